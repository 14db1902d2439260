"""scikit-learn's HistGradientBoostingRegressor on duet's own evaluation folds and features.

Reads what `trainer/examples/export_folds.rs` writes (every fold of every fixed split for each
seed, each fold's rows encoded with the feature spec fitted on its training rows, exactly as
duet's MLP sees them), fits one regressor of ln(speed) per fold on the fold's feasible training
rows and scores MAPE of speed on its feasible test rows, grouped as duet's metrics table is
(device and mode, and all rows). Prints a Markdown table of the mean and sample standard
deviation over seeds, beside duet's MLP from a model.json trained on the same data and seeds, and
writes every per-seed figure as JSON.

Workload identities (`--identities`):
  onehot   (default) the identity one-hot columns where the split leaves workloads known
           (random, unseen_pairs, and probed_workloads, whose held-out workloads train on 1 to 3
           of their settings with their identity); none on unseen_workloads or unseen_<feature>
           (the export's `--group-by`), where the held-out workloads have no column and every
           training row has two set;
  none     never;
  doubled  as duet trains: each training row twice, with its identity columns and with them
           zeroed; test rows as the fold's encoder writes them.

Usage:
  python benchmarks/histgb/histgb.py <export dir> [--duet models/default/model.json]
      [--identities onehot|none|doubled] [--json out.json]

Regressor: 300 iterations, learning rate 0.05, no early stopping, everything else
scikit-learn's default; `random_state` is the fold's seed. One thread unless OMP_NUM_THREADS
says otherwise.
"""

import argparse
import csv
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor  # noqa: E402

SPLITS = ["random", "unseen_pairs", "unseen_workloads"]
IDENTITY_COLUMN = ".id="


def read_rows(export: Path):
    """The corpus' directed rows: (gpu, mode, speed or None) per row index."""
    rows = []
    with open(export / "rows.csv", newline="") as f:
        for r in csv.DictReader(f):
            assert int(r["row"]) == len(rows)
            speed = float(r["speed"]) if r["speed"] else None
            rows.append((r["gpu"], r["mode"], speed))
    return rows


def fold_files(export: Path, seed: int, split: str):
    folder = export / f"seed-{seed}" / split
    k = 0
    while (folder / f"fold-{k}.json").exists():
        yield folder / f"fold-{k}"
        k += 1


def load_fold(base: Path):
    meta = json.loads(base.with_suffix(".json").read_text())
    x = np.fromfile(base.with_suffix(".f32"), dtype="<f4")
    x = x.reshape(meta["rows"], meta["width"])
    return meta, x


def design(meta, x, split: str, identities: str):
    """Training and test matrices of one fold, as `--identities` asks."""
    ids = np.array([IDENTITY_COLUMN in c for c in meta["columns"]])
    train, test = np.array(meta["train"]), np.array(meta["test"])
    # Identities only where the split leaves the test rows' workloads known.
    keep_ids = identities == "doubled" or (
        identities == "onehot" and split in ("random", "unseen_pairs", "probed_workloads")
    )
    cols = np.ones(len(ids), bool) if keep_ids else ~ids
    x_train, x_test = x[train][:, cols], x[test][:, cols]
    train_rows = train
    if identities == "doubled" and ids.any():
        hidden = x_train.copy()
        hidden[:, ids[cols]] = 0.0
        x_train = np.vstack([x_train, hidden])
        train_rows = np.concatenate([train, train])
    return x_train, train_rows, x_test, test


def mean_sd(values):
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def duet_figures(model_json: Path):
    """(split, gpu, mode) -> (mean, sd) of duet's MLP MAPE of speed, and the seeds."""
    m = json.loads(model_json.read_text())
    sd = {
        (r["split"], r["gpu"], r["mode"]): r["metrics"]["mape_speed"]
        for r in m.get("metrics_sd", [])
        if r["predictor"] == "mlp"
    }
    out = {
        (r["split"], r["gpu"], r["mode"]): (r["metrics"]["mape_speed"], sd.get((r["split"], r["gpu"], r["mode"])))
        for r in m["metrics"]
        if r["predictor"] == "mlp"
    }
    seeds = (m.get("evaluation") or {}).get("seeds", [m["config"]["seed"]])
    return out, seeds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("export", type=Path)
    p.add_argument("--duet", type=Path, help="a model.json trained on the same data and seeds")
    p.add_argument("--identities", choices=["onehot", "none", "doubled"], default="onehot")
    p.add_argument("--json", type=Path, help="write every per-seed figure here")
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--learning-rate", type=float, default=0.05)
    args = p.parse_args()

    info = json.loads((args.export / "export.json").read_text())
    rows = read_rows(args.export)
    seeds = info["seeds"]
    started = time.time()
    # (seed, split, gpu, mode) -> absolute percentage errors
    errors = defaultdict(list)
    for seed in seeds:
        for split in info.get("splits", SPLITS):
            for base in fold_files(args.export, seed, split):
                meta, x = load_fold(base)
                x_train, train_rows, x_test, test_rows = design(meta, x, split, args.identities)
                ok_train = np.array([rows[i][2] is not None for i in train_rows])
                y = np.log([rows[i][2] for i in train_rows[ok_train]])
                model = HistGradientBoostingRegressor(
                    max_iter=args.iterations,
                    learning_rate=args.learning_rate,
                    early_stopping=False,
                    random_state=seed,
                )
                model.fit(x_train[ok_train], y)
                ok_test = np.array([rows[i][2] is not None for i in test_rows])
                if not ok_test.any():
                    continue  # every test row infeasible (oom): no speed to score
                predicted = np.exp(model.predict(x_test[ok_test]))
                for i, pred in zip(test_rows[ok_test], predicted):
                    gpu, mode, speed = rows[i]
                    ape = abs(pred - speed) / speed
                    errors[(seed, split, gpu, mode)].append(ape)
                    errors[(seed, split, "all", "all")].append(ape)
            print(f"seed {seed} {split}: done ({time.time() - started:.0f} s)", file=sys.stderr)

    duet, duet_seeds = duet_figures(args.duet) if args.duet else ({}, None)
    if duet_seeds is not None and list(duet_seeds) != list(seeds):
        print(f"warning: {args.duet} was evaluated on seeds {duet_seeds}, the export on {seeds}", file=sys.stderr)
    order = list(info.get("splits", SPLITS))
    groups = sorted({k[1:] for k in errors}, key=lambda g: (order.index(g[0]), g[1] != "all", g[1], g[2]))
    table = []
    print(f"HistGB (scikit-learn {sklearn.__version__}, {args.iterations} iterations, learning rate "
          f"{args.learning_rate}, identities {args.identities}) on {info['data']}, seeds {seeds}: "
          f"MAPE of speed, mean ± sd over seeds")
    print()
    print("| split | device | mode | rows | HistGB | duet MLP |")
    print("|---|---|---|---|---|---|")
    for split, gpu, mode in groups:
        per_seed = [float(np.mean(errors[(s, split, gpu, mode)])) for s in seeds]
        n = len(errors[(seeds[0], split, gpu, mode)])
        m, sd = mean_sd(per_seed)
        d = duet.get((split, gpu, mode))
        duet_cell = "" if d is None else f"{100 * d[0]:.2f}% ± {100 * (d[1] or 0):.2f}"
        print(f"| {split} | {gpu} | {mode} | {n} | {100 * m:.2f}% ± {100 * sd:.2f} | {duet_cell} |")
        table.append({
            "split": split, "gpu": gpu, "mode": mode, "rows": n,
            "histgb_mape_speed": dict(zip(map(str, seeds), per_seed)),
            "histgb_mean": m, "histgb_sd": sd,
            "duet_mean": None if d is None else d[0], "duet_sd": None if d is None else d[1],
        })
    print(f"\n{time.time() - started:.0f} s", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({
            "export": info, "identities": args.identities, "sklearn": sklearn.__version__,
            "iterations": args.iterations, "learning_rate": args.learning_rate, "table": table,
        }, indent=2))


if __name__ == "__main__":
    main()
