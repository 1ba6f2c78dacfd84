"""CPython's own asyncio test suite on zigcorn's loop (see tests/support/asyncio_suite.py).

Every test of ``test.test_asyncio`` that passes on asyncio's own loop on this machine
must pass on zigcorn's, apart from `asyncio_suite.EXPECTED` (each with its reason).
"""

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.asyncio_suite import EXPECTED
from tests.support.harness import ROOT
from tests.support.tools import skip_or_fail

pytestmark = pytest.mark.every_python


def test_cpython_asyncio_suite_passes_on_zigcorns_loop(tmp_path):
    """CPython's test.test_asyncio on zigcorn's loop, against its result on asyncio's own.

    Slow: the whole suite is thousands of tests with real timeouts and subprocesses (about
    40 s); it is the conformance check of the loop on each interpreter."""
    if importlib.util.find_spec("test.test_asyncio") is None:
        skip_or_fail("this interpreter ships without its test suite, test.test_asyncio "
                     "(Debian: libpython3.X-testsuite)")
    out = tmp_path / "suite.json"
    proc = subprocess.run([sys.executable, "-m", "tests.support.asyncio_suite", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500, stdin=subprocess.DEVNULL)  # fmt: skip
    print(proc.stdout[-5000:])
    result = json.loads(out.read_text())
    assert result["regressions"] == [], proc.stdout[-20000:]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    # The run really happened: thousands of tests, zigcorn's own battery among them.
    assert result["run"] > 2000
    assert result["modules"]["test_events"]["run"] > 300
    # Nothing listed as expected is stale: each still differs (or the list would hide a fix).
    assert set(result["expected"]) == set(EXPECTED)
