"""How sure the evidence makes each culprit, and the one fact that decides it.

* ``certain``: the culprit's own readable dump shows it (it never enqueued the op its peers
  wait in, it issued the odd op, its entries close a cycle);
* ``likely``: the dumps point at it but cannot show it from its side (it wrote no dump, so a
  crash and a stall look alike; no file names it and the layout of the groups implies it; it
  is blocked inside a collective whose completion its backend does not report);
* ``suspect``: another reading fits the dumps as well (its own dump could not be trusted; a
  group of two, where either side may have issued the odd op; ops the buffers never saw).

When every culprit is a suspect, the verdict is ``inconclusive`` and they are listed as the
suspects (:func:`analyzer.diagnosis.engine.diagnose`).
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.diagnosis.alternatives import stuck_alike
from analyzer.diagnosis.evidence import StuckEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Confidence, Culprit, Finding
from analyzer.kinds import FindingKind
from analyzer.terms import plural, rank_runs

__all__ = ["culprits_of", "missing_suspects", "unseen_suspect"]


_DESYNC = (FindingKind.OP_MISMATCH, FindingKind.SIZE_MISMATCH, FindingKind.DTYPE_MISMATCH)


def _where(f: Finding) -> str:
    name = f.group_desc or f"group {f.group}"
    return f"{f.op or 'an op'} in {name} seq {f.seq}" if f.seq >= 0 else name


def _wait(waiters: Sequence[int]) -> str:
    return "waits" if len(waiters) == 1 else "wait"


def _members_unknown(facts: Facts, group: str) -> bool:
    """No dump lists ``group``'s members (they come from entries alone) and nothing declares
    the world: a member may exist that no file names."""
    return group in facts.unlisted_groups and facts.nothing_listed


def _judge(facts: Facts, rank: int, f: Finding) -> tuple[Confidence, str]:
    """The confidence of ``rank`` as the culprit of finding ``f``."""
    if rank in facts.unsure:
        return Confidence.SUSPECT, f"its own dump cannot be trusted: {facts.unsure[rank]}"
    if rank in facts.inferred:
        return Confidence.LIKELY, (
            f"no file names it: the layout of {facts.inferred[rank]} implies a member with no dump"
        )
    g = facts.graph  # direct waiters only: the count of all is in the summary
    waiters = sorted(int(w) for w in g.predecessors(rank)) if rank in g else []
    kind = FindingKind(f.kind) if f.kind in FindingKind._value2member_map_ else None
    if kind is FindingKind.MISSING_DUMP:
        return Confidence.LIKELY, (
            f"it wrote no dump and {plural(waiters)} {rank_runs(waiters)} {_wait(waiters)} on it: "
            "a crash and a stall look alike from the others' files"
            if waiters
            else "it wrote no dump: a crash and a stall look alike from the others' files"
        )
    if kind is FindingKind.NOT_JOINED:
        return Confidence.CERTAIN, (
            f"its own dump shows it never enqueued {_where(f)}; "
            f"{plural(waiters)} {rank_runs(waiters)} {_wait(waiters)} on it"
            if waiters
            else f"its own dump shows it never enqueued {_where(f)}"
        )
    if kind in _DESYNC:
        size = len(facts.members.get(f.group, ())) if f.group else 0
        if size == 2:
            return Confidence.SUSPECT, (
                f"a group of two disagrees on {_where(f)}: either side may have issued the odd one"
            )
        return (
            Confidence.CERTAIN,
            f"its own entry for {_where(f)} differs from every other member's",
        )
    if kind is FindingKind.DEADLOCK:
        return Confidence.CERTAIN, "its own entries close a cycle of waits"
    if (
        kind is FindingKind.STUCK_IN_COLLECTIVE
        and isinstance(f.evidence, StuckEvidence)
        and f.evidence.suspect is None
        and len(f.ranks) > 1
    ):
        return Confidence.SUSPECT, (
            f"every member enqueued {_where(f)} and none completed it; no member stands out "
            "(what holds it inside, network, GPU or host, is not in the files)"
        )
    if kind is FindingKind.STUCK_IN_COLLECTIVE and _members_unknown(facts, f.group):
        return Confidence.SUSPECT, (
            f"it is the one whose entry of {_where(f)} never completed or timed out, but no dump "
            "lists that group's members nor the job's ranks: a member that wrote no file at all "
            "may be the one they all wait on"
        )
    if kind is FindingKind.STUCK_IN_COLLECTIVE:
        return Confidence.LIKELY, (
            f"every member enqueued {_where(f)} and it is the one whose entry never completed "
            "or timed out: what it waits for inside (network, GPU, host) is not in the files"
        )
    if kind is FindingKind.UNRECORDED_OPS:
        return Confidence.SUSPECT, "its counters ran ahead of its entries: the ops are in no buffer"
    return Confidence.LIKELY, f"others wait on it in {_where(f)}"


def _changed(facts: Facts, rank: int, group: str, seq: int) -> str | None:
    """``size [[8]] -> [[12]]`` when ``rank``'s op at ``seq`` of ``group`` differs in size or
    dtype from what it posted for every earlier op of that name in that group (two at
    least), else None. Where that group holds fewer, its dtype against every earlier op of
    that name in any of its groups (two at least; sizes differ between groups by design)."""
    e = facts.tables.entries
    coll = e[(e["rank"] == rank) & ~e["is_p2p"].to_numpy(bool)]
    mine = coll[coll["pg_name"] == group]
    now = mine[mine["seq"] == seq]
    if len(now) != 1:
        return None
    op = now["op"].iat[0]
    before = mine[(mine["seq"] < seq) & (mine["op"] == op)]
    checks: tuple[tuple[str, str, str], ...] = (
        ("input_sizes", "size", ""),
        ("input_dtypes", "dtype", ""),
    )
    if len(before) < 2:
        before = coll[(coll["record_id"] < now["record_id"].iat[0]) & (coll["op"] == op)]
        checks = (("input_dtypes", "dtype", f" (its earlier {op} ops were in other groups)"),)
        if len(before) < 2:
            return None
    for col, word, where in checks:
        usual = set(before[col].astype(str))
        if len(usual) == 1 and (value := str(now[col].iat[0])) not in usual:
            return f"{word} {usual.pop()} -> {value}{where}"
    return None


def _with_silent_partners(
    facts: Facts, culprit: Culprit, silent: list[int], where: str
) -> tuple[Culprit, list[Culprit]]:
    """``culprit``, which never joined ``where``, and the members of its group with no dump,
    each a suspect. Where the culprit's backend records no send/recv (gloo), it may be
    blocked in one with them: then it is a suspect too."""
    rank = culprit.rank
    them = f"{plural(silent)} {rank_runs(silent)}"
    d = facts.matching.dialects.of(rank)
    blind = d is not None and not d.records_p2p
    if blind:
        culprit = Culprit(
            rank,
            Confidence.SUSPECT,
            f"it never enqueued {where}, but {them} of that group wrote no dump and this "
            "backend records no send/recv: it may be blocked in one with them, or stopped on "
            "its own",
        )
    return culprit, [
        Culprit(
            p,
            Confidence.SUSPECT,
            f"it wrote no dump, so whether it joined {where} is in no file"
            + (
                f": it may hold rank {rank} in a send/recv this backend does not record, or it "
                "crashed"
                if blind
                else f" (rank {rank} never did): it may have crashed or stopped as well"
            ),
        )
        for p in silent
    ]


#: Pairs checked for a desync whose partner died (each check scans the entries once).
_MAX_PAIR_CHECKS = 64


def _partners_changed(facts: Facts, dead: set[int]) -> dict[int, list[tuple[int, str, str]]]:
    """For culprits with no dump (``dead``): rank -> (waiter, where, change) for each member
    that waits on it in a group where it is the only other member and whose op there changed
    size or dtype from its own history (gloo aborts the receiver of a size mismatch)."""
    w = facts.waits
    w = w[w["holder"].isin(sorted(dead))]
    members = facts.members
    pairs = [
        (int(holder), int(waiter), str(group), int(seq), str(op))
        for holder, waiter, group, seq, op in w[
            ["holder", "waiter", "pg_name", "seq", "op"]
        ].itertuples(index=False)
        if set(members.get(group, ())) == {int(waiter), int(holder)}
    ]
    out: dict[int, list[tuple[int, str, str]]] = {}
    descs = dict(zip(facts.tables.groups["pg_name"], facts.tables.groups["pg_desc"], strict=True))
    for holder, waiter, group, seq, op in pairs[:_MAX_PAIR_CHECKS]:
        change = _changed(facts, waiter, group, seq)
        if change:
            where = f"{op} in {descs.get(group) or group} seq {seq}"
            out.setdefault(holder, []).append((waiter, where, change))
    return out


#: Members with no dump named as suspects beside one culprit, at most (more are no second
#: fault but files that were not collected).
_MAX_SILENT = 8


def _silent_partners(
    facts: Facts, findings: Sequence[Finding], ranks: set[int]
) -> dict[int, list[int]]:
    """For culprits that never joined an op: rank -> the members of that op's group that
    wrote no dump (readable evidence of them is none, and they are not culprits). Whether
    they joined it is in no file: a second fault (a crash beside the stall) looks the same
    as members that joined and died later."""
    missing = facts.unblamed_missing - ranks
    if not missing:
        return {}
    out: dict[int, list[int]] = {}
    for f in findings:
        if not f.culprit or f.kind != FindingKind.NOT_JOINED.value or not f.group:
            continue
        silent = sorted(missing & set(facts.members.get(f.group, ())))
        if 0 < len(silent) <= _MAX_SILENT:
            for r in f.ranks:
                out.setdefault(r, silent)
    return out


def _unlisted_members(facts: Facts, findings: Sequence[Finding], named: set[int]) -> list[Culprit]:
    """Ranks with no dump that may be members of a collective its known members are all stuck
    in, where no dump lists that group's members (gloo 2.13): the 'stuck' collective may be
    one such a member never joined. Each a suspect (at most :data:`_MAX_SILENT`)."""
    missing = facts.unblamed_missing - named
    if not missing:
        return []
    out: list[Culprit] = []
    for f in findings:
        if f.culprit and f.kind == FindingKind.STUCK_IN_COLLECTIVE.value and f.group:
            if f.group not in facts.unlisted_groups or len(missing) > _MAX_SILENT:
                continue
            where = _where(f)
            out.extend(
                Culprit(
                    r,
                    Confidence.SUSPECT,
                    f"it wrote no dump, and no dump lists the members of the group of {where}: "
                    "if it is one, the others wait on it there (it crashed or stalled), not "
                    "inside the network",
                )
                for r in sorted(missing)
            )
    return out


def _unproven_waits(facts: Facts, dead: set[int], named: set[int]) -> list[Culprit]:
    """Ranks others wait on, whose own wait on a culprit with no dump (``dead``) rests on
    their newest entry, retired by a backend that retires an op that timed out as one that
    completed (gloo), or every op when issued (no completion reports): each may have
    finished that op and stopped after it, a second fault beside the crash. A suspect."""
    unobserved = (
        facts.matching.dialects.unobserved_ranks - facts.matching.dialects.retired_done_ranks
    )
    if not dead or not unobserved:
        return []
    w = facts.waits
    w = w[w["holder"].isin(sorted(dead)) & w["waiter"].isin(sorted(unobserved - named))]
    g = facts.graph
    out: dict[int, Culprit] = {}
    for waiter, holder, group, seq, op in w[
        ["waiter", "holder", "pg_name", "seq", "op"]
    ].itertuples(index=False):
        r = int(waiter)
        if r in out or r not in g or not any(int(p) != int(holder) for p in g.predecessors(r)):
            continue
        last = facts.last_entry(r)
        if last is None or bool(last["is_p2p"]) or not bool(last["retired"]):
            continue
        if str(last["pg_name"]) != str(group) or int(last["seq"]) != int(seq):
            continue
        waiters = sorted(int(p) for p in g.predecessors(r))
        desc = str(last.get("pg_desc") or "") or str(group)
        own = facts.matching.dialects.dumps_on_own_timeout(r)
        out[r] = Culprit(
            r,
            Confidence.SUSPECT,
            f"{plural(waiters)} {rank_runs(waiters)} {_wait(waiters)} on it, and it waits on rank "
            f"{int(holder)} (no dump) only in its last op, {op} in {desc} seq {int(seq)}, which "
            "its backend retired: it retires an op that timed out as one that completed (or "
            "every op when issued), so it may have finished that op and stopped after it, a "
            "second fault beside the first"
            + (
                " (its own file shows a timeout only if it was written on its own timeout, "
                "not on a request to every rank)"
                if own
                else ""
            ),
        )
    return [out[r] for r in sorted(out)]


def missing_suspects(facts: Facts) -> tuple[Culprit, ...]:
    """Where ops are pending but nobody is blamed and no dump lists any group's members:
    the ranks with no dump (at most :data:`_MAX_SILENT`), each a suspect. They may be members
    of the groups the others stopped in, and what those wait on."""
    missing = sorted(facts.unblamed_missing)
    if not missing or len(missing) > _MAX_SILENT or not facts.nothing_listed:
        return ()
    return tuple(
        Culprit(
            r,
            Confidence.SUSPECT,
            "it wrote no dump, and ops are pending on the ranks that did: no dump lists the "
            "groups' members, so it may be one of the groups they stopped in and what they "
            "wait on there (it crashed or stalled)",
        )
        for r in missing
    )


def unseen_suspect(facts: Facts, findings: Sequence[Finding]) -> str:
    """Why a rank that wrote no file and that no dump names may be the culprit, or "": the
    culprit is held in a collective whose members no dump lists, nor the job's ranks (gloo
    2.13), and no rank is known to be missing. Such a member would be the one they all wait
    on, and nothing in the files gives its number."""
    if facts.unblamed_missing:
        return ""
    for f in findings:
        stuck = f.culprit and f.kind == FindingKind.STUCK_IN_COLLECTIVE.value and f.group
        if stuck and _members_unknown(facts, f.group):
            return (
                f"a member of the group of {_where(f)} that wrote no file would be the one the "
                "others wait on (it crashed or stalled); no file gives its number"
            )
    return ""


def culprits_of(facts: Facts, findings: Sequence[Finding], ranks: set[int]) -> tuple[Culprit, ...]:
    """Each culprit of ``ranks`` judged by the first culprit finding that names it. A rank
    with no dump whose only group peer changed size or dtype in the op it died in is a
    suspect, and so is that peer (a desync whose partner died: the odd rank's own history is
    the only witness)."""
    out: dict[int, Culprit] = {}
    missing = FindingKind.MISSING_DUMP.value
    dead = {r for f in findings if f.culprit and f.kind == missing for r in f.ranks} & ranks
    changed = _partners_changed(facts, dead) if dead else {}
    partners = _silent_partners(facts, findings, ranks)
    for r in sorted(ranks):
        f = next((f for f in findings if f.culprit and r in f.ranks), None)
        if f is None:
            out[r] = Culprit(r, Confidence.SUSPECT, "named by no finding of its own")
            continue
        confidence, because = _judge(facts, r, f)
        out[r] = Culprit(r, confidence, because)
        if r in partners:
            out[r], more = _with_silent_partners(facts, out[r], partners[r], _where(f))
            for p in more:
                out.setdefault(p.rank, p)
        if f.kind != missing:
            continue
        for peer, where, change in changed.get(r, ()):
            out[r] = Culprit(
                r,
                Confidence.SUSPECT,
                f"it wrote no dump and its only peer in {where}, rank {peer}, changed {change} "
                "there: a desync may have aborted it (gloo aborts the receiver of a size "
                "mismatch), or it crashed on its own",
            )
            out.setdefault(
                peer,
                Culprit(
                    peer,
                    Confidence.SUSPECT,
                    f"a suspect desync: it changed {change} in {where} from what it posted "
                    f"before, and its peer rank {r} died in that op",
                ),
            )
    for p in _unlisted_members(facts, findings, set(out)):
        out.setdefault(p.rank, p)
    for p in _unproven_waits(facts, dead, set(out)):
        out.setdefault(p.rank, p)
    held, where = stuck_alike(facts, findings)
    for r in held:
        out[r] = Culprit(
            r,
            Confidence.SUSPECT,
            f"every member of its group enqueued {where} as its last op and none went past it; "
            "this backend reports no completion: they may be stuck inside it (network, GPU, "
            "one frozen member) or all stalled after it",
        )
    return tuple(out[r] for r in sorted(out))
