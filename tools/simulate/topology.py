"""Ranks and process groups of a tp x pp x dp job."""

from __future__ import annotations

from tools.simulate.constants import DEFAULT, DP, EMB, MP, PP, TP


class Topology:
    """Ranks and process groups, created in one order that every rank shares."""

    def __init__(self, tp: int, pp: int, dp: int) -> None:
        if min(tp, pp, dp) < 1:
            raise ValueError("tp, pp and dp must be >= 1")
        self.tp, self.pp, self.dp = tp, pp, dp
        self.world = tp * pp * dp
        self.group_ranks: list[tuple[int, ...]] = []
        self.group_role: list[int] = []
        self.role_gid = [[-1] * 6 for _ in range(self.world)]
        # Creation order (global names "0", "1", ...): default, data parallel, pipeline
        # (each followed by its embedding group), tensor parallel, model parallel. Ranks
        # outside a group never create its backend, so the local pg_id counter of a
        # middle pipeline stage (no embedding group) runs behind the others.
        self._add(DEFAULT, range(self.world))
        for p in range(pp):
            for t in range(tp):
                self._add(DP, [self.rank(t, p, d) for d in range(dp)])
        for d in range(dp):
            for t in range(tp):
                ranks = [self.rank(t, p, d) for p in range(pp)]
                self._add(PP, ranks)
                if pp > 1:
                    self._add(EMB, [ranks[0], ranks[-1]])
        for d in range(dp):
            for p in range(pp):
                self._add(TP, [self.rank(t, p, d) for t in range(tp)])
        for d in range(dp):
            self._add(MP, [self.rank(t, p, d) for p in range(pp) for t in range(tp)])
        self.role_pgid = [[-1] * 6 for _ in range(self.world)]
        counters = [0] * self.world
        for gid, members in enumerate(self.group_ranks):
            role = self.group_role[gid]
            for r in members:
                self.role_pgid[r][role] = counters[r]
                counters[r] += 1

    def _add(self, role: int, ranks) -> None:
        gid = len(self.group_ranks)
        ranks = tuple(ranks)
        self.group_ranks.append(ranks)
        self.group_role.append(role)
        for r in ranks:
            self.role_gid[r][role] = gid

    def rank(self, t: int, p: int, d: int) -> int:
        return d * (self.pp * self.tp) + p * self.tp + t

    def coords(self, r: int) -> tuple[int, int, int]:
        return r % self.tp, (r // self.tp) % self.pp, r // (self.tp * self.pp)

    def group_name(self, gid: int) -> str:
        return str(gid)

    def group_size(self, gid: int) -> int:
        return len(self.group_ranks[gid])

    def members(self, r: int, role: int) -> tuple[int, ...]:
        gid = self.role_gid[r][role]
        return self.group_ranks[gid] if gid >= 0 else ()
