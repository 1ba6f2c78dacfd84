"""Logging: zigcorn.error / zigcorn.access, --log-config (JSON, YAML, ini), levels, access log on and off."""

import json
import re

import httpx
import pytest

from tests.support.harness import wait_for, zigcorn_only
from tests.support.tools import require_module

pytestmark = [zigcorn_only, pytest.mark.every_python]

ACCESS_LINE = re.compile(r'127\.0\.0\.1:\d+ - "GET /hello\?x=1 HTTP/1\.1" 200 \d+ \d+\.\dms')


def dict_config(log_file) -> dict:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(name)s|%(levelname)s|%(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file), "formatter": "plain"}},
        "loggers": {
            "zigcorn.error": {"handlers": ["file"], "level": "INFO", "propagate": False},
            "zigcorn.access": {"handlers": ["file"], "level": "INFO", "propagate": False},
        },
    }


def check_file_logging(start_server, config_path, log_file):
    server = start_server("basic:app", "--log-config", str(config_path))
    httpx.get(server.url + "/hello?x=1")
    assert server.stop() == 0
    text = log_file.read_text()
    assert "zigcorn.error|INFO|Started server process" in text
    assert "zigcorn.access|INFO|" in text and ACCESS_LINE.search(text), text
    assert "Started server process" not in server.output()  # the config replaced stderr logging


def test_json_log_config(start_server, tmp_path):
    config = tmp_path / "log.json"
    config.write_text(json.dumps(dict_config(tmp_path / "out.log")))
    check_file_logging(start_server, config, tmp_path / "out.log")


def test_yaml_log_config(start_server, tmp_path):
    yaml = require_module("yaml")
    config = tmp_path / "log.yaml"
    config.write_text(yaml.safe_dump(dict_config(tmp_path / "out.log")))
    check_file_logging(start_server, config, tmp_path / "out.log")


def test_ini_log_config(start_server, tmp_path):
    log_file = tmp_path / "out.log"
    config = tmp_path / "log.ini"
    config.write_text(f"""
[loggers]
keys=root,error,access
[handlers]
keys=file
[formatters]
keys=plain
[logger_root]
handlers=
[logger_error]
qualname=zigcorn.error
handlers=file
level=INFO
propagate=0
[logger_access]
qualname=zigcorn.access
handlers=file
level=INFO
propagate=0
[handler_file]
class=FileHandler
args=({str(log_file)!r},)
formatter=plain
[formatter_plain]
format=%(name)s|%(levelname)s|%(message)s
""")
    check_file_logging(start_server, config, log_file)


def test_default_access_line_has_every_field(start_server):
    server = start_server("basic:app")
    httpx.get(server.url + "/hello?x=1")
    assert wait_for(lambda: ACCESS_LINE.search(server.output()) is not None), server.output()


def test_no_access_log(start_server):
    server = start_server("basic:app", "--no-access-log")
    httpx.get(server.url + "/hello?x=1")
    server.stop()
    assert "GET /hello" not in server.output()
    assert "Started server process" in server.output()


def test_log_level_warning_silences_info(start_server):
    server = start_server("basic:app", "--log-level", "warning")
    httpx.get(server.url + "/hello?x=1")
    server.stop()
    assert "Started server process" not in server.output() and "GET /hello" not in server.output()


def _logging_state() -> dict:
    import logging

    state = {}
    for name in ("zigcorn", "zigcorn.error", "zigcorn.access"):
        logger = logging.getLogger(name)
        state[name] = (
            logger.level,
            logger.propagate,
            logger.disabled,
            [(type(h), h.name, h.stream, type(h.formatter), h.formatter.use_colors, h.formatter._fmt) for h in logger.handlers],
        )
    return state


@pytest.mark.parametrize("use_colors", [None, False, True])
def test_default_logging_without_logging_config_matches_dict_config(use_colors):
    # The default setup skips logging.config (about 1 MiB of modules); it must leave
    # exactly what dictConfig(LOGGING_CONFIG) leaves.
    import copy
    import logging.config

    from zigcorn.logging import LOGGING_CONFIG, apply_default_logging

    config = copy.deepcopy(LOGGING_CONFIG)
    if use_colors is not None:
        for formatter in config["formatters"].values():
            formatter["use_colors"] = use_colors
    try:
        logging.getLogger("zigcorn.error").addHandler(logging.NullHandler())  # replaced by both
        logging.config.dictConfig(config)
        expected = _logging_state()
        logging.getLogger("zigcorn.error").addHandler(logging.NullHandler())
        logging.getLogger("zigcorn.access").disabled = True
        apply_default_logging(use_colors)
        assert _logging_state() == expected
    finally:
        for name in ("zigcorn", "zigcorn.error", "zigcorn.access"):
            logger = logging.getLogger(name)
            logger.handlers = []
            logger.propagate = True
            logger.setLevel(logging.NOTSET)


def test_a_changed_default_dict_goes_through_dict_config(monkeypatch):
    from zigcorn import logging as zlogging

    assert zlogging.is_default_logging(zlogging.LOGGING_CONFIG)
    monkeypatch.setitem(zlogging.LOGGING_CONFIG["loggers"]["zigcorn.error"], "level", "DEBUG")
    assert not zlogging.is_default_logging(zlogging.LOGGING_CONFIG)


# ---- the response size: the body's bytes, as gunicorn's %(b)s -----------------------------


def _lines(server, marker: str) -> list[str]:
    return [line for line in server.output().splitlines() if marker in line]


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_b_atom_is_the_body_length_on_the_wire(start_server, http2):
    server = start_server("compress_app:app", "--access-log-format", "q=%(q)s %(m)s b=%(b)s B=%(B)s",
                          "--compression", "gzip")  # fmt: skip
    wire = {}
    with httpx.Client(base_url=server.url, http1=not http2, http2=http2, timeout=30) as client:
        assert len(client.get("/?size=8").content) == 8
        for query in ("size=20000", "size=20000&chunks=4"):  # compressed in one piece, and streamed
            with client.stream("GET", "/?" + query, headers={"accept-encoding": "gzip"}) as r:
                r.read()
                assert r.headers["content-encoding"] == "gzip"
                wire[query] = r.num_bytes_downloaded
        client.get("/?size=0")
        client.head("/?size=8&last")
    assert wait_for(lambda: _lines(server, "last")), server.output()
    assert _lines(server, "q=") == [
        "q=size=8 GET b=8 B=8",
        f"q=size=20000 GET b={wire['size=20000']} B={wire['size=20000']}",
        f"q=size=20000&chunks=4 GET b={wire['size=20000&chunks=4']} B={wire['size=20000&chunks=4']}",
        "q=size=0 GET b=- B=0",
        "q=size=8&last HEAD b=- B=0",
    ], server.output()
    assert 0 < wire["size=20000"] < 20000 and 0 < wire["size=20000&chunks=4"] < 20000


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_the_default_line_counts_the_body(start_server, interface):
    args = ("wsgi_apps:app", "--interface", "wsgi") if interface == "wsgi" else ("basic:app",)
    server = start_server(*args)
    r = httpx.get(server.url + "/bytes?n=8")  # basic.py echoes the path: 6 bytes
    assert wait_for(lambda: _lines(server, "GET /bytes")), server.output()
    (line,) = _lines(server, "GET /bytes")
    assert re.search(rf'"GET /bytes\?n=8 HTTP/1\.1" 200 {len(r.content)} \d+\.\dms$', line), line
