"""--http3's settings and the engine's `http3_*` options: what Config refuses, what the
engine takes at its bounds and refuses past them, and the UDP sockets the Python side makes
(one per worker, in order, steered by `_core.quic_steer`)."""

import os
import socket
from pathlib import Path

import pytest

from tests.support.tools import require_module
from zigcorn import _core
from zigcorn.config import Config
from zigcorn.protocols.http import HTTPCycle, wake
from zigcorn.sockets import bind_quic
from zigcorn.protocols.websocket import WebSocketCycle

trustme = require_module("trustme")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("h3opts")
    cert = trustme.CA().issue_cert("localhost", "127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(root / "cert.pem")
    cert.private_key_pem.write_to_path(root / "key.pem")
    return {"ssl_certfile": str(root / "cert.pem"), "ssl_keyfile": str(root / "key.pem")}


@pytest.fixture
def udp():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


def options_for(config: Config, fd: int, index: int = 0, workers: int = 1) -> dict:
    options = config.engine_options()
    options.update(config.engine_http3_options(fd, 4433, index, workers))
    options["metrics_slot"] = 0
    options["websocket_class"] = WebSocketCycle
    return options


def new_engine(options: dict) -> None:
    from zigcorn.tls import load_openssl

    load_openssl()
    _core.Engine(lambda stream: None, wake, HTTPCycle, options).close()


def test_http3_is_off_by_default_and_needs_tls(tls_files):
    assert Config("tests.apps.basic:app").engine_options()["http3_fd"] == -1
    with pytest.raises(ValueError, match="http3 needs TLS"):
        Config("tests.apps.basic:app", http3=True)
    with pytest.raises(ValueError, match="http3 needs TLS"):
        Config("tests.apps.basic:app", http3=True, ssl_certfile=tls_files["ssl_certfile"])
    config = Config("tests.apps.basic:app", http3=True, **tls_files)
    assert len(config.http3_retry_key) == len(config.http3_reset_key) == 32
    assert config.http3_retry_key != config.http3_reset_key


def test_http3_refuses_fd_uds_and_too_many_workers(tls_files):
    with pytest.raises(ValueError, match="not with --fd or --uds"):
        Config("tests.apps.basic:app", http3=True, uds="/tmp/x.sock", **tls_files)
    with pytest.raises(ValueError, match="not with --fd or --uds"):
        Config("tests.apps.basic:app", http3=True, fd=3, **tls_files)
    most = _core.LIMITS["http3_workers"][1]
    Config("tests.apps.basic:app", http3=True, workers=most, **tls_files)
    with pytest.raises(ValueError, match=f"at most {most} workers"):
        Config("tests.apps.basic:app", http3=True, workers=most + 1, **tls_files)


def test_http3_settings_bounds(tls_files):
    for retry in ("auto", "always", "never"):
        Config("tests.apps.basic:app", http3=True, http3_retry=retry, **tls_files)
    with pytest.raises(ValueError, match="http3_retry"):
        Config("tests.apps.basic:app", http3=True, http3_retry="sometimes", **tls_files)
    for port in (0, 65535):
        Config("tests.apps.basic:app", http3=True, http3_port=port, **tls_files)
    for port in (-1, 65536):
        with pytest.raises(ValueError, match="http3_port"):
            Config("tests.apps.basic:app", http3=True, http3_port=port, **tls_files)
    for name in ("http3_max_streams", "http3_stream_window", "http3_connection_window", "http3_idle_timeout",
                 "http3_handshake_timeout", "http3_max_connections"):
        low, high = _core.LIMITS[name]
        for bad in (low - 1, high + 1):
            with pytest.raises(ValueError, match=name):
                Config("tests.apps.basic:app", http3=True, **{name: bad}, **tls_files)
    with pytest.raises(ValueError, match="http3_handshakes_before_retry <= http3_max_handshakes"):
        Config("tests.apps.basic:app", http3=True, http3_handshakes_before_retry=300, **tls_files)
    with pytest.raises(ValueError, match="http3_handshakes_before_retry <= http3_max_handshakes"):
        Config("tests.apps.basic:app", http3=True, http3_max_connections=100, **tls_files)
    with pytest.raises(ValueError, match="http3_congestion"):
        Config("tests.apps.basic:app", http3=True, http3_congestion="bbr", **tls_files)
    with pytest.raises(ValueError, match="not a directory"):
        Config("tests.apps.basic:app", http3=True, http3_qlog_dir="/nonexistent/qlog", **tls_files)
    config = Config("tests.apps.basic:app", http3=True, http3_qlog_dir=".", http3_congestion="cubic", **tls_files)
    options = config.engine_http3_options(0, 4433, 0, 1)
    assert options["http3_qlog_dir"] == os.getcwd() and options["http3_congestion"] == 1


def test_the_engine_takes_its_http3_options(tls_files, udp):
    config = Config("tests.apps.basic:app", http3=True, **tls_files)
    options = options_for(config, udp.fileno())
    assert options["http3_idle_timeout"] == 30.0 and options["http3_congestion"] == 0
    assert options["http3_retry"] == 1
    new_engine(options)
    from zigcorn.tls import load_openssl

    load_openssl()
    engine = _core.Engine(lambda stream: None, wake, HTTPCycle, {**options, "http3_worker_index": 2, "http3_workers": 4})
    try:
        reported = engine.options()
    finally:
        engine.close()
    assert {k: v for k, v in reported.items() if k.startswith("http3_")} == {
        "http3_fd": udp.fileno(), "http3_alt_svc_port": 4433, "http3_retry": 1, "http3_worker_index": 2,
        "http3_workers": 4, "http3_idle_timeout": 30.0, "http3_handshake_timeout": 10.0, "http3_max_streams": 128,
        "http3_stream_window": 65536, "http3_connection_window": 1 << 20, "http3_handshakes_before_retry": 64,
        "http3_max_handshakes": 256, "http3_max_connections": 4096, "http3_congestion": 0,
        "http3_qlog_dir": None}  # and never a key
    off = _core.Engine(lambda stream: None, wake, HTTPCycle, {**options, "http3_fd": -1})
    try:
        assert not any(k.startswith("http3_") for k in off.options())
    finally:
        off.close()
    # Absent keys and fd -1 are "off", even without a certificate.
    new_engine({k: v for k, v in options.items() if not k.startswith("http3_")})
    new_engine({**options, "http3_fd": -1, "http3_retry_key": None})
    assert udp.fileno() >= 0  # the engine never closes the socket: Python owns it


def test_the_engine_refuses_http3_values_past_its_bounds(tls_files, udp):
    options = options_for(Config("tests.apps.basic:app", http3=True, **tls_files), udp.fileno())
    names = [name for name in _core.LIMITS if name.startswith("http3_")]
    assert names == ["http3_fd", "http3_alt_svc_port", "http3_worker_index", "http3_workers", "http3_idle_timeout",
                     "http3_handshake_timeout", "http3_max_streams", "http3_stream_window", "http3_connection_window",
                     "http3_handshakes_before_retry", "http3_max_handshakes", "http3_max_connections"]
    for name in names:
        low, high = _core.LIMITS[name]
        for bad in (low - 1, high + 1):
            if name == "http3_fd" and bad == -1:
                continue  # -1 is "off"
            with pytest.raises(ValueError, match=name):
                new_engine({**options, name: bad})
    for name in names[1:]:
        if name in ("http3_worker_index", "http3_workers"):
            continue
        low, high = _core.LIMITS[name]
        # The endpoint's bounds must keep their order (retry <= drop <= all) at either end.
        ordered = ("http3_handshakes_before_retry", "http3_max_handshakes", "http3_max_connections")
        new_engine({**options, **{k: _core.LIMITS[k][0] for k in ordered}, name: low})
        new_engine({**options, **{k: _core.LIMITS[k][1] for k in ordered}, name: high})
    with pytest.raises(ValueError, match="http3_max_handshakes 300 <= http3_max_connections 200 does not hold"):
        new_engine({**options, "http3_max_handshakes": 300, "http3_max_connections": 200})
    with pytest.raises(ValueError, match="http3_handshakes_before_retry 9 <= http3_max_handshakes 8"):
        new_engine({**options, "http3_handshakes_before_retry": 9, "http3_max_handshakes": 8})
    new_engine({**options, "http3_congestion": 1, "http3_qlog_dir": "/tmp"})
    with pytest.raises(ValueError, match="http3_congestion"):
        new_engine({**options, "http3_congestion": 2})
    for bad in ("relative/dir", "/" + "d" * 1024, "/a\0b"):
        with pytest.raises(ValueError, match="http3_qlog_dir must be an absolute path"):
            new_engine({**options, "http3_qlog_dir": bad})
    with pytest.raises(TypeError, match="http3_qlog_dir"):
        new_engine({**options, "http3_qlog_dir": b"/tmp"})
    new_engine({**options, "http3_worker_index": 254, "http3_workers": 255})
    with pytest.raises(ValueError, match="below http3_workers"):
        new_engine({**options, "http3_worker_index": 3, "http3_workers": 3})
    for key in ("http3_retry_key", "http3_reset_key"):
        for bad in (b"", b"k" * 31, b"k" * 33):
            with pytest.raises(ValueError, match=key):
                new_engine({**options, key: bad})
        with pytest.raises(TypeError, match=key):
            new_engine({**options, key: "k" * 32})
        missing = {k: v for k, v in options.items() if k != key}
        with pytest.raises(KeyError, match=key):
            new_engine(missing)
    with pytest.raises(ValueError, match="http3_retry"):
        new_engine({**options, "http3_retry": 3})
    with pytest.raises(ValueError, match="needs TLS"):
        new_engine({**options, "ssl_certfile": None})


def test_every_http3_setting_reaches_the_engine_as_given(tls_files, udp, tmp_path):
    given = {"http3_max_streams": 9, "http3_stream_window": 20_000, "http3_connection_window": 90_000,
             "http3_idle_timeout": 4.5, "http3_handshake_timeout": 2.0, "http3_handshakes_before_retry": 3,
             "http3_max_handshakes": 5, "http3_max_connections": 7, "http3_congestion": "cubic",
             "http3_qlog_dir": str(tmp_path)}
    config = Config("tests.apps.basic:app", http3=True, **given, **tls_files)
    from zigcorn.tls import load_openssl

    load_openssl()
    engine = _core.Engine(lambda stream: None, wake, HTTPCycle, options_for(config, udp.fileno()))
    try:
        reported = engine.options()
    finally:
        engine.close()
    assert {name: reported[name] for name in given} == {**given, "http3_congestion": 1}


def test_the_engine_refuses_a_socket_that_is_not_udp(tls_files):
    options = options_for(Config("tests.apps.basic:app", http3=True, **tls_files), 0)
    with socket.socket() as tcp:
        with pytest.raises(ValueError, match="not a UDP socket"):
            new_engine({**options, "http3_fd": tcp.fileno()})
    with pytest.raises(ValueError, match="not a UDP socket"):
        new_engine({**options, "http3_fd": 1_000_000})  # not open


def test_bind_quic_makes_one_socket_per_worker_in_one_group(tls_files):
    config = Config("tests.apps.basic:app", http3=True, **tls_files)
    group = bind_quic(config, 0, 4)
    try:
        assert len(group) == 4
        ports = {s.getsockname()[1] for s in group.socks}
        assert ports == {group.port}
        for sock in group.socks:
            assert sock.type == socket.SOCK_DGRAM and not sock.getblocking() and not sock.get_inheritable()
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        # Steered by the worker byte (the DCID's first byte of a short header): datagram k
        # lands on socket k whatever its source.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            for k in range(4):
                client.sendto(bytes([0x41, k + 4 * k]) + b"\0" * 30, ("127.0.0.1", group.port))
            for k, sock in enumerate(group.socks):
                sock.settimeout(2)
                assert sock.recv(100)[1] % 4 == k
    finally:
        group.close()
    single = bind_quic(config, 0, 1)
    try:
        assert single.socks[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 0
    finally:
        single.close()


def test_bind_quic_reports_a_taken_port(tls_files):
    config = Config("tests.apps.basic:app", http3=True, **tls_files)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        with pytest.raises(OSError, match="UDP \\(HTTP/3\\)"):
            bind_quic(config, taken.getsockname()[1], 1)


def test_a_worker_takes_the_socket_its_predecessor_held_or_the_first_free_one():
    from zigcorn.supervisors.multiprocess import Master, Worker

    master = Master(config=None, target=4)

    def add(pid, index, generation=0, retiring=False):
        master.workers[pid] = Worker(pid, slot=len(master.workers), generation=generation, ready_fd=-1,
                                     started_at=0.0, retiring=retiring, quic_index=index)

    assert master._quic_index(None) == 0
    for pid, index in ((10, 0), (11, 1), (13, 3)):
        add(pid, index)
    assert master._quic_index(None) == 2  # the one no serving worker holds
    assert master._quic_index(11) == 1  # --workers-max-rss: the successor takes its predecessor's
    add(12, 2)
    master.workers[11].retiring = True
    assert master._quic_index(None) == 1  # a crashed or retired worker's socket is free again
    master.generation = 1  # SIGHUP: the new generation shares the old one's sockets in order
    assert master._quic_index(None) == 0


def udp_sockets_on(port: int) -> int:
    """How many UDP sockets are bound to `port` on this machine (/proc/net/udp)."""
    lines = Path("/proc/net/udp").read_text().splitlines()[1:]
    return sum(1 for line in lines if line.split()[1].endswith(f":{port:04X}"))


def test_the_master_binds_one_udp_socket_per_worker_and_keeps_them(tls_files):
    import signal
    import time

    from tests.support.harness import Server, wait_for

    server = Server("h3_app:app", "--ssl-certfile", tls_files["ssl_certfile"], "--ssl-keyfile",
                    tls_files["ssl_keyfile"], "--http3", "--workers", "4").wait_ready(timeout=30)
    try:
        assert udp_sockets_on(server.port) == 4
        line = "HTTP/3 on https://127.0.0.1:%d (UDP), one socket per worker" % server.port
        assert wait_for(lambda: line in server.output(), timeout=10), server.output()
        children_file = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
        assert wait_for(lambda: len(children_file.read_text().split()) == 4, timeout=15)
        children = children_file.read_text().split()
        os.kill(int(children[0]), signal.SIGKILL)  # a crash: the master starts another
        time.sleep(0.5)
        assert udp_sockets_on(server.port) == 4  # the master's copies keep the group whole
        assert wait_for(lambda: len(children_file.read_text().split()) == 4, timeout=15)
        assert udp_sockets_on(server.port) == 4
    finally:
        server.stop()
    assert wait_for(lambda: udp_sockets_on(server.port) == 0, timeout=5)
