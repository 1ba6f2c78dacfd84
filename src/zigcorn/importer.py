"""Resolve ``"package.module:attribute.path"`` strings to objects.

Errors the user can fix by retyping the string become one-line
`ImportFromStringError`s; errors inside the user's own code are left alone so
their traceback points at the real bug.
"""

from __future__ import annotations

import importlib
from typing import Any


class ImportFromStringError(Exception):
    """The import string is malformed or names something that does not exist."""


def import_from_string(import_str: Any) -> Any:
    """Return the object named by ``import_str``; non-strings are returned as they are."""
    if not isinstance(import_str, str):
        return import_str

    module_name, _, attr_path = import_str.partition(":")
    if not module_name or not attr_path:
        raise ImportFromStringError(f'Import string "{import_str}" must be in format "<module>:<attribute>".')

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a miss on the named module (or one of its parent packages) is the
        # user's typo; a missing dependency imported by their module is their bug.
        if exc.name is None or not _is_prefix(exc.name, module_name):
            raise
        raise ImportFromStringError(f'Could not import module "{module_name}".') from None

    obj: Any = module
    for attr in attr_path.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise ImportFromStringError(f'Attribute "{attr_path}" not found in module "{module_name}".') from None
    return obj


def _is_prefix(package: str, module_name: str) -> bool:
    """True if ``package`` is ``module_name`` itself or one of its parent packages."""
    return module_name == package or module_name.startswith(package + ".")
