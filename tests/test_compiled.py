"""The pure-Python modules setup.py compiles: a compiled module never runs in place of a changed source."""
from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay_eqsat import _compiled

EXT = importlib.machinery.EXTENSION_SUFFIXES[0]


def _package(tmp_path: Path, record: bool = True) -> Path:
    """A package ``pkg`` with two modules, each with a (fake) extension module beside it."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name in ("a", "b"):
        (root / f"{name}.py").write_text(f"WHO = '{name} source'\n")
        (root / f"{name}{EXT}").write_bytes(b"not an extension module")
    if record:
        rec = {f"pkg.{n}": _compiled.source_record(root / f"{n}.py") for n in ("a", "b")}
        (root / _compiled.MANIFEST).write_text(json.dumps(rec))
    return root


def test_untouched_or_merely_touched_sources_keep_their_compiled_modules(tmp_path):
    root = _package(tmp_path)
    assert _compiled.scan(root) == (["pkg.a", "pkg.b"], [])
    src = root / "a.py"
    later = time.time() + 5
    os.utime(src, (later, later))  # a checkout rewrote it, same bytes
    assert _compiled.scan(root) == (["pkg.a", "pkg.b"], [])


def test_a_changed_source_is_imported_from_source(tmp_path):
    root = _package(tmp_path)
    (root / "b.py").write_text("WHO = 'b edited'\n")
    assert _compiled.scan(root) == (["pkg.a"], ["pkg.b"])
    (root / "a.py").write_text("WHO = 'a source'\n\n")  # one more byte
    assert _compiled.scan(root) == ([], ["pkg.a", "pkg.b"])


def test_extensions_without_a_build_record_are_not_trusted(tmp_path):
    root = _package(tmp_path, record=False)
    assert _compiled.scan(root) == ([], ["pkg.a", "pkg.b"])


def test_pure_python_imports_every_module_from_source(tmp_path):
    root = _package(tmp_path)
    assert _compiled.scan(root, pure=True) == ([], ["pkg.a", "pkg.b"])


def test_the_source_finder_goes_before_the_extension_module(tmp_path):
    """The fake extension modules cannot load: importing works only if the finder takes the source."""
    root = _package(tmp_path)
    code = ("import sys; from relay_eqsat import _compiled as c; from pathlib import Path; "
            f"root = Path({str(root)!r}); "
            "sys.meta_path.insert(0, c.SourceFinder({'pkg.a': root / 'a.py'})); "
            "import pkg.a; print(pkg.a.WHO, pkg.a.__file__.endswith('.py'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["a", "source", "True"]


def _run_status(env_extra: dict) -> dict:
    code = ("import json, relay_eqsat, relay_eqsat._compiled as c, relay_eqsat.rewrite.rule as r; "
            "print(json.dumps(dict(c.status(), rule_file=r.__file__)))")
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True,
                         text=True, env={**os.environ, **env_extra})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_this_build_runs_its_compiled_modules_or_the_sources():
    if not (_compiled._ROOT / _compiled.MANIFEST).exists():
        # a source tree nobody built (pytest run without `make ext`, which `make test` always runs)
        pytest.skip("no build record: the pure-Python modules were never compiled in this checkout")
    st = _run_status({_compiled.PURE_ENV: "0"})
    assert "relay_eqsat.rewrite.rule" in st["compiled"] and not st["from_source"]  # the build is current
    assert not st["rule_file"].endswith(".py")
    pure = _run_status({_compiled.PURE_ENV: "1"})
    assert pure["pure_python"] and not pure["compiled"] and pure["rule_file"].endswith("rule.py")
