//! Split-conformal calibration of the conservative output (ln of the p10 speed, the p90
//! slowdown), one shift for pairs of known workloads and one for pairs with a new workload.
//!
//! The trainer holds calibration rows out of every ensemble member's training and early
//! stopping, scores them with the trained ensemble (`s = raw ln p10 - ln measured speed`, above
//! zero where the pair ran slower than its p90 slowdown) and keeps, per kind of pair, the
//! `ceil((n + 1)(1 - alpha))`-th smallest score of `n`: on a new row exchangeable with those,
//! `raw - shift` is at or below the measured log speed with probability at least `1 - alpha`.
//! The shift is applied at prediction time, per pair, after the ensemble's mean.
//!
//! A full `duet train` fits the shifts cross-conformally: the scores are those of the
//! evaluation's per-fold refits on their own held-out rows (unseen pairs for `known`, each
//! workload left out in turn for `new`), so every measured pair and every workload contributes,
//! not a small held-out share. `--final-only` has no evaluation and holds rows out of the final
//! fit instead (split conformal).

use duet_core::api::Calibration as Kind;
use serde::{Deserialize, Serialize};

use crate::network::CONSERVATIVE_QUANTILE;

/// Miscoverage the conservative output is calibrated to: 0.1 (the p90 slowdown).
pub const ALPHA: f64 = CONSERVATIVE_QUANTILE;

/// The two calibrations of a model. A `model.json` written before per-pair calibration has none:
/// both shifts read as 0, and its conservative head already carries the single shift it was
/// trained with.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Calibration {
    /// Pairs whose two workloads both have an identity slot (all devices pooled).
    pub known: Offset,
    /// Pairs with at least one workload the model has no identity for (all devices pooled).
    pub new: Offset,
    /// The same two shifts fitted on each training device's calibration rows alone (Mondrian
    /// conformal: the 90% then holds on every device, not only on average over them); empty
    /// for a single device. A device absent here (one the model never saw) uses the pooled
    /// shifts.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_device: std::collections::BTreeMap<String, Shifts>,
    /// How the shifts were fitted (`CROSS_CONFORMAL` or `SPLIT_CONFORMAL`, with what they were
    /// fitted on); empty in files written before it was recorded (split-conformal).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub method: String,
}

/// `Calibration::method` of a model whose shifts come from the evaluation's out-of-fold scores.
pub const CROSS_CONFORMAL: &str = "cross-conformal";
/// `Calibration::method` of a model whose shifts come from rows held out inside the final fit.
pub const SPLIT_CONFORMAL: &str = "split-conformal";

/// The two shifts of one device.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Shifts {
    pub known: Offset,
    pub new: Offset,
}

impl Calibration {
    /// The shift of ln(p10 speed) for a pair of this kind on `gpu` (the pooled one where the
    /// device has none of its own).
    pub fn shift(&self, kind: Kind, gpu: Option<&str>) -> f64 {
        let (known, new) = match gpu.and_then(|g| self.by_device.get(g)) {
            Some(d) => (&d.known, &d.new),
            None => (&self.known, &self.new),
        };
        match kind {
            Kind::Known => known.shift,
            Kind::New => new.shift,
        }
    }
}

/// One conformal shift and what it was fitted on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Offset {
    /// Subtracted from the network's ln(p10 speed) (so added to ln(p90 slowdown)).
    pub shift: f64,
    /// Feasible calibration rows (directed) the shift was fitted on.
    pub rows: usize,
    /// Distinct workloads held out of training to produce those rows (new-workload calibration),
    /// or distinct unordered pairs (known-workload calibration).
    pub groups: usize,
    /// Set when this kind had too few rows for the finite-sample quantile and borrowed the other
    /// kind's shift, or stayed uncalibrated (shift 0); says which and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// The split-conformal shift of `scores` at miscoverage `alpha`: the
/// `ceil((n + 1)(1 - alpha))`-th smallest score, or `None` when that rank exceeds `n` (too few
/// rows for a finite bound; `n >= 9` at `alpha = 0.1`). Non-finite scores are refused as `None`.
pub fn conformal_shift(scores: &[f64], alpha: f64) -> Option<f64> {
    if scores.iter().any(|s| !s.is_finite()) || !(alpha > 0.0 && alpha < 1.0) {
        return None;
    }
    let n = scores.len();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    // A tiny tolerance keeps (n + 1)(1 - alpha) = 9.000000000000002 at rank 9.
    let rank = (((n + 1) as f64) * (1.0 - alpha) - 1e-9).ceil() as usize;
    if rank == 0 || rank > n {
        return None;
    }
    let mut sorted = scores.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_sample_rank() {
        // n = 9: rank ceil(10 * 0.9) = 9, the largest.
        let scores: Vec<f64> = (1..=9).map(f64::from).collect();
        assert_eq!(conformal_shift(&scores, 0.1), Some(9.0));
        // n = 8: rank 9 > 8, no finite bound.
        assert_eq!(conformal_shift(&scores[..8], 0.1), None);
        // n = 19: rank ceil(20 * 0.9) = 18.
        let scores: Vec<f64> = (1..=19).rev().map(f64::from).collect();
        assert_eq!(conformal_shift(&scores, 0.1), Some(18.0));
        assert_eq!(conformal_shift(&[f64::NAN; 20], 0.1), None);
    }

    #[test]
    fn shift_covers_exchangeable_rows() {
        // Scores from a fixed generator: on fresh draws of the same law, the shift covers at
        // least 90% on average over many calibrations.
        let mut rng = crate::network::Rng::new(3);
        let mut covered = 0usize;
        let mut total = 0usize;
        for _ in 0..200 {
            let cal: Vec<f64> = (0..30).map(|_| rng.unit()).collect();
            let shift = conformal_shift(&cal, 0.1).expect("enough rows");
            for _ in 0..50 {
                total += 1;
                if rng.unit() <= shift {
                    covered += 1;
                }
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let rate = covered as f64 / total as f64;
        assert!((0.89..0.95).contains(&rate), "coverage {rate}");
    }

    #[test]
    fn old_model_json_reads_no_shift() {
        let c: Calibration = serde_json::from_str("{}").expect("absent calibrations read as none");
        assert_eq!(c.shift(Kind::Known, Some("v100")), 0.0);
        assert_eq!(c.shift(Kind::New, None), 0.0);
    }

    #[test]
    fn device_shift_where_the_device_has_one() {
        let o = |shift| Offset {
            shift,
            ..Offset::default()
        };
        let c = Calibration {
            known: o(0.1),
            new: o(0.2),
            by_device: [(
                "v100".to_string(),
                Shifts {
                    known: o(0.3),
                    new: o(0.4),
                },
            )]
            .into(),
            method: String::new(),
        };
        assert_eq!(c.shift(Kind::Known, Some("v100")), 0.3);
        assert_eq!(c.shift(Kind::New, Some("v100")), 0.4);
        assert_eq!(c.shift(Kind::Known, Some("a100")), 0.1);
        assert_eq!(c.shift(Kind::New, None), 0.2);
    }
}
