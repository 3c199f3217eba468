"""Build of the optional compiled parts: the reader (analyzer.load._fastpickle) and the group-by
kernels (analyzer.kernels._groupkeys); everything else is in pyproject.toml. Without a C compiler the
install still succeeds and the Python reader and numpy's group-bys are used."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

#: Small recorded dump sets the wheel carries (analyzer/samples/), for `hangscope demo`.
DEMO_SAMPLES = ("chain_tp_dp_w8", "stall_w4", "crash_w4", "deadlock_w4", "size_desync_w4")


class BuildWithSamples(build_py):
    """build_py, and the demo samples copied from sample_dumps/ into the built package."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent / "sample_dumps"
        for name in DEMO_SAMPLES:
            src = root / name
            if src.is_dir() and not self.dry_run:
                dst = Path(self.build_lib) / "analyzer" / "samples" / name
                shutil.copytree(src, dst, dirs_exist_ok=True)


setup(
    cmdclass={"build_py": BuildWithSamples},
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
    ],
)
