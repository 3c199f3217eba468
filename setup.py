"""Build of the optional compiled reader (analyzer._fastpickle); everything else is in
pyproject.toml. Without a C compiler the install still succeeds and the Python reader is used."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "analyzer._fastpickle",
            sources=["analyzer/_fastpickle/module.c", "analyzer/_fastpickle/core.c"],
            depends=["analyzer/_fastpickle/core.h"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
