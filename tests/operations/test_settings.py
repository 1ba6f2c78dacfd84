"""One source of truth for settings: every option's default, bounds and help live in
`zigcorn.config.SETTINGS`, and the engine runs with exactly what Config says.

The engine is created in this process from the options dict the server would give it,
then asked what it runs with (`Engine.options()`), for the defaults and for a
non-default value of every option that reaches it.
"""

import asyncio

import os

import pytest

from tests.support.harness import zigcorn_only

pytestmark = zigcorn_only

from zigcorn import _core  # noqa: E402
from zigcorn.config import DEFAULTS, SETTING, SETTINGS, WRITER_MODES, Config  # noqa: E402
from zigcorn.protocols.http import HTTPCycle, wake  # noqa: E402
from zigcorn.main import build_parser  # noqa: E402
from zigcorn.protocols.websocket import WebSocketCycle  # noqa: E402

# A value other than the default for every option the engine runs with.
NON_DEFAULT = {
    "timeout_keep_alive": 7.5,
    "timeout_header": 11,
    "timeout_body": 12,
    "timeout_write": 13,
    "timeout_connection": 3600,
    "server_header": False,
    "date_header": False,
    "limit_connections": 1234,
    "limit_keep_alive_requests": 55,
    "limit_request_body": 4096,
    "limit_request_line": 100,
    "limit_request_fields": 7,
    "limit_request_head": 999,
    "ws": "none",
    "ws_max_size": 1000,
    "ws_max_queue": 3,
    "ws_ping_interval": 0,
    "ws_ping_timeout": 2.5,
    "ws_per_message_deflate": False,
    "busy_poll": 0,
    "writer_thread": "on",
    # The other one than what serves by default (auto: io_uring; the suite's epoll run sets epoll by environment).
    "io_backend": "io_uring" if os.environ.get("ZIGCORN_IO_BACKEND") == "epoll" else "epoll",
    "io_uring_buffers": 1024,
    "io_uring_buffer_size": 16384,
    "http2": False,
    "h2c_upgrade": True,
    "http2_max_concurrent_streams": 9,
    "proxy_headers": False,
    "metrics_path": "/m",
    "health_path": "/h",
    "ready_path": "/r",
    "root_path": "/api",
    "request_id_header": "x-req",
    "trace_context": True,
    "server_timing": True,
    "tcp_nodelay": False,
    "compression": "gzip,br",
    "compression_min_size": 10,
    "compression_gzip_level": 1,
    "compression_brotli_level": 1,
    "compression_zstd_level": 1,
    "compression_types": "text/html",
    "request_decompression": True,
    "tcp_keepalive_idle": 30,
    "tcp_keepalive_interval": 5,
    "tcp_keepalive_count": 3,
    "tcp_user_timeout": 9000,
    "tcp_fastopen": 16,
    "hsts": 600,
    "limit_connections_per_ip": 50,
    "limit_request_rate": 20,
    "limit_request_burst": 40,
    "limit_request_table": 1024,
    "proxy_protocol": True,
    "access_log": False,
}


def expected(config: Config) -> dict:
    """What the engine must report for `config`, in Config's units."""
    ping = config.ws_ping_interval
    return {
        "timeout_keep_alive": float(config.timeout_keep_alive),
        "timeout_header": float(config.timeout_header),
        "timeout_body": float(config.timeout_body),
        "timeout_write": float(config.timeout_write),
        "timeout_connection": config.timeout_connection or 0,
        "server_header": config.server_header,
        "date_header": config.date_header,
        "limit_connections": config.limit_connections,
        "limit_keep_alive_requests": config.limit_keep_alive_requests,
        "limit_request_body": config.limit_request_body,
        "limit_request_line": config.limit_request_line,
        "limit_request_fields": config.limit_request_fields,
        "limit_request_head": config.limit_request_head,
        "ws": config.ws != "none",
        "ws_max_size": config.ws_max_size,
        "ws_max_queue": config.ws_max_queue,
        # None and 0 both mean no pings.
        "ws_ping_interval": float(ping or 0),
        "ws_ping_timeout": float(config.ws_ping_timeout),
        "ws_per_message_deflate": config.ws_per_message_deflate,
        "busy_poll": config.busy_poll,
        "writer_thread": WRITER_MODES[config.writer_thread],
        "io_backend": config.resolved_io_backend,
        "io_uring_buffers": config.io_uring_buffers,
        "io_uring_buffer_size": config.io_uring_buffer_size,
        "http2": bool(config.http2),
        "h2c_upgrade": config.h2c_upgrade,
        "http2_max_concurrent_streams": config.http2_max_concurrent_streams,
        "proxy_headers": config.proxy_headers,
        "metrics_path": config.metrics_path or "",
        "health_path": config.health_path or "",
        "ready_path": config.ready_path or "",
        "root_path": config.root_path,
        "request_id_header": config.request_id_header or "",
        "trace_context": config.trace_context,
        "server_timing": config.server_timing,
        "tcp_nodelay": config.tcp_nodelay,
        "tcp_keepalive_idle": config.tcp_keepalive_idle or 0,
        "tcp_keepalive_interval": config.tcp_keepalive_interval or 0,
        "tcp_keepalive_count": config.tcp_keepalive_count or 0,
        "tcp_user_timeout": config.tcp_user_timeout or 0,
        "tcp_fastopen": config.tcp_fastopen or 0,
        "hsts": f"max-age={config.hsts}" if config.hsts is not None else "",
        "limit_connections_per_ip": config.limit_connections_per_ip or 0,
        "limit_request_rate": config.limit_request_rate or 0,
        "limit_request_burst": (config.limit_request_burst or config.limit_request_rate or 0)
        if config.limit_request_rate else 0,
        "limit_request_table": config.limit_request_table,
        "compression": ",".join(config.compression),
        "compression_min_size": config.compression_min_size,
        "compression_gzip_level": config.compression_gzip_level,
        "compression_brotli_level": config.compression_brotli_level,
        "compression_zstd_level": config.compression_zstd_level,
        "compression_types": ",".join(config.compression_types),
        "request_decompression": config.request_decompression,
        "proxy_protocol": config.proxy_protocol,
        # The engine logs what it answers itself while `zigcorn.access` takes INFO.
        "access_log": config.access_log,
    }


def engine_for(config: Config):
    options = config.engine_options()
    options["metrics_slot"] = 0
    if options["ws"]:
        options["websocket_class"] = WebSocketCycle
    return _core.Engine(lambda stream: None, wake, HTTPCycle, options)


def reported(config: Config) -> dict:
    engine = engine_for(config)
    try:
        return engine.options()
    finally:
        engine.close()


def test_engine_runs_with_configs_defaults():
    config = Config("tests.apps.basic:app")
    assert reported(config) == expected(config)
    # The drifts of the past: 20 s pings, a 100 µs busy poll, an 8190-byte target.
    assert reported(config)["ws_ping_interval"] == 20.0
    assert reported(config)["busy_poll"] == 100
    assert reported(config)["limit_request_line"] == 8190


def test_engine_runs_with_every_non_default_value():
    assert set(NON_DEFAULT) <= SETTING.keys()
    for name, value in NON_DEFAULT.items():
        assert value != DEFAULTS[name], name
    config = Config("tests.apps.basic:app", **NON_DEFAULT)
    got = reported(config)
    assert got == expected(config)
    # Each one really moved (not a coincidence of both sides keeping a default).
    defaults = reported(Config("tests.apps.basic:app"))
    assert [name for name in got if got[name] == defaults[name]] == []


def test_the_walk_covers_every_option_the_engine_reads():
    # Every key the engine reports is checked above; every setting the engine takes is reported.
    config = Config("tests.apps.basic:app")
    assert set(reported(config)) == set(expected(config)) == set(NON_DEFAULT)


def test_the_engine_has_no_defaults_of_its_own():
    options = Config("tests.apps.basic:app").engine_options()
    options["metrics_slot"] = 0
    options["websocket_class"] = WebSocketCycle
    for name in ("timeout_header", "limit_request_line", "ws_ping_interval", "busy_poll", "root_path", "headers"):
        partial = {k: v for k, v in options.items() if k != name}
        with pytest.raises(KeyError, match=name):
            _core.Engine(lambda stream: None, wake, HTTPCycle, partial)


def engine_options(config: Config | None = None) -> dict:
    options = (config or Config("tests.apps.basic:app")).engine_options()
    options["metrics_slot"] = 0
    options["websocket_class"] = WebSocketCycle
    return options


def refused_by_the_engine(options: dict, name: str, value) -> None:
    with pytest.raises(ValueError, match=name):
        engine = _core.Engine(lambda stream: None, wake, HTTPCycle, {**options, name: value})
        engine.close()


def test_out_of_range_values_are_refused_not_clamped():
    options = engine_options()
    for name, (low, high) in _core.LIMITS.items():
        if name.startswith(("ssl_", "http3_")):
            continue  # read with a certificate (and a UDP socket) only: the next test, tests/http3/test_http3_options.py
        for bad in (low - 1, high + 1):
            refused_by_the_engine(options, name, bad)
    refused_by_the_engine(options, "timeout_write", -1.0)
    # Past 64 bits is out of range too, not an OverflowError.
    refused_by_the_engine(options, "limit_request_body", 2**64)


def test_out_of_range_tls_values_are_refused(tmp_path):
    trustme = pytest.importorskip("trustme")
    from zigcorn.tls import load_openssl

    load_openssl()
    cert = trustme.CA().issue_cert("localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "server.pem")
    options = engine_options(Config("tests.apps.basic:app", ssl_certfile=str(tmp_path / "server.pem")))
    tls = [name for name in _core.LIMITS if name.startswith("ssl_")]
    assert sorted(tls) == ["ssl_cert_reqs", "ssl_max_version", "ssl_min_version", "ssl_session_cache"]
    for name in tls:
        low, high = _core.LIMITS[name]
        for bad in (low - 1, high + 1):
            refused_by_the_engine(options, name, bad)


# What a setting needs beside it to be valid.
COMPANIONS = {"limit_request_burst": {"limit_request_rate": 1}}
# Config caps these lower than the engine could take: a busy poll at 5 ms (the engine
# could spin 1 s), a WebSocket's queue at 2**20 messages.
CAPPED = {"busy_poll", "ws_max_queue"}
# Engine options Config checks by rules of its own (`Config._check_tls`, with the reasons
# in its messages): the versions come from ssl_version and ssl_min_version's names.
CHECKED_BY_CONFIG = {"ssl_cert_reqs", "ssl_min_version", "ssl_max_version"}


def test_config_bounds_are_the_engines_own():
    for name, (low, high) in _core.LIMITS.items():
        if name.startswith("http3_"):
            continue  # not settings: the server fills them in per worker (tests/http3/test_http3_options.py)
        if name in CHECKED_BY_CONFIG:
            continue
        setting = SETTING[name]
        if setting.low != low:
            # The engine's 0 is "off", which Config says with None.
            assert (low, setting.low, setting.default) == (0, 1, None), name
        if name in CAPPED:
            assert setting.high < high, name
        else:
            assert setting.high == high, name
        for good in (setting.low, setting.high):
            Config("tests.apps.basic:app", **COMPANIONS.get(name, {}), **{name: good})
        for bad in (setting.low - 1, setting.high + 1):
            with pytest.raises(ValueError, match=name):
                Config("tests.apps.basic:app", **COMPANIONS.get(name, {}), **{name: bad})


def test_config_maxima_are_the_engines_own(tmp_path):
    """One past each of `_core.MAXIMA`: Config refuses it with the setting's name, and so
    does the engine if given it directly; the most itself is taken by both."""
    most = _core.MAXIMA
    assert set(most) == {"compression_types", "request_id_header", "forwarded_allow_ips", "metrics_buckets",
                         "metrics_bucket_seconds", "static", "static_route",
                         "http3_qlog_dir"}  # with a UDP socket only: tests/http3/test_http3_options.py
    types = "text/" + "x" * (most["compression_types"] - 5)
    header = "x-" + "a" * (most["request_id_header"] - 2)
    ips = [f"10.0.{i // 250}.{i % 250}" for i in range(most["forwarded_allow_ips"] + 1)]
    buckets = [float(i + 1) for i in range(most["metrics_buckets"] + 1)]
    top = float(most["metrics_bucket_seconds"])
    routes = [f"/r{i}" for i in range(most["static"] + 1)]
    route = "/" + "r" * (most["static_route"] - 1)
    cases = [  # (setting, the most it takes, one past that)
        ("compression_types", types, types + "x"),
        ("request_id_header", header, header + "a"),
        ("forwarded_allow_ips", ips[:-1], ips),
        ("metrics_buckets", buckets[:-1], buckets),
        ("metrics_buckets", [top], [top + 1]),
        ("static", [f"{r}={tmp_path}" for r in routes[:-1]], [f"{r}={tmp_path}" for r in routes]),
        ("static", [f"{route}={tmp_path}"], [f"{route}r={tmp_path}"]),
    ]
    for name, at_most, past in cases:
        engine_for(Config("tests.apps.basic:app", **{name: at_most})).close()
        with pytest.raises(ValueError, match=name):
            Config("tests.apps.basic:app", **{name: past})
    # The engine's own check, for a caller that is not Config.
    options = engine_options()
    refused_by_the_engine(options, "compression_types", types + "x")
    refused_by_the_engine(options, "request_id_header", header + "a")
    refused_by_the_engine(options, "forwarded_allow_ips", ips)
    refused_by_the_engine(options, "metrics_buckets", buckets)
    refused_by_the_engine(options, "metrics_buckets", [top + 1])
    refused_by_the_engine(options, "static", [(r, str(tmp_path)) for r in routes])
    refused_by_the_engine(options, "static", [(route + "r", str(tmp_path))])


def test_command_line_defaults_are_configs():
    parser = build_parser()
    flags = {action.dest: action for action in parser._actions}
    for setting in SETTINGS:
        action = flags[setting.name]
        if f"ZIGCORN_{setting.name.upper()}" in os.environ:
            continue  # ZIGCORN_<NAME> sets the flag's default (the suite's io_uring run sets one)
        # None on the command line means "not given": Config's own default then applies.
        assert action.default in (setting.default, None), setting.name
        if action.default is None and setting.default is not None:
            assert setting.kind == "append" or isinstance(setting.default, dict), setting.name
        if setting.default is not None and setting.kind != "append" and not isinstance(setting.default, dict):
            assert action.default == setting.default, setting.name
    assert set(flags) - {"help", "version", "app", "app_dir", "config"} == SETTING.keys()


def test_command_line_and_config_agree_on_what_not_giving_an_option_means(monkeypatch):
    import importlib

    cli = importlib.import_module("zigcorn.main")
    captured = {}
    monkeypatch.setattr(cli, "serve", lambda config: captured.setdefault("config", config))
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    cli.main(["tests.apps.basic:app"])
    from_cli = captured["config"]
    from_api = Config("tests.apps.basic:app")
    for setting in SETTINGS:
        assert getattr(from_cli, setting.name) == getattr(from_api, setting.name), setting.name
    assert reported(from_cli) == reported(from_api)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="prot"):
        Config("tests.apps.basic:app", prot=80)


@pytest.fixture(autouse=True)
def _loop():
    # HTTPCycle and friends need no running loop to be handed to the engine, but Config's
    # logging set-up and the engine's call_soon plumbing expect a loop policy in place.
    asyncio.set_event_loop(asyncio.new_event_loop())
    yield
    asyncio.get_event_loop().close()
    asyncio.set_event_loop(None)


def test_docs_tables_show_configs_defaults():
    """The docs pages (each topic's own tables) document each option's default; they must say
    what Config does. The settings reference is generated from the table itself
    (tests/operations/test_settings_table.py holds it to the table)."""
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    readme = "\n".join(page.read_text() for page in sorted(docs.glob("*.md")) if page.name != "settings.md")
    by_flag = {s.flag: s for s in SETTINGS}
    row = re.compile(r"^\| `(--[a-z-]+)(?: [A-Z:_]+)?` \| (`[^`]*`|on|off|none) ", re.M)
    checked = 0
    for flag, default_text in row.findall(readme):
        setting = by_flag.get(flag)
        if setting is None:  # a command-line-only flag (--app-dir)
            continue
        default = setting.default
        if default is None and setting.shown:  # resolved at start-up ($WEB_CONCURRENCY, ...)
            continue
        if default is None:
            allowed = {"off", "none"}
        elif isinstance(default, bool):
            allowed = {"on", "`true`"} if default else {"off", "`false`"}
        elif default == "":
            allowed = {'`""`'}
        else:
            allowed = {f"`{default}`"}
        assert default_text in allowed, f"docs/ say {flag} defaults to {default_text}, Config to {default!r}"
        checked += 1
    assert checked >= 25, f"only {checked} rows of docs/ tables were recognised"


def test_every_choice_is_checked_by_the_settings_table():
    for setting in SETTINGS:
        if setting.choices is None:
            continue
        with pytest.raises(ValueError, match=f"^{setting.name} must be one of {', '.join(setting.choices)}"):
            Config("tests.apps.basic:app", **{setting.name: "no-such-choice"})
        for choice in setting.choices:
            assert Config("tests.apps.basic:app", **{setting.name: choice})


def test_a_protocol_class_for_http_is_refused_with_the_reason():
    class H11Protocol:  # what uvicorn.run(http=...) accepts
        pass

    with pytest.raises(ValueError, match="http must be one of auto, h11, httptools.*protocol class cannot"):
        Config("tests.apps.basic:app", http=H11Protocol)


def test_bounds_config_alone_keeps_hold_at_their_edges():
    """The settings whose bounds are Config's own (not the engine's: `_core.LIMITS`), e.g.
    --drain-delay and --shutdown-delay: each bound is accepted, one past it refused."""
    checked = []
    for setting in SETTINGS:
        if setting.low is None or setting.high is None or setting.name in _core.LIMITS:
            continue
        if setting.name in getattr(_core, "MAXIMA", {}):
            continue
        extra = COMPANIONS.get(setting.name, {})
        for good in (setting.low, setting.high):
            Config("tests.apps.basic:app", **extra, **{setting.name: good})
        for bad in (setting.low - 1, setting.high + 1):
            with pytest.raises(ValueError, match=setting.name):
                Config("tests.apps.basic:app", **extra, **{setting.name: bad})
        checked.append(setting.name)
    assert {"drain_delay", "shutdown_delay"} <= set(checked), checked
