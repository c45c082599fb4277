"""Warnings that point at the user's call site, not at TVM's or this package's internals.

The pass's warnings are raised in ``EqSatPass.transform_module``, which TVM's C++ pass
machinery calls back (through ``tvm.transform.Sequential``, ``relay.build``, tvmc...): no fixed
``stacklevel`` reaches the user's line. :func:`warn` walks up the Python stack to the first frame
whose module is outside ``relay_eqsat`` and ``tvm`` (the C++ frames are not on it: a callback's
caller is the Python frame that entered the FFI) and issues the warning there with
``warnings.warn_explicit`` (what Python 3.12's ``skip_file_prefixes`` does). Filters and the
once-per-location registry work as for ``warnings.warn``.
"""
from __future__ import annotations

import sys
import warnings
from types import FrameType

#: the packages whose frames a warning skips
INTERNAL = ("relay_eqsat", "tvm")


def _internal(frame: FrameType, packages: tuple[str, ...]) -> bool:
    name = frame.f_globals.get("__name__") or ""
    return any(name == p or name.startswith(p + ".") for p in packages)


def caller_frame(packages: tuple[str, ...] = INTERNAL) -> FrameType | None:
    """The innermost frame of the calling stack outside ``packages`` (None: none is)."""
    frame = sys._getframe(1)
    while frame is not None and _internal(frame, packages):
        frame = frame.f_back
    return frame


def warn(message: str, category: type[Warning] = UserWarning, packages: tuple[str, ...] = INTERNAL) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside ``packages``
    (the outermost frame when every frame is inside them)."""
    frame = caller_frame(packages)
    if frame is None:
        frame = sys._getframe(1)
        while frame.f_back is not None:
            frame = frame.f_back
    module_globals = frame.f_globals
    registry = module_globals.setdefault("__warningregistry__", {})
    # no module_globals: with them warn_explicit asks the module's loader for its source, which
    # raises for `python -c` code (BuiltinImporter); linecache reads a real file by its name anyway.
    # A warning raised as an error by the user's filters ("error") propagates, as warnings.warn's would.
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=module_globals.get("__name__"), registry=registry)
