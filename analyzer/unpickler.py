"""The unpickler of dump files: it builds plain containers and scalars, and nothing else.

Every global, persistent id and extension code is refused, so a crafted file that names
``os.system`` (or any other callable) is reported as unsafe and nothing in it runs.
"""

from __future__ import annotations

import copyreg
import gc
import io
import pickle
from typing import Any, ClassVar

__all__ = ["SafeUnpickler", "unpickle"]


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain containers and scalars."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def _refuse_extension(self: Any) -> None:
    raise pickle.UnpicklingError("refused extension code (copyreg registry)")


class PySafeUnpickler(pickle._Unpickler):
    """The pure-Python unpickler with globals and extension codes refused.

    The C unpickler looks extension codes (EXT1/2/4) up in copyreg's process-wide cache
    before it calls ``find_class``: once any code in the process has unpickled a registered
    extension, the C path would hand its object to a dump. Used only while the process has
    extensions registered (library use); slower, but it never consults the registry.
    """

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)
    for _op in (pickle.EXT1, pickle.EXT2, pickle.EXT4):
        dispatch[_op[0]] = _refuse_extension
    del _op

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def unpickle(data: bytes) -> Any:
    """Unpickle with :class:`SafeUnpickler` as fast as ``pickle.loads``.

    The C unpickler reads a bare ``BytesIO`` a few bytes per opcode; behind a
    ``BufferedReader`` it takes whole buffers (several times faster; figures in
    docs/performance.md). The cyclic
    garbage collector is paused meanwhile: unpickling creates hundreds of thousands of
    containers, none of them garbage, and each collection would walk them all.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if copyreg._extension_registry:  # type: ignore[attr-defined]
            return PySafeUnpickler(io.BytesIO(data)).load()
        return SafeUnpickler(io.BufferedReader(io.BytesIO(data))).load()
    finally:
        if was_enabled:
            gc.enable()
