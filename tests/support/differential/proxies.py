"""zigcorn behind the front ends people run (nginx, HAProxy, Apache httpd, Caddy): desync
attempts go to the front end, and every request the app saw must be one the front end
answered to the client that sent it.

Each attempt is one client connection's bytes, with a distinct marker (``m=``) in every
request line in it; after it, victim connections send plain requests with their own
markers. The app (echo.py with DIFF_LOG) logs every request it sees. The invariants:

- every echo a client receives carries a marker that client sent (no response goes to
  the wrong client);
- the requests the app logged are exactly the echoes the clients received, one each (the
  app saw no request the front end did not forward as one: nothing smuggled, nothing
  replayed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.harness import free_port

from . import servers
from .client import exchange

MARKER = re.compile(r"m=([A-Za-z0-9-]+)")


# ---------------------------------------------------------------------------------------
# Front ends, each proxying to 127.0.0.1:<upstream> with reused upstream connections.

class Front(servers.Proc):
    binary = ""

    def __init__(self, name: str, upstream: int, proxy_protocol: bool = False):
        self.prefix = Path(tempfile.mkdtemp(prefix=f"diff-{name}-"))
        self.h2_port = None
        port = free_port()
        cmd = self.configure(port, upstream, proxy_protocol)
        super().__init__(name, cmd, port, env=self.env(), cwd=self.prefix)

    def env(self) -> dict:
        return {}

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.prefix, ignore_errors=True)


class NginxFront(Front):
    binary = "nginx"

    def configure(self, port, upstream, proxy_protocol):
        user = "user root root;\n" if os.geteuid() == 0 else ""
        self.h2_port = free_port()
        p = self.prefix
        (p / "nginx.conf").write_text(f"""{user}daemon off;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {p}/body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
    upstream app {{ server 127.0.0.1:{upstream}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{self.h2_port} http2;
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            # The usual WebSocket-enabling lines: Upgrade is passed on.
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
        }}
    }}
}}
""")
        return [shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(p), "-c", str(p / "nginx.conf"),
                "-e", str(p / "error.log")]


class HaproxyFront(Front):
    binary = "haproxy"

    def configure(self, port, upstream, proxy_protocol):
        self.h2_port = free_port()
        send = " send-proxy-v2" if proxy_protocol else ""
        (self.prefix / "haproxy.cfg").write_text(f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 10s
    option http-keep-alive
    option forwardfor
    http-reuse always
frontend fe
    bind 127.0.0.1:{port}
    bind 127.0.0.1:{self.h2_port} proto h2
    default_backend be
backend be
    server app 127.0.0.1:{upstream}{send}
""")
        return [shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(self.prefix / "haproxy.cfg")]


class ApacheFront(Front):
    binary = "apache2"

    def configure(self, port, upstream, proxy_protocol):
        p = self.prefix
        mods = "/usr/lib/apache2/modules"
        user = "User www-data\nGroup www-data\n" if os.geteuid() == 0 else ""
        (p / "httpd.conf").write_text(f"""ServerRoot "{p}"
ServerName localhost
Listen 127.0.0.1:{port}
PidFile {p}/httpd.pid
ErrorLog {p}/error.log
LogLevel warn
DefaultRuntimeDir {p}
Mutex file:{p} default
{user}LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule proxy_module {mods}/mod_proxy.so
LoadModule proxy_http_module {mods}/mod_proxy_http.so
ProxyPass / http://127.0.0.1:{upstream}/ keepalive=On
ProxyPreserveHost On
""")
        os.chmod(p, 0o755)
        return [shutil.which("apache2") or "/usr/sbin/apache2", "-X", "-f", str(p / "httpd.conf")]


class CaddyFront(Front):
    binary = "caddy"

    def configure(self, port, upstream, proxy_protocol):
        (self.prefix / "Caddyfile").write_text(f"""{{
    admin off
    auto_https off
}}
http://127.0.0.1:{port} {{
    reverse_proxy 127.0.0.1:{upstream}
}}
""")
        return [shutil.which("caddy") or "/usr/bin/caddy", "run", "--config", str(self.prefix / "Caddyfile"),
                "--adapter", "caddyfile"]

    def env(self) -> dict:
        return {"HOME": str(self.prefix), "XDG_DATA_HOME": str(self.prefix), "XDG_CONFIG_HOME": str(self.prefix)}


FRONTS = {"nginx": NginxFront, "haproxy": HaproxyFront, "apache": ApacheFront, "caddy": CaddyFront}


# ---------------------------------------------------------------------------------------
# The desync corpus: name -> one attacker connection's bytes ("{m}" numbered per request).

def _req(method: str, path: str, fields: list[str], body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: app.example\r\n" + "".join(f + "\r\n" for f in fields) + "\r\n"
    return head.encode("latin-1") + body


SMUGGLED = b"GET /smuggled?m={m} HTTP/1.1\r\nHost: app.example\r\n\r\n"
SMUGGLED_PREFIX = b"GET /smuggled?m={m} HTTP/1.1\r\nX-Ignore: x"  # the victim's request would complete it


def _cl_te(te_field: str, body: bytes) -> bytes:
    return _req("POST", "/a?m={m}", [f"Content-Length: {len(body)}", te_field], body)


def _te_cl(te_field: str) -> bytes:
    body = b"3a\r\n" + SMUGGLED[:0x3a].ljust(0x3a, b"x") + b"\r\n0\r\n\r\n"
    return _req("POST", "/a?m={m}", [te_field, "Content-Length: 4"], body)


TE_FIELDS = {
    "plain": "Transfer-Encoding: chunked",
    "upper": "TRANSFER-ENCODING: CHUNKED",
    "space-before-colon": "Transfer-Encoding : chunked",
    "tab-value": "Transfer-Encoding:\tchunked",
    "vtab-value": "Transfer-Encoding:\x0bchunked",
    "xchunked": "Transfer-Encoding: xchunked",
    "chunked-identity": "Transfer-Encoding: chunked, identity",
    "identity-chunked": "Transfer-Encoding: identity, chunked",
    "two-lines": "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
    "obs-fold": "X-Fold: a\r\n Transfer-Encoding: chunked",
    "folded-value": "Transfer-Encoding:\r\n chunked",
    "bare-lf-before": "X-A: a\nTransfer-Encoding: chunked",
    "quoted": 'Transfer-Encoding: "chunked"',
    "underscore": "Transfer_Encoding: chunked",
    "nul": "Transfer-Encoding: chunked\x00",
}

DESYNC: dict[str, bytes] = {}
for _name, _field in TE_FIELDS.items():
    DESYNC[f"cl-te:{_name}"] = _cl_te(_field, b"0\r\n\r\n" + SMUGGLED_PREFIX)
    DESYNC[f"te-cl:{_name}"] = _te_cl(_field)
DESYNC.update({
    "cl-cl-different": _req("POST", "/a?m={m}", ["Content-Length: 6", "Content-Length: 41"], b"0\r\n\r\n" + SMUGGLED),
    "cl-list": _req("POST", "/a?m={m}", ["Content-Length: 6, 41"], b"0\r\n\r\n" + SMUGGLED),
    "cl-plus": _req("POST", "/a?m={m}", ["Content-Length: +41"], SMUGGLED),
    "cl-leading-space-name": _req("POST", "/a?m={m}", [" Content-Length: 41"], SMUGGLED),
    "cl-0-get-with-body": _req("GET", "/a?m={m}", [f"Content-Length: {len(SMUGGLED)}"], SMUGGLED),
    "cl-0-post": _req("POST", "/a?m={m}", ["Content-Length: 0"]) + SMUGGLED,
    "chunk-size-overflow": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"],
                                b"10000000000000001\r\nx\r\n0\r\n\r\n" + SMUGGLED),
    "chunk-ext-lf": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"], b"1;a\nx\r\nx\r\n0\r\n\r\n" + SMUGGLED),
    "chunk-bare-lf-size": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"], b"3\nabc\r\n0\r\n\r\n" + SMUGGLED),
    "chunk-leading-zeros": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"], b"0003\r\nabc\r\n0\r\n\r\n" + SMUGGLED),
    "chunk-trailer-smuggle": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"],
                                  b"0\r\nX-T: 1\r\n\r\n" + SMUGGLED),
    "chunk-data-missing-crlf": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"], b"3\r\nabcX0\r\n\r\n" + SMUGGLED),
    "pipelined-two": _req("GET", "/a?m={m}", []) + SMUGGLED,
    "pipelined-body-then-get": _req("POST", "/a?m={m}", ["Content-Length: 3"], b"abc") + SMUGGLED,
    "pipelined-chunked-then-get": _req("POST", "/a?m={m}", ["Transfer-Encoding: chunked"], b"3\r\nabc\r\n0\r\n\r\n") + SMUGGLED,
    "expect-100-body-smuggle": _req("POST", "/a?m={m}", ["Expect: 100-continue", f"Content-Length: {len(SMUGGLED)}"],
                                    SMUGGLED),
    "expect-100-no-body-sent": _req("POST", "/a?m={m}", ["Expect: 100-continue", "Content-Length: 0"]) + SMUGGLED,
    "expect-odd-value": _req("POST", "/a?m={m}", ["Expect: y 100-continue", f"Content-Length: {len(SMUGGLED)}"], SMUGGLED),
    "http10-keep-alive-pipelined": b"GET /a?m={m} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + SMUGGLED,
    "upgrade-h2c": _req("GET", "/a?m={m}", ["Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c",
                                             "HTTP2-Settings: AAMAAABkAAQAAP__"]) + SMUGGLED,
    "upgrade-h2c-post": _req("POST", "/a?m={m}", ["Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c",
                                                   "HTTP2-Settings: AAMAAABkAAQAAP__", "Content-Length: 3"], b"abc") + SMUGGLED,
    "upgrade-websocket-failed": _req("GET", "/a?m={m}", ["Connection: Upgrade", "Upgrade: websocket",
                                                         "Sec-WebSocket-Version: 1", "Sec-WebSocket-Key: bad"]) + SMUGGLED,
    "upgrade-websocket-no-key": _req("GET", "/a?m={m}", ["Connection: Upgrade", "Upgrade: websocket"]) + SMUGGLED,
    "upgrade-unknown": _req("GET", "/a?m={m}", ["Connection: Upgrade", "Upgrade: foo"]) + SMUGGLED,
})


# ---------------------------------------------------------------------------------------
# One attempt and its check.

@dataclass
class Attempt:
    name: str
    sent: dict  # connection label -> markers it sent
    received: dict  # connection label -> markers of the echoes it got
    logged: list  # markers of the requests the app logged
    statuses: dict  # connection label -> statuses of its non-echo responses
    problems: list


def _number(data: bytes, prefix: str) -> tuple[bytes, list[str]]:
    markers = []
    while b"{m}" in data:
        marker = f"{prefix}-{len(markers)}"
        markers.append(marker)
        data = data.replace(b"{m}", marker.encode(), 1)
    return data, markers


def _echo_markers(outcome) -> list[str]:
    found = []
    for item in outcome.items:
        if "reading" in item:
            match = MARKER.search(item["reading"]["target"])
            found.append(match.group(1) if match else f"(none: {item['reading']['target']})")
    return found


def attempt(front_port: int, log: Path, name: str, data: bytes, tag: str, victims: int = 2) -> Attempt:
    before = log.stat().st_size if log.exists() else 0
    data, markers = _number(data, f"{tag}A")
    sent, received, statuses = {"attacker": markers}, {}, {}
    out = exchange(front_port, data, first=2.0, idle=0.5)
    received["attacker"] = _echo_markers(out)
    statuses["attacker"] = [i["status"] for i in out.items if "status" in i]
    _victims(front_port, tag, victims, sent, received, statuses)
    return _check(name, log, before, sent, received, statuses)


def _victims(front_port: int, tag: str, count: int, sent: dict, received: dict, statuses: dict) -> None:
    for v in range(count):
        marker = f"{tag}V{v}"
        victim = exchange(front_port, f"GET /victim?m={marker} HTTP/1.1\r\nHost: app.example\r\n\r\n".encode(),
                          first=3.0, idle=0.2)
        sent[f"victim{v}"] = [marker]
        received[f"victim{v}"] = _echo_markers(victim)
        statuses[f"victim{v}"] = [i["status"] for i in victim.items if "status" in i]


def _check(name: str, log: Path, before: int, sent: dict, received: dict, statuses: dict) -> Attempt:
    time.sleep(0.2)  # an upstream read that the front end gave up on may still log
    logged = _logged(log, before)
    problems = []
    for conn, got in received.items():
        for marker in got:
            if marker not in sent[conn]:
                problems.append(f"{conn} received the echo of {marker}, which it did not send")
    got_all = sorted(m for ms in received.values() for m in ms)
    if sorted(logged) != got_all:
        problems.append(f"the app saw {sorted(logged)} but the clients received echoes of {got_all}")
    for conn in received:
        if conn.startswith("victim") and not received[conn] and not statuses[conn]:
            problems.append(f"{conn} got no answer")
    return Attempt(name, sent, received, logged, statuses, problems)


# ---------------------------------------------------------------------------------------
# HTTP/2 to the front end, HTTP/1.1 behind it: H2.CL and H2.TE.

H2_ATTEMPTS = {
    "h2.baseline": ([("content-length", "3")], b"abc"),  # must be echoed: the h2 path works
    "h2.cl-shorter": ([("content-length", "0")], SMUGGLED),
    "h2.cl-longer": ([("content-length", "100")], b"abc"),
    "h2.te-chunked": ([("transfer-encoding", "chunked")], b"0\r\n\r\n" + SMUGGLED),
    "h2.te-chunked-cl": ([("transfer-encoding", "chunked"), ("content-length", "5")], b"0\r\n\r\n" + SMUGGLED),
    "h2.crlf-in-value": ([("x-a", "a\r\nTransfer-Encoding: chunked")], b"0\r\n\r\n" + SMUGGLED),
    "h2.upper-case-name": ([("Content-Length", "0")], SMUGGLED),
    "h2.connection-header": ([("connection", "keep-alive")], b""),
    "h2.te-trailers-other": ([("te", "chunked")], b""),
}


def h2_attempt(front_port: int, h1_port: int, log: Path, name: str, fields: list, body: bytes, tag: str) -> Attempt:
    """One HTTP/2 request (prior knowledge) with odd fields to the front end, then a victim
    over HTTP/1.1; the same invariants as `attempt`."""
    import socket

    import h2.config
    import h2.connection
    import h2.events

    before = log.stat().st_size if log.exists() else 0
    body = body.replace(b"{m}", f"{tag}A-1".encode())
    marker = f"{tag}A-0"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False,
        validate_inbound_headers=False))
    received, statuses = {"attacker": []}, {"attacker": []}
    with socket.create_connection(("127.0.0.1", front_port), timeout=5) as sock:
        conn.initiate_connection()
        headers = [(":method", "POST"), (":scheme", "http"), (":authority", "app.example"),
                   (":path", f"/a?m={marker}")] + fields
        conn.send_headers(1, headers, end_stream=False)
        conn.send_data(1, body, end_stream=True)
        try:
            sock.sendall(conn.data_to_send())
        except OSError:
            pass
        data, status, done = b"", None, False
        sock.settimeout(3)
        while not done:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, OSError):
                break
            if not chunk:
                break
            try:
                events = conn.receive_data(chunk)
            except Exception:  # the front end broke the protocol: what it answered so far counts
                break
            for event in events:
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers).get(b":status", b"0"))
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    done = True
            try:
                sock.sendall(conn.data_to_send())
            except OSError:
                break
    if status == 200:
        try:
            match = MARKER.search(json.loads(data)["target"])
            received["attacker"].append(match.group(1) if match else "(none)")
        except ValueError:
            statuses["attacker"].append(status)
    elif status is not None:
        statuses["attacker"].append(status)
    sent = {"attacker": [marker, f"{tag}A-1"]}  # A-1 only ever as body bytes: its echo means smuggling
    sent_ok = {"attacker": [marker]}
    _victims(h1_port, tag, 1, sent_ok, received, statuses)
    result = _check(name, log, before, sent_ok, received, statuses)
    result.sent = sent
    return result


def _logged(log: Path, before: int) -> list[str]:
    with open(log, "rb") as f:
        f.seek(before)
        out = []
        for line in f.read().splitlines():
            match = MARKER.search(json.loads(line)["target"])
            out.append(match.group(1) if match else "(none)")
    return out


# ---------------------------------------------------------------------------------------
# A whole run: a front end before its own zigcorn, every attempt in turn.

def _start_front(front: str, upstream: int, proxy_protocol: bool, started: list) -> Front:
    """Start a front end on fresh ports. A port free_port() found free can be taken
    before the front binds it (another front's upstream connection gets it as its
    ephemeral source port: CI saw apache fail so), so a bind failure tries new ports,
    three times at most."""
    for tries_left in (2, 1, 0):
        proxy = FRONTS[front](front, upstream, proxy_protocol)
        started.append(proxy)
        try:
            return proxy.wait_ready()
        except RuntimeError as exc:
            if tries_left == 0 or "in use" not in str(exc):
                raise
            proxy.stop()
            started.remove(proxy)
    raise AssertionError("unreachable")


def run_front(front: str, proxy_protocol: bool = False, names: list[str] | None = None) -> list[Attempt]:
    log = Path(tempfile.mkdtemp(prefix="diff-applog-")) / "app.log"
    log.touch()
    app = servers.zigcorn({"DIFF_LOG": str(log)}, *(("--proxy-protocol",) if proxy_protocol else ()))
    started = [app]
    try:
        app.wait_ready()
        proxy = _start_front(front, app.port, proxy_protocol, started)
        out = []
        for i, (name, data) in enumerate(DESYNC.items()):
            if names is None or name in names:
                out.append(attempt(proxy.port, log, name, data, f"{front[:2]}{i}", victims=1))
        if proxy.h2_port:
            for i, (name, (fields, body)) in enumerate(H2_ATTEMPTS.items()):
                out.append(h2_attempt(proxy.h2_port, proxy.port, log, name, fields, body, f"{front[:2]}h{i}"))
        return out
    except RuntimeError as exc:
        return [Attempt("(start)", {}, {}, [], {}, [str(exc)])]
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(log.parent, ignore_errors=True)
