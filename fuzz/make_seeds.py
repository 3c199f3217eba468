"""Seed corpus for the native fuzzer: the recorded sample dumps as they are, and each one
written again with pickle protocols 2 to 5 (FRAME, MEMOIZE, SHORT_BINUNICODE...)."""

from __future__ import annotations

import io
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.unpickler import SafeUnpickler as _SafeUnpickler  # noqa: E402


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    dumps = sorted((ROOT / "sample_dumps").rglob("nccl_trace_rank_*"))
    # TorchComms' format (tools/torchcomms_fr.py) and the debug server's per_rank/ files.
    dumps += sorted((ROOT / "sample_dumps").glob("torchcomms_*/comm_lib_trace_rank_[0-9]"))
    dumps += sorted((ROOT / "sample_dumps").glob("debug_server_*/per_rank/rank_*"))
    for i, path in enumerate(dumps):
        data = path.read_bytes()
        (out / f"sample_{i}").write_bytes(data)
        raw = _SafeUnpickler(io.BytesIO(data)).load()
        for proto in (3, 4, 5):
            (out / f"sample_{i}_p{proto}").write_bytes(pickle.dumps(raw, protocol=proto))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
