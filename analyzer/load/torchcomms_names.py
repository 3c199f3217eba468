"""Which comm each entry of a TorchComms dump belongs to, when one process holds two comms of
the same name (a middle pipeline stage's ``pp`` comm to the stage before and the one after).

TorchComms' ``FlightRecorder::record_pg_ranks`` (``comms/torchcomms/hooks/fr/
FlightRecorder.cpp``) keeps the ranks in a map keyed by ``(name, backend)`` and assigns them:
the second comm of a name overwrites the first, so ``pg_config`` lists the name once, with
the ranks of the comm registered last. The entries still tell the comms apart: each carries
its hook's registration count as ``pg_id`` (``registerWithComm``). So here:

* a name whose entries carry one ``pg_id`` is the comm ``pg_config`` lists;
* a name whose entries carry several: the highest ``pg_id`` (registered last) is the comm
  ``pg_config`` lists; an earlier one takes the one other member set of that name holding
  this rank that the other ranks' ``pg_config`` show; when that is not one set, its members
  stay unknown and it is keyed ``<name>#<pg_id>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CommKeys", "comm_keys", "known_member_sets", "other_member_sets"]

Members = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CommKeys:
    """Per entry, its comm's (name, members); the comms found; what to tell about them."""

    entries: tuple[tuple[str, Members | None], ...]
    comms: tuple[tuple[str, Members | None], ...]
    notes: tuple[str, ...] = ()


def known_member_sets(
    configs: Sequence[Mapping[str, tuple[str, Members | None]]],
) -> dict[str, set[Members]]:
    """Every member set each comm name has in any of these ``pg_config``s."""
    out: dict[str, set[Members]] = {}
    for config in configs:
        for name, (_, members) in config.items():
            if members:
                out.setdefault(name, set()).add(tuple(members))
    return out


def other_member_sets(
    known: Mapping[str, set[Members]], name: str, rank: int, mine: Sequence[set[int]]
) -> list[Members]:
    """The member sets of comm ``name`` holding ``rank`` that ``known`` has besides those in
    ``mine`` (the comms of that name its own pg_config lists): the candidates for an earlier
    comm of a reused name."""
    return sorted(s for s in known.get(name, ()) if rank in s and set(s) not in mine)


def comm_keys(
    rank: int,
    config: Mapping[str, tuple[str, Members | None]],
    names: np.ndarray,
    pg_ids: np.ndarray,
    known: Mapping[str, set[Members]],
) -> CommKeys:
    """The comm of each entry of one rank's dump (``names``/``pg_ids`` per entry), from its
    ``pg_config`` and the member sets ``known`` from every rank's (see the module)."""
    listed = {n: (tuple(m) if m else None) for n, (_, m) in config.items()}
    by_entry: dict[tuple[str, int], tuple[str, Members | None]] = {}
    notes: list[str] = []
    ids_of: dict[str, set[int]] = {}
    for n, p in zip(names.tolist(), pg_ids.tolist(), strict=True):
        ids_of.setdefault(str(n), set()).add(int(p))
    for name, ids in ids_of.items():
        last = listed.get(name)
        if len(ids) == 1:
            by_entry[(name, next(iter(ids)))] = (name, last)
            continue
        *earlier, newest = sorted(ids)
        by_entry[(name, newest)] = (name, last)
        others = other_member_sets(known, name, rank, [set(last or ())])
        sure = len(earlier) == 1 and len(others) == 1
        for pg_id in earlier:
            by_entry[(name, pg_id)] = (name, others[0]) if sure else (f"{name}#{pg_id}", None)
        notes.append(
            f"rank {rank}: {len(ids)} comms named {name!r} (pg_id {', '.join(map(str, sorted(ids)))}"
            "; its pg_config keeps the last one's ranks): "
            + (
                "told apart by pg_id, the earlier one's members read from the other ranks' "
                "pg_config"
                if sure
                else "told apart by pg_id; the earlier ones' members are unknown"
            )
        )
    entries = tuple(
        by_entry[(str(n), int(p))] for n, p in zip(names.tolist(), pg_ids.tolist(), strict=True)
    )
    comms = dict.fromkeys(by_entry.values())
    for name, members in listed.items():
        if name not in ids_of:
            comms[(name, members)] = None
    return CommKeys(entries=entries, comms=tuple(comms), notes=tuple(notes))
