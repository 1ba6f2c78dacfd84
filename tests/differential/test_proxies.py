"""zigcorn behind nginx, HAProxy (also with send-proxy-v2 and an h2c front), Apache httpd
and Caddy: desync attempts (CL.TE, TE.CL, TE.TE obfuscations, CL.0, pipelined leftovers,
Expect tricks, h2c and WebSocket upgrade smuggling, H2.CL and H2.TE) must leave the app
seeing exactly the requests the front end answered, each answer going to its own client.
See tests/support/differential/proxies.py. The front ends run side by side, once."""

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.tools import require_module, require_tool

require_module("h2")

FRONTS = {  # test id -> (front end, --proxy-protocol, program)
    "nginx": ("nginx", False, "nginx"),
    "haproxy": ("haproxy", False, "haproxy"),
    "haproxy-send-proxy-v2": ("haproxy", True, "haproxy"),
    "apache": ("apache", False, "apache2"),
    "caddy": ("caddy", False, "caddy"),
}


@pytest.fixture(scope="module")
def runs():
    """The front ends whose program is on PATH, run side by side once: key -> its finished
    future. A missing program is never started (its case skips, or fails on CI, in
    `require_tool`), and a front that raised fails its own case only (`result()`)."""
    from tests.support.differential import proxies

    here = {key: spec for key, spec in FRONTS.items() if shutil.which(spec[2])}
    with ThreadPoolExecutor(max(1, len(here))) as pool:
        futures = {key: pool.submit(proxies.run_front, front, pp) for key, (front, pp, _) in here.items()}
        wait(futures.values())
    return futures


@zigcorn_only
@pytest.mark.parametrize("key", FRONTS)
def test_no_desync_behind(key, runs):
    """No request smuggled or desynchronised through this front end.

    Slow (the first case): the module's `runs` fixture, counted in whichever case comes
    first, drives every front end's attack battery side by side (about 35 s)."""
    require_tool(FRONTS[key][2], reason=f"{FRONTS[key][2]} is the front end under test (.ci/run installs it)")
    attempts = runs[key].result()
    failures = [f"{a.name}: {'; '.join(a.problems)} (answers {a.statuses}, echoes {a.received})"
                for a in attempts if a.problems]
    assert not failures, "\n".join(failures)
    assert len(attempts) >= 50
    baseline = [a for a in attempts if a.name == "h2.baseline"]
    assert all(a.received["attacker"] for a in baseline), baseline  # HTTP/2 reached the app through the front


H2C_UPGRADE = (b"GET /up HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n")


def _first_status(port: int, data: bytes) -> int:
    from tests.support.differential.client import exchange

    out = exchange(port, data, first=3.0, idle=0.3)
    return (out.interim or [0])[0] if out.interim else out.items[0].get("status", 200)


@zigcorn_only
@pytest.mark.parametrize("field", ["X-Forwarded-For: 10.0.0.1", "Via: 1.1 front", "Forwarded: for=10.0.0.1",
                                   "X-Real-IP: 10.0.0.1", "X-Forwarded-Proto: https"])
def test_h2c_upgrade_declined_for_a_proxied_request(start_server, field):
    """Regression (found behind HAProxy, which passes Upgrade on and tunnels the 101): a
    request a proxy forwarded is never upgraded to h2c, it is answered over HTTP/1.1, even
    with --h2c-upgrade (without it no request is)."""
    server = start_server("basic:app", "--h2c-upgrade")
    assert _first_status(server.port, H2C_UPGRADE + b"\r\n") == 101
    assert _first_status(server.port, H2C_UPGRADE + field.encode() + b"\r\n\r\n") == 200


@zigcorn_only
def test_h2c_upgrade_declined_with_proxy_protocol(start_server):
    server = start_server("basic:app", "--proxy-protocol", "--h2c-upgrade")
    header = b"PROXY TCP4 10.0.0.1 127.0.0.1 5555 80\r\n"
    assert _first_status(server.port, header + H2C_UPGRADE + b"\r\n") == 200


# A stand-in for `proxies.run_front` in the pytest run below: records the fronts it was asked
# to start and answers a clean run, so the check costs no real proxy.
_FAKE_RUNS = """
import os
import shutil
from tests.support.differential import proxies

def _fake_run_front(front, proxy_protocol=False, names=None):
    with open(os.environ["FAKE_RUNS_LOG"], "a") as log:
        log.write(f"{front} {proxy_protocol}\\n")
    binary = proxies.FRONTS[front].binary
    if shutil.which(binary) is None:  # as starting the real program would
        raise FileNotFoundError(2, "No such file or directory", binary)
    return [proxies.Attempt("h2.baseline" if i == 0 else f"a{i}", {}, {"attacker": ["m"]}, [], {}, [])
            for i in range(50)]

proxies.run_front = _fake_run_front
"""


def test_a_missing_front_end_skips_its_own_case_only(tmp_path):
    """The first run on a machine with nginx, HAProxy and Apache but no Caddy: the caddy case
    skips (naming the program), the four others run; on CI (CI=true) the same case fails.
    Never an error from starting a program that is not there. The module runs in a
    subprocess pytest whose PATH holds stand-ins for three front ends and nothing else,
    with `proxies.run_front` replaced by a plugin (`_FAKE_RUNS`) that logs what it was
    asked to start and raises FileNotFoundError for a program not on PATH, as the real one
    does: the log shows Caddy was never started."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("nginx", "haproxy", "apache2"):
        (bin_dir / program).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / program).chmod(0o755)
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "fake_runs.py").write_text(_FAKE_RUNS)
    outcomes = {}
    for ci in ("", "true"):
        log = tmp_path / f"started{ci}.log"
        # CI as the case says; the server under test is zigcorn's (run_front is fake anyway).
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "ZIGCORN_TEST_SERVER")}
        env.update(PATH=str(bin_dir), FAKE_RUNS_LOG=str(log), PYTHONPATH=os.pathsep.join(
            [str(plugin_dir), str(ROOT), env.get("PYTHONPATH", "")]), **({"CI": ci} if ci else {}))
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "fake_runs", "-p", "no:cacheprovider", "-rs", "-q", "tests/differential/test_proxies.py",
                               "-k", "test_no_desync_behind"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        outcomes[ci] = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
        started = sorted(log.read_text().splitlines()) if log.exists() else []
        assert started == ["apache False", "haproxy False", "haproxy True", "nginx False"], (started, done.stdout)
        assert "error" not in outcomes[ci], done.stdout[-3000:]
        if ci:
            assert outcomes[ci].startswith("1 failed, 4 passed"), done.stdout[-3000:]
            assert "caddy is the front end under test" in done.stdout, done.stdout[-3000:]
        else:
            assert outcomes[ci].startswith("4 passed, 1 skipped"), done.stdout[-3000:]
            assert "SKIPPED" in done.stdout and "not on PATH: caddy" in done.stdout, done.stdout[-3000:]
