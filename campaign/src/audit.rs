//! The audit: a uniform sample of the settings selection never chose, measured at the end and
//! never used for selection, and what it says about the error on every unmeasured setting.
//!
//! Each audited setting gives the absolute percentage error of the model fitted on the chosen
//! settings, in each feasible direction. The estimate is the ratio of their sum to their count
//! over the sample (the MAPE over directed rows, as every duet figure counts it), and its 90%
//! interval is a t interval of that ratio estimator over the sampled settings (the setting is
//! the unit drawn, its directions come together), with the finite-population correction of a
//! sample drawn without replacement from the unmeasured settings.

use std::collections::HashMap;

use duet_core::dataset::{Dataset, Status, speed};
use duet_core::rng::Rng;
use serde::{Deserialize, Serialize};

use crate::scoring::Scorer;
use crate::settings::{Candidate, Setting};

/// The audit's default size (`--audit`).
pub const DEFAULT_AUDIT: usize = 30;

/// What the interval is, for reports.
pub const INTERVAL: &str = "90% t interval (n - 1 degrees of freedom) of the ratio estimator \
sum(absolute percentage errors) / count(feasible directions) over the audited settings, with \
the finite-population correction (1 - n/N) of a uniform draw without replacement from the N \
unmeasured settings";

/// How many of a budget's settings the audit takes: the requested size, at most a third of the
/// budget (so that selection always has two thirds of it), and at most what is left.
pub fn audit_size(budget: usize, requested: usize, left: usize) -> usize {
    requested.min(budget / 3).min(left)
}

/// `n` of `0..population`, uniformly without replacement, in draw order.
pub fn draw(population: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..population).collect();
    Rng::new(seed).shuffle(&mut order);
    order.truncate(n);
    order
}

/// The measurement noise of the audited settings: the mean relative standard error of their
/// measured speeds, over the feasible directions whose pair and solo windows estimated one
/// (`speed = pair rate / solo rate`, so the two relative errors add in quadrature). The
/// model's error on the unmeasured settings cannot be told apart from this floor. `None` where
/// no audited row carries standard errors (a dataset imported without them).
pub fn measurement_noise(measured: &Dataset, audited: &[Setting]) -> Option<f64> {
    let keys: std::collections::HashSet<_> = audited.iter().map(Setting::key).collect();
    let errors: Vec<f64> = measured
        .directed_speeds()
        .iter()
        .filter(|s| keys.contains(&Setting::of(s.pair).key()))
        .filter_map(|s| s.relative_se)
        .collect();
    #[allow(clippy::cast_precision_loss)]
    (!errors.is_empty()).then(|| errors.iter().sum::<f64>() / errors.len() as f64)
}

/// The absolute percentage errors of speed of `scorer` (the model fitted on the chosen
/// settings) on each audited setting, in its feasible directions, against what `measured` (the
/// known datasets, the audited settings' rows included) holds. An audited setting that was not
/// feasible, crashed, timed out or has no row gives none.
pub fn errors(scorer: &Scorer, measured: &[Dataset], audited: &[Candidate]) -> Vec<Vec<f64>> {
    let rows: Vec<HashMap<_, _>> = measured
        .iter()
        .map(|d| d.pairs.iter().map(|p| (Setting::of(p).key(), p)).collect())
        .collect();
    let predictions = scorer.predict(audited);
    audited
        .iter()
        .zip(&predictions)
        .map(|(c, prediction)| {
            let Some(p) = rows.get(c.dataset).and_then(|r| r.get(&c.setting.key())) else {
                return Vec::new();
            };
            if p.status != Status::Ok {
                return Vec::new();
            }
            let solo = |id: &str| measured[c.dataset].workload(id).map(|w| w.solo_throughput);
            let (Some(sa), Some(sb)) = (solo(&p.a), solo(&p.b)) else {
                return Vec::new();
            };
            let (fa, fb) = (speed(p.throughput_a, sa), speed(p.throughput_b, sb));
            // In the setting's own order, as the prediction's directions.
            let truth = if p.a == c.setting.a {
                [fa, fb]
            } else {
                [fb, fa]
            };
            prediction
                .directions
                .iter()
                .zip(truth)
                .filter(|(d, _)| !d.members.is_empty())
                .map(|(d, t)| (d.speed() - t).abs() / t)
                .collect()
        })
        .collect()
}

/// The audit's estimate of the MAPE on the unmeasured settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Settings audited.
    pub n: usize,
    /// Unmeasured settings they were drawn from.
    pub population: usize,
    /// Feasible directed rows among the audited settings.
    pub rows: usize,
    /// Estimated MAPE of speed.
    pub mape: f64,
    /// The 90% interval; absent with fewer than two audited settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<f64>,
}

impl Estimate {
    /// Whether the interval holds `truth`.
    pub fn holds(&self, truth: f64) -> Option<bool> {
        Some(self.low? <= truth && truth <= self.high?)
    }
}

/// The estimate from the audited settings' errors (`errors[i]`: the absolute percentage errors
/// of setting i's feasible directions, empty for an infeasible one), drawn from `population`
/// unmeasured settings. None when no audited direction is feasible.
pub fn estimate(errors: &[Vec<f64>], population: usize) -> Option<Estimate> {
    let n = errors.len();
    let y: Vec<f64> = errors.iter().map(|e| e.iter().sum()).collect();
    #[allow(clippy::cast_precision_loss)]
    let x: Vec<f64> = errors.iter().map(|e| e.len() as f64).collect();
    let rows: usize = errors.iter().map(Vec::len).sum();
    if rows == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let mape = y.iter().sum::<f64>() / rows as f64;
    let (low, high) = if n >= 2 {
        #[allow(clippy::cast_precision_loss)]
        let (nf, big) = (n as f64, population.max(n) as f64);
        let xbar = x.iter().sum::<f64>() / nf;
        let residual: f64 = y
            .iter()
            .zip(&x)
            .map(|(yi, xi)| (yi - mape * xi).powi(2))
            .sum::<f64>()
            / (nf - 1.0);
        let variance = (1.0 - nf / big) * residual / (nf * xbar * xbar);
        let half = t_90(n - 1) * variance.max(0.0).sqrt();
        (Some((mape - half).max(0.0)), Some(mape + half))
    } else {
        (None, None)
    };
    Some(Estimate {
        n,
        population,
        rows,
        mape,
        low,
        high,
    })
}

/// The 95th percentile of Student's t with `df` degrees of freedom (the half-width factor of a
/// two-sided 90% interval): exact to three decimals for 1 to 4, then the Cornish-Fisher
/// expansion in 1/df (within 0.001 of the exact value from 5 on).
pub fn t_90(df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        1 => 6.314,
        2 => 2.920,
        3 => 2.353,
        4 => 2.132,
        _ => {
            let z: f64 = 1.644_853_626_951_472_2;
            #[allow(clippy::cast_precision_loss)]
            let v = df as f64;
            let g1 = (z.powi(3) + z) / 4.0;
            let g2 = (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / 96.0;
            let g3 = (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / 384.0;
            let g4 = (79.0 * z.powi(9) + 776.0 * z.powi(7) + 1482.0 * z.powi(5)
                - 1920.0 * z.powi(3)
                - 945.0 * z)
                / 92160.0;
            z + g1 / v + g2 / (v * v) + g3 / v.powi(3) + g4 / v.powi(4)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measurement_noise_adds_pair_and_solo_errors_in_quadrature() {
        let mut d = crate::testdata::synthetic(4, &[duet_core::dataset::Mode::Mps]);
        let audited = vec![Setting::of(&d.pairs[0])];
        // Rows without standard errors: no noise to report.
        assert_eq!(measurement_noise(&d, &audited), None);
        let (a, b) = (d.pairs[0].a.clone(), d.pairs[0].b.clone());
        for w in &mut d.workloads {
            w.solo_throughput_se = Some(0.04 * w.solo_throughput);
        }
        let p = &mut d.pairs[0];
        p.throughput_a_se = Some(0.03 * p.throughput_a);
        p.throughput_b_se = Some(0.03 * p.throughput_b);
        let noise = measurement_noise(&d, &audited).expect("noise");
        assert!((noise - 0.05).abs() < 1e-9, "{noise} ({a} + {b})");
        // Settings that were not measured count for nothing.
        let unmeasured = Setting::new(
            "nobody",
            "else",
            "v100",
            duet_core::dataset::Mode::Mps,
            None,
            None,
        );
        assert_eq!(measurement_noise(&d, &[unmeasured]), None);
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        // Student's t, 0.95 quantile.
        for (df, exact) in [
            (1, 6.314),
            (5, 2.015),
            (8, 1.860),
            (10, 1.812),
            (20, 1.725),
            (29, 1.699),
            (100, 1.660),
        ] {
            assert!((t_90(df) - exact).abs() < 1e-3, "df {df}: {}", t_90(df));
        }
    }

    #[test]
    fn the_estimate_is_the_mape_of_the_directions() {
        // Three settings: two feasible directions each, one infeasible (no error).
        let errors = vec![vec![0.1, 0.3], vec![0.3, 0.3], vec![]];
        let e = estimate(&errors, 30).expect("feasible rows");
        assert_eq!((e.n, e.rows, e.population), (3, 4, 30));
        assert!((e.mape - 0.25).abs() < 1e-12);
        let (low, high) = (e.low.expect("low"), e.high.expect("high"));
        assert!(low < e.mape && e.mape < high, "{low} {high}");
        // Residuals -0.1, 0.1, 0 over 2 degrees of freedom; x-bar 4/3; (1 - 3/30) / 3.
        let half = t_90(2) * ((1.0f64 - 0.1) * 0.01 / (3.0 * 16.0 / 9.0)).sqrt();
        assert!((high - e.mape - half).abs() < 1e-12, "{high}");
        assert_eq!(e.holds(0.25), Some(true));
        assert_eq!(e.holds(5.0), Some(false));
        // The whole population audited: no sampling error left.
        let all = estimate(&[vec![0.1, 0.3], vec![0.2, 0.2]], 2).expect("rows");
        assert!((all.high.expect("high") - all.low.expect("low")).abs() < 1e-12);
        assert!(estimate(&[vec![]], 5).is_none());
        assert_eq!(estimate(&[vec![0.5]], 5).and_then(|e| e.low), None);
    }

    #[test]
    fn the_audit_takes_at_most_a_third_of_the_budget() {
        assert_eq!(audit_size(300, DEFAULT_AUDIT, 1000), 30);
        assert_eq!(audit_size(24, DEFAULT_AUDIT, 1000), 8);
        assert_eq!(audit_size(300, DEFAULT_AUDIT, 5), 5);
        let d = draw(10, 4, 7);
        assert_eq!(d.len(), 4);
        assert_eq!(d, draw(10, 4, 7));
        let mut sorted = d.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4);
    }
}
