"""Builds the Cython modules (the e-graph core, the OCF extraction kernel) and compiles the
pure-Python modules of the e-graph growth hot path unchanged (``COMPILED_PY``); everything
else is declared in pyproject.toml."""
import glob
import importlib.util
import json
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# the package's record format, loaded without importing the package (nor putting its directory,
# with its types.py, on sys.path)
_spec = importlib.util.spec_from_file_location(
    "relay_eqsat_compiled", Path(__file__).resolve().parent / "relay_eqsat" / "_compiled.py")
_compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_compiled)

sources = sorted(glob.glob("relay_eqsat/egraph/*.pyx") + glob.glob("relay_eqsat/extract/*.pyx"))
extensions = [
    Extension(
        src[:-4].replace("/", "."),
        [src],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for src in sources
]

# Plain Python modules compiled as they are (Cython's pure-Python mode): rule planning, the
# operator table's attribute normalization and type inference, the attribute and type values.
# Profiled on e-graph growth (bench/egraph_throughput.py): planning a rule's right-hand side is
# most of the time, and runs 2.2-2.6x faster compiled (--plan-replay). relay_eqsat/_compiled.py
# keeps a changed source from running stale compiled code.
COMPILED_PY = sorted(["relay_eqsat/types.py", "relay_eqsat/rewrite/rule.py", "relay_eqsat/rewrite/application.py",
                      "relay_eqsat/rewrite/language.py", "relay_eqsat/rewrite/matching.py"]
                     + [p for p in glob.glob("relay_eqsat/ops/*.py") if not p.endswith("__init__.py")])
py_extensions = [Extension(src[:-3].replace("/", "."), [src], extra_compile_args=["-O2"]) for src in COMPILED_PY]


class BuildExt(build_ext):
    """build_ext, then the record of the compiled sources beside the package's modules."""

    def run(self):
        super().run()
        root = Path(".") if self.inplace else Path(self.build_lib)
        record = {src[:-3].replace("/", "."): _compiled.source_record(Path(src)) for src in COMPILED_PY}
        out = root / "relay_eqsat" / _compiled.MANIFEST
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


setup(
    ext_modules=cythonize(extensions, language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False})
    + cythonize(py_extensions, language_level=3,
                # Python semantics kept: annotations are not C types (a str subclass stays a str)
                compiler_directives={"annotation_typing": False}),
    cmdclass={"build_ext": BuildExt},
)
