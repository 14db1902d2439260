//! Honest baselines, fitted on the same training rows and scored on the same held-out rows as
//! the MLP: the constant mean, the utilisation-sum rule, ridge regression on the same encoded
//! inputs, and low-rank matrix completion of the pair matrix (the classic approach for data
//! without counters).

use std::collections::HashMap;

use duet_core::dataset::FeatureValue;

use crate::features::JobFeatures;
use crate::model::Rng;
use crate::rows::Example;

/// Mean measured speed of the feasible training rows.
pub fn constant(train: &[&Example]) -> f64 {
    let speeds: Vec<f64> = train.iter().filter_map(|e| e.speed).collect();
    #[allow(clippy::cast_precision_loss)]
    let n = speeds.len().max(1) as f64;
    speeds.iter().sum::<f64>() / n
}

/// `min(1, 100 / (util_a + util_b))` with `gpu_util` in percent: two jobs that together ask
/// for more than the device has share it in proportion. `None` without utilisation counters.
pub fn utilisation_sum(a: &JobFeatures, b: &JobFeatures) -> Option<f64> {
    let util = |j: &JobFeatures| j.get("gpu_util").and_then(FeatureValue::as_number);
    let total = util(a)? + util(b)?;
    Some(if total <= 100.0 { 1.0 } else { 100.0 / total })
}

/// Ridge regression of log speed on the encoded inputs (plus an unpenalised intercept).
#[derive(Debug, Clone)]
pub struct Ridge {
    weights: Vec<f64>,
    intercept: f64,
}

impl Ridge {
    /// Fits on `rows` encoded rows of `width` values with targets `y`.
    pub fn fit(x: &[f32], width: usize, y: &[f64], lambda: f64) -> Ridge {
        let n = y.len();
        #[allow(clippy::cast_precision_loss)]
        let y_mean = y.iter().sum::<f64>() / n.max(1) as f64;
        let mut col_mean = vec![0.0; width];
        for r in 0..n {
            for (c, m) in col_mean.iter_mut().enumerate() {
                *m += f64::from(x[r * width + c]);
            }
        }
        #[allow(clippy::cast_precision_loss)]
        col_mean.iter_mut().for_each(|m| *m /= n.max(1) as f64);
        // Normal equations on centred data: (X'X + lambda I) w = X'y.
        let mut a = vec![0.0; width * width];
        let mut rhs = vec![0.0; width];
        for r in 0..n {
            let row: Vec<f64> = (0..width)
                .map(|c| f64::from(x[r * width + c]) - col_mean[c])
                .collect();
            let t = y[r] - y_mean;
            for i in 0..width {
                rhs[i] += row[i] * t;
                for j in 0..=i {
                    a[i * width + j] += row[i] * row[j];
                }
            }
        }
        for i in 0..width {
            a[i * width + i] += lambda;
            for j in 0..i {
                a[j * width + i] = a[i * width + j];
            }
        }
        let weights = solve_spd(&mut a, &rhs, width);
        let intercept = y_mean
            - weights
                .iter()
                .zip(&col_mean)
                .map(|(w, m)| w * m)
                .sum::<f64>();
        Ridge { weights, intercept }
    }

    /// Predicted log speed of one encoded row.
    pub fn predict(&self, row: &[f32]) -> f64 {
        self.intercept
            + self
                .weights
                .iter()
                .zip(row)
                .map(|(w, x)| w * f64::from(*x))
                .sum::<f64>()
    }
}

/// Solves `A w = b` for symmetric positive definite `A` (n x n, overwritten) by Cholesky.
fn solve_spd(a: &mut [f64], b: &[f64], n: usize) -> Vec<f64> {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        let d = d.max(1e-12).sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    let mut z = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|k| a[i * n + k] * z[k]).sum();
        z[i] = (b[i] - s) / a[i * n + i];
    }
    let mut w = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[k * n + i] * w[k]).sum();
        w[i] = (z[i] - s) / a[i * n + i];
    }
    w
}

/// Low-rank completion of the log-speed matrix: `mu + context + u_a + v_b + p_a . q_b`, where
/// rows and columns are workloads (scoped by dataset) and the context is device, mode and
/// shares. Fitted by seeded SGD with L2; an unseen workload falls back on the biases it has.
#[derive(Debug, Clone)]
pub struct LowRank {
    mu: f64,
    context: HashMap<String, f64>,
    row_bias: HashMap<String, f64>,
    col_bias: HashMap<String, f64>,
    row_factor: HashMap<String, Vec<f64>>,
    col_factor: HashMap<String, Vec<f64>>,
}

fn job_key(e: &Example, id: &str) -> String {
    format!("{}/{id}", e.dataset)
}

fn context_key(e: &Example) -> String {
    format!("{}/{}/{:?}/{:?}", e.gpu, e.mode, e.share_a, e.share_b)
}

impl LowRank {
    pub const RANK: usize = 3;

    pub fn fit(train: &[&Example], seed: u64) -> LowRank {
        let data: Vec<(&Example, f64)> = train
            .iter()
            .filter_map(|e| e.speed.map(|s| (*e, s.ln())))
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let mu = data.iter().map(|(_, y)| y).sum::<f64>() / data.len().max(1) as f64;
        let mut rng = Rng::new(seed);
        let mut model = LowRank {
            mu,
            context: HashMap::new(),
            row_bias: HashMap::new(),
            col_bias: HashMap::new(),
            row_factor: HashMap::new(),
            col_factor: HashMap::new(),
        };
        let factor = |rng: &mut Rng| -> Vec<f64> {
            (0..Self::RANK).map(|_| (rng.unit() - 0.5) * 0.1).collect()
        };
        for (e, _) in &data {
            model.context.entry(context_key(e)).or_insert(0.0);
            let (a, b) = (job_key(e, &e.a), job_key(e, &e.b));
            model.row_bias.entry(a.clone()).or_insert(0.0);
            model.col_bias.entry(b.clone()).or_insert(0.0);
            model
                .row_factor
                .entry(a)
                .or_insert_with(|| factor(&mut rng));
            model
                .col_factor
                .entry(b)
                .or_insert_with(|| factor(&mut rng));
        }
        let (lr, reg) = (0.03, 0.02);
        let mut order: Vec<usize> = (0..data.len()).collect();
        for _ in 0..400 {
            rng.shuffle(&mut order);
            for &i in &order {
                let (e, y) = data[i];
                let (a, b, c) = (job_key(e, &e.a), job_key(e, &e.b), context_key(e));
                let err = y - model.raw(&c, &a, &b);
                *model.context.get_mut(&c).expect("fitted") += lr * err;
                let rb = model.row_bias.get_mut(&a).expect("fitted");
                *rb += lr * (err - reg * *rb);
                let cb = model.col_bias.get_mut(&b).expect("fitted");
                *cb += lr * (err - reg * *cb);
                let p = model.row_factor[&a].clone();
                let q = model.col_factor[&b].clone();
                let pf = model.row_factor.get_mut(&a).expect("fitted");
                for k in 0..Self::RANK {
                    pf[k] += lr * (err * q[k] - reg * p[k]);
                }
                let qf = model.col_factor.get_mut(&b).expect("fitted");
                for k in 0..Self::RANK {
                    qf[k] += lr * (err * p[k] - reg * q[k]);
                }
            }
        }
        model
    }

    fn raw(&self, context: &str, a: &str, b: &str) -> f64 {
        let dot = match (self.row_factor.get(a), self.col_factor.get(b)) {
            (Some(p), Some(q)) => p.iter().zip(q).map(|(x, y)| x * y).sum(),
            _ => 0.0,
        };
        self.mu
            + self.context.get(context).copied().unwrap_or(0.0)
            + self.row_bias.get(a).copied().unwrap_or(0.0)
            + self.col_bias.get(b).copied().unwrap_or(0.0)
            + dot
    }

    /// Predicted log speed of `e`.
    pub fn predict(&self, e: &Example) -> f64 {
        self.raw(&context_key(e), &job_key(e, &e.a), &job_key(e, &e.b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ridge_recovers_a_linear_function() {
        // y = 0.5 + 2 x0 - x1 on a small grid, tiny penalty.
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in 0..5 {
            for j in 0..5 {
                x.extend([i as f32, j as f32]);
                y.push(0.5 + 2.0 * f64::from(i) - f64::from(j));
            }
        }
        let r = Ridge::fit(&x, 2, &y, 1e-9);
        assert!((r.predict(&[3.0, 1.0]) - 5.5).abs() < 1e-6);
    }
}
