"""The documentation site builds with `mkdocs build --strict`: a page left out of the nav,
a link to a page or an anchor that does not exist, or a link out of docs/ fails the build
(mkdocs.yml's `validation` turns each into a warning, and strict mode fails on any). The
last two tests build deliberately broken copies, so a setting that stopped making strict
mode fail on those would fail here too. Needs mkdocs-material (the [test] extra): missing,
it skips locally and fails on CI (tests/support/tools.py).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import require_module

ROOT = Path(__file__).resolve().parents[2]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the site whose mkdocs.yml is in `root`, into `site`."""
    require_module("mkdocs", "the docs site is built with mkdocs (pip install mkdocs-material)")
    require_module("material", "the docs site's theme is mkdocs-material")
    # Material prints a banner about MkDocs 2.0 on every build; it is not a warning of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )


def copy_of_the_site(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied to a folder of their own, to break on purpose."""
    root = tmp_path / "copy"
    root.mkdir()
    shutil.copy2(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", root / "docs")
    return root


def test_the_site_builds_strictly(tmp_path):
    result = build(ROOT, tmp_path / "site")
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()
    # Every page the nav names was built (a nav entry for a missing page is an error too).
    for page in ("getting-started", "settings", "deployment", "http2", "http3", "ARCHITECTURE"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


@pytest.mark.parametrize(
    "breakage, expected",
    [
        ("[a page that is not there](no-such-page.md)", "no-such-page.md"),
        ("[an anchor that is not there](http2.md#no-such-heading)", "no-such-heading"),
        ("[a file outside docs/](../README.md)", "README.md"),
    ],
)
def test_a_broken_link_fails_the_build(tmp_path, breakage, expected):
    root = copy_of_the_site(tmp_path)
    with (root / "docs" / "index.md").open("a") as page:
        page.write(f"\n{breakage}\n")
    result = build(root, tmp_path / "site")
    assert result.returncode != 0, f"strict mode let a broken link through: {breakage}"
    assert expected in result.stderr + result.stdout


def test_a_page_missing_from_the_nav_fails_the_build(tmp_path):
    root = copy_of_the_site(tmp_path)
    (root / "docs" / "orphan.md").write_text("# A page the nav does not name\n")
    result = build(root, tmp_path / "site")
    assert result.returncode != 0, "strict mode let a page missing from the nav through"
    assert "orphan.md" in result.stderr + result.stdout
