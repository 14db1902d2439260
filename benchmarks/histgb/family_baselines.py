"""What predicts a job of a new model family, from the Gavel datasets alone (no duet model):
per device, each family left out in turn, every directed row of its space-sharing pairs scored
(the job of the held-out family, or its partner, or both). Each row is the ln of a job's speed
next to its partner. Predictors, all fitted on the other families' rows:

- HistGB: gradient boosting on both jobs' profile features (log solo throughput, log batch size
  with a missing flag, train or inference) and the partner's identity (one-hot);
- an MLP on the same inputs (scikit-learn, two layers of 64, three seeds averaged);
- ridge on the same inputs;
- the partner's mean: the partner's average ln speed effect on every job it ran with.

    python benchmarks/histgb/family_baselines.py

MAPE of speed pooled over each device's held-out rows. Exploratory (its own folds and
features, not duet's `export_folds`): it asks which kind of model item 3 of the new-family issue
should start from.
"""

from pathlib import Path

import numpy as np
import polars as pl
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import Ridge
from sklearn.neural_network import MLPRegressor

root = Path(__file__).resolve().parents[2]


def load(device):
    folder = root / "datasets" / f"gavel-{device}"
    workloads = {r["workload"]: r for r in pl.read_parquet(folder / "workloads.parquet").iter_rows(named=True)}
    pairs = pl.read_parquet(folder / "pairs.parquet").filter(
        (pl.col("status") == "ok") & (pl.col("mode") == "space"))
    rows = []
    for r in pairs.iter_rows(named=True):
        for job, partner, throughput in ((r["a"], r["b"], r["throughput_a"]), (r["b"], r["a"], r["throughput_b"])):
            rows.append((job, partner, np.log(throughput / workloads[job]["solo_throughput"])))
    return workloads, rows


def profile(w):
    batch = w["batch_size"]
    return [np.log(w["solo_throughput"]), np.log(batch) if batch else 0.0, 0.0 if batch else 1.0,
            1.0 if w["kind"] == "train" else 0.0]


def inputs(workloads, rows, partners):
    return np.array([profile(workloads[j]) + profile(workloads[p]) + [1.0 if p == q else 0.0 for q in partners]
                     for j, p, _ in rows])


for device in ("k80", "p100", "v100"):
    workloads, rows = load(device)
    family = {k: w["model"] for k, w in workloads.items()}
    errors = {"HistGB": [], "MLP": [], "ridge": [], "partner's mean": []}
    for held_family in sorted(set(family.values())):
        held = {k for k, f in family.items() if f == held_family}
        train = [r for r in rows if r[0] not in held and r[1] not in held]
        test = [r for r in rows if r[0] in held or r[1] in held]
        partners = sorted({p for _, p, _ in train})
        x, y = inputs(workloads, train, partners), np.array([r[2] for r in train])
        xt, yt = inputs(workloads, test, partners), np.array([r[2] for r in test])
        error = lambda p: np.abs(np.exp(p) - np.exp(yt)) / np.exp(yt) * 100  # noqa: E731
        errors["HistGB"].append(error(HistGradientBoostingRegressor(
            max_iter=300, learning_rate=0.05, random_state=0).fit(x, y).predict(xt)))
        mean, sd = x.mean(0), x.std(0) + 1e-9
        mlp = [MLPRegressor(hidden_layer_sizes=(64, 64), alpha=1e-3, max_iter=2000, random_state=s)
               .fit((x - mean) / sd, y).predict((xt - mean) / sd) for s in range(3)]
        errors["MLP"].append(error(np.mean(mlp, axis=0)))
        errors["ridge"].append(error(Ridge(1.0).fit((x - mean) / sd, y).predict((xt - mean) / sd)))
        effect = {}
        for _, p, v in train:
            effect.setdefault(p, []).append(v)
        errors["partner's mean"].append(error(np.array(
            [np.mean(effect[p]) if p in effect else y.mean() for _, p, _ in test])))
    print(device, "  ".join(f"{k} {np.concatenate(v).mean():.2f}%" for k, v in errors.items()))
