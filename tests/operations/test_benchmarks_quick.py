"""The benchmark harness works end to end (``benchmarks/run.py --quick`` against zigcorn).

Checks that the harness produces its JSON with every expected number, never how fast
anything is.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import require_tool

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"

WRK_SAMPLE = """\
Running 1s test @ http://127.0.0.1:8000/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   812.34us  301.12us   9.87ms   90.00%
    Req/Sec    70.12k     3.01k   75.00k    80.00%
  Latency Distribution
     50%  750.00us
     75%    0.90ms
     90%    1.10ms
     99%    2.50ms
  70123 requests in 1.00s, 9.12MB read
  Socket errors: connect 0, read 3, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  70100.55
Transfer/sec:      9.10MB
"""


def _load_module():
    spec = importlib.util.spec_from_file_location("bench_load", BENCH / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_wrk_output():
    result = _load_module().parse_wrk(WRK_SAMPLE)
    assert result["rps"] == 70100.55
    assert result["requests"] == 70123
    assert result["p50_ms"] == pytest.approx(0.75)
    assert result["p99_ms"] == pytest.approx(2.5)
    assert result["non_2xx_3xx"] == 7
    assert result["socket_errors"] == {"connect": 0, "read": 3, "write": 0, "timeout": 1}
    assert result["socket_errors_total"] == 4


def test_quick_benchmark_produces_results(tmp_path):
    """benchmarks/run.py --quick end to end: wrk against zigcorn, the JSON, table and plot.

    Slow: wrk's quick rounds are timed runs of a few seconds each, plus 500 idle
    connections opened first (15 s quiet, near 40 s on a busy machine)."""
    require_tool("wrk", reason="wrk is not installed (apt-get install -y wrk)")
    out, md = tmp_path / "quick.json", tmp_path / "quick.md"
    cmd = [sys.executable, str(BENCH / "run.py"), "--quick", "--servers", "zigcorn", "--no-venv",
           "--apps", "raw", "--idle-connections", "500", "--json", str(out), "--markdown", str(md),
           "--plot", str(tmp_path / "ratios.svg")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)  # 15 s quiet, 37 s on a busy CI machine; past 60 s once under a heavier load
    assert proc.returncode == 0, proc.stdout + proc.stderr

    doc = json.loads(out.read_text())
    assert {"date", "machine", "config", "apps"} <= doc.keys()
    assert doc["machine"]["nproc"] > 0 and doc["machine"]["cpu_model"] and doc["machine"]["kernel"]
    result = doc["apps"]["raw"]["zigcorn"]
    assert "error" not in result
    assert result["idle"]["rss_kib"] > 0 and result["idle"]["pss_kib"] > 0
    assert result["peak_rss_kib"] > 0
    for connections in ("1", "64"):
        point = result["load"][connections]
        assert point["rps"] > 0 and point["requests"] > 0
        assert point["p50_ms"] > 0 and point["p99_ms"] > 0
        assert point["non_2xx_3xx"] == 0
    idle = result["idle_connections"]
    assert idle["opened"] == 500 and idle["alive"] > 0
    assert idle["rss_after_kib"] > 0 and idle["bytes_per_connection"] is not None
    assert result["workers"]["supported"] in (True, False)
    soak = result["soak"]
    assert soak["seconds"] == 2 and soak["rps"] > 0 and soak["errors"] == 0
    assert soak["samples"] >= 2 and soak["growth_kib"] is not None and len(soak["series"]) >= soak["samples"]
    table = md.read_text()
    assert "| zigcorn" in table and "req/s c64" in table and "RSS growth, soak" in table
    chart = (tmp_path / "ratios.svg").read_text()
    assert chart.startswith("<svg") and "raw: req/s c64" in chart and "zigcorn: 1.00x" in chart


def test_rss_trend_sees_a_climb_and_ignores_the_warm_up():
    spec = importlib.util.spec_from_file_location("bench_memory", BENCH / "memory.py")
    memory = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = memory  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(memory)
    finally:
        del sys.modules[spec.name]
    warm_then_flat = [(0.0, 1000), (5.0, 5000), (10.0, 9000), (20.0, 9000), (30.0, 9004), (40.0, 9000)]
    flat = memory.rss_trend(warm_then_flat, skip_s=10)
    assert flat["samples"] == 4 and flat["growth_kib"] == 0 and abs(flat["slope_kib_per_min"]) < 10
    leaking = [(float(t), 9000 + 10 * t) for t in range(0, 61, 5)]  # 10 KiB a second
    climb = memory.rss_trend(leaking, skip_s=10)
    assert climb["growth_kib"] == 500 and climb["slope_kib_per_min"] == 600.0
    assert memory.rss_trend([(0.0, 1), (1.0, 2)], skip_s=10)["growth_kib"] is None


def test_static_mount_benchmark_produces_results(tmp_path):
    """``benchmarks/static.py --mount`` against zigcorn alone: every figure is there."""
    require_tool("wrk", reason="wrk is not installed (apt-get install -y wrk)")
    out = tmp_path / "static.json"
    cmd = [sys.executable, str(BENCH / "static.py"), "--mount", "--servers", "zigcorn", "--no-venv",
           "--seconds", "1", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (row,) = json.loads(out.read_text())["rows"]
    assert row["server"] == "zigcorn" and row["idle_rss_kib"] > 0
    for key in ("1k_c64", "256k_c64"):
        assert row[key]["rps"] > 0 and row[key]["errors"] == 0
    assert row["big_c16"]["mb_per_s"] > 0 and row["big_c16"]["errors"] == 0


def _bench_eval(code: str) -> object:
    """Run ``code`` (which prints JSON) in a fresh interpreter with benchmarks/ on its
    path: the harness's modules (its h2.py among them) stay out of this process."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(BENCH)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_peer_row_names_its_configuration():
    """Each row's figures are labelled with the flags that pick its loop, task, parser and
    HTTP/2 mode: the peers' rows never read as bare defaults, and the fast configurations
    run the flags they are named after (over HTTP/1.1 and over HTTP/2)."""
    got = _bench_eval(
        "import json, tempfile; from pathlib import Path; import h2, servers\n"
        "env = servers.Env('python', frozenset({'uvloop'}))\n"
        "tmp = Path(tempfile.mkdtemp())\n"
        "out = {}\n"
        "for name, spec in servers.SERVERS.items():\n"
        "    if not spec.is_app_server: continue\n"
        "    cmd = spec.command(env, 'raw_app:app', 1234, 2, tmp)\n"
        "    out[name] = {'h1': servers.configuration(cmd, spec.environ)}\n"
        "    try: out[name]['h2c'] = servers.configuration(h2.h2_command(name, cmd, None), spec.environ)\n"
        "    except ValueError: pass\n"
        "print(json.dumps(out))\n")
    for name, modes in got.items():
        assert "--workers 2" in modes["h1"], (name, modes)
        if not name.startswith("zigcorn"):
            assert modes["h1"] != "defaults", name
    assert "--task-impl rust" in got["granian-rust"]["h1"] and "--loop uvloop" in got["granian-rust"]["h1"]
    assert "--loop rloop --task-impl rust" in got["granian-rloop-rust"]["h1"]
    assert "--task-impl asyncio" in got["granian"]["h1"]
    assert "--http zttp" in got["uvicorn-zttp"]["h1"] and "--http httptools" in got["uvicorn"]["h1"]
    assert "--http zttp" in got["uvicorn"]["h2c"] and "--http2" in got["uvicorn"]["h2c"]
    assert "--http 2" in got["granian-rloop"]["h2c"] and "--loop rloop" in got["granian-rloop"]["h2c"]
    assert got["h2corn"]["h2c"] == got["h2corn"]["h1"]
    assert "saltare" not in {name for name, modes in got.items() if "h2c" in modes}
    assert got["saltare-OO"]["h1"].startswith("python -OO") and "MALLOC_ARENA_MAX=1" in got["saltare-OO"]["h1"]


def test_rounds_steal_share_and_ratios():
    """rounds.py's steal share of a /proc/stat interval, and its per-round ratios."""
    got = _bench_eval(
        "import json, rounds\n"
        "before = [100, 0, 50, 800, 0, 0, 0, 10]\n"
        "after = [160, 0, 70, 900, 0, 0, 0, 30]\n"
        "print(json.dumps([rounds.steal_share(before, after), rounds.steal_share(after, after),\n"
        "                  rounds.ratios([200.0, 300.0, 90.0], [100.0, 100.0, 100.0]), rounds.key_of('raw_c64', 2)]))\n")
    share, nothing, ratios, key = got
    assert share == 20 / 200 and nothing == 0.0
    assert ratios == {"rounds": [2.0, 3.0, 0.9], "median": 2.0}
    assert key == "raw_c64_w2"
