"""The other forms of a dump: torch 2.15's recorder hook (nccl2) and the JSON dump."""

from __future__ import annotations

from typing import Any


def to_hook_form(dump: dict[str, Any], backend: str = "nccl2") -> dict[str, Any]:
    """The same rank's dump as torch 2.15's recorder hook writes it for ``backend``.

    * ``profiling_name`` prefix ``nccl2:``; ``op_id`` counts every op of the group, 0-based;
    * send entries carry only input sizes/dtypes, recv entries only output ones;
    * states: ``completed`` + retired, or ``scheduled`` and not retired (nccl2 reports
      completion; ``started`` never appears);
    * no ``coalesced`` work entries: a batched send/recv carries its own completion;
    * ``pg_status``: the last enqueued and completed op_id of each group, started -1;
    * ``comm_lib_version`` empty; ``record_id`` numbers the remaining entries in order.
    """
    entries: list[dict[str, Any]] = []
    first_rid = dump["entries"][0]["record_id"] if dump["entries"] else 0
    for e in dump["entries"]:
        pname = e["profiling_name"]
        op = pname.split(":", 1)[1]
        if op == "coalesced":
            if entries and entries[-1]["is_p2p"] and not entries[-1]["retired"]:
                prev = entries[-1]  # the batched op this work completes
                done = e["state"] == "completed"
                prev["state"] = "completed" if done else "scheduled"
                prev["retired"] = done
                prev["time_discovered_completed_ns"] = (
                    e["time_discovered_completed_ns"] if done else None
                )
            continue
        h = dict(e)
        h["profiling_name"] = f"{backend}:{op}"
        h["op_id"] = e["collective_seq_id"] + e["p2p_seq_id"] - 1
        done = e["state"] == "completed"
        h["state"] = "completed" if done else "scheduled"
        h["retired"] = done
        h["time_discovered_started_ns"] = None
        if not done:
            h["time_discovered_completed_ns"] = None
        if op.startswith("send"):
            h["output_sizes"], h["output_dtypes"] = [], []
        elif op.startswith("recv"):
            h["input_sizes"], h["input_dtypes"] = [], []
        entries.append(h)
    for i, h in enumerate(entries):
        h["record_id"] = first_rid + i
    last: dict[int, list[int]] = {}
    for h in entries:
        st = last.setdefault(h["pg_id"], [-1, -1])
        st[0] = max(st[0], h["op_id"])
        if h["state"] == "completed":
            st[1] = max(st[1], h["op_id"])
    status = {}
    for key, value in dump["pg_status"].items():
        enq, comp = last.get(int(key), [-1, -1])
        status[key] = {
            "last_enqueued_collective": enq if enq >= 0 else value["last_enqueued_collective"],
            "last_started_collective": -1,
            "last_completed_collective": comp,
        }
    return {**dump, "comm_lib_version": "", "pg_status": status, "entries": entries}


def to_json_form(dump: dict[str, Any]) -> dict[str, Any]:
    """What ``_dump_nccl_trace_json`` writes for the same state."""
    out: dict[str, Any] = {
        "version": dump["version"],
        "comm_lib_version": dump["comm_lib_version"],
        "pg_config": dump["pg_config"],
        "pg_status": {
            k: {kk: str(vv) for kk, vv in v.items()} for k, v in dump["pg_status"].items()
        },
    }
    entries = []
    for e in dump["entries"]:
        j = {k: v for k, v in e.items() if k != "frames"}
        j["process_group"] = list(e["process_group"])
        if j["time_discovered_started_ns"] is None:
            j["time_discovered_started_ns"] = 0
        if j["time_discovered_completed_ns"] is None:
            j["time_discovered_completed_ns"] = 0
        entries.append(j)
    if entries:
        out["entries"] = entries
    return out
