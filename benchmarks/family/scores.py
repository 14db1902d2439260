"""Other conformity scores for a new family's p90, replayed on a model's held-out rows.

The trainer's `new_family` shift is the 90% quantile of `ln p10 - ln measured` over the held-out
families' rows, every family weighing the same. This replays, per device and leave-one-family-
out (each family's rows bounded by a quantile of the other families' scores, none touching the
held family, as the trainer's folds are, but without the trainer's floor at the `new` shift),
that score and others:

- `p10`: the trainer's score (raw p10: `ln predicted_p10 + shift` where held-out.csv keeps each
  row's fold shift, files written since 2026-12-06 later in the day; in older files recovered by
  solving for the fold shifts, which is wrong where the trainer's floor at the `new` shift
  applied);
- `median`: `ln predicted - ln measured` (no use of the network's spread);
- `p10/(c+partner)`: the score divided by 0.1 + the measured mean slowdown (ln) that the row's
  known job takes or gives in training (what the held family's partner is known to do);
- `p10/(c+predicted)`: divided by 0.1 + the predicted slowdown (ln);
- `p10 by role`: the shift fitted apart for rows whose own job is of the new family and rows
  where only its partner is (Mondrian by role).

Reads `held-out.csv` (with `predicted_p10` and `held`, files written since 2026-12-06) and
`model.json` of MODEL_DIR.

Usage: python benchmarks/family/scores.py MODEL_DIR
"""

import csv
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path


def balanced_quantile(groups, level=0.9):
    """The trainer's rule: the level quantile with every group weighing the same."""
    kept = [g for g in groups.values() if g]
    weighted = sorted((s, 1 / (len(kept) * len(g))) for g in kept for s in g)
    total = 0.0
    for s, w in weighted:
        total += w
        if total >= level - 1e-12:
            return s
    return weighted[-1][0]


def main():
    model = Path(sys.argv[1])
    rows = list(csv.DictReader(open(model / "held-out.csv", newline="")))
    calibration = json.load(open(model / "model.json"))["calibration"]
    measured = {(r["gpu"], r["a"], r["b"]): float(r["speed"]) for r in rows if r["split"] == "unseen_pairs"}
    held = [r for r in rows if r["split"] == "unseen_model"]
    seen = defaultdict(Counter)
    for r in held:
        seen[r["a"]][r["held"]] += 1
        seen[r["b"]][r["held"]] += 1
    family = {w: c.most_common(1)[0][0] for w, c in seen.items()}
    print("| device | score | pooled | averaged over families | lowest family | sd over families | mean ln(predicted / bound) |")
    print("|---|---|---|---|---|---|---|")
    for gpu in sorted({r["gpu"] for r in held}):
        rs = [dict(r) for r in held if r["gpu"] == gpu]
        fams = sorted({r["held"] for r in rs})
        for r in rs:
            r["y"] = math.log(float(r["speed"]))
            r["m"] = math.log(float(r["predicted"]))
            r["c"] = math.log(float(r["predicted_p10"])) - r["y"]
            f = r["held"]
            known = []
            if family[r["b"]] != f:
                v = [-math.log(s) for (g, a, b), s in measured.items() if g == gpu and b == r["b"] and family[a] != f]
                known += [sum(v) / len(v)] if v else []
            if family[r["a"]] != f:
                v = [-math.log(s) for (g, a, b), s in measured.items() if g == gpu and a == r["a"] and family[b] != f]
                known += [sum(v) / len(v)] if v else []
            if not known:
                v = [-math.log(s) for (g, a, b), s in measured.items() if g == gpu and family[a] != f and family[b] != f]
                known = [sum(v) / len(v)]
            r["partner"] = sum(known) / len(known)
            r["own"] = family[r["a"]] == f

        def others(score, f, keep=lambda r: True):
            return {
                g: [score(r) for r in rs if r["held"] == g and keep(r) and family[r["a"]] != f and family[r["b"]] != f]
                for g in fams
                if g != f
            }

        if all(r.get("shift") not in (None, "") for r in rs):
            for r in rs:
                r["raw"] = r["c"] + r["y"] + float(r["shift"])
        else:
            # Each fold's shift, so that raw p10 = calibrated p10 + shift: a fixed point of the
            # trainer's rule.
            shift = {f: calibration["by_device"][gpu]["new_family"]["shift"] for f in fams}
            for _ in range(100):
                new = {f: balanced_quantile(others(lambda r: r["c"] + shift[r["held"]], f)) for f in fams}
                if all(abs(new[f] - shift[f]) < 1e-12 for f in fams):
                    break
                shift = new
            for r in rs:
                r["raw"] = r["c"] + r["y"] + shift[r["held"]]

        def replay(name, score, bound, split=None):
            covered, width = defaultdict(list), []
            for f in fams:
                for part in ([True, False] if split else [None]):
                    keep = (lambda r: split(r) == part) if split else (lambda r: True)
                    q = balanced_quantile(others(score, f, keep))
                    for r in rs:
                        if r["held"] == f and keep(r):
                            covered[f].append(r["y"] >= bound(r, q))
                            width.append(r["m"] - bound(r, q))
            pooled = [c for cs in covered.values() for c in cs]
            share = {f: sum(c) / len(c) for f, c in covered.items()}
            avg = sum(share.values()) / len(share)
            low = min(share, key=share.get)
            sd = (sum((s - avg) ** 2 for s in share.values()) / len(share)) ** 0.5
            print(
                f"| {gpu} | {name} | {100 * sum(pooled) / len(pooled):.1f}% | {100 * avg:.1f}% "
                f"| {low} {100 * share[low]:.0f}% | {100 * sd:.1f} | {sum(width) / len(width):.3f} |"
            )

        replay("p10", lambda r: r["raw"] - r["y"], lambda r, q: r["raw"] - q)
        replay("median", lambda r: r["m"] - r["y"], lambda r, q: r["m"] - q)
        replay(
            "p10/(c+partner)",
            lambda r: (r["raw"] - r["y"]) / (0.1 + r["partner"]),
            lambda r, q: r["raw"] - q * (0.1 + r["partner"]),
        )
        replay(
            "p10/(c+predicted)",
            lambda r: (r["raw"] - r["y"]) / (0.1 - r["m"]),
            lambda r, q: r["raw"] - q * (0.1 - r["m"]),
        )
        replay("p10 by role", lambda r: r["raw"] - r["y"], lambda r, q: r["raw"] - q, split=lambda r: r["own"])


if __name__ == "__main__":
    main()
