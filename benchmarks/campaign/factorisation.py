"""How much a 25% sample of a complete dataset can teach a learner other than duet's network: a
low-rank factorisation of the workloads' interference (the collaborative-filtering approach to
interference prediction), fitted to random shares of the settings, scored on a random 20% test
set (BENCHMARKS.md, "Budgeted campaigns").

    ln speed(a next to b) = mu + alpha_a + beta_b + <U_a, V_b>    (rank R, L2 penalty LAMBDA)

fitted with L-BFGS on a smoothed absolute error of ln speed (as duet's loss), 5 random starts
averaged; only feasible settings, both directions of each. Test sets and shares are drawn with
numpy's generator from each seed, so they are not the replay's own (`duet campaign replay`):
compare its figures with the replay's in spread, not setting by setting.

Usage: python benchmarks/campaign/factorisation.py DATASET [RANKS=1,2,4] [LAMBDAS=0.001,0.01]
       (the test environment's Python: numpy, scipy, polars)
"""

import sys

import numpy as np
import polars as pl
from scipy.optimize import minimize

SEEDS = (7, 8, 9)
SHARES = (0.25, 0.5, 1.0)
TEST = 0.2
STARTS = 5


def settings(folder):
    workloads = pl.read_parquet(f"{folder}/workloads.parquet")
    pairs = pl.read_parquet(f"{folder}/pairs.parquet")
    ids = workloads["workload"].to_list()
    index = {w: i for i, w in enumerate(ids)}
    solo = dict(zip(ids, workloads["solo_throughput"].to_list()))
    out = []
    for r in pairs.iter_rows(named=True):
        if r["status"] != "ok":
            out.append(None)
            continue
        out.append((index[r["a"]], index[r["b"]],
                    np.log(r["throughput_a"] / solo[r["a"]]),
                    np.log(r["throughput_b"] / solo[r["b"]])))
    return len(ids), out


def directions(data, chosen):
    a, b, y = [], [], []
    for i in chosen:
        if data[i] is None:
            continue
        x, z, yx, yz = data[i]
        a += [x, z]
        b += [z, x]
        y += [yx, yz]
    return np.array(a), np.array(b), np.array(y)


def fit(n, rank, penalty, a, b, y, seed):
    rng = np.random.default_rng(seed)
    size = 1 + 2 * n + 2 * n * rank
    x0 = rng.normal(0.0, 0.1, size)
    x0[0] = y.mean()

    def parts(x):
        return (x[0], x[1:1 + n], x[1 + n:1 + 2 * n],
                x[1 + 2 * n:1 + 2 * n + n * rank].reshape(n, rank),
                x[1 + 2 * n + n * rank:].reshape(n, rank))

    def loss(x):
        mu, alpha, beta, u, v = parts(x)
        e = mu + alpha[a] + beta[b] + (u[a] * v[b]).sum(1) - y
        smooth = np.sqrt(e * e + 1e-4)
        de = e / smooth / len(y)
        g = np.zeros_like(x)
        g[0] = de.sum()
        np.add.at(g[1:1 + n], a, de)
        np.add.at(g[1 + n:1 + 2 * n], b, de)
        gu = np.zeros((n, rank))
        gv = np.zeros((n, rank))
        np.add.at(gu, a, de[:, None] * v[b])
        np.add.at(gv, b, de[:, None] * u[a])
        g[1 + 2 * n:1 + 2 * n + n * rank] = gu.ravel()
        g[1 + 2 * n + n * rank:] = gv.ravel()
        g[1:] += 2 * penalty * x[1:]
        return smooth.sum() / len(y) + penalty * (x[1:] @ x[1:]), g

    mu, alpha, beta, u, v = parts(minimize(loss, x0, jac=True, method="L-BFGS-B",
                                           options={"maxiter": 3000}).x)
    return lambda p, q: mu + alpha[p] + beta[q] + (u[p] * v[q]).sum(1)


def main():
    folder = sys.argv[1]
    ranks = [int(r) for r in (sys.argv[2] if len(sys.argv) > 2 else "1,2,4").split(",")]
    penalties = [float(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "0.001,0.01").split(",")]
    n, data = settings(folder)
    print(f"{folder}: {n} workloads, {len(data)} settings; MAPE of speed on the test set, "
          f"mean ± sd over seeds {SEEDS}")
    print("| rank | lambda | " + " | ".join(f"{int(100 * s)}%" for s in SHARES) + " |")
    print("|---|---|" + "---|" * len(SHARES))
    for rank in ranks:
        for penalty in penalties:
            scores = {s: [] for s in SHARES}
            for seed in SEEDS:
                rng = np.random.default_rng(seed)
                order = rng.permutation(len(data))
                test, selectable = order[:int(TEST * len(data))], order[int(TEST * len(data)):]
                ta, tb, ty = directions(data, test)
                for share in SHARES:
                    chosen = rng.permutation(selectable)[:int(share * len(selectable))]
                    a, b, y = directions(data, chosen)
                    mean = np.mean([fit(n, rank, penalty, a, b, y, seed * 10 + k)(ta, tb)
                                    for k in range(STARTS)], axis=0)
                    scores[share].append(np.mean(np.abs(np.exp(mean - ty) - 1.0)))
            cells = " | ".join(f"{100 * np.mean(v):.2f}% ± {100 * np.std(v):.2f}"
                               for v in scores.values())
            print(f"| {rank} | {penalty} | {cells} |")


if __name__ == "__main__":
    main()
