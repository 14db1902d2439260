//! Honest baselines, fitted on the same training rows and scored on the same held-out rows as
//! the MLP: the constant mean, the utilisation-sum rule, ridge regression on the same encoded
//! inputs, and low-rank matrix completion of the pair matrix (the classic approach for data
//! without counters).

use std::collections::HashMap;

use duet_core::dataset::FeatureValue;

use crate::rows::Example;
use duet_model::encoding::JobFeatures;
use duet_model::least_squares::solve_spd;
use duet_model::network::Rng;

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

/// Low-rank completion of the log-speed matrix: `mu + context + u_a + v_b + p_a . q_b`, where
/// rows and columns are workloads (scoped by dataset) and the context is device, mode and
/// shares. Fitted by seeded SGD with L2; an unseen workload falls back on the biases it has.
#[derive(Debug, Clone)]
pub struct LowRank {
    mu: f64,
    contexts: Index,
    jobs: Index,
    context_bias: Vec<f64>,
    row_bias: Vec<f64>,
    col_bias: Vec<f64>,
    /// `RANK` values per job.
    row_factor: Vec<f64>,
    col_factor: Vec<f64>,
}

/// Dense numbering of string keys.
#[derive(Debug, Clone, Default)]
struct Index(HashMap<String, usize>);

impl Index {
    fn add(&mut self, key: String) -> usize {
        let next = self.0.len();
        *self.0.entry(key).or_insert(next)
    }

    fn get(&self, key: &str) -> Option<usize> {
        self.0.get(key).copied()
    }
}

fn job_key(e: &Example, id: &str) -> String {
    format!("{}/{id}", e.dataset)
}

fn context_key(e: &Example) -> String {
    format!("{}/{}/{:?}/{:?}", e.gpu, e.mode, e.share_a, e.share_b)
}

impl LowRank {
    pub const RANK: usize = 3;
    const EPOCHS: usize = 400;
    const LEARNING_RATE: f64 = 0.03;
    const L2: f64 = 0.02;

    pub fn fit(train: &[&Example], seed: u64) -> LowRank {
        let mut contexts = Index::default();
        let mut jobs = Index::default();
        let data: Vec<(usize, usize, usize, f64)> = train
            .iter()
            .filter_map(|e| {
                let y = e.speed?.ln();
                Some((
                    contexts.add(context_key(e)),
                    jobs.add(job_key(e, &e.a)),
                    jobs.add(job_key(e, &e.b)),
                    y,
                ))
            })
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let mu = data.iter().map(|d| d.3).sum::<f64>() / data.len().max(1) as f64;
        let mut rng = Rng::new(seed);
        let n = jobs.0.len();
        let mut factor =
            |len: usize| -> Vec<f64> { (0..len).map(|_| (rng.unit() - 0.5) * 0.1).collect() };
        let mut m = LowRank {
            mu,
            context_bias: vec![0.0; contexts.0.len()],
            row_bias: vec![0.0; n],
            col_bias: vec![0.0; n],
            row_factor: factor(n * Self::RANK),
            col_factor: factor(n * Self::RANK),
            contexts,
            jobs,
        };
        let (lr, l2, r) = (Self::LEARNING_RATE, Self::L2, Self::RANK);
        let mut order: Vec<usize> = (0..data.len()).collect();
        let mut rng = Rng::new(seed ^ 0x10_4A4E);
        for _ in 0..Self::EPOCHS {
            rng.shuffle(&mut order);
            for &i in &order {
                let (c, a, b, y) = data[i];
                let err = y - m.raw(Some(c), Some(a), Some(b));
                m.context_bias[c] += lr * err;
                m.row_bias[a] += lr * (err - l2 * m.row_bias[a]);
                m.col_bias[b] += lr * (err - l2 * m.col_bias[b]);
                for k in 0..r {
                    let p = m.row_factor[a * r + k];
                    let q = m.col_factor[b * r + k];
                    m.row_factor[a * r + k] += lr * (err * q - l2 * p);
                    m.col_factor[b * r + k] += lr * (err * p - l2 * q);
                }
            }
        }
        m
    }

    fn raw(&self, context: Option<usize>, a: Option<usize>, b: Option<usize>) -> f64 {
        let r = Self::RANK;
        let dot = match (a, b) {
            (Some(a), Some(b)) => (0..r)
                .map(|k| self.row_factor[a * r + k] * self.col_factor[b * r + k])
                .sum(),
            _ => 0.0,
        };
        self.mu
            + context.map_or(0.0, |c| self.context_bias[c])
            + a.map_or(0.0, |a| self.row_bias[a])
            + b.map_or(0.0, |b| self.col_bias[b])
            + dot
    }

    /// Predicted log speed of `e`.
    pub fn predict(&self, e: &Example) -> f64 {
        self.raw(
            self.contexts.get(&context_key(e)),
            self.jobs.get(&job_key(e, &e.a)),
            self.jobs.get(&job_key(e, &e.b)),
        )
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
