"""Layering: the core (``relay_eqsat/`` but ``relay_eqsat.passes``) imports neither TVM, nor
PyTorch, nor ``relay_eqsat.passes``; only ``passes/`` talks to TVM.

The exceptions are the two front doors, importing the TVM side lazily: the package's
``relay_eqsat.EqSatPass`` (``relay_eqsat/__init__.py``'s ``__getattr__``) and the users' pytest
plugin's ``eqsat`` fixture (``passes/regression/plugin.py``).
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import relay_eqsat

CORE = Path(relay_eqsat.__file__).resolve().parent
FORBIDDEN = ("tvm", "torch", "relay_eqsat.passes")
#: (file relative to the core, enclosing function, module imported): the allowed exceptions
ALLOWED = {("__init__.py", "__getattr__", "relay_eqsat.passes")}
#: ``passes/``, installed as ``relay_eqsat.passes`` (beside the core in a checkout, inside it in a wheel)
PASSES = CORE / "passes" if (CORE / "passes").is_dir() else CORE.parent / "passes"


def _module_name(path: Path) -> str:
    try:
        parts = ["relay_eqsat", "passes", *path.relative_to(PASSES).with_suffix("").parts]
    except ValueError:
        parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(path: Path, module: str, level: int) -> str:
    """The absolute module name of ``from <level dots><module> import ...`` in ``path``."""
    if not level:
        return module
    package = _module_name(path).split(".")
    if path.name != "__init__.py" and not path.name.startswith("__init__."):
        package.pop()  # a module's relative imports start from its package
    base = package[:len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imports_py(path: Path):
    """(imported module, enclosing function or None, line) for every import statement of a
    Python file, function-local ones included (not those under ``if TYPE_CHECKING:``, which never
    run); ``from a import b`` yields both a and a.b."""
    tree = ast.parse(path.read_text(), str(path))

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, func, child.lineno
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(path, child.module or "", child.level)
                yield base, func, child.lineno
                for alias in child.names:
                    yield f"{base}.{alias.name}", func, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, None)


_PYX_IMPORT = re.compile(r"^\s*(?:from\s+(\.*)([\w.]*)\s+c?import\s+(.+)|c?import\s+(.+))$")


def _imports_pyx(path: Path):
    """The same for a Cython file, from its import lines (``import``/``cimport``, parenthesized
    continuation lines joined); the enclosing function is not tracked (None)."""
    lines = path.read_text().splitlines()
    k = 0
    while k < len(lines):
        line, lineno = lines[k].split("#")[0], k + 1
        while "(" in line and ")" not in line and k + 1 < len(lines):
            k += 1
            line += " " + lines[k].split("#")[0]
        k += 1
        m = _PYX_IMPORT.match(line)
        if not m:
            continue
        if m.group(4) is not None:
            for name in m.group(4).split(","):
                yield name.split()[0], None, lineno
            continue
        base = _resolve(path, m.group(2), len(m.group(1)))
        yield base, None, lineno
        for name in m.group(3).strip("() ").split(","):
            if name.strip():
                yield f"{base}.{name.split()[0]}", None, lineno


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_core_sources_import_no_tvm_torch_or_passes():
    files = sorted(p for ext in ("*.py", "*.pyx", "*.pxd") for p in CORE.rglob(ext))
    assert any(p.suffix == ".pyx" for p in files) and len(files) > 20
    bad, allowed_seen = [], set()
    for path in files:
        rel = path.relative_to(CORE).as_posix()
        imports = _imports_py(path) if path.suffix == ".py" else _imports_pyx(path)
        for module, func, line in imports:
            if not _forbidden(module):
                continue
            exception = next((a for a in ALLOWED if a[0] == rel and a[1] == func and
                              (module == a[2] or module.startswith(a[2] + "."))), None)
            if exception:
                allowed_seen.add(exception)
            else:
                bad.append(f"relay_eqsat/{rel}:{line}: imports {module}" + (f" (in {func})" if func else ""))
    assert not bad, "the core must not import TVM, PyTorch or relay_eqsat.passes:\n" + "\n".join(bad)
    assert allowed_seen == ALLOWED  # the front door is still there (and nothing else is allowed)


def test_importing_every_core_module_loads_no_tvm_or_torch():
    code = """
import importlib, json, pkgutil, sys
import relay_eqsat
names = [m.name for m in pkgutil.walk_packages(relay_eqsat.__path__, "relay_eqsat.")
         if not m.name.startswith("relay_eqsat.passes")]
for n in names:
    importlib.import_module(n)
print(json.dumps({"imported": names, "loaded": sorted(m for m in sys.modules
      if m.split(".")[0] in ("tvm", "torch") or m.startswith("relay_eqsat.passes"))}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "relay_eqsat.cost.measure" in result["imported"] and len(result["imported"]) > 20
    assert result["loaded"] == []


def test_the_measuring_worker_is_a_passes_module():
    pytest.importorskip("tvm")
    import importlib

    from relay_eqsat.cost import measure

    assert measure.WORKER_MODULE.startswith("relay_eqsat.passes.")
    worker = importlib.import_module(measure.WORKER_MODULE)
    for spec in (measure.PROBE_HOST_TARGET, measure.PROBE_BACKENDS):
        module, _, function = spec.partition(":")
        assert callable(getattr(importlib.import_module(module), function))
    assert callable(worker.worker_main)


def _sources():
    """(module name, path) of every source of the package: the core and ``passes/``."""
    for root in (CORE, PASSES):
        for ext in ("*.py", "*.pyx", "*.pxd"):
            for path in sorted(root.rglob(ext)):
                if "__pycache__" not in path.parts:
                    yield _module_name(path), path


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (a ``.pyx`` and its ``.pxd`` are one module;
    ``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``)."""
    sources = list(_sources())
    modules = {name for name, _ in sources}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in sources:
        by_statement: dict[int, list[str]] = {}
        for module, _, line in (_imports_py(path) if path.suffix == ".py" else _imports_pyx(path)):
            by_statement.setdefault(line, []).append(module)
        for names in by_statement.values():
            base, members = names[0], [m for m in names[1:] if m.startswith(names[0] + ".")]
            targets = [m for m in members if m in modules]
            if not members or len(targets) < len(members):
                targets.append(base)
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (the extractors' own Tarjan,
    ``relay_eqsat.extract.cycles``, over the modules numbered in name order)."""
    from relay_eqsat.extract.cycles import strongly_connected_components

    names = sorted(graph)
    number = {n: k for k, n in enumerate(names)}
    succ = [sorted(number[m] for m in graph[n]) for n in names]
    return sorted(sorted(names[k] for k in comp) for comp in strongly_connected_components(succ) if len(comp) > 1)


def test_cycles_finds_a_cycle_through_function_level_imports(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    code = tmp_path / "m.py"
    code.write_text("import os\ndef f():\n    from relay_eqsat.cost import base\n")
    assert ("relay_eqsat.cost.base", "f", 3) in set(_imports_py(code))


def test_module_imports_form_a_dag():
    graph = import_graph()
    assert "relay_eqsat.passes.relay.eqsat_pass" in graph and "relay_eqsat.egraph.core" in graph
    assert "relay_eqsat.pipeline" in graph["relay_eqsat.passes.relay.eqsat_pass"]
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_pytest_plugin_imports_tvm_only_in_its_fixture():
    plugin = PASSES / "regression" / "plugin.py"
    for module, func, line in _imports_py(plugin):
        if _forbidden(module) and module != "relay_eqsat.passes" and not module.startswith("relay_eqsat.passes.regression"):
            pytest.fail(f"passes/regression/plugin.py:{line}: imports {module}")
        if module.startswith("relay_eqsat.passes.regression.fixture") or module == "tvm":
            assert func == "eqsat", f"passes/regression/plugin.py:{line}: {module} outside the fixture"
