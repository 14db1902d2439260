//! What a job of a new model family is answered with beside the network.
//!
//! A new family's features lie where training had no job, and a network extrapolates there: on
//! the committed Gavel devices every learner given the job's profile (duet's network, gradient
//! boosting, ridge) is further off for a held-out family than the plain additive effects of the
//! jobs it knows (BENCHMARKS.md, "A new model family"). So such a pair's ln speed is a weighted
//! mean of the network's and of the **effects prior**: the device's mean ln speed, plus how much
//! slower than that mean jobs ran next to the partner, plus how much slower the job itself ran
//! next to anyone, each where training measured the job, and where it did not, as the job's
//! profile predicts it on devices whose families show the profile transfers (`profile`). The
//! network's weight is chosen per device on the evaluation's leave-one-family-out folds (the same
//! folds that calibrate the `new_family` p90, which is then fitted on the weighted predictions),
//! so a device whose features do transfer keeps the network and one whose do not leans on the
//! effects. The p10 is the more pessimistic of the network's and the weighted speed less the
//! network's spread (`weigh_outputs`).
//!
//! A job measured in only a few pair settings (`probed`: say a new family's after `duet profile
//! --onto DIR --probes K`) is known to the network by those few rows alone, and the same effects
//! answer beside it: its own effect and its effect as a partner are what its probes measured,
//! less what its partners there explain (backfitted, since a few partners do not average out),
//! with a weight of the network's own, chosen on the folds that hold workloads out but for their
//! probes. A pair of well-measured or new workloads of known families is answered by the network
//! alone.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::encoding::{FeatureSpec, Novelty, PROBED_MAX};
use crate::network::{OUT_LOG_SPEED, OUT_LOG_SPEED_P10};

pub mod profile;

pub use profile::{Profile, ProfileEffects};

/// The network's weights tried for a new family's pairs: 0, 0.1, ..., 1.
pub const WEIGHTS: usize = 11;

/// Rows a device needs among the held-out families' for a weight of its own; with fewer it
/// takes the weight chosen on every device's rows together.
pub const MIN_WEIGHT_ROWS: usize = 30;

/// The effects prior of every training device and the network's weight on each.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FamilyPrior {
    pub devices: BTreeMap<String, DeviceEffects>,
}

/// Which jobs a pair's prior answers for, each with its own weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// A job of the pair is of a family training never had.
    NewFamily,
    /// Neither is new, and one was measured in at most `PROBED_MAX` pair settings on the device.
    Probed,
}

/// One device's additive effects (ln speed) and the network's weights there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceEffects {
    /// The network's weight in a new family's ln speed (the effects prior has the rest).
    pub weight: f64,
    /// The held-out families' rows the weight was chosen on (0: none, the network alone).
    pub chosen_on: usize,
    /// The network's weight in a probed job's ln speed (1, the network alone, in a model.json
    /// written before probed jobs had a prior).
    #[serde(default = "network_alone")]
    pub probed_weight: f64,
    /// The probed folds' rows `probed_weight` was chosen on.
    #[serde(default)]
    pub probed_chosen_on: usize,
    /// Mean ln speed of every feasible directed row measured on the device.
    pub mean: f64,
    /// Per training workload: mean ln speed of the jobs that ran next to it, less `mean`.
    pub partner: BTreeMap<String, f64>,
    /// Per training workload: its own mean ln speed next to any partner, less `mean`.
    pub own: BTreeMap<String, f64>,
    /// A job's own and partner effects from its profile, for a job training never measured
    /// (`profile`); absent where its family folds chose the plain prior, and in a model.json
    /// written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileEffects>,
}

fn network_alone() -> f64 {
    1.0
}

/// Rounds of backfitting a sparse workload's effects (each round its own effect given its
/// partners', then its partner effect given its partners' own); a handful settles them.
const BACKFIT_ROUNDS: usize = 5;

impl Default for DeviceEffects {
    fn default() -> DeviceEffects {
        DeviceEffects {
            weight: 1.0,
            chosen_on: 0,
            probed_weight: 1.0,
            probed_chosen_on: 0,
            mean: 0.0,
            partner: BTreeMap::new(),
            own: BTreeMap::new(),
            profile: None,
        }
    }
}

/// One measured directed row: job `a` at `ln_speed` next to `b` on `gpu`.
#[derive(Debug, Clone, Copy)]
pub struct EffectRow<'a> {
    pub gpu: &'a str,
    pub a: &'a str,
    pub b: &'a str,
    pub ln_speed: f64,
}

impl DeviceEffects {
    /// The network's weight for a pair whose prior is on `basis`.
    pub fn weight_of(&self, basis: Basis) -> f64 {
        match basis {
            Basis::NewFamily => self.weight,
            Basis::Probed => self.probed_weight,
        }
    }

    /// The mean, partner and own effects of one device's finite rows (weights 1), and the
    /// effects from `profiles` where its families show they transfer ([`profile::fit`]).
    fn fit(rows: &[EffectRow], profiles: &Profiles) -> DeviceEffects {
        let mut total = (0.0, 0usize);
        let mut partner: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
        let mut own: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
        let add = |s: &mut (f64, usize), x: f64| {
            s.0 += x;
            s.1 += 1;
        };
        for r in rows {
            add(&mut total, r.ln_speed);
            add(partner.entry(r.b).or_default(), r.ln_speed);
            add(own.entry(r.a).or_default(), r.ln_speed);
        }
        #[allow(clippy::cast_precision_loss)]
        let mean = |s: &(f64, usize)| s.0 / s.1 as f64;
        let m = mean(&total);
        let sparse: Vec<&str> = own
            .iter()
            .filter(|(_, s)| s.1 <= PROBED_MAX as usize)
            .map(|(id, _)| *id)
            .collect();
        let less = |map: BTreeMap<&str, (f64, usize)>| -> BTreeMap<String, f64> {
            map.into_iter()
                .map(|(id, v)| (id.to_string(), mean(&v) - m))
                .collect()
        };
        let mut effects = DeviceEffects {
            mean: m,
            partner: less(partner),
            own: less(own),
            ..DeviceEffects::default()
        };
        effects.backfit_sparse(rows, &sparse);
        let well_measured: BTreeSet<&str> = effects
            .own
            .keys()
            .map(String::as_str)
            .filter(|id| !sparse.contains(id))
            .collect();
        effects.profile = profile::fit(
            rows,
            effects.mean,
            (&effects.own, &effects.partner),
            &well_measured,
            &profiles.columns,
            &profiles.workloads,
        );
        effects
    }

    /// Each of `sparse`'s own effect made the mean of its rows' ln speeds less the mean and
    /// its partners' effects, and its partner effect the mean of its partners' less the mean
    /// and their own effects, alternately ([`BACKFIT_ROUNDS`]); well-measured workloads keep
    /// their plain means, which a full grid's partners average out of.
    fn backfit_sparse(&mut self, rows: &[EffectRow], sparse: &[&str]) {
        #[allow(clippy::cast_precision_loss)]
        let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
        for _ in 0..BACKFIT_ROUNDS {
            for &w in sparse {
                let of =
                    |map: &BTreeMap<String, f64>, id: &str| map.get(id).copied().unwrap_or(0.0);
                let own: Vec<f64> = rows
                    .iter()
                    .filter(|r| r.a == w)
                    .map(|r| r.ln_speed - self.mean - of(&self.partner, r.b))
                    .collect();
                if let Some(x) = mean(&own) {
                    self.own.insert(w.to_string(), x);
                }
                let partner: Vec<f64> = rows
                    .iter()
                    .filter(|r| r.b == w)
                    .map(|r| r.ln_speed - self.mean - of(&self.own, r.a))
                    .collect();
                if let Some(x) = mean(&partner) {
                    self.partner.insert(w.to_string(), x);
                }
            }
        }
    }
}

impl FamilyPrior {
    /// The effects of `rows`, every weight 1 (the network alone) until [`FamilyPrior::weigh`].
    /// A workload measured as job `a` in at most [`PROBED_MAX`] rows of a device has its own
    /// and partner effects there backfitted on its rows ([`backfit_sparse`]): a plain mean
    /// over a few partners is mostly theirs.
    pub fn fit<'a>(rows: impl IntoIterator<Item = EffectRow<'a>>) -> FamilyPrior {
        FamilyPrior::fit_with_profiles(rows, &Profiles::default())
    }

    /// [`FamilyPrior::fit`], each device also fitting a new job's effects from `profiles`
    /// where its families show they transfer ([`profile::fit`]).
    pub fn fit_with_profiles<'a>(
        rows: impl IntoIterator<Item = EffectRow<'a>>,
        profiles: &Profiles,
    ) -> FamilyPrior {
        let mut by_device: BTreeMap<&str, Vec<EffectRow>> = BTreeMap::new();
        for r in rows {
            if r.ln_speed.is_finite() {
                by_device.entry(r.gpu).or_default().push(r);
            }
        }
        let devices = by_device
            .into_iter()
            .map(|(gpu, rows)| (gpu.to_string(), DeviceEffects::fit(&rows, profiles)))
            .collect();
        FamilyPrior { devices }
    }

    /// The effects prior's ln speed of job a of an encoded pair row, and the network's weight,
    /// where one of the row's jobs is of a new family (`FeatureSpec::family_is_new`), or else
    /// neither is new and one is probed, on a device the prior knows; `None` otherwise (the
    /// network alone answers).
    pub fn for_row(&self, spec: &FeatureSpec, row: &[f32]) -> Option<(f64, f64)> {
        self.lookup(spec, row)
            .map(|(ln, basis, device)| (ln, device.weight_of(basis)))
    }

    /// [`FamilyPrior::for_row`]'s prior ln speed, with what it answers for and the device's
    /// effects (for its weights).
    pub fn lookup(&self, spec: &FeatureSpec, row: &[f32]) -> Option<(f64, Basis, &DeviceEffects)> {
        let width = spec.job_width();
        let (a, b) = (row.get(..width)?, row.get(width..2 * width)?);
        let gpu = spec.row_gpu(row);
        let basis = if spec.family_is_new(a) || spec.family_is_new(b) {
            Basis::NewFamily
        } else if spec.novelty(a, gpu).max(spec.novelty(b, gpu)) == Novelty::Probed {
            Basis::Probed
        } else {
            return None;
        };
        let device = self.devices.get(gpu?)?;
        // A job training measured on the device: its effect; one it never did: its profile's
        // (none: 0, an average job).
        let effect = |map: &BTreeMap<String, f64>, job: &[f32], as_partner: bool| {
            spec.identity_of(job)
                .and_then(|id| map.get(id))
                .copied()
                .or_else(|| {
                    let (own, partner) = device.profile.as_ref()?.effects(job)?;
                    Some(if as_partner { partner } else { own })
                })
                .unwrap_or(0.0)
        };
        let prior = device.mean + effect(&device.partner, b, true) + effect(&device.own, a, false);
        Some((prior, basis, device))
    }

    /// Sets each device's new-family weight to the one [`Weights::choose`] picks on `rows`.
    pub fn weigh(&mut self, rows: &[Candidate]) {
        let weights = Weights::choose(rows);
        for (gpu, device) in &mut self.devices {
            (device.weight, device.chosen_on) = weights.of(gpu);
        }
    }

    /// Sets each device's probed weight to the one [`Weights::choose`] picks on `rows` (probed
    /// workloads' held-out rows).
    pub fn weigh_probed(&mut self, rows: &[Candidate]) {
        let weights = Weights::choose(rows);
        for (gpu, device) in &mut self.devices {
            (device.probed_weight, device.probed_chosen_on) = weights.of(gpu);
        }
    }
}

/// The network's weight per device, as chosen on a held-out family's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// Devices with [`MIN_WEIGHT_ROWS`] rows or more: the weight and the rows it was chosen on.
    pub by_device: BTreeMap<String, (f64, usize)>,
    /// Chosen on every row together.
    pub pooled: (f64, usize),
}

impl Weights {
    /// For each device, the weight of `0, 0.1, ..., 1` whose weighted predictions of its
    /// `rows` (a held-out family's: the network's ln speed, the prior's, the measured one) have
    /// the lowest mean relative error of speed ([`best_weight`]); a device with fewer than
    /// [`MIN_WEIGHT_ROWS`] rows, or none, takes the weight of every row together (no rows at
    /// all: 1, the network).
    pub fn choose(rows: &[Candidate]) -> Weights {
        let mut gpus: Vec<&str> = rows.iter().map(|r| r.gpu.as_str()).collect();
        gpus.sort_unstable();
        gpus.dedup();
        let by_device = gpus
            .into_iter()
            .filter_map(|gpu| {
                let own = rows.iter().filter(move |r| r.gpu == gpu);
                (own.clone().count() >= MIN_WEIGHT_ROWS)
                    .then(|| (gpu.to_string(), best_weight(own)))
            })
            .collect();
        Weights {
            by_device,
            pooled: best_weight(rows.iter()),
        }
    }

    /// The weight on `gpu` and the rows it was chosen on.
    pub fn of(&self, gpu: &str) -> (f64, usize) {
        self.by_device.get(gpu).copied().unwrap_or(self.pooled)
    }
}

/// A held-out family's directed row, as the weight is chosen on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The family held out.
    pub family: String,
    pub gpu: String,
    pub network: f64,
    pub prior: f64,
    pub ln_speed: f64,
}

/// The weight of the network with the least mean relative error of speed over `rows`, each
/// held-out family weighing the same (a family with many workloads, or with a few pairs the
/// network gets very wrong, does not choose for the others), the smaller one on a tie; and how
/// many rows chose it. 1 where there are none.
pub fn best_weight<'a>(rows: impl Iterator<Item = &'a Candidate> + Clone) -> (f64, usize) {
    let n = rows.clone().count();
    if n == 0 {
        return (1.0, 0);
    }
    let error = |w: f64| -> f64 {
        let mut by_family: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
        for r in rows.clone() {
            let e = by_family.entry(r.family.as_str()).or_default();
            e.0 += (blend(w, r.network, r.prior) - r.ln_speed).exp_m1().abs();
            e.1 += 1;
        }
        #[allow(clippy::cast_precision_loss)]
        by_family.values().map(|(sum, n)| sum / *n as f64).sum()
    };
    #[allow(clippy::cast_precision_loss)]
    let best = (0..WEIGHTS)
        .map(|k| k as f64 / (WEIGHTS - 1) as f64)
        .map(|w| (w, error(w)))
        .fold(
            (1.0, f64::INFINITY),
            |best, (w, e)| {
                if e < best.1 { (w, e) } else { best }
            },
        );
    (best.0, n)
}

/// The network's `network` and the prior's `prior` ln speed weighted by `weight`.
pub fn blend(weight: f64, network: f64, prior: f64) -> f64 {
    weight * network + (1.0 - weight) * prior
}

/// A new family's ln speed and ln p10 speed from the network's (`speed`, `p10`), the prior's
/// ln speed and the network's weight: the speed weighted ([`blend`]); the p10 the lower of the
/// network's and the weighted speed less the network's spread (`speed - p10`). The prior has no
/// spread of its own, so the network's quantile head says how uncertain the job is, and where
/// the network and the prior disagree the p10 takes the more pessimistic of the two: their
/// disagreement is uncertainty too. The `new_family` shift, fitted on these, makes the p90 hold
/// on average; the lower of the two puts the width where the answers disagree.
pub fn weigh_outputs(weight: f64, speed: f64, p10: f64, prior: f64) -> (f64, f64) {
    let weighted = blend(weight, speed, prior);
    (weighted, p10.min(weighted + (p10 - speed)))
}

/// One row of network outputs (`OUTPUTS` values) weighed in place with the prior's ln speed by
/// `weight` ([`weigh_outputs`]); the feasibility logit stays the network's.
pub fn weigh_in(out: &mut [f32], weight: f64, prior: f64) {
    let (speed, p10) = weigh_outputs(
        weight,
        f64::from(out[OUT_LOG_SPEED]),
        f64::from(out[OUT_LOG_SPEED_P10]),
        prior,
    );
    #[allow(clippy::cast_possible_truncation)]
    {
        out[OUT_LOG_SPEED] = speed as f32;
        out[OUT_LOG_SPEED_P10] = p10 as f32;
    }
}

/// Every training workload's profile, for [`FamilyPrior::fit_with_profiles`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profiles {
    /// The columns of a job's encoding the profiles hold (`FeatureSpec::profile_columns`).
    pub columns: Vec<usize>,
    /// By workload id.
    pub workloads: BTreeMap<String, Profile>,
}

#[cfg(test)]
mod tests;
