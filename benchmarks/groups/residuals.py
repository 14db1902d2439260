"""How far a model learned from measured groups could go below the excess rule on a dataset's
groups, from the measurements alone (no duet model): the rule's error, how reproducible the
measurements it composes are, what corrections learned from a quarter of the groups reach on
the rest, and whether choosing that quarter (`duet profile --group-budget`'s balanced design)
beats a random one.

    python benchmarks/groups/residuals.py [GROUPS_DATASET] [PAIRS_DATASET_MEASURED_AGAIN]

defaults: datasets/cpu-dev2c-triples and datasets/cpu-dev2c (the same six workloads' pairs,
measured by another campaign on another day).
"""

import sys
from pathlib import Path

import numpy as np
import polars as pl

root = Path(__file__).resolve().parents[2]
groups_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "datasets/cpu-dev2c-triples"
again_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "datasets/cpu-dev2c"


def pair_speeds(folder):
    """(job, other, gpu, mode) -> the job's co-located speed; the solo throughputs."""
    w = pl.read_parquet(folder / "workloads.parquet")
    solo = dict(zip(w["workload"], w["solo_throughput"]))
    speeds = {}
    for r in pl.read_parquet(folder / "pairs.parquet").filter(pl.col("status") == "ok").iter_rows(named=True):
        for job, other, throughput in ((r["a"], r["b"], r["throughput_a"]), (r["b"], r["a"], r["throughput_b"])):
            speeds.setdefault((job, other, r["gpu"], r["mode"]), []).append(throughput / solo[job])
    # A workload next to itself is measured in both orders: the mean of the two, as duet's own
    # composition (core/src/dataset/compose.rs) takes it.
    return {k: float(np.mean(v)) for k, v in speeds.items()}, solo


def mape(pred, truth):
    return float(np.mean(np.abs(pred - truth) / truth) * 100)


speeds, solo = pair_speeds(groups_dir)
jobs = []  # (group, workload, co-runners, measured speed, excess-rule speed)
g = pl.read_parquet(groups_dir / "groups.parquet").filter(pl.col("status") == "ok")
for (gid,), rows in g.group_by(["group"], maintain_order=True):
    names = rows["workload"].to_list()
    for i, r in enumerate(rows.iter_rows(named=True)):
        co = [names[j] for j in range(len(names)) if j != i]
        pairwise = [speeds[(r["workload"], c, r["gpu"], r["mode"])] for c in co]
        rule = 1.0 / (1.0 + sum(1.0 / s - 1.0 for s in pairwise))
        jobs.append((gid, r["workload"], tuple(sorted(co)), r["throughput"] / solo[r["workload"]], rule))
group_ids = np.array([j[0] for j in jobs])
truth = np.array([j[3] for j in jobs])
rule = np.array([j[4] for j in jobs])
residual = np.log(truth) - np.log(rule)
names = sorted({j[1] for j in jobs})
index = {n: k for k, n in enumerate(names)}
print(f"{groups_dir.name}: {len(set(group_ids))} groups, {len(jobs)} jobs, {len(names)} workloads")
print(f"excess rule on the measured pairs: MAPE {mape(rule, truth):.2f}%, bias of ln {residual.mean():+.4f}")

# The same pairs measured by another campaign: how reproducible what the rule composes is.
again, _ = pair_speeds(again_dir)
common = [k for k in speeds if k in again]
if common:
    diff = np.array([abs(np.log(speeds[k] / again[k])) for k in common])
    print(f"the same {len(common)} directed pairs measured again ({again_dir.name}): "
          f"mean |ln ratio| {diff.mean():.3f}, median {np.median(diff):.3f}")


def design(rows):
    """One-hot of the job's own workload and counts of its co-runners' workloads."""
    x = np.zeros((len(rows), 2 * len(names) + 1))
    for n, k in enumerate(rows):
        x[n, 0] = 1.0
        x[n, 1 + index[jobs[k][1]]] = 1.0
        for c in jobs[k][2]:
            x[n, 1 + len(names) + index[c]] += 1.0
    return x


def ridge(x, y, alpha):
    penalty = alpha * np.eye(x.shape[1])
    penalty[0, 0] = 0.0  # the intercept is not shrunk
    return np.linalg.solve(x.T @ x + penalty, x.T @ y)


everything = np.arange(len(jobs))
fit = ridge(design(everything), residual, 1e-3)
print(f"in sample, own and co-runner effects on top of the rule fitted on every group: "
      f"MAPE {mape(rule * np.exp(design(everything) @ fit), truth):.2f}% (a floor no held-out "
      f"fit reaches)")

draws = 20
unique = np.unique(group_ids)
results = {"rule": [], "mean shift": [], "own effect (shrunk)": [],
           "own and co-runner effects (ridge 1)": [], "own and co-runner effects (ridge 10)": []}
for seed in range(draws):
    rng = np.random.default_rng(seed)
    train_groups = set(rng.choice(unique, len(unique) // 4, replace=False).tolist())
    train = np.array([k for k in everything if group_ids[k] in train_groups])
    test = np.array([k for k in everything if group_ids[k] not in train_groups])
    results["rule"].append(mape(rule[test], truth[test]))
    shift = residual[train].mean()
    results["mean shift"].append(mape(rule[test] * np.exp(shift), truth[test]))
    own = {}
    for n in names:
        mine = residual[[k for k in train if jobs[k][1] == n]]
        own[n] = (mine.sum() + 3 * shift) / (len(mine) + 3)  # shrunk to the mean by 3 jobs
    correction = np.array([own[jobs[k][1]] for k in test])
    results["own effect (shrunk)"].append(mape(rule[test] * np.exp(correction), truth[test]))
    for alpha in (1, 10):
        w = ridge(design(train), residual[train], alpha)
        results[f"own and co-runner effects (ridge {alpha})"].append(
            mape(rule[test] * np.exp(design(test) @ w), truth[test]))
base = np.array(results["rule"])
print(f"trained on a random quarter of the groups, scored on the rest ({draws} draws):")
for name, values in results.items():
    v = np.array(values)
    print(f"  {name:40s} MAPE {v.mean():6.2f}% ± {v.std():.2f}  "
          f"({(1 - v / base).mean() * 100:+.1f}% against the rule)")

# Which quarter to measure: could a campaign that chooses its groups do better than a random
# draw? A workload's effect is a mean of its jobs' residuals, so a balanced design (each next
# group the one that raises the sum of squared job counts least, ties in random order: every
# workload in about as many jobs) estimates the least measured workloads better. Scored with
# duet's own effects (each workload's residual sum over its jobs plus 3, `trainer/src/groups.rs`'s
# rule with the penalty its folds chose on all the triples), 200 draws each.
members = {}
for j in jobs:
    members.setdefault(j[0], []).append(j[1])


def rise(counts, group):
    """How much a group raises the sum of the workloads' squared job counts."""
    return sum(2 * counts[w] * group.count(w) + group.count(w) ** 2 for w in set(group))


def balanced(rng, n):
    """`duet profile --group-budget`'s design (profiler/src/campaign/design.rs)."""
    order = list(unique)
    rng.shuffle(order)
    counts = {w: 0 for w in names}
    chosen = []
    for _ in range(n):
        best = min((g for g in order if g not in chosen), key=lambda g: rise(counts, members[g]))
        chosen.append(best)
        for w in members[best]:
            counts[w] += 1
    spreads.append(max(counts.values()) - min(counts.values()))
    return set(chosen)


spreads = []


def shrunk_effects(train, test, penalty=3):
    effect = {}
    for n in names:
        mine = residual[[k for k in train if jobs[k][1] == n]]
        effect[n] = mine.sum() / (len(mine) + penalty)
    return rule[test] * np.exp(np.array([effect[jobs[k][1]] for k in test]))


choosers = {
    "a random quarter": lambda rng: set(rng.choice(unique, len(unique) // 4, replace=False).tolist()),
    "a balanced quarter": lambda rng: balanced(rng, len(unique) // 4),
}
print("duet's shrunk own effects (penalty 3) by how the quarter is chosen (200 draws):")
for label, chooser in choosers.items():
    before, after = [], []
    for seed in range(200):
        chosen = chooser(np.random.default_rng(seed))
        train = np.array([k for k in everything if group_ids[k] in chosen])
        test = np.array([k for k in everything if group_ids[k] not in chosen])
        before.append(mape(rule[test], truth[test]))
        after.append(mape(shrunk_effects(train, test), truth[test]))
    before, after = np.array(before), np.array(after)
    print(f"  {label:20s} rule {before.mean():6.2f}%  with effects {after.mean():6.2f}% ± {after.std():.2f}  "
          f"({(1 - after / before).mean() * 100:+.1f}% against the rule; 20% or more in "
          f"{(1 - after / before >= 0.2).mean() * 100:.0f}% of draws)")
print(f"  the balanced designs' spread of jobs per workload (most - fewest): "
      f"{ {int(k): int(v) for k, v in zip(*np.unique(spreads, return_counts=True))} } draws")
