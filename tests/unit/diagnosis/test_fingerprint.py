"""The fingerprint: its parts, its id, and what it leaves out."""

from __future__ import annotations

import hashlib
import json

from analyzer.diagnosis import Finding, fingerprint_id, make_fingerprint
from analyzer.diagnosis.fingerprint import fingerprint_of, group_role, user_location

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
STDLIB = "/usr/lib/python3.11/threading.py"


def test_the_id_is_sha256_of_the_canonical_parts() -> None:
    parts = {
        "verdict": "hang",
        "kind": "not_joined",
        "op": "all_reduce",
        "group_role": "default_pg",
        "location": "train.py in step",
    }
    body = json.dumps({"v": 1, **parts}, sort_keys=True, separators=(",", ":"))
    assert fingerprint_id(parts) == hashlib.sha256(body.encode()).hexdigest()[:12]
    fp = make_fingerprint(**parts)
    assert fp.id == fingerprint_id(parts) and fp.to_dict() == {"id": fp.id, **parts}


def test_group_role_keeps_the_role_not_the_ranks_nor_a_hash() -> None:
    assert group_role("2", "TENSOR_MODEL_PARALLEL_GROUP") == "TENSOR_MODEL_PARALLEL_GROUP"
    assert group_role("tp[0,1]", "") == "tp"
    assert group_role("dp[1,3]", "undefined") == "dp"
    assert group_role("5", "") == ""
    assert group_role("7f3a9c0e1b2d4f6a", "") == ""
    assert group_role("3c9d", "") == ""


def test_location_is_the_innermost_user_frame_without_line_nor_folder() -> None:
    frames = [
        {"filename": TORCH, "name": "all_reduce", "line": 3245},
        {"filename": STDLIB, "name": "run", "line": 10},
        {"filename": "<frozen runpy>", "name": "_run_code", "line": 88},
        {"filename": "/home/a/job/model/train.py", "name": "step", "line": 144},
        {"filename": "/home/a/job/main.py", "name": "main", "line": 9},
    ]
    assert user_location(frames) == "train.py in step"
    moved = [dict(f, line=f["line"] + 7) for f in frames]
    moved[3]["filename"] = "/scratch/other/checkout/model/train.py"
    assert user_location(moved) == "train.py in step"
    assert user_location(frames[:3]) == ""


def test_a_diagnosis_without_a_culprit_has_a_fingerprint_of_what_is_known() -> None:
    none = fingerprint_of("no_hang", "no_hang", [Finding(kind="no_hang", ranks=(), summary="")])
    assert (none.verdict, none.kind, none.op, none.group_role, none.location) == (
        "no_hang",
        "no_hang",
        "",
        "",
        "",
    )
    assert len(none.id) == 12 and int(none.id, 16) >= 0


def test_rank_numbers_and_seq_do_not_change_it() -> None:
    def one(ranks: tuple[int, ...], seq: int, group: str) -> str:
        f = Finding(
            kind="not_joined",
            ranks=ranks,
            summary=f"rank {ranks[0]} ...",
            group=group,
            group_desc="DATA_PARALLEL_GROUP",
            seq=seq,
            op="all_reduce",
            culprit=True,
            stack=({"filename": "/x/train.py", "name": "step", "line": seq},),
        )
        return fingerprint_of("hang", "not_joined", [f]).id

    assert one((3,), 7, "6") == one((511,), 90, "41")


def test_an_installed_helper_librarys_wrapper_is_no_user_location() -> None:
    """torch's collectives are wrapped by typing_extensions' deprecation decorator in the
    recorded stacks: the location is the user's own frame further out."""
    frames = [
        {"filename": "/opt/venv/lib/python3.11/site-packages/torch/distributed/c.py", "name": "f"},
        {
            "filename": "/opt/venv/lib/python3.11/site-packages/typing_extensions.py",
            "name": "wrapper",
        },
        {"filename": "/jobs/app/train.py", "name": "step"},
    ]
    assert user_location(frames) == "train.py in step"
    assert user_location(frames[:2]) == "typing_extensions.py in wrapper"  # nothing else
