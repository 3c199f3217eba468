"""Build of the optional compiled reader (analyzer._fastpickle); everything else is in
pyproject.toml. Without a C compiler the install still succeeds and the Python reader is used."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "analyzer._fastpickle",
            sources=["analyzer/_fastpickle/module.c", "analyzer/_fastpickle/core.c"],
            depends=["analyzer/_fastpickle/core.h"],
            # -fno-semantic-interposition: the core's exported functions (fp_spend, fp_plain,
            # ...) may be inlined into each other; without it they are called through the
            # PLT as a shared object requires, which costs the parse about a quarter.
            extra_compile_args=["-O3", "-fno-semantic-interposition", "-std=c99", "-Wall",
                                "-Wextra"],
            optional=True,
        )
    ]
)
