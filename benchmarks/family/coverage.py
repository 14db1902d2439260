"""p90 coverage of the held-out units of a model's evaluation: pooled over rows (the report's
figure) and averaged over the units a fold held out (each family, or workload, weighing the
same: the draw a new family's calibration is fitted for).

Reads the `held-out.csv` a `duet train` writes (its first seed's evaluation; `predicted_p10` and
`held` are in files written since 2026-12-06). A row is covered where its measured speed is at
or above the predicted p10 speed.

Usage: python benchmarks/family/coverage.py MODEL_DIR [--split unseen_model]
"""

import argparse
import csv
from collections import defaultdict
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--split", default="unseen_model")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(Path(args.model) / "held-out.csv", newline="")))
    rows = [r for r in rows if r["split"] == args.split]
    if not rows or "held" not in rows[0]:
        raise SystemExit(f"{args.model}/held-out.csv has no {args.split} rows with `held`")
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        covered = float(r["speed"]) >= float(r["predicted_p10"])
        for device in (r["gpu"], "all"):
            by[device][r["held"]].append(covered)
    print("| device | rows | pooled over rows | averaged over units | units | lowest unit | highest unit |")
    print("|---|---|---|---|---|---|---|")
    for device in sorted(by, key=lambda d: (d == "all", d)):
        units = by[device]
        every = [c for cs in units.values() for c in cs]
        shares = {u: sum(cs) / len(cs) for u, cs in units.items()}
        lo = min(shares, key=shares.get)
        hi = max(shares, key=shares.get)
        print(
            f"| {device} | {len(every)} | {100 * sum(every) / len(every):.1f}% "
            f"| {100 * sum(shares.values()) / len(shares):.1f}% | {len(shares)} "
            f"| {lo} {100 * shares[lo]:.1f}% ({len(units[lo])}) "
            f"| {hi} {100 * shares[hi]:.1f}% ({len(units[hi])}) |"
        )


if __name__ == "__main__":
    main()
