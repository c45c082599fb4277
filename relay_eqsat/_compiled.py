"""Which of the package's pure-Python modules run compiled, and never a stale compiled one.

``setup.py`` compiles a few plain Python modules with Cython, unchanged (the
e-graph growth hot path: rule planning, the operator table's attribute
normalization and type inference: 2.2-2.6x faster planning alone,
``bench/egraph_throughput.py --plan-replay``). The extension module sits
beside its source and Python imports it first. The build records each source's hash in
``_compiled_sources.json``; :func:`prefer_fresh_sources`, run when the
package is imported, compares them with the sources as they are now: a
module whose source changed since it was compiled (an edit without
``make ext``) is imported from its source instead, with a warning, so the
program run is always the program written. ``RELAY_EQSAT_PURE_PYTHON=1``
imports every one from its source (for profiling: compiled functions are
invisible to cProfile).
"""
from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import warnings
from pathlib import Path

# imported when needed (hashlib, importlib.abc/util): importing the package stays cheap

MANIFEST = "_compiled_sources.json"  # {module: {"sha256", "size", "mtime_ns"}} of each source at build time
PURE_ENV = "RELAY_EQSAT_PURE_PYTHON"
_ROOT = Path(__file__).resolve().parent  # the package directory
_state: dict = {}


def source_record(path: Path) -> dict:
    """What the build records of a source file (and what it is compared with)."""
    import hashlib

    data = path.read_bytes()
    st = path.stat()
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _source_of(root: Path, module: str) -> Path:
    return root.parent.joinpath(*module.split(".")).with_suffix(".py")


def _fresh(source: Path, rec: dict) -> bool:
    try:
        st = source.stat()
    except OSError:
        return False
    if st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns"):
        return True  # untouched since the build
    return st.st_size == rec.get("size") and source_record(source)["sha256"] == rec.get("sha256")


def scan(root: Path, pure: bool = False) -> tuple[list[str], list[str]]:
    """``(compiled, from_source)`` for the package at ``root``: modules whose extension module
    matches the source it was built from, and those to import from their source instead (the
    source changed since, the extension has no build record, or ``pure``)."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = {}
    compiled, stale = [], []
    for module in sorted(_shadowed_sources(root)):
        rec = manifest.get(module)
        # an extension module without a record (built by hand, a manifest lost) is not trusted either
        (stale if pure or rec is None or not _fresh(_source_of(root, module), rec) else compiled).append(module)
    return compiled, stale


def _shadowed_sources(root: Path) -> set[str]:
    """Modules of the package (and its subpackages, where modules live) with both a ``.py`` source
    and an extension module beside it."""
    dirs = [root] + [Path(e.path) for e in os.scandir(root) if e.is_dir() and (Path(e.path) / "__init__.py").exists()]
    found = set()
    for d in dirs:
        for e in os.scandir(d):
            if e.is_file() and e.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                src = Path(e.path).with_name(e.name.split(".")[0] + ".py")
                if src.exists():
                    found.add(".".join(src.relative_to(root.parent).with_suffix("").parts))
    return found


class SourceFinder:
    """A meta path finder: imports the named modules from their ``.py`` source, ahead of the
    compiled module beside it."""

    def __init__(self, sources: dict[str, Path]):
        self.sources = sources

    def find_spec(self, fullname, path=None, target=None):
        src = self.sources.get(fullname)
        if src is None:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(fullname, src)


def prefer_fresh_sources() -> dict:
    """Check this package's compiled modules against their sources, once per process, before
    any of them is imported; returns :func:`status`."""
    if _state:
        return _state
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    compiled, stale = scan(_ROOT, pure)
    if stale:
        sys.meta_path.insert(0, SourceFinder({m: _source_of(_ROOT, m) for m in stale}))
        if not pure:
            warnings.warn(f"relay_eqsat: {', '.join(stale)} changed since compiled (or no build record); "
                          "running the Python source (slower). Run `make ext` to compile again.",
                          RuntimeWarning, stacklevel=2)
    _state.update(compiled=compiled, from_source=stale, pure_python=pure)
    return _state


def status() -> dict:
    """``compiled``: modules running compiled; ``from_source``: compiled ones imported from their source
    instead; ``pure_python``: whether ``RELAY_EQSAT_PURE_PYTHON`` asked for that."""
    return dict(prefer_fresh_sources())
