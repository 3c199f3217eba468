"""What torch 2.15's debug server (``torch.distributed.debug.start_debug_server``) leaves
for a user to hand over, read as evidence.

* **Saved pages** ``/fr_trace_json`` and ``/torchcomms_fr_trace_json``: one HTML page holds
  every rank, each as ``<h2>Rank N: url</h2>`` then ``<pre>`` and that rank's recorder JSON
  (escaped by the page's template). Each rank's JSON is read as that rank's dump.
* **A** ``dump_dir``: every ``dump_interval`` the server writes timestamped snapshots,
  ``<kind>_<YYYYmmdd_HHMMSS>.txt``. ``stacks_<ts>.txt`` holds every rank's all-thread
  Python stack (``=== Rank N: url ===`` then the output of ``faulthandler``): where each rank
  is now, read as a capture's context files are. The newest complete snapshot is taken; a
  newer one that starts ``PARTIAL DATA: k/N workers responded`` is named in a note.

Everything here is untrusted: files are read within caps, the pages' text is never run or
rendered, every value is bounded and kept as text.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzer.load.parsed_dump import ParsedDump

__all__ = [
    "PAGE_MARK",
    "TORCHCOMMS_MEMBER",
    "Snapshot",
    "chosen",
    "is_page",
    "is_page_member",
    "is_torchcomms_page",
    "page_member",
    "page_ranks",
    "prefer_files",
    "read_text",
    "snapshot_only",
    "snapshots",
]

#: Bytes every debug-server page carries (its template's header and a rank heading).
PAGE_MARK = (b"PyTorch Distributed", b"<h2>Rank ")
#: ``<kind>_<YYYYmmdd_HHMMSS>.txt``: the periodic dumper's file names.
_SNAPSHOT = re.compile(
    r"^(?P<kind>stacks|torchcomms_fr_trace|fr_trace|torchcomms_health_check|c10d_health_check"
    r"|pyspy_dump|wait_counters|tcpstore)_(?P<ts>\d{8}_\d{6})\.txt$"
)
_RANK_SECTION = re.compile(
    r"<h2>Rank (\d{1,7}): [^<]{0,2000}</h2>\s*(?:<p>[^<]{0,2000}</p>\s*)?<pre>(.*?)</pre>", re.S
)
#: How a section of TorchComms' page is labelled (a sign for :mod:`analyzer.load.torchcomms`).
TORCHCOMMS_MEMBER = "torchcomms_"
_MEMBER = re.compile(r":(?:torchcomms_)?rank_\d{1,7}\.json$")
_PARTIAL = re.compile(r"^PARTIAL DATA: (\d{1,7})/(\d{1,7}) workers responded")


def is_page_member(path: str) -> bool:
    """Was this dump read from a section of a saved page (:func:`page_member`)?"""
    return bool(_MEMBER.search(path))


def prefer_files(
    dumps: Sequence[ParsedDump], label: str = "torchcomms-"
) -> tuple[list[ParsedDump], list[tuple[str, str]]]:
    """The dumps to read, and (path, why) of those left out: a rank's sections of saved pages
    give way to its own dump files (per_rank/), and a rank's c10d page section to its
    TorchComms one (the same ops, recorded twice)."""

    def is_comms(d: ParsedDump) -> bool:
        in_page = f":{TORCHCOMMS_MEMBER}rank_" in d.path
        return in_page or any(b.startswith(label) for b in d.vocab["backend"])

    files = {d.rank for d in dumps if not is_page_member(d.path)}
    comms = {d.rank for d in dumps if is_comms(d)}
    kept: list[ParsedDump] = []
    dropped: list[tuple[str, str]] = []
    for d in dumps:
        if is_page_member(d.path) and d.rank in files:
            dropped.append((d.path, "a debug-server page's section: the rank's own dump is read"))
        elif is_page_member(d.path) and d.rank in comms and not is_comms(d):
            dropped.append(
                (d.path, "a debug-server page's c10d section: its TorchComms one is read")
            )
        else:
            kept.append(d)
    return kept, dropped


def snapshot_only(names: Iterable[str]) -> bool:
    """Are some of these file names the debug server's periodic snapshots?"""
    return any(_SNAPSHOT.match(os.path.basename(n)) for n in names)


def is_page(head: bytes) -> bool:
    """Is this the start of a page the debug server served (saved from a browser)?"""
    return all(mark in head for mark in PAGE_MARK) and b"<pre>" in head


def page_member(path: str, rank: int, torchcomms: bool = False) -> str:
    """The label of one rank's dump inside a saved page (``torchcomms_rank_N.json`` in the
    page of TorchComms' recorder)."""
    return f"{path}:{TORCHCOMMS_MEMBER if torchcomms else ''}rank_{rank}.json"


def is_torchcomms_page(text: str) -> bool:
    """Does the page say it shows TorchComms' recorder (``/torchcomms_fr_trace_json``)?"""
    head = text[:4096]
    return "<title>TorchComms FlightRecorder" in head or "torchcomms_fr_trace_json?" in text[:65536]


def page_ranks(text: str, max_ranks: int) -> Iterator[tuple[int, bytes]]:
    """(rank, that rank's JSON) of every rank section of a page, at most ``max_ranks``;
    sections that failed (no JSON) are left out."""
    for n, m in enumerate(_RANK_SECTION.finditer(text)):
        if n >= max_ranks:
            return
        body = html.unescape(m.group(2)).strip()
        if body.startswith("{"):
            yield int(m.group(1)), body.encode()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One file the periodic dumper wrote."""

    kind: str
    stamp: str
    path: Path
    partial: str = ""
    """Its first line when some workers did not answer (``PARTIAL DATA: k/N ...``)."""

    @property
    def responded(self) -> int | None:
        """How many workers answered, where some did not (None: every one did)."""
        m = _PARTIAL.match(self.partial)
        return int(m.group(1)) if m else None

    @property
    def time(self) -> str:
        s = self.stamp
        return f"{s[:4]}-{s[4:6]}-{s[6:8]} {s[9:11]}:{s[11:13]}:{s[13:15]}"


def _head_line(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(200).split(b"\n", 1)[0].decode("utf-8", "replace")
    except OSError:
        return ""


def snapshots(inputs: Sequence[str | os.PathLike[str]], kind: str | None) -> list[Snapshot]:
    """The ``kind`` snapshots (every kind: None) in the folders of ``inputs`` (and the files
    given), oldest first."""
    seen: dict[Path, None] = {}
    for spec in inputs:
        p = Path(os.fspath(spec))
        for f in sorted(p.iterdir()) if p.is_dir() else [p] if p.is_file() else []:
            seen.setdefault(f, None)
    out = []
    for f in seen:
        m = _SNAPSHOT.match(f.name)
        if m and kind in (None, m.group("kind")) and f.is_file():
            line = _head_line(f)
            partial = line if _PARTIAL.match(line) else ""
            out.append(Snapshot(m.group("kind"), m.group("ts"), f, partial))
    return sorted(out, key=lambda s: (s.stamp, s.path.name))


def chosen(snaps: Sequence[Snapshot]) -> tuple[Snapshot | None, list[Snapshot]]:
    """The newest complete snapshot (the newest of all when none is complete), and the
    partial ones newer than it."""
    if not snaps:
        return None, []
    complete = [s for s in snaps if not s.partial]
    pick = complete[-1] if complete else snaps[-1]
    return pick, [s for s in snaps if s.partial and s.stamp > pick.stamp]


def read_text(path: Path, cap: int) -> str:
    """The first ``cap`` bytes of ``path`` as text (undecodable bytes replaced)."""
    with open(path, "rb") as fh:
        return fh.read(cap).decode("utf-8", "replace")


#: Per table, the columns tabulate right-aligns (numbers): values end where the heading ends.
_NUMERIC = {
    "Groups": frozenset({"size"}),
    "Memberships": frozenset({"global_rank"}),
    "NCCL Calls": frozenset({"id", "collective_id", "global_rank", "traceback_id"}),
}
_GROUP_ID = re.compile(r"^(.*?)-?\d{12,20}$")
_MAX_ROWS = 1 << 20


def _rows(sections: dict[str, list[str]], table: str) -> list[dict[str, str]]:
    """The rows of one plain tabulate table (heading first), cells by the heading's columns."""
    lines = sections.get(table, [])
    numeric = _NUMERIC.get(table, frozenset())
    if not lines:
        return []
    head = lines[0]
    cols = [(m.group(0), m.start(), m.end()) for m in re.finditer(r"\S+", head)]
    out = []
    for line in lines[1 : _MAX_ROWS + 1]:
        row: dict[str, str] = {}
        for name, start, end in cols:
            if name in numeric:
                cell = line[:end].rsplit(None, 1)[-1] if line[end - 1 : end].strip() else ""
            else:
                cell = (
                    line[start:].split("  ", 1)[0].strip()
                    if line[start : start + 1].strip()
                    else ""
                )
            row[name] = cell[:1000]
        out.append(row)
    return out


def _sections(text: str) -> dict[str, list[str]]:
    """``--- Groups ---`` ... : the lines of each table of the first trace in ``text``."""
    out: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines()[: 4 * _MAX_ROWS]:
        m = re.match(r"^--- (\w[\w ]{0,40}) ---$", line)
        if m:
            if m.group(1) in out:
                break  # a second trace (the NCCL one) follows
            name = m.group(1)
            out[name] = []
        elif line.startswith("==="):
            if out:
                break
        elif name and line.strip():
            out[name].append(line)
    return out


def table_dumps(text: str, max_rank: int) -> dict[int, bytes]:
    """Per rank, a JSON dump of what the tables of a ``*fr_trace_<ts>.txt`` say it enqueued:
    one entry per row of its NCCL Calls (in each comm's order; an op no collective matched,
    the comm's newest, is not retired), comms keyed by name and members as TorchComms'
    reading keys them. Only who enqueued what is kept: the tables hold no dtypes, no states
    worth reading and no order across comms."""
    import json

    sec = _sections(text)
    members: dict[str, list[int]] = {}
    for row in _rows(sec, "Memberships"):
        if row.get("global_rank", "").isdigit():
            members.setdefault(row.get("group_id", ""), []).append(int(row["global_rank"]))
    desc = {r.get("id", ""): r.get("desc", "") for r in _rows(sec, "Groups")}
    by_name: dict[str, list[tuple[str, list[int]]]] = {}
    for gid, ranks in members.items():
        m = _GROUP_ID.match(gid)
        by_name.setdefault(m.group(1) if m else gid, []).append((gid, sorted(ranks)))
    dumps: dict[int, dict[str, object]] = {}
    for n, row in enumerate(_rows(sec, "NCCL Calls")):
        rank_text, name = row.get("global_rank", ""), row.get("group_id", "")
        if not rank_text.isdigit() or int(rank_text) >= max_rank:
            continue
        rank = int(rank_text)
        group = next((g for g in by_name.get(name, []) if rank in g[1]), None)
        if group is None:
            continue
        gid, ranks = group
        backend = desc.get(gid, "")
        d = dumps.setdefault(
            rank, {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}
        )
        d["pg_config"][name] = {"name": name, "desc": backend, "ranks": str(ranks)}  # type: ignore[index]
        entries: list[dict[str, object]] = d["entries"]  # type: ignore[assignment]
        sizes = row.get("sizes", "")
        entries.append(
            {
                "record_id": n,
                "pg_id": 0,
                "process_group": [name, backend],
                "collective_seq_id": len(entries),
                "p2p_seq_id": 0,
                "op_id": len(entries),
                "profiling_name": row.get("collective_type", ""),
                "input_sizes": json.loads(sizes)
                if re.fullmatch(r"[\[\]\d, ]{0,1000}", sizes)
                else [],
                "output_sizes": [],
                "input_dtypes": [],
                "output_dtypes": [],
                "state": "scheduled",
                "retired": bool(row.get("collective_id")),
                "time_created_ns": 0,
                "is_p2p": False,
            }
        )
    return {r: json.dumps(d).encode() for r, d in sorted(dumps.items())}
