//! Split-conformal calibration of the conservative output (ln of the p10 speed, the p90
//! slowdown), one shift for pairs of known workloads, one for pairs with a thinly measured
//! (probed) workload, one for pairs with a new workload and one for pairs with a workload of a
//! new model family.
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
//! not a small held-out share. `--final-only` has no evaluation and calibrates the same way over
//! folds of its own rows ([`FOLDED_CONFORMAL`]).
//!
//! `new_family` comes from the evaluation's leave-one-family-out folds (a model with a family
//! feature, `FeatureSpec::family`; a `--final-only` fit's own family folds). With fewer than
//! [`MIN_FAMILIES`] families held out, a 90% bound over families cannot be told from luck: such
//! a model answers a new family's pair with the widest shift it has, labelled `conservative`, as
//! it does a pair with a job far outside training's range. Never a silent narrow interval.

use duet_core::api::Calibration as Kind;
use serde::{Deserialize, Serialize};

use crate::network::CONSERVATIVE_QUANTILE;
use crate::prior::FamilyPrior;

/// Miscoverage the conservative output is calibrated to: 0.1 (the p90 slowdown).
pub const ALPHA: f64 = CONSERVATIVE_QUANTILE;

/// Families a `new_family` shift must have been fitted on before pairs are answered with it;
/// with fewer, a new family's pair gets the widest shift, labelled `conservative`.
pub const MIN_FAMILIES: usize = 5;

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
    /// Pairs with a training workload measured in at most `PROBED_MAX` pair settings (all
    /// devices pooled), fitted on model families held out but for 1 to `PROBED_MAX` settings of
    /// each of their workloads (`probed_workloads`; a `--final-only` fit's from its own probed
    /// folds, the same over its rows, and its pair folds' thinly measured workloads). Empty
    /// where no held-out row was of this class (a final-only fit of fewer than 5 families or
    /// workloads, all well measured; files written before it): such a pair takes the wider of
    /// `known` and `new`.
    #[serde(skip_serializing_if = "Offset::is_empty")]
    pub probed: Offset,
    /// Pairs with a workload of a model family training never had (all devices pooled); its
    /// `groups` are the families held out. Empty (no rows) in a model without a family feature,
    /// in a `--final-only` one of fewer than [`MIN_FAMILIES`] families, and in files written
    /// before it.
    #[serde(skip_serializing_if = "Offset::is_empty")]
    pub new_family: Offset,
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
    /// A group of three or more jobs answered from its pairs (`crate::group`): the shift of the
    /// composed ln(p10 speed), by group size (`"3"`), fitted on the training data's measured
    /// groups (`rows`: their jobs, `groups`: the groups). Empty where training had none: such a
    /// group's p90 is the composition of its pairs' p90s, calibrated on no group.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub groups: std::collections::BTreeMap<String, Offset>,
    /// A composed group's correction by the training data's measured groups, by group size
    /// (`"3"`): each training workload's own effect on its ln speed in groups of that size, on
    /// each device (`crate::group::compose`). Empty where training had no measured groups, or
    /// where the effects did not help on groups they were not fitted on (then every effect is
    /// 0 and the size is absent).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub group_effects: std::collections::BTreeMap<String, GroupEffects>,
    /// The group sizes (`"3"`) the network answers itself, one row per job (its spec's
    /// `groups`), where it beat the composition of its pairs on measured groups it was not
    /// trained on; their `groups` shift is then the network's. Every other size is composed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub group_network: std::collections::BTreeSet<String>,
    /// A pair with a job of a new family, or with a probed job: its ln speeds weighted between
    /// the network's and the effects prior's (`crate::prior`, a weight per device for each),
    /// the `new_family` and `probed` shifts fitted on the weighted ones. Absent without
    /// leave-one-family-out or probed folds (fewer than [`MIN_FAMILIES`] families, or workloads
    /// where no family is named; files written before it): the network alone answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family_prior: Option<FamilyPrior>,
}

/// Each training workload's own effect on a composed group's ln speed, for one group size: the
/// mean over its jobs in the training data's measured groups of `ln measured speed - ln composed
/// speed`, shrunk toward 0 as `sum / (jobs + penalty)`, with the penalty chosen by a K-fold over
/// the groups. A job of a group the measured groups say the pairs' rule gets wrong the same way
/// every time (a workload that suffers more with two co-runners than its two pairs add up to)
/// is corrected by it; a workload never measured in a group, or given inline, by nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GroupEffects {
    /// The shrinkage, in jobs.
    pub penalty: f64,
    /// Measured jobs the effects were fitted on.
    pub jobs: usize,
    /// By device, by workload: the effect on ln speed.
    pub by_device: std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>,
}

impl GroupEffects {
    /// The effect of `workload` on `gpu`; 0 where it has none.
    pub fn of(&self, gpu: &str, workload: &str) -> f64 {
        self.by_device
            .get(gpu)
            .and_then(|d| d.get(workload))
            .copied()
            .filter(|e| e.is_finite())
            .unwrap_or(0.0)
    }
}

/// `Calibration::method` of a model whose shifts come from the evaluation's out-of-fold scores.
pub const CROSS_CONFORMAL: &str = "cross-conformal";
/// `Calibration::method` of a model whose shifts come from rows held out inside the final fit.
pub const SPLIT_CONFORMAL: &str = "split-conformal";
/// `Calibration::method` of a final-only fit calibrated on folds of its own rows: every
/// workload, every unordered pair and (with a family feature) every family held out once, each
/// fold's ensemble scoring what it did not see (`duet train --final-only`, budgeted campaigns).
pub const FOLDED_CONFORMAL: &str = "cross-conformal over the final fit's folds";

/// The two shifts of one device.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Shifts {
    pub known: Offset,
    pub new: Offset,
    #[serde(default, skip_serializing_if = "Offset::is_empty")]
    pub probed: Offset,
    #[serde(default, skip_serializing_if = "Offset::is_empty")]
    pub new_family: Offset,
}

impl Calibration {
    /// The shift of ln(p10 speed) for a pair of this kind on `gpu` (the pooled one where the
    /// device has none of its own); `conservative`, and `new_family` where the model has no
    /// calibrated one, take the widest.
    pub fn shift(&self, kind: Kind, gpu: Option<&str>) -> f64 {
        self.resolve(kind, gpu).1
    }

    /// The class a pair asking for `kind` is answered in, and its shift on `gpu`: `new_family`
    /// becomes `conservative` where the model has no calibrated new-family shift, and is never
    /// narrower than `new` on the same device.
    pub fn resolve(&self, kind: Kind, gpu: Option<&str>) -> (Kind, f64) {
        let own = gpu.and_then(|g| self.by_device.get(g));
        let pick = |pooled: &Offset, device: Option<&Offset>| device.unwrap_or(pooled).shift;
        match kind {
            Kind::Known => (kind, pick(&self.known, own.map(|d| &d.known))),
            // A probed job is at least as uncertain as a fully measured one; without a shift of
            // its own it takes the wider of known's and new's (it is at least as known as a
            // job profiled alone, and no narrower than a measured one).
            Kind::Probed => {
                let known = pick(&self.known, own.map(|d| &d.known));
                let own_probed = own.map(|d| &d.probed).filter(|o| !o.is_empty());
                let probed = if self.probed.is_empty() {
                    pick(&self.new, own.map(|d| &d.new))
                } else {
                    pick(&self.probed, own_probed)
                };
                (kind, probed.max(known))
            }
            Kind::New => (kind, pick(&self.new, own.map(|d| &d.new))),
            // A new family is at least as new as a new workload: its p90 never narrower.
            Kind::NewFamily if self.families_calibrated() => (
                kind,
                pick(
                    &self.new_family,
                    own.map(|d| &d.new_family).filter(|o| !o.is_empty()),
                )
                .max(pick(&self.new, own.map(|d| &d.new))),
            ),
            Kind::NewFamily | Kind::Conservative => (Kind::Conservative, self.widest()),
        }
    }

    /// The shift of a composed group's ln(p10 speed) for groups of `size` jobs, and how many
    /// measured groups fitted it; `None` where no group of that size calibrated one.
    pub fn group_shift(&self, size: usize) -> Option<(f64, usize)> {
        self.groups
            .get(&size.to_string())
            .filter(|o| !o.is_empty() && o.shift.is_finite())
            .map(|o| (o.shift, o.groups))
    }

    /// Whether the network answers a group of `size` jobs itself, one row per job.
    pub fn network_answers(&self, size: usize) -> bool {
        !self.group_network.is_empty() && self.group_network.contains(&size.to_string())
    }

    /// The correction of the composed ln speed of `workload` (a training workload's id) in a
    /// group of `size` jobs on `gpu`: its group effect, 0 where the model has none.
    pub fn group_effect(&self, size: usize, gpu: &str, workload: &str) -> f64 {
        self.group_effects_of(size)
            .map_or(0.0, |e| e.of(gpu, workload))
    }

    /// The group effects for groups of `size` jobs, where the model has them.
    pub fn group_effects_of(&self, size: usize) -> Option<&GroupEffects> {
        if self.group_effects.is_empty() {
            return None;
        }
        self.group_effects.get(&size.to_string())
    }

    /// Whether a new family's pairs have a calibrated shift of their own: one fitted on at
    /// least [`MIN_FAMILIES`] held-out families.
    pub fn families_calibrated(&self) -> bool {
        !self.new_family.is_empty() && self.new_family.groups >= MIN_FAMILIES
    }

    /// The widest shift the model has, of any class on any device (at least 0: never tighter
    /// than the learned p10): what a pair no calibrated class covers gets.
    pub fn widest(&self) -> f64 {
        let devices = self
            .by_device
            .values()
            .flat_map(|d| [&d.known, &d.new, &d.probed, &d.new_family]);
        [&self.known, &self.new, &self.probed, &self.new_family]
            .into_iter()
            .chain(devices)
            .filter(|o| !o.is_empty())
            .map(|o| o.shift)
            .filter(|s| s.is_finite())
            .fold(0.0, f64::max)
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

impl Offset {
    /// No row fitted it (a class the model has none of).
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
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
            probed: Offset::default(),
            new_family: Offset::default(),
            by_device: [(
                "v100".to_string(),
                Shifts {
                    known: o(0.3),
                    new: o(0.4),
                    probed: Offset::default(),
                    new_family: Offset::default(),
                },
            )]
            .into(),
            method: String::new(),
            groups: std::collections::BTreeMap::new(),
            group_effects: std::collections::BTreeMap::new(),
            group_network: std::collections::BTreeSet::new(),
            family_prior: None,
        };
        assert_eq!(c.shift(Kind::Known, Some("v100")), 0.3);
        assert_eq!(c.shift(Kind::New, Some("v100")), 0.4);
        assert_eq!(c.shift(Kind::Known, Some("a100")), 0.1);
        assert_eq!(c.shift(Kind::New, None), 0.2);
    }

    #[test]
    fn a_probed_job_takes_its_own_shift_never_narrower_than_known() {
        let o = |shift| Offset {
            shift,
            rows: 50,
            groups: 10,
            fallback: None,
        };
        let mut c = Calibration {
            known: o(0.1),
            new: o(0.4),
            probed: o(0.25),
            by_device: [(
                "v100".to_string(),
                Shifts {
                    known: o(0.3),
                    new: o(0.5),
                    probed: o(0.2),
                    new_family: Offset::default(),
                },
            )]
            .into(),
            ..Calibration::default()
        };
        assert_eq!(c.resolve(Kind::Probed, None), (Kind::Probed, 0.25));
        assert_eq!(c.resolve(Kind::Probed, Some("k80")), (Kind::Probed, 0.25));
        // On v100 its own shift is narrower than a measured job's there: known's.
        assert_eq!(c.resolve(Kind::Probed, Some("v100")), (Kind::Probed, 0.3));
        // A device without probed rows of its own takes the pooled one.
        c.by_device.get_mut("v100").expect("v100").probed = Offset::default();
        assert_eq!(c.resolve(Kind::Probed, Some("v100")), (Kind::Probed, 0.3));
        c.by_device.get_mut("v100").expect("v100").known = o(0.1);
        assert_eq!(c.resolve(Kind::Probed, Some("v100")), (Kind::Probed, 0.25));
        // No probed calibration at all (a final-only fit): the wider of known and new.
        c.probed = Offset::default();
        c.by_device.clear();
        assert_eq!(c.resolve(Kind::Probed, None), (Kind::Probed, 0.4));
        assert_eq!(c.widest(), 0.4);
        let json = serde_json::to_string(&c).expect("serialises");
        assert!(!json.contains("probed"), "{json}");
    }

    #[test]
    fn a_new_family_is_calibrated_only_from_enough_families() {
        let o = |shift, groups| Offset {
            shift,
            rows: 100,
            groups,
            fallback: None,
        };
        let mut c = Calibration {
            known: o(0.1, 300),
            new: o(0.2, 26),
            probed: Offset::default(),
            new_family: o(0.35, MIN_FAMILIES),
            by_device: [(
                "v100".to_string(),
                Shifts {
                    known: o(0.3, 300),
                    new: o(0.5, 26),
                    probed: Offset::default(),
                    new_family: o(0.45, MIN_FAMILIES),
                },
            )]
            .into(),
            method: String::new(),
            groups: std::collections::BTreeMap::new(),
            group_effects: std::collections::BTreeMap::new(),
            group_network: std::collections::BTreeSet::new(),
            family_prior: None,
        };
        assert_eq!(c.resolve(Kind::NewFamily, None), (Kind::NewFamily, 0.35));
        // On v100 the new-workload shift is wider: a new family's p90 is never narrower.
        assert_eq!(
            c.resolve(Kind::NewFamily, Some("v100")),
            (Kind::NewFamily, 0.5)
        );
        c.by_device.get_mut("v100").expect("v100").new_family.shift = 0.55;
        assert_eq!(
            c.resolve(Kind::NewFamily, Some("v100")),
            (Kind::NewFamily, 0.55)
        );
        // Out of range: the widest shift of any class on any device.
        assert_eq!(
            c.resolve(Kind::Conservative, None),
            (Kind::Conservative, 0.55)
        );
        // Too few families: never a silent narrow interval.
        c.new_family.groups = MIN_FAMILIES - 1;
        assert_eq!(
            c.resolve(Kind::NewFamily, Some("k80")),
            (Kind::Conservative, 0.55)
        );
        // A model without the class (no family feature, or an older file) says so too.
        c.new_family = Offset::default();
        assert_eq!(c.resolve(Kind::NewFamily, None).0, Kind::Conservative);
        let json = serde_json::to_string(&Calibration::default()).expect("serialises");
        assert!(!json.contains("new_family"), "{json}");
        // Tightening shifts never make the widest narrower than the learned p10.
        let tight = Calibration {
            known: o(-0.2, 10),
            ..Calibration::default()
        };
        assert_eq!(tight.widest(), 0.0);
    }
}
