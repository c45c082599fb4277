"""Reading model files for the command lines, with one clear error per bad input.

``relay-eqsat optimize`` and ``relay-eqsat tvmc`` load models through tvmc's
frontends, which fail on a missing, empty or corrupt file with whatever the
frontend raises (a protobuf ``DecodeError``, an ``IndexError`` deep in a
converter...) or, for an empty ONNX file, not at all (an empty ``main``).
Here every such failure becomes a :class:`ModelFileError` whose message names
the file and says what is wrong, and a malformed ``--input-shapes`` string a
:class:`ShapesError`; the CLIs print it as one line and exit with status 2.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Iterator

#: one "name:[d1,d2,...]" entry of tvmc's --input-shapes syntax (its own pattern)
_SHAPE_ENTRY = r"(?:\w+\/)?[:\w.]+\:\s*\[\-?\d+(?:\,\s*\-?\d+)*\]"
SHAPES_SYNTAX = '"name:[d1,d2,...] other:[d1,...]", e.g. "x:[1,3,224,224]"'


class ModelFileError(ValueError):
    """A model file that cannot be read (missing, empty, a directory, corrupt, unsupported)."""


class ShapesError(ValueError):
    """An ``--input-shapes`` string that does not follow tvmc's syntax."""


def check_model_file(path: str) -> None:
    """Raise :class:`ModelFileError` unless ``path`` is a readable, non-empty regular file."""
    if not os.path.exists(path):
        raise ModelFileError(f"cannot read model {path!r}: no such file")
    if not os.path.isfile(path):
        raise ModelFileError(f"cannot read model {path!r}: not a regular file")
    if not os.access(path, os.R_OK):
        raise ModelFileError(f"cannot read model {path!r}: permission denied")
    if os.path.getsize(path) == 0:
        raise ModelFileError(f"cannot read model {path!r}: the file is empty")


def parse_input_shapes(text: str) -> dict:
    """tvmc's ``--input-shapes`` syntax, strictly: every part of ``text`` must
    be a ``name:[dims]`` entry (tvmc's own parser skips what it cannot read)."""
    from tvm.driver.tvmc.shape_parser import parse_shape_string

    rest = re.sub(_SHAPE_ENTRY, " ", text)
    if not re.findall(_SHAPE_ENTRY, text) or rest.strip():
        raise ShapesError(f"bad --input-shapes {text!r}: expected {SHAPES_SYNTAX}")
    return parse_shape_string(text)


def _reason(error: BaseException) -> str:
    text = str(error).strip()
    last = text.splitlines()[-1].strip() if text else ""
    return f"{type(error).__name__}: {last}" if last else type(error).__name__


def load_model_file(path: str, input_shapes: str | None = None, model_format: str | None = None):
    """``(mod, params)`` of a model file through tvmc's frontends;
    :class:`ModelFileError` or :class:`ShapesError` for bad input."""
    from tvm.driver.tvmc import frontends

    shapes = parse_input_shapes(input_shapes) if input_shapes else None
    check_model_file(path)
    try:
        model = frontends.load_model(path, model_format, shapes)
    except Exception as e:  # noqa: BLE001 - every frontend fails its own way
        raise ModelFileError(f"cannot read model {path!r}: {_reason(e)}") from e
    _check_loaded(path, model.mod)
    return model.mod, model.params


def _check_loaded(path: str, mod) -> None:
    """A frontend can accept a file with no graph (an empty ONNX ModelProto parses)."""
    from tvm import relay

    func = mod["main"] if "main" in [gv.name_hint for gv in mod.get_global_vars()] else None
    if func is None or (not func.params and isinstance(func.body, relay.Tuple) and not func.body.fields):
        raise ModelFileError(f"cannot read model {path!r}: it holds no computation")


@contextlib.contextmanager
def model_load_errors() -> Iterator[None]:
    """Within the block, tvmc's ``frontends.load_model`` (which ``tvmc compile``
    calls) raises :class:`ModelFileError` for a file it cannot read, so the
    caller can tell a bad model from a failure of the compilation itself."""
    from tvm.driver.tvmc import frontends

    original = frontends.load_model

    def load_model(path, *args, **kwargs):
        check_model_file(str(path))
        try:
            model = original(path, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - every frontend fails its own way
            raise ModelFileError(f"cannot read model {str(path)!r}: {_reason(e)}") from e
        _check_loaded(str(path), model.mod)
        return model

    frontends.load_model = load_model
    try:
        yield
    finally:
        frontends.load_model = original
