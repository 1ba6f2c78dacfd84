"""zigcorn's reading of HTTP/1.1 beside uvicorn (h11 and httptools), hypercorn, gunicorn,
granian and nginx: the fixed corpus and a few generated inputs from a fixed seed. Every
disagreement in which zigcorn is looser or reads differently must have a written reason
(tests/support/differential/verdicts.py); the long run is ``python -m
tests.support.differential --help``."""

import pytest

from tests.support.harness import zigcorn_only
from tests.support.tools import require_module, require_tool

for _module in ("uvicorn", "httptools", "h11", "hypercorn", "granian", "gunicorn"):
    require_module(_module)

SEED, COUNT = 40, 60


@pytest.fixture(scope="module")
def rows():
    require_tool("nginx", reason="nginx is a reference parser (.ci/run installs it)")
    from tests.support.differential import run, servers

    started = servers.start_all(list(servers.REFERENCES))
    try:
        from tests.support.differential import corpus

        inputs = corpus.inputs(SEED, COUNT)
        results = run.run(inputs, started)
    finally:
        for server in started.values():
            server.stop()
    return run.classify(inputs, results, started)


@zigcorn_only
def test_every_looser_or_different_reading_has_a_reason(rows):
    """Every input zigcorn reads more loosely than, or differently from, a reference parser
    has a reason in the corpus.

    Slow: the module's `rows` fixture, counted here, starts the reference servers and sends
    them and zigcorn the whole generated corpus (about 50 s); the other tests reuse it."""
    bad = [f"{row['verdict']} on {row['input'].key}: {row['input'].data[:200]!r} "
           f"(relations {row['relations']})"
           for row in rows if row["verdict"].split(":")[0] in ("looser", "reads-differently", "split")
           and row["verdict"] != "split:stricter" and not row["reason"]]
    assert not bad, "\n".join(bad)


@zigcorn_only
def test_zigcorn_agrees_on_the_valid_seeds(rows):
    seeds = [row for row in rows if row["input"].tags[0].startswith("seed:")]
    assert seeds and all(row["verdict"] == "agree" for row in seeds), [(r["input"].key, r["relations"]) for r in seeds]


@zigcorn_only
def test_no_reference_failed_to_answer_everything(rows):
    # A reference that answered nothing at all was not running: the comparison would be empty.
    for name in rows[0]["result"]:
        assert any(row["result"][name].items for row in rows), name


@zigcorn_only
@pytest.mark.parametrize("tag", ["cl-and-te-smuggle", "chunk-smuggled-after-last", "te-obs-fold", "obs-fold",
                                 "te-chunked-identity", "cl-two-lines-different", "chunk-size-overflow"])
def test_smuggling_vectors_never_read_looser(rows, tag):
    for row in rows:
        if row["input"].tags[0] == tag:
            assert row["verdict"].split(":")[0] not in ("looser", "reads-differently"), (tag, row["relations"])


def test_harness_help_documents_the_long_run():
    import subprocess
    import sys

    from tests.support.harness import ROOT

    out = subprocess.run([sys.executable, "-m", "tests.support.differential", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    assert "--count" in out and "Release days" in out
