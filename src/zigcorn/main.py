"""The ``zigcorn`` command and `run()`, uvicorn's entry points under zigcorn's name.

argparse rather than click keeps the CLI dependency-free; it is imported only
when the command line is parsed, so programs calling `run()` never load it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import zigcorn
from zigcorn.config import STARTUP_FAILURE, Config
from zigcorn.settings import SETTING, SETTINGS, Setting

logger = logging.getLogger("zigcorn.error")

if TYPE_CHECKING:
    import argparse


def run(app: Any, *, app_dir: str | None = None, **kwargs: Any) -> None:
    """Serve ``app`` (an ASGI app or a ``"module:attribute"`` string) until stopped.

    Takes `Config`'s keywords, as ``uvicorn.run`` does. ``app_dir`` is put first
    on ``sys.path`` ("" means the current directory) so the app string resolves
    against it. Exits with status 3 if the server could not start.
    """
    if app_dir is not None:
        sys.path.insert(0, app_dir or os.getcwd())
    serve(Config(app, **kwargs))


def raise_nofile() -> None:
    """--auto-raise-nofile: the soft RLIMIT_NOFILE up to the hard one (workers inherit it)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        # Linux refuses an infinite soft limit for descriptors: nr_open is the real ceiling.
        try:
            with open("/proc/sys/fs/nr_open") as f:
                hard = int(f.read())
        except (OSError, ValueError):
            hard = 1 << 20
    if soft >= hard:
        logger.info("Open files limit: %d (already the hard limit).", soft)
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    except (OSError, ValueError) as exc:
        logger.warning("Could not raise the open files limit from %d to %d: %s", soft, hard, exc)
        return
    logger.info("Open files limit raised from %d to %d.", soft, hard)


def serve(config: Config) -> None:
    """Run a server for `config` until it stops; exit 3 if it never started.

    With ``reload`` a supervisor restarts a fresh server process on code changes; with
    ``workers`` > 1 a master forks and tends the workers; else this process serves.
    """
    if config.auto_raise_nofile:
        raise_nofile()
    if config.reload:
        from zigcorn.supervisors.reload import run_reloader

        run_reloader(config)
        return
    if config.workers > 1 or config.workers_max_rss is not None:
        from zigcorn.supervisors.multiprocess import run_master

        run_master(config)
        return
    config.loop_factory()  # before zigcorn.server imports asyncio: the loop decides how
    from zigcorn.supervisors.process import wants_privilege_drop
    from zigcorn.server import Server

    listener = pid_file = quic = None
    if wants_privilege_drop(config):
        # Bound before the app starts, so that only binding runs with root's privileges.
        from zigcorn.supervisors.process import after_bind
        from zigcorn.sockets import bind, bind_quic

        try:
            listener = bind(config)
            if config.http3:
                quic = bind_quic(config, listener.sock.getsockname()[1], 1)
            pid_file = after_bind(config)
        except OSError as exc:
            logging.getLogger("zigcorn.error").error("%s", exc.strerror or exc)
            sys.exit(STARTUP_FAILURE)
    server = Server(config, listener, owns_listener=listener is not None, pid_file=pid_file,
                    quic=(quic, 0) if quic is not None else None)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # Ctrl+C before signal handlers were installed: nothing to report
    finally:
        if pid_file is not None:
            pid_file.remove()
        if quic is not None:
            quic.close()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``zigcorn`` and ``python -m zigcorn``."""
    # The parser (every setting's action, group and help text) is garbage once the Config
    # exists: built in a frame of its own, it is not held for the server's whole life.
    loaded_by_cli = CLI_ONLY_MODULES - sys.modules.keys()
    config = config_from_command_line(sys.argv[1:] if argv is None else list(argv))
    forget_modules(loaded_by_cli)
    serve(config)


# What parsing the command line imports and serving never uses (about 0.2 MiB of a
# serving process): argparse, the gettext it looks translations up with, and tomllib for
# --config. Only the ones the CLI itself loaded are forgotten: an app that
# imports them gets them afresh, as it would under run().
CLI_ONLY_MODULES = frozenset({"argparse", "gettext", "tomllib", "tomllib._parser", "tomllib._re",
                              "tomllib._types"})


def forget_modules(names: set[str] | frozenset[str]) -> None:
    """Drop `names` from sys.modules so that, unreferenced, they are collected; the server
    collects garbage (and trims the C heap) once its startup is done."""
    for name in names:
        sys.modules.pop(name, None)


def config_from_command_line(argv: list[str]) -> Config:
    """The `Config` the command line, the config file and ``ZIGCORN_*`` describe; exits
    with argparse's usage error (status 2) on a wrong one."""
    config_file = _config_file_argument(argv)
    try:
        file_values = read_config_file(config_file) if config_file else {}
    except ValueError as exc:
        build_parser().error(str(exc))
    parser = build_parser(file_values)
    options = vars(parser.parse_args(argv))
    options.pop("config")
    for name, value in file_values.items():
        given = options.get(name)
        if isinstance(value, list) and isinstance(given, list) and given[: len(value)] == value and len(given) > len(value):
            options[name] = given[len(value) :]  # a repeatable flag replaces the file's list, not extends it
    app, app_dir = options.pop("app"), options.pop("app_dir")
    # Not given on the command line (None) means Config's default, which may be something else.
    options = {name: value for name, value in options.items() if value is not None or SETTING[name].default is None}
    if not app:
        parser.error("the following arguments are required: APP")
    sys.path.insert(0, app_dir or os.getcwd())
    try:
        return Config(app, **options)
    except ValueError as exc:  # a setting out of range: one line, like argparse's own errors
        parser.error(str(exc))


def build_parser(file_values: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="zigcorn",
        description="Run an ASGI application on zigcorn.",
        usage="%(prog)s APP [options]",
        formatter_class=_help_formatter,
    )
    parser.add_argument(
        "app", metavar="APP", nargs="?", default=os.environ.get(ENV_PREFIX + "APP"),
        help='the application, as "module:attribute" (e.g. main:app); or $ZIGCORN_APP',
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=_version_line())
    parser.add_argument("--app-dir", default="", metavar="DIR", help="import APP from here (default: cwd)")
    parser.add_argument(
        "--config", metavar="FILE", default=os.environ.get(ENV_PREFIX + "CONFIG"),
        help="read settings from this TOML file (run()'s keyword names); the environment and the command line win",
    )  # fmt: skip
    groups: dict[str, argparse._ArgumentGroup] = {}
    for setting in SETTINGS:
        group = groups.get(setting.group) or groups.setdefault(setting.group, parser.add_argument_group(setting.group))
        group.add_argument(setting.flag, *setting.aliases, **_argument(setting))
    if file_values:
        for action in parser._actions:
            if action.dest in file_values and not (action.dest == "app" and action.default):
                action.default = file_values[action.dest]
                action.required = False
    _defaults_from_environment(parser)
    return parser


def _config_file_argument(argv: list[str]) -> str | None:
    """The --config FILE among `argv` (the last one), else $ZIGCORN_CONFIG: needed before the
    parser is built, since the file's values become its defaults."""
    found = os.environ.get(ENV_PREFIX + "CONFIG") or None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--config="):
            found = arg.partition("=")[2]
    return found


# The keys a config file may hold besides the settings: run()'s own arguments.
_FILE_ONLY_KEYS = {"app": str, "app_dir": str}


def read_config_file(path: str) -> dict[str, Any]:
    """``--config FILE``: a TOML table of run()'s keyword arguments, checked against the
    settings table. Raises ValueError naming the file and the key at fault."""
    import tomllib

    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in _FILE_ONLY_KEYS:
            if not isinstance(value, str):
                raise ValueError(f"{path}: {key!r} must be a string, not {value!r}")
            values[key] = value
            continue
        setting = SETTING.get(key)
        if setting is None:
            hint = ""
            if key.replace("-", "_") in SETTING:
                hint = f" (did you mean {key.replace('-', '_')!r}?)"
            raise ValueError(f"{path}: unknown key {key!r}{hint}")
        try:
            value = _file_value(setting, value)
            if setting.kind != "append":
                setting.check(value)
        except ValueError as exc:
            raise ValueError(f"{path}: {key!r}: {exc}") from None
        values[key] = value
    return values


def _file_value(setting: Setting, value: Any) -> Any:
    """A TOML value as the setting takes it, or ValueError saying what was expected."""
    def wrong(expected: str):
        return ValueError(f"expected {expected}, not {value!r} ({type(value).__name__})")

    if setting.kind in ("onoff", "switch") or setting.type == "boolean":
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if setting.kind == "append":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise wrong("a string or an array of strings")
        if setting.type == "header":
            from argparse import ArgumentTypeError

            try:
                return [_header(item) for item in items]
            except ArgumentTypeError as exc:
                raise ValueError(str(exc)) from None
        return items
    if setting.type in (int, "port"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong("an integer")
        return value
    if setting.type == "octal":
        if isinstance(value, str):
            try:
                return int(value, 8)
            except ValueError:
                raise wrong("an octal mode (0o660 or \"660\")") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong("an octal mode (0o660 or \"660\")")
        return value
    if setting.type is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong("a number")
        return value
    if setting.name == "log_config" and isinstance(value, dict):
        return value  # a dictConfig table in the file itself
    if setting.also is not None and setting.also[0](value):
        return value
    if not isinstance(value, str):
        raise wrong("a string")
    return value


def _argument(setting: Setting) -> dict[str, Any]:
    """add_argument()'s keywords for one setting: its flag's kind, type, choices and help."""
    import argparse

    kwargs: dict[str, Any] = {"dest": setting.name}
    default = setting.default
    if setting.kind == "onoff":
        kwargs["action"] = argparse.BooleanOptionalAction
        shown = setting.shown or ("on" if default else "off")
    elif setting.kind == "switch":
        kwargs["action"] = "store_true"
        shown = None
    else:
        kwargs["metavar"] = setting.metavar
        kwargs["type"] = _TYPES.get(setting.type, setting.type)
        if setting.choices is not None:
            kwargs["choices"] = setting.choices
            kwargs.pop("metavar")
        if setting.kind == "append":
            kwargs["action"] = "append"
            shown = setting.shown or (" ".join(default) if default else None)
        else:
            shown = setting.shown or (None if default is None else str(default))
    # argparse's default stays None for anything Config fills in itself (lists, the
    # logging dict, values read from the environment): main() leaves those to Config.
    if setting.kind in ("onoff", "switch") or (setting.kind == "value" and isinstance(default, (int, float, str))):
        kwargs["default"] = default
    kwargs["help"] = setting.help + (f" (default: {shown})" if shown else "")
    return kwargs


ENV_PREFIX = "ZIGCORN_"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def _defaults_from_environment(parser: argparse.ArgumentParser) -> None:
    """Every option also reads ``ZIGCORN_<NAME>`` (e.g. ZIGCORN_PORT=9000); flags win."""
    import argparse

    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        name = ENV_PREFIX + action.dest.upper()
        text = os.environ.get(name)
        if text is None:
            continue
        if isinstance(action, (argparse.BooleanOptionalAction, argparse._StoreTrueAction)):
            if text.lower() not in _TRUE | _FALSE:
                parser.error(f"{name}={text!r}: expected one of 1/0, true/false, yes/no, on/off")
            value = text.lower() in _TRUE
        elif isinstance(action, argparse._AppendAction):
            value = [action.type(item) if action.type else item for item in text.split(",") if item.strip()]
        else:
            try:
                value = action.type(text) if action.type else text
            except (ValueError, argparse.ArgumentTypeError) as exc:
                parser.error(f"{name}={text!r}: {exc}")
            if action.choices is not None and value not in action.choices:
                parser.error(f"{name}={text!r}: choose from {', '.join(map(str, action.choices))}")
        action.default = value
        action.required = False


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's formatter, told the terminal's width as ``shutil.get_terminal_size`` would.

    Left to itself it imports ``shutil`` (and with it zlib, bz2 and lzma, about 0.6 MiB of
    a serving process) for that one number, on every ``add_argument``.
    """
    import argparse

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return argparse.HelpFormatter(prog, width=(columns or 80) - 2)


def _version_line() -> str:
    """What ``platform`` would say, without importing it into every server process."""
    implementation = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name)
    return f"zigcorn {zigcorn.__version__} with {implementation} {sys.version.split()[0]} on {os.uname().sysname}"


def _port(text: str) -> int:
    from argparse import ArgumentTypeError

    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise ArgumentTypeError(f"{text} is not a port (0-65535)")
    return port


def _octal(text: str) -> int:
    from argparse import ArgumentTypeError

    try:
        return int(text, 8)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not an octal mode like 660") from None
def _boolean(text: str) -> bool:
    from argparse import ArgumentTypeError

    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ArgumentTypeError(f"{text!r} is not a boolean (true or false)")


def _header(text: str) -> tuple[str, str]:
    from argparse import ArgumentTypeError

    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ArgumentTypeError(f'{text!r} is not in format "NAME:VALUE"')
    return name.strip(), value.strip()


# Command-line parsers of the settings whose `type` names one.
_TYPES = {"port": _port, "octal": _octal, "boolean": _boolean, "header": _header}


if __name__ == "__main__":
    main()
