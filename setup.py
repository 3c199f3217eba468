"""Build of the optional compiled parts: the reader (analyzer.load._fastpickle) and the group-by
kernels (analyzer.kernels._groupkeys); everything else is in pyproject.toml. Without a C compiler the
install still succeeds and the Python reader and numpy's group-bys are used."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "analyzer.load._fastpickle",
            sources=["analyzer/load/_fastpickle/module.c", "analyzer/load/_fastpickle/core.c"],
            depends=["analyzer/load/_fastpickle/core.h"],
            # -fno-semantic-interposition: the core's exported functions (fp_spend, fp_plain,
            # ...) may be inlined into each other; without it they are called through the
            # PLT as a shared object requires, which costs the parse about a quarter.
            extra_compile_args=[
                "-O3",
                "-fno-semantic-interposition",
                "-std=c99",
                "-Wall",
                "-Wextra",
            ],
            optional=True,
        ),
        # The group-by kernels of analyzer/kernels/group_by.py (numpy's versions are used without it).
        Extension(
            "analyzer.kernels._groupkeys",
            sources=["analyzer/kernels/_groupkeys/groupkeys.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        ),
    ]
)
