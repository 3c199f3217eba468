"""Accuracy on the corpus of real recorded hangs (corpus/cases, written by tools/corpus).

Every case is analyzed and its answer held against its truth (``tools/corpus/check.py`` says
what right, wrong and unsure mean). Prints a table per fault class and dialect
(right/wrong/unsure), every wrong case with what the analysis said, the wrong cases grouped
by what went wrong, and as its last line:

    real corpus: N cases (K fault classes), R right, W wrong, U unsure

    python bench/accuracy_real.py                      # every case
    python bench/accuracy_real.py --sample 1           # one case per fault class and dialect
    python bench/accuracy_real.py --write-baseline     # pin the results in corpus/BASELINE.json
    python bench/accuracy_real.py --subsets            # each case with one host's files only
    python bench/accuracy_real.py --lost-one           # each case with one waiter's file lost
    python bench/accuracy_real.py --world-given        # each case with --world-size N given
    python bench/accuracy_real.py --dialect gloo@2.13  # the cases of one dialect

``--subsets`` scores each case with only one block of ranks' dumps kept
(:mod:`tools.corpus.subsets`) and ends with
``real corpus subsets: N variants of M cases, R right, W wrong (C confident), U unsure``;
``--lost-one`` each case with the file of one rank that is no culprit taken away, the same
line with ``one file lost``. ``--world-given`` analyzes each case as a user who knows the
job's world size and types ``--world-size N`` (the truth's ``world``) and ends with
``real corpus with the world size given: N cases (K fault classes), R right, W wrong, U unsure``
(``--write-baseline`` then pins them in ``corpus/BASELINE_WORLD.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.corpus.check import (  # noqa: E402
    Outcome,
    case_paths,
    check_case,
    dumps,
    missing_fact,
    read_case,
    to_record,
)
from tools.corpus.spec import DIALECTS, FAULTS  # noqa: E402

CASES = ROOT / "corpus" / "cases"
BASELINE = ROOT / "corpus" / "BASELINE.json"
#: The results with the world size given (``--world-given --write-baseline``).
BASELINE_WORLD = ROOT / "corpus" / "BASELINE_WORLD.json"
ALL_DIALECTS = tuple(  # nccl-lazy+states next to nccl-lazy
    x for d in DIALECTS for x in ((d, "nccl-lazy+states") if d == "nccl-lazy" else (d,))
)


def stratified(paths: list[Path], per_cell: int) -> list[Path]:
    """The first ``per_cell`` cases (by name) of every fault class and dialect."""
    seen: Counter[tuple[str, str]] = Counter()
    picked = []
    for path in paths:
        truth, _ = read_case(path)
        cell = (truth.get("fault", "?"), truth.get("recorded", {}).get("dialect", "?"))
        if seen[cell] < per_cell:
            seen[cell] += 1
            picked.append(path)
    return picked


def of_dialects(paths: list[Path], dialects: list[str]) -> list[Path]:
    """The cases recorded as one of ``dialects``."""
    return [p for p in paths if read_case(p)[0].get("recorded", {}).get("dialect") in dialects]


def last_line(outcomes: list[Outcome], world_given: bool = False) -> str:
    n = len(outcomes)
    k = len({o.fault for o in outcomes})
    c = Counter(o.result for o in outcomes)
    return (
        f"real corpus{' with the world size given' if world_given else ''}: {n} cases ({k} fault classes), "
        f"{c['right']} right, {c['wrong']} wrong, {c['unsure']} unsure"
    )


def table(outcomes: list[Outcome]) -> list[str]:
    """right/wrong/unsure per fault class (rows) and dialect (columns)."""
    cells: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        cells[(o.fault, o.dialect)][o.result] += 1
        cells[(o.fault, "all")][o.result] += 1
        cells[("all", o.dialect)][o.result] += 1
        cells[("all", "all")][o.result] += 1
    dialects = [d for d in ALL_DIALECTS if any(o.dialect == d for o in outcomes)]
    dialects += sorted({o.dialect for o in outcomes} - set(dialects)) + ["all"]
    faults = [f for f in FAULTS if any(o.fault == f for o in outcomes)]
    faults += sorted({o.fault for o in outcomes} - set(faults)) + ["all"]
    text = {
        (f, d): (f"{c['right']}/{c['wrong']}/{c['unsure']}" if (c := cells.get((f, d))) else "-")
        for f in faults
        for d in dialects
    }
    width = {d: max(len(d), *(len(text[(f, d)]) for f in faults)) + 2 for d in dialects}
    lines = [
        "right/wrong/unsure per fault class and dialect",
        f"{'fault':<22}" + "".join(f"{d:>{width[d]}}" for d in dialects),
    ]
    for f in faults:
        lines.append(f"{f:<22}" + "".join(f"{text[(f, d)]:>{width[d]}}" for d in dialects))
    return lines


def wrong_lines(outcomes: list[Outcome]) -> list[str]:
    wrong = [o for o in outcomes if o.result == "wrong"]
    lines = [f"wrong cases ({len(wrong)}):"]
    for o in wrong:
        said = ", ".join(f"{r}:{c}" for r, c in o.said.culprits) or "none"
        lines.append(
            f"  {o.case}: {o.why}; truth {o.truth.get('culprits')} "
            f"{'/'.join(o.truth.get('kinds', []))}; said {o.said.verdict} {o.said.kind} "
            f"culprits [{said}]: {o.said.headline[:160]}"
        )
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in wrong:
        groups[f"{o.why} on {o.fault}"].append(o)
    lines.append(f"wrong cases by what went wrong ({len(groups)} groups):")
    for key, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        dialects = ",".join(sorted({o.dialect for o in members}))
        lines.append(f"  {len(members):>3}  {key} [{dialects}] e.g. {members[0].case}")
    return lines


def unsure_lines(outcomes: list[Outcome]) -> list[str]:
    """The unsure answers grouped by the fact their dumps lack (one case named per group)."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.result == "unsure":
            groups[missing_fact(o.said)].append(o)
    lines = [f"unsure cases by what the dumps do not hold ({len(groups)} groups):"]
    for key, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        faults = ",".join(sorted({o.fault for o in members}))
        lines.append(f"  {len(members):>3}  {key} [{faults}] e.g. {members[0].case}")
    return lines


def subsets_report(paths: list[Path], lost: bool = False) -> int:
    """Score every case with one block of ranks' files kept (or, ``lost``, one rank's file
    taken away); print the confident wrong ones."""
    from tools.corpus.subsets import lost_one, variants

    started = time.monotonic()
    found = list(lost_one(paths) if lost else variants(paths))
    what = "one file lost" if lost else "a subset of the files"
    took = time.monotonic() - started
    c = Counter(v.result for v in found)
    confident = [v for v in found if v.confident]
    print(f"confident wrong answers with {what} ({len(confident)}):")
    for v in confident:
        said = ", ".join(f"{r}:{k}" for r, k in v.said.culprits) or "none"
        variant = f"rank {v.kept[0]}'s file lost" if lost else f"ranks {v.kept[0]}-{v.kept[1]} kept"
        print(
            f"  {v.case} {variant}: {v.why}; truth "
            f"{v.truth.get('culprits')}; said {v.said.verdict} {v.said.kind} [{said}]"
        )
    print(f"analyzed in {took:.1f} s")
    print(
        f"real corpus {'with ' + what if lost else 'subsets'}: {len(found)} variants of "
        f"{len({v.case for v in found})} cases, "
        f"{c['right']} right, {c['wrong']} wrong ({len(confident)} confident), "
        f"{c['unsure']} unsure"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES)
    ap.add_argument("--sample", type=int, metavar="N", help="N cases per fault class x dialect")
    ap.add_argument("--json", type=Path, help="also write every outcome as JSON here")
    ap.add_argument(
        "--write-baseline",
        action="store_true",
        help=f"write {BASELINE.name} ({BASELINE_WORLD.name} with --world-given)",
    )
    ap.add_argument("--subsets", action="store_true", help="each case with one host's files")
    ap.add_argument("--lost-one", action="store_true", help="each case with one waiter's file lost")
    ap.add_argument("--world-given", action="store_true", help="each case with --world-size N")
    ap.add_argument(
        "--dialect", action="append", metavar="D", help="only the cases of dialect D (repeatable)"
    )
    args = ap.parse_args(argv)
    paths = case_paths(args.cases)
    if args.dialect:
        paths = of_dialects(paths, args.dialect)
    if args.sample:
        paths = stratified(paths, args.sample)
    if not paths:
        print(f"no cases in {args.cases} (make corpus writes them)", file=sys.stderr)
        return 2
    if args.subsets or args.lost_one:
        return subsets_report(paths, lost=args.lost_one)
    started = time.monotonic()
    outcomes = [check_case(p, world_given=args.world_given) for p in paths]
    took = time.monotonic() - started
    records = [to_record(o) for o in outcomes]
    if args.json:
        args.json.write_text(dumps(records))
    if args.write_baseline:
        base = {r["case"]: r["result"] for r in records}
        where = BASELINE_WORLD if args.world_given else BASELINE
        where.write_text(json.dumps(base, indent=1, sort_keys=True) + "\n")
    for line in table(outcomes) + wrong_lines(outcomes) + unsure_lines(outcomes):
        print(line)
    print(f"analyzed in {took:.1f} s")
    print(last_line(outcomes, args.world_given))
    return 0


if __name__ == "__main__":
    sys.exit(main())
