"""A budget replay's test-set p90 coverage pooled over the seeds of several replays of the same
device (each seed's draw is its own: its test set, choices, audit and fits depend on the seed
alone, so replays of disjoint seeds add up to one replay of all of them).

Reads each REPORT_DIR's `report.json` (written by `duet campaign replay`), checks that they
replay the same data, budgets and selections with disjoint seeds, and prints per selection and
budget the mean coverage over every seed, its standard deviation, its standard error, and
whether the mean is in [85%, 95%]; then the same for the first replay's seeds alone, and how
often a mean of that many seeds, drawn from these, falls outside the band.

Usage: python benchmarks/campaign/seeds.py REPORT_DIR [REPORT_DIR...]
"""

import itertools
import json
import statistics
import sys
from pathlib import Path

LOW, HIGH = 0.85, 0.95


def load(folder):
    path = Path(folder) / "report.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {e}")
    if report.get("format") != "duet-campaign-replay/1":
        raise SystemExit(f"{path}: not a campaign replay report")
    return path, report


def cells(path, report):
    """(select, budget) -> {seed: coverage}, and 'full data' -> {seed: coverage}."""
    out = {}
    for curve in report["curves"]:
        for point in curve["points"]:
            out[(curve["select"], point["budget"])] = {
                s["seed"]: s["p90_coverage"] for s in point["seeds"]
            }
    out[("full data", "")] = {s["seed"]: s["p90_coverage"] for s in report["full"]["seeds"]}
    for key, by_seed in out.items():
        if any(v is None for v in by_seed.values()):
            raise SystemExit(f"{path}: {key} has a seed without p90 coverage")
    return out


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    reports = [load(f) for f in sys.argv[1:]]
    first_path, first = reports[0]
    same = ("data", "settings", "test", "selectable", "rounds", "audit", "min_pairs", "noise")
    pooled = cells(first_path, first)
    for path, report in reports[1:]:
        for field in same:
            if report.get(field) != first.get(field):
                raise SystemExit(f"{path}: `{field}` differs from {first_path}'s")
        more = cells(path, report)
        if more.keys() != pooled.keys():
            raise SystemExit(f"{path}: other selections or budgets than {first_path}")
        for key, by_seed in more.items():
            if by_seed.keys() & pooled[key].keys():
                raise SystemExit(f"{path}: seeds {sorted(by_seed.keys() & pooled[key].keys())} "
                                 f"are in {first_path} too")
            pooled[key].update(by_seed)
    name = first["data"][0]["name"] if first["data"] else first_path.parent.name
    first_seeds = sorted(first["seeds"])
    print(f"{name}: seeds {sorted(next(iter(pooled.values())))}")
    print()
    print(f"| selection | measured | mean | sd | se | in band | seeds {', '.join(map(str, first_seeds))} "
          f"| in band | means of {len(first_seeds)} seeds outside |")
    print("|---|---|---|---|---|---|---|---|---|")
    inside = total = 0
    for (select, budget), by_seed in pooled.items():
        values = list(by_seed.values())
        mean = statistics.mean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        se = sd / len(values) ** 0.5
        few = statistics.mean(by_seed[s] for s in first_seeds)
        combos = list(itertools.combinations(values, len(first_seeds)))
        outside = sum(not LOW <= statistics.mean(c) <= HIGH for c in combos)
        band = LOW <= mean <= HIGH
        if select != "full data":
            inside += band
            total += 1
        print(f"| {select} | {budget or 'all'} | {100 * mean:.2f}% | {100 * sd:.2f} | "
              f"{100 * se:.2f} | {'yes' if band else 'no'} | {100 * few:.2f}% | "
              f"{'yes' if LOW <= few <= HIGH else 'no'} | {100 * outside / len(combos):.0f}% |")
    print()
    print(f"budget cells in [{100 * LOW:.0f}%, {100 * HIGH:.0f}%] over every seed: {inside} of {total}")


if __name__ == "__main__":
    main()
