"""The settings table (`zigcorn.settings.SETTINGS`) is the one home of every setting: the
engine's options, the command line's groups and the reference page ``docs/settings.md``
are checked against it here (the values the engine runs with: test_settings.py)."""

import pathlib

import pytest

from tests.support.harness import zigcorn_only

pytestmark = zigcorn_only

from zigcorn import _core  # noqa: E402
from zigcorn.config import Config  # noqa: E402
from zigcorn.protocols.http import HTTPCycle, wake  # noqa: E402
from zigcorn.main import build_parser  # noqa: E402
from zigcorn.settings import ENGINE_ONLY, SETTINGS, markdown  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_reference_page_is_the_tables():
    page = (ROOT / "docs" / "settings.md").read_text()
    assert page == markdown(), "docs/settings.md is stale: python -m zigcorn.settings --markdown > docs/settings.md"


def test_every_engine_option_is_given_by_a_setting_or_the_server():
    """Each option the engine reads (`specs` in src/zig/python/options.zig) is set by one
    setting's `engine` column or named in ENGINE_ONLY, in the group the engine expects it."""
    given = {}
    for setting in SETTINGS:
        if setting.option is not None:
            assert setting.option not in given, f"{setting.option} is set by {given[setting.option]} too"
            given[setting.option] = setting.name
            assert _core.OPTIONS.get(setting.option) in ("always", "tls", "http3"), setting.name
    for when, names in ENGINE_ONLY.items():
        for name in names:
            assert _core.OPTIONS[name] == when, name
            given[name] = None
    settings = {name for name, when in _core.OPTIONS.items() if when != "plumbing"}
    assert set(given) == settings


def test_engine_options_carry_exactly_the_engines_names(tmp_path):
    trustme = pytest.importorskip("trustme")
    cert = trustme.CA().issue_cert("localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "server.pem")
    plain = Config("tests.apps.basic:app").engine_options()
    always = {name for name, when in _core.OPTIONS.items() if when == "always"} | {"http3_fd"}  # -1: off
    assert set(plain) == always
    tls = Config("tests.apps.basic:app", ssl_certfile=str(tmp_path / "server.pem")).engine_options()
    assert set(tls) == always | {name for name, when in _core.OPTIONS.items() if when == "tls"}


def test_the_engine_refuses_an_option_it_does_not_know():
    options = Config("tests.apps.basic:app").engine_options()
    options["metrics_slot"] = 0
    with pytest.raises(ValueError, match="unknown engine option 'timeout_keepalive'"):
        _core.Engine(lambda stream: None, wake, HTTPCycle, {**options, "timeout_keepalive": 5.0})


def test_each_flag_is_under_its_settings_group():
    parser = build_parser()
    group_of = {action.dest: group.title for group in parser._action_groups for action in group._group_actions}
    for setting in SETTINGS:
        assert group_of[setting.name] == setting.group, setting.name
    assert {group_of[name] for name in ("http3", "http3_port", "http3_retry")} == {"HTTP/3"}
