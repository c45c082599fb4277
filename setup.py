"""Builds the Cython modules (the e-graph core, the OCF extraction kernel); everything else is
declared in pyproject.toml."""
import glob

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

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

setup(ext_modules=cythonize(extensions, language_level=3,
                            compiler_directives={"boundscheck": False, "wraparound": False}))
