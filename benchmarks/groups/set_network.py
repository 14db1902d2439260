"""Whether an order-invariant network with one row per job (issue 34, item 3) learns a group's
speeds better than duet's composition of pairs, on a dataset's measured groups, before building
it into duet: the same draws as `residuals.py` (a random quarter of the groups for training, the
rest scored), measurements only.

    python benchmarks/groups/set_network.py [GROUPS_DATASET] [DRAWS]

The network sees, for each job of a setting, its own encoding (its workload's one-hot identity,
standardised log solo throughput and batch size where the dataset has them, train or
inference), the mean of its co-runners' encodings and ln(number of co-runners); it answers ln of
the job's speed (throughput over solo throughput). A pair is the case of one co-runner, so one
network answers any group size from one row per job, invariant to the co-runners' order. It is
trained on every measured pair (both jobs) and the draw's quarter of the groups, by squared error
(scikit-learn's MLPRegressor, two hidden layers of 32 as duet's default, an ensemble of 5 seeds
averaged, as duet's), and compared on the other three quarters with the excess rule on the measured
pairs and with duet's answer (the rule corrected by each workload's shrunk group effect, penalty 3).
"""

import sys
from pathlib import Path

import numpy as np
import polars as pl
from sklearn.neural_network import MLPRegressor

root = Path(__file__).resolve().parents[2]
folder = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "datasets/cpu-dev2c-triples"
draws = int(sys.argv[2]) if len(sys.argv) > 2 else 20

workloads = pl.read_parquet(folder / "workloads.parquet")
names = sorted(workloads["workload"].to_list())
index = {n: k for k, n in enumerate(names)}
solo = dict(zip(workloads["workload"], workloads["solo_throughput"]))
numeric = [c for c in ("solo_throughput", "batch_size") if c in workloads.columns]
profile = {}
for column in numeric:
    values = np.log(np.array([float(v) if v is not None else np.nan for v in workloads[column]]))
    mean, std = np.nanmean(values), np.nanstd(values) or 1.0
    for name, v in zip(workloads["workload"], values):
        profile.setdefault(name, []).append(0.0 if np.isnan(v) else (v - mean) / std)
for name, kind in zip(workloads["workload"], workloads["kind"]):
    profile[name].append(1.0 if kind == "train" else 0.0)


def encode(name):
    one_hot = np.zeros(len(names))
    one_hot[index[name]] = 1.0
    return np.concatenate([one_hot, profile[name]])


def row(job, others):
    """One row per job: its own encoding, its co-runners' mean, ln(co-runners)."""
    pooled = np.mean([encode(o) for o in others], axis=0)
    return np.concatenate([encode(job), pooled, [np.log(len(others))]])


# Every measured pair, both jobs (the directed pairs duet trains on).
pair_rows, pair_truth, speeds = [], [], {}
for r in pl.read_parquet(folder / "pairs.parquet").filter(pl.col("status") == "ok").iter_rows(named=True):
    for job, other, throughput in ((r["a"], r["b"], r["throughput_a"]), (r["b"], r["a"], r["throughput_b"])):
        pair_rows.append(row(job, [other]))
        pair_truth.append(np.log(throughput / solo[job]))
        speeds.setdefault((job, other), []).append(throughput / solo[job])
speeds = {k: float(np.mean(v)) for k, v in speeds.items()}
pair_rows, pair_truth = np.array(pair_rows), np.array(pair_truth)

# Every job of every measured group, with the excess rule's answer from the measured pairs.
jobs = []  # (group, workload, x, ln measured speed, rule speed)
groups = pl.read_parquet(folder / "groups.parquet").filter(pl.col("status") == "ok")
for (gid,), rows in groups.group_by(["group"], maintain_order=True):
    members = rows["workload"].to_list()
    for i, r in enumerate(rows.iter_rows(named=True)):
        others = members[:i] + members[i + 1:]
        rule = 1.0 / (1.0 + sum(1.0 / speeds[(r["workload"], o)] - 1.0 for o in others))
        jobs.append((gid, r["workload"], row(r["workload"], others),
                     np.log(r["throughput"] / solo[r["workload"]]), rule))
group_ids = np.array([j[0] for j in jobs])
x = np.array([j[2] for j in jobs])
truth = np.exp(np.array([j[3] for j in jobs]))
rule = np.array([j[4] for j in jobs])
residual = np.log(truth) - np.log(rule)
unique = np.unique(group_ids)
print(f"{folder.name}: {len(pair_truth)} pair jobs, {len(unique)} groups, {len(jobs)} group jobs, "
      f"{x.shape[1]} inputs per row")


def mape(pred, actual):
    return float(np.mean(np.abs(pred - actual) / actual) * 100)


def network(train_x, train_y):
    members = [MLPRegressor(hidden_layer_sizes=(32, 32), alpha=1e-4, learning_rate_init=1e-2,
                            max_iter=3000, tol=1e-7, n_iter_no_change=100, random_state=seed)
               .fit(train_x, train_y) for seed in range(5)]
    return lambda q: np.exp(np.mean([m.predict(q) for m in members], axis=0))


pairs_only = network(pair_rows, pair_truth)
print(f"trained on the pairs alone, every group: network {mape(pairs_only(x), truth):.2f}%, "
      f"the rule {mape(rule, truth):.2f}%")

results = {"the rule (measured pairs)": [], "duet: the rule with shrunk group effects": [],
           "set network, pairs and the quarter": []}
for seed in range(draws):
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(unique, len(unique) // 4, replace=False).tolist())
    train = np.array([g in chosen for g in group_ids])
    test = ~train
    results["the rule (measured pairs)"].append(mape(rule[test], truth[test]))
    effect = {}
    for n in names:
        mine = residual[train & (np.array([j[1] for j in jobs]) == n)]
        effect[n] = mine.sum() / (len(mine) + 3)
    corrected = rule[test] * np.exp(np.array([effect[j[1]] for j, t in zip(jobs, test) if t]))
    results["duet: the rule with shrunk group effects"].append(mape(corrected, truth[test]))
    answer = network(np.vstack([pair_rows, x[train]]),
                     np.concatenate([pair_truth, np.log(truth[train])]))
    results["set network, pairs and the quarter"].append(mape(answer(x[test]), truth[test]))
print(f"trained with a random quarter of the groups, scored on the rest ({draws} draws):")
base = np.array(results["the rule (measured pairs)"])
for label, values in results.items():
    v = np.array(values)
    print(f"  {label:42s} MAPE {v.mean():6.2f}% ± {v.std():.2f}  "
          f"({(1 - v / base).mean() * 100:+.1f}% against the rule)")
duet = np.array(results["duet: the rule with shrunk group effects"])
net = np.array(results["set network, pairs and the quarter"])
print(f"  the set network below duet's answer in {(net < duet).sum()} of {draws} draws; "
      f"20% or more below the rule in {(1 - net / base >= 0.2).sum()}")
