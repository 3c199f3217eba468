"""TorchComms' flight recorder (meta-pytorch/torchcomms, ``comms/torchcomms/hooks/fr/``):
recognised from each dump's content, then read into the keys the rest of the pipeline
matches on.

Its dumps carry the c10d format's keys and version (``"2.10"``) and the same ``nccl:`` or
``gloo:`` prefixes, but not their meaning (``FlightRecorder.cpp``):

* ``pg_status`` is always empty (``record`` is passed no group status);
* ``pg_config`` is keyed by the communicator's name and its ``desc`` is the backend name
  (``registerWithComm``); names are reused by disjoint comms (every tensor-parallel comm of a
  device mesh is ``"tp"``);
* ``collective_seq_id`` and ``op_id`` are process-wide, over every comm and op kind, so one
  collective carries different ids on different ranks; ``p2p_seq_id`` is always 0;
* ``send``/``recv`` carry no peer and ``is_p2p`` is always false; ``batch_op_issue`` marks a
  batched send/recv without tensors.

A dump is read as TorchComms when its ``pg_status`` is empty, every ``desc`` of its
``pg_config`` is a backend name (the prefix of its entries, or a known one), and one more
sign is there: counters that run across comms, peerless send/recv, ``batch_op_issue``, or,
across ranks, the same collective of a comm carrying different ids. The prefix alone never
decides (the same ``nccl:`` prefix is the legacy recorder's).

Then, in each such dump:

* every comm is keyed by (name, member set): ``tp`` of ranks 0 and 1 becomes ``tp[0,1]``;
* a collective's ``seq`` is its position among its comm's own entries (0, 1, ...);
* a send/recv of a two-member comm gets the other member as its peer and its position
  among that comm's sends (or recvs) as its ``p2p_seq``; in larger comms the peer is not
  written and stays unknown;
* the ``desc`` (the backend name) is dropped: the key names the comm;
* the backend label becomes ``torchcomms-<backend>`` (``torchcomms-gloo``,
  ``torchcomms-nccl``): what the dialect table reads (completion, who writes a file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from analyzer.load import entry_columns as col
from analyzer.load.debug_server import TORCHCOMMS_MEMBER
from analyzer.load.duplicates import TORCHCOMMS_LABEL
from analyzer.load.parsed_dump import ParsedDump
from analyzer.load.torchcomms_align import align_wrapped
from analyzer.load.torchcomms_names import comm_keys, known_member_sets, other_member_sets

__all__ = [
    "LABEL_PREFIX",
    "TorchCommsRead",
    "comm_key",
    "read_torchcomms",
    "resolve_across_shards",
    "signs_of",
]

#: The backend label of a TorchComms dump: ``torchcomms-gloo``, ``torchcomms-nccl``...
LABEL_PREFIX = TORCHCOMMS_LABEL
#: Backend names a TorchComms ``desc`` takes (``TorchComm::getBackend``), besides the
#: prefixes of the dump's own entries.
_BACKENDS = frozenset(
    {"gloo", "nccl", "ncclx", "rccl", "rcclx", "xccl", "hccl", "mccl", "mpi", "ucc", "dummy"}
)
_P2P_OPS = ("send", "recv")
_BATCH = "batch_op_issue"
_SPLIT = "split"


@dataclass(frozen=True, slots=True)
class TorchCommsRead:
    """What reading the TorchComms dumps of a set did: which ranks' dumps were read so, and
    the signs each showed."""

    ranks: tuple[int, ...] = ()
    signs: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    unaligned: dict[int, str] = field(default_factory=dict)
    """Ranks whose wrapped buffer could not be lined up with the other members', and why."""


def _span(members: Sequence[int]) -> str:
    """``0,1`` / ``0-3`` / ``0-3,8``: runs of three or more consecutive ranks collapsed."""
    out: list[str] = []
    i = 0
    ms = list(members)
    while i < len(ms):
        j = i
        while j + 1 < len(ms) and ms[j + 1] == ms[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{ms[i]}-{ms[j]}")
        else:
            out.extend(str(m) for m in ms[i : j + 1])
        i = j + 1
    return ",".join(out)


def comm_key(name: str, members: Sequence[int] | None) -> str:
    """A comm's key: its name and member set, ``tp[0,1]`` (the name alone without members)."""
    if not members:
        return name
    return f"{name}[{_span(sorted(members))}]"


def _column(d: ParsedDump, name: str) -> np.ndarray:
    """``name`` of every entry, as text."""
    vocab = d.vocab[name]
    return np.array(vocab, dtype=object)[np.asarray(d.strings[name], dtype=np.int64)]


def signs_of(d: ParsedDump) -> tuple[str, ...]:
    """The signs of TorchComms' recorder in one dump; empty when it is not one.

    Needed: an empty ``pg_status`` and every ``pg_config`` desc a backend name; then at least
    one more sign of the dump's own (counters that run across comms, a peerless send/recv,
    ``batch_op_issue``), unless the caller has a cross-rank sign."""
    if d.pg_status or not d.pg_config:
        return ()
    backends = set(d.vocab["backend"]) - {""} if d.n_entries else set()
    descs = {desc for desc, _ in d.pg_config.values()}
    if not descs or not all(desc in backends or desc in _BACKENDS for desc in descs):
        return ()
    signs = ["empty pg_status", "every pg_config desc is a backend name"]
    if d.path.endswith(".json") and f":{TORCHCOMMS_MEMBER}rank_" in d.path:
        signs.append("a section of the debug server's TorchComms page")
    if not d.n_entries:
        return tuple(signs)
    ops = _column(d, "op")
    names = _column(d, "pg_name")
    seq = np.asarray(d.ints["seq"], dtype=np.int64)
    p2p = np.isin(ops, _P2P_OPS)
    if len(set(names.tolist())) > 1 and len(seq) > 1 and bool((np.diff(seq) > 0).all()):
        signs.append("collective_seq_id runs across comms (one counter per process)")
    peerless = p2p & (np.asarray(d.ints["peer_local"]) < 0)
    if peerless.any():
        signs.append("send/recv without a peer")
    if (ops == _BATCH).any():
        signs.append("batch_op_issue entries")
    return tuple(signs)


def _positions(keys: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For the rows in ``mask``: how many earlier rows of ``mask`` share their key (0, 1...);
    -1 elsewhere."""
    out = np.full(len(keys), -1, dtype=np.int64)
    seen: dict[object, int] = {}
    for i in np.flatnonzero(mask).tolist():
        k = keys[i]
        n = seen.get(k, 0)
        out[i] = n
        seen[k] = n + 1
    return out


def _rekey(d: ParsedDump) -> dict[str, str]:
    """Old comm name -> its key, for the comms of this dump's ``pg_config``."""
    return {name: comm_key(name, members) for name, (_, members) in d.pg_config.items()}


def _rewrite(d: ParsedDump, known: Mapping[str, set[tuple[int, ...]]]) -> list[str]:
    """Read one TorchComms dump into the pipeline's keys (see the module's docstring); the
    notes to tell about it. ``known``: every comm name's member sets in the set's dumps."""
    names = _column(d, "pg_name") if d.n_entries else np.array([], dtype=object)
    pg_ids = np.asarray(d.ints["pg_id"], dtype=np.int64) if d.n_entries else np.array([])
    found = comm_keys(d.rank, d.pg_config, names, pg_ids, known)
    notes = list(found.notes)
    # The desc is the backend name, which the label keeps: the key names the comm alone.
    d.pg_config = {comm_key(n, m): ("", m) for n, m in found.comms}
    d.vocab["pg_desc"] = ["" for _ in d.vocab["pg_desc"]]
    d.vocab["backend"] = [f"{LABEL_PREFIX}{b}" if b else b for b in d.vocab["backend"]]
    if not d.n_entries:
        return notes
    # One key per comm, not per entry (a key spans the member list: thousands of ranks).
    key_of: dict[tuple[str, int], str] = {}
    for n, m in found.entries:
        if (n, id(m)) not in key_of:
            key_of[(n, id(m))] = comm_key(n, m)
    codes, keys = col.vocab([key_of[(n, id(m))] for n, m in found.entries])
    d.strings["pg_name"], d.vocab["pg_name"] = col.narrow(codes), keys
    ops = _column(d, "op")
    names = _column(d, "pg_name")
    p2p = np.isin(ops, _P2P_OPS)
    batch = ops == _BATCH
    coll = ~p2p & ~batch
    seq = _positions(names, coll)
    # A send/recv carries the seq of the comm's newest collective before it, as c10d's do.
    last: dict[object, int] = {}
    for i in range(len(names)):
        if coll[i]:
            last[names[i]] = int(seq[i])
        else:
            seq[i] = last.get(names[i], -1)
    peer = np.asarray(d.ints["peer_local"], dtype=np.int64).copy()
    me = np.asarray(d.ints["self_local"], dtype=np.int64).copy()
    members = {n: m for n, (_, m) in d.pg_config.items()}
    wide = set()
    for i in np.flatnonzero(p2p).tolist():
        ms = members.get(names[i])
        if ms and len(ms) == 2 and d.rank in ms:
            me[i] = ms.index(d.rank)
            peer[i] = 1 - me[i]
        elif ms:
            wide.add(str(names[i]))
    if wide:
        notes.append(
            f"send/recv in comm(s) of more than two members ({', '.join(sorted(wide))}): "
            "TorchComms writes no peer, so they are not paired"
        )
    p2p_seq = _positions(np.array([f"{n}\0{o}" for n, o in zip(names, ops)], dtype=object), p2p)
    p2p_seq[~p2p] = 0
    d.ints["seq"] = col.narrow(seq)
    d.ints["p2p_seq"] = col.narrow(p2p_seq)
    d.ints["peer_local"] = col.narrow(peer)
    d.ints["self_local"] = col.narrow(me)
    d.bools["is_p2p"] = np.asarray(p2p | batch, dtype=bool)
    # A rank outside a split's new comm gets no comm back and never reaches the post-hook
    # that retires the split (TorchComm::split): a split with later entries returned.
    split = ops == _SPLIT
    split[-1] = False
    if split.any() and not np.asarray(d.bools["retired"])[split].all():
        d.bools["retired"] = np.asarray(d.bools["retired"], dtype=bool) | split
    return notes


def resolve_across_shards(dumps: Sequence[ParsedDump]) -> None:
    """Stores of shards of one job, read together: an earlier comm of a reused name that its
    shard keyed ``<name>#<pg_id>`` (the other ranks' ``pg_config`` were in other shards)
    takes the one other member set of that name holding its rank that the union's dumps
    show, as reading the whole job's files does; its send/recv in a comm of two get their
    peer back."""
    known: dict[str, set[tuple[int, ...]]] = {}
    for d in dumps:
        for key, (_, members) in d.pg_config.items():
            if members and "#" not in key:
                known.setdefault(key.split("[", 1)[0], set()).add(tuple(members))
    for d in dumps:
        unknown = [k for k, (_, m) in d.pg_config.items() if "#" in k and not m]
        for key in unknown:
            base = key.split("#", 1)[0]
            mine = [set(m) for k, (_, m) in d.pg_config.items() if m and k.split("[", 1)[0] == base]
            others = other_member_sets(known, base, d.rank, mine)
            if sum(k.split("#", 1)[0] == base for k in unknown) != 1 or len(others) != 1:
                continue
            _rename_comm(d, key, base, others[0])


def _rename_comm(d: ParsedDump, key: str, base: str, members: tuple[int, ...]) -> None:
    """Key ``key``'s comm as ``base`` with ``members`` in ``d``; its send/recv in a comm of
    two get their own and their peer's local ranks (as :func:`_rewrite` gives them)."""
    new = comm_key(base, members)
    d.pg_config = {
        (new if k == key else k): (v if k != key else ("", members)) for k, v in d.pg_config.items()
    }
    if not d.n_entries or key not in d.vocab["pg_name"]:
        return
    vocab = list(d.vocab["pg_name"])
    old_code = vocab.index(key)
    codes = np.asarray(d.strings["pg_name"], dtype=np.int64).copy()
    if new in vocab:
        codes[codes == old_code] = vocab.index(new)
    else:
        vocab[old_code] = new
    fresh, keys = col.vocab(np.array(vocab, dtype=object)[codes].tolist())
    d.strings["pg_name"], d.vocab["pg_name"] = col.narrow(fresh), keys
    if len(members) != 2 or d.rank not in members:
        return
    names = _column(d, "pg_name")
    rows = (names == new) & np.isin(_column(d, "op"), _P2P_OPS)
    me = np.asarray(d.ints["self_local"], dtype=np.int64).copy()
    peer = np.asarray(d.ints["peer_local"], dtype=np.int64).copy()
    me[rows] = members.index(d.rank)
    peer[rows] = 1 - members.index(d.rank)
    d.ints["self_local"], d.ints["peer_local"] = col.narrow(me), col.narrow(peer)


def _cross_rank_sign(dumps: Sequence[ParsedDump]) -> bool:
    """Does the same collective (same comm, same position) carry different ids on ranks?"""
    firsts: dict[str, set[int]] = {}
    for d in dumps:
        if not d.n_entries:
            continue
        names = _column(d, "pg_name")
        ops = _column(d, "op")
        seq = np.asarray(d.ints["seq"], dtype=np.int64)
        keys = _rekey(d)
        coll = ~np.isin(ops, (*_P2P_OPS, _BATCH))
        pos = _positions(names, coll)
        for i in np.flatnonzero(coll & (pos == 0)).tolist():
            firsts.setdefault(keys.get(str(names[i]), str(names[i])), set()).add(int(seq[i]))
    return any(len(ids) > 1 for ids in firsts.values())


def read_torchcomms(dumps: Sequence[ParsedDump], note: str = "") -> TorchCommsRead:
    """Recognise the TorchComms dumps among ``dumps`` and read them in place (see the
    module's docstring); the others are left as they are. ``note``: what to say first (where
    the dumps came from, when not from files of their own)."""
    read = _read(dumps)
    return replace(read, notes=(note, *read.notes)) if note else read


def _read(dumps: Sequence[ParsedDump]) -> TorchCommsRead:
    candidates = {id(d): signs_of(d) for d in dumps}
    base = [d for d in dumps if candidates[id(d)]]
    if not base:
        return TorchCommsRead()
    cross = _cross_rank_sign(base)
    chosen = [d for d in base if len(candidates[id(d)]) > 2 or cross]
    if not chosen:
        return TorchCommsRead()
    signs: list[str] = []
    for d in chosen:
        for s in candidates[id(d)]:
            if s not in signs:
                signs.append(s)
    if cross:
        signs.append("one collective carries different ids on different ranks")
    notes: list[str] = []
    active = [d.rank for d in chosen if d.n_entries and not np.asarray(d.bools["retired"]).any()]
    if active:
        notes.append(
            f"rank(s) {', '.join(map(str, sorted(set(active))))}: only entries in flight "
            "(onlyActive, as the debug server's page shows them): positions count from the "
            "first entry in flight"
        )
    known = known_member_sets([d.pg_config for d in chosen])
    for d in chosen:
        for n in _rewrite(d, known):
            if n not in notes:
                notes.append(n)
    aligned, unaligned = align_wrapped(chosen, _column)
    notes.extend(n for n in dict.fromkeys(aligned) if n not in notes)
    return TorchCommsRead(
        ranks=tuple(sorted({d.rank for d in chosen})),
        signs=tuple(signs),
        notes=tuple(notes),
        unaligned=unaligned,
    )
