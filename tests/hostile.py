"""Builders of the hostile and broken files that real dump directories get: shared by the
hostile-input tests (tests/scenarios/test_adversarial.py) and their cost benchmark
(bench/hostile_input.py), so that both speak of the same files.

Each builder starts from a recorded sample whose culprit is known and adds or replaces files.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import SAMPLES, dump, entry, write_pickle

CHAIN = SAMPLES / "chain_tp_dp_w8"  # gloo pickles; rank 3 stalled
JSON8 = SAMPLES / "tp_dp_w8_json"  # JSON; rank 5 stalled
#: What an unsafe pickle looks like at its simplest: os.system("echo pwned").
EVIL_PICKLE = b"cos\nsystem\n(S'echo pwned'\ntR."
_HEAD = b"\x80\x04}(X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10X\x07\x00\x00\x00entries"


def copy_job(src: Path, dst: Path) -> Path:
    """The sample's dumps (not its EXPECTED.json) in a new folder."""
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.name != "EXPECTED.json":
            shutil.copy(p, dst / p.name)
    return dst


def load(path: Path) -> dict[str, Any]:
    return pickle.loads(path.read_bytes())


def save(path: Path, obj: Any) -> None:
    path.write_bytes(pickle.dumps(obj))


def laughs() -> bytes:
    """A dump whose entry's input_sizes is a list of 10 lists of 10 lists ... 9 levels deep,
    each level one memoized object: 300 bytes of pickle, 10**9 values if walked."""
    out = io.BytesIO()
    out.write(b"X\x01\x00\x00\x00aq\x000")
    for level in range(1, 10):
        out.write(
            b"]("
            + (b"h" + bytes([level - 1])) * 10
            + b"eq"
            + bytes([level])
            + (b"0" if level < 9 else b"")
        )
    return (
        _HEAD + b"](}(X\x0e\x00\x00\x00profiling_nameX\x0f\x00\x00\x00gloo:all_reduce"
        b"X\x0d\x00\x00\x00process_group(X\x01\x00\x00\x000X\x00\x00\x00\x00tX\x11"
        b"\x00\x00\x00collective_seq_idK\x09X\x0b\x00\x00\x00input_sizes" + out.getvalue() + b"ueu."
    )


def deep_pickle(levels: int) -> bytes:
    """A dump whose entries are ``levels`` lists nested in one another."""
    return _HEAD + b"]" + b"(]" * levels + b"e" * levels + b"u."


def deep_json(levels: int) -> str:
    """A JSON dump whose entries are ``levels`` arrays nested in one another."""
    return '{"version": "2.10", "entries": ' + "[" * levels + "]" * levels + "}"


def huge_length() -> bytes:
    """A pickle that announces a string of 2**61 bytes."""
    return b"\x80\x04}X\x07\x00\x00\x00version\x8d" + (1 << 61).to_bytes(8, "little") + b"a"


def gzip_bomb(path: Path, mb: int) -> None:
    """A gzip file: a dump's head, a bytes object announced as 1 GB, then ``mb`` MB of zeros
    (a few MB of gzip): only the cap on decompressed bytes stops it."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(_HEAD + b"\x8e" + (1 << 30).to_bytes(8, "little"))
        chunk = bytes(1 << 20)
        for _ in range(mb):
            f.write(chunk)


def unreadable_ranks(job: Path) -> None:
    """Ranks 4 to 7 of an 8-rank job: truncated, empty, random bytes, an unsafe pickle."""
    good = (job / "nccl_trace_rank_4").read_bytes()
    (job / "nccl_trace_rank_4").write_bytes(good[:300])
    (job / "nccl_trace_rank_5").write_bytes(b"")
    (job / "nccl_trace_rank_6").write_bytes(os.urandom(5000))
    (job / "nccl_trace_rank_7").write_bytes(EVIL_PICKLE)


def wrong_types(path: Path) -> None:
    """Five entries of a dump with a field of the wrong type or an impossible value."""
    obj = load(path)
    ents = obj["entries"]
    ents[0]["profiling_name"] = 7
    ents[1]["process_group"] = {"a": 1}
    ents[2]["input_sizes"] = "x" * 10 + "\x1b"
    ents[3]["frames"] = [1, 2]
    ents[4]["profiling_name"] = "gloo:send 0->" + "9" * 40  # no int64 holds it
    save(path, obj)


def corrupt_values(path: Path) -> None:
    """Four entries broken: sequence numbers out of range, a binary op name, no group."""
    obj = load(path)
    ents = obj["entries"]
    ents[0]["collective_seq_id"] = -5
    ents[1]["collective_seq_id"] = 1 << 62
    ents[2]["profiling_name"] = "\x00\xff" * 50
    del ents[3]["process_group"]
    save(path, obj)


def absurd_member(path: Path) -> None:
    """The default group of a dump lists rank 2,000,000,000."""
    obj = load(path)
    obj["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 2000000000]"}}
    save(path, obj)


#: Control characters a crafted dump may write into group descs and frame names.
DESC_ESCAPES = "\x1b[2J\x1b[HNO HANG\n\x1b[8m\u202e"
FRAME_ESCAPES = "x\x1b]0;pwned\x07\r\x1b[2K"


def escapes(path: Path) -> None:
    """Terminal escapes in every group desc and frame name of a dump."""
    obj = load(path)
    for e in obj["entries"]:
        e["process_group"] = (e["process_group"][0], DESC_ESCAPES)
        for f in e["frames"]:
            f["name"] = FRAME_ESCAPES
    save(path, obj)


def older_copy(path: Path, dst: Path, *, shift_s: int = 0) -> None:
    """A different, older dump of the same rank: one entry fewer (an older snapshot of the
    same ring buffer), and with ``shift_s`` its entries that many seconds earlier (an
    earlier attempt's process: another incident)."""
    obj = load(path)
    for e in obj["entries"]:
        e["time_created_ns"] -= shift_s * 10**9
    obj["entries"] = obj["entries"][:-1]
    dst.parent.mkdir(parents=True, exist_ok=True)
    save(dst, obj)


def gloo_rank(seqs: int, *, gather_at: int = 2) -> dict[str, Any]:
    """A gloo rank's dump (torch 2.13) of ``seqs`` ops in the default group, one of them an
    all_gather of 4 shapes (which tells a world of 4)."""
    ents = []
    for s in range(1, seqs + 1):
        out = [[4]] * 4 if s == gather_at else [[4]]
        e = entry(
            s,
            op="all_gather" if s == gather_at else "all_reduce",
            backend="gloo",
            retired=s < seqs,
            record_id=s,
            t=s,
        )
        e["output_sizes"] = out
        e["output_dtypes"] = ["Float"] * len(out)
        ents.append(e)
    d = dump(ents, backend="gloo")
    d["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}  # gloo on torch 2.13
    return d


def highest_rank_crashed(job: Path) -> None:
    """Ranks 0 to 2 of a world of 4 (known from an all_gather); rank 3 wrote nothing."""
    job.mkdir(parents=True, exist_ok=True)
    for r in range(3):
        write_pickle(job / f"nccl_trace_rank_{r}", gloo_rank(5))
