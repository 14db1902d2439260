//! A new job's effects from its profile: what the effects prior knows of a job training never
//! measured.
//!
//! The effects prior adds a training workload's own effect (how much slower it runs next to
//! anyone) and its partner effect (how much slower its partners run) to the device's mean. A job
//! of a new family has neither, so without this its pair is answered as if it were an average
//! job, whatever its profile. Here each effect is a ridge regression on the job's encoded profile
//! (numeric features and their missing flags, categorical slots but the family's, never the
//! identity), fitted on the device's well-measured training workloads. Whether it helps, and how
//! strongly its coefficients are shrunk, is chosen per device by holding each family of the
//! training workloads out in turn and scoring the pairs that touch it, the plain prior kept
//! unless the families agree a fit does better (`choose`): a device whose profiles tell nothing
//! about the effects answers as before.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::EffectRow;
use crate::least_squares::solve_spd;

/// Ridge penalties tried, per training workload (the penalty on the standardised coefficients
/// is this times the number of workloads): from light to heavy shrinkage.
pub const PENALTIES: [f64; 5] = [0.03, 0.1, 0.3, 1.0, 3.0];

/// Families (groups) the training workloads of a device need for a fit to be chosen: with
/// fewer, holding one out leaves too little to tell whether the profile transfers.
pub const MIN_GROUPS: usize = 3;

/// A linear function of a job's profile columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    pub intercept: f64,
    /// One per column of [`ProfileEffects::columns`].
    pub weights: Vec<f64>,
}

impl Linear {
    fn at(&self, x: impl Iterator<Item = f64>) -> f64 {
        self.intercept + self.weights.iter().zip(x).map(|(w, v)| w * v).sum::<f64>()
    }
}

/// One device's effects of a job from its profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileEffects {
    /// The columns of a job's encoding read (`FeatureSpec::profile_columns`).
    pub columns: Vec<usize>,
    /// The penalty chosen, of [`PENALTIES`].
    pub penalty: f64,
    /// The workloads fitted on and the families the penalty was chosen on.
    pub workloads: usize,
    pub families: usize,
    /// The job's own effect (ln speed over the device's mean next to anyone).
    pub own: Linear,
    /// Its effect as a partner (its partners' ln speed over the mean).
    pub partner: Linear,
}

impl ProfileEffects {
    /// The own and partner effects of the job encoded in `job`; `None` where the encoding is
    /// shorter than the columns (a spec the fit was not made with).
    pub fn effects(&self, job: &[f32]) -> Option<(f64, f64)> {
        if self.columns.iter().any(|&c| c >= job.len()) {
            return None;
        }
        let x = || self.columns.iter().map(|&c| f64::from(job[c]));
        Some((self.own.at(x()), self.partner.at(x())))
    }
}

/// A training workload as the fit sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Its family (or its own id where the corpus names none): held out together.
    pub group: String,
    /// Its encoding's profile columns.
    pub x: Vec<f64>,
}

/// The effects of one device's well-measured workloads (`own`, `partner`, less the mean) fitted
/// on their `profiles` where holding each family out shows it helps: each of [`PENALTIES`] and
/// the plain prior scored by the mean relative error of speed over the rows that touch the
/// family held out, one error per family, and chosen from those by [`choose`]; `None` where the
/// plain prior is chosen or there is too little to choose on.
pub fn fit(
    rows: &[EffectRow],
    mean: f64,
    effects: (&BTreeMap<String, f64>, &BTreeMap<String, f64>),
    well_measured: &BTreeSet<&str>,
    columns: &[usize],
    profiles: &BTreeMap<String, Profile>,
) -> Option<ProfileEffects> {
    let (own, partner) = effects;
    let workloads: Vec<(&str, &Profile, f64, f64)> = profiles
        .iter()
        .filter(|(id, _)| well_measured.contains(id.as_str()))
        .filter_map(|(id, p)| {
            Some((
                id.as_str(),
                p,
                *own.get(id.as_str())?,
                *partner.get(id.as_str())?,
            ))
        })
        .filter(|(_, p, ..)| p.x.len() == columns.len() && p.x.iter().all(|v| v.is_finite()))
        .collect();
    let groups: BTreeSet<&str> = workloads.iter().map(|w| w.1.group.as_str()).collect();
    if groups.len() < MIN_GROUPS || columns.is_empty() {
        return None;
    }
    // Each family held out: the other workloads' fits, and the rows touching it.
    let error_of = |held: &str, penalty: Option<f64>| -> Option<f64> {
        let inside: BTreeSet<&str> = workloads
            .iter()
            .filter(|w| w.1.group == held)
            .map(|w| w.0)
            .collect();
        let kept: Vec<_> = workloads
            .iter()
            .filter(|w| w.1.group != held)
            .copied()
            .collect();
        let fitted = penalty.map(|p| fit_both(&kept, p));
        let effect = |id: &str, partner_side: bool| -> f64 {
            if inside.contains(id) {
                let Some((own_fit, partner_fit)) = &fitted else {
                    return 0.0;
                };
                let x = &profiles[id].x;
                let f = if partner_side { partner_fit } else { own_fit };
                return f.at(x.iter().copied());
            }
            let map = if partner_side { partner } else { own };
            map.get(id).copied().unwrap_or(0.0)
        };
        let mut sum = 0.0;
        let mut n = 0usize;
        for r in rows {
            if inside.contains(r.a) || inside.contains(r.b) {
                let predicted = mean + effect(r.a, false) + effect(r.b, true);
                sum += (predicted - r.ln_speed).exp_m1().abs();
                n += 1;
            }
        }
        #[allow(clippy::cast_precision_loss)]
        (n > 0).then(|| sum / n as f64)
    };
    let penalty = choose(|penalty| {
        groups
            .iter()
            .map(|g| error_of(g, penalty).unwrap_or(0.0))
            .collect()
    })?;
    let (own_fit, partner_fit) = fit_both(&workloads, penalty);
    Some(ProfileEffects {
        columns: columns.to_vec(),
        penalty,
        workloads: workloads.len(),
        families: groups.len(),
        own: own_fit,
        partner: partner_fit,
    })
}

/// The penalty chosen from each candidate's errors by family (`errors(None)`: the plain
/// prior's), by the one-standard-error rule on paired differences: the simplest candidate (the
/// plain prior, then the heaviest penalty to the lightest) whose mean error over the families is
/// within one standard error of the best's, that error the spread of their differences family by
/// family. With seven families a penalty that wins on a few by chance is within its own noise of
/// the plain prior, which is then kept: a profile is used only where the families agree it helps.
fn choose(errors: impl Fn(Option<f64>) -> Vec<f64>) -> Option<f64> {
    let candidates: Vec<Option<f64>> = std::iter::once(None)
        .chain(PENALTIES.iter().rev().map(|&p| Some(p)))
        .collect();
    let by: Vec<Vec<f64>> = candidates.iter().map(|&c| errors(c)).collect();
    #[allow(clippy::cast_precision_loss)]
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    let best = (0..by.len()).fold(0, |best, k| {
        if mean(&by[k]) < mean(&by[best]) {
            k
        } else {
            best
        }
    });
    let within = |k: usize| {
        let d: Vec<f64> = by[k].iter().zip(&by[best]).map(|(a, b)| a - b).collect();
        let m = mean(&d);
        #[allow(clippy::cast_precision_loss)]
        let n = d.len() as f64;
        let var = d.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        m <= (var / n).sqrt()
    };
    let chosen = (0..by.len()).find(|&k| within(k)).unwrap_or(best);
    candidates[chosen]
}

/// Ridge fits of the own and of the partner effect on the workloads' profiles.
fn fit_both(workloads: &[(&str, &Profile, f64, f64)], penalty: f64) -> (Linear, Linear) {
    let x: Vec<&[f64]> = workloads.iter().map(|w| w.1.x.as_slice()).collect();
    let own: Vec<f64> = workloads.iter().map(|w| w.2).collect();
    let partner: Vec<f64> = workloads.iter().map(|w| w.3).collect();
    (ridge(&x, &own, penalty), ridge(&x, &partner, penalty))
}

/// Ridge regression of `y` on the rows of `x` with an intercept: each column standardised over
/// the rows (a constant column gets no weight), the penalty `penalty` times the number of rows
/// on the standardised coefficients, the result written back in the columns' own units.
pub fn ridge(x: &[&[f64]], y: &[f64], penalty: f64) -> Linear {
    let n = x.len();
    let d = x.first().map_or(0, |r| r.len());
    if n == 0 {
        return Linear {
            intercept: 0.0,
            weights: vec![0.0; d],
        };
    }
    #[allow(clippy::cast_precision_loss)]
    let count = n as f64;
    let y_mean = y.iter().sum::<f64>() / count;
    let mean: Vec<f64> = (0..d)
        .map(|j| x.iter().map(|r| r[j]).sum::<f64>() / count)
        .collect();
    let scale: Vec<f64> = (0..d)
        .map(|j| (x.iter().map(|r| (r[j] - mean[j]).powi(2)).sum::<f64>() / count).sqrt())
        .collect();
    let live: Vec<usize> = (0..d).filter(|&j| scale[j] > 1e-9).collect();
    let z = |r: &[f64], j: usize| (r[j] - mean[j]) / scale[j];
    let k = live.len();
    // The normal equations (Z'Z + penalty n I) b = Z'(y - mean), Z the standardised columns.
    let mut a = vec![0.0; k * k];
    let mut rhs = vec![0.0; k];
    for (p, &jp) in live.iter().enumerate() {
        for (q, &jq) in live.iter().enumerate() {
            a[p * k + q] = x.iter().map(|r| z(r, jp) * z(r, jq)).sum::<f64>()
                + if p == q { penalty * count } else { 0.0 };
        }
        rhs[p] = x
            .iter()
            .zip(y)
            .map(|(r, yi)| z(r, jp) * (yi - y_mean))
            .sum();
    }
    let b = solve_spd(&mut a, &rhs, k);
    let mut weights = vec![0.0; d];
    let mut intercept = y_mean;
    for (p, &j) in live.iter().enumerate() {
        weights[j] = b[p] / scale[j];
        intercept -= weights[j] * mean[j];
    }
    Linear { intercept, weights }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn ridge_recovers_a_line_and_shrinks_it_to_the_mean() {
        // y = 2 + 0.5 x0; x1 is constant and gets no weight.
        let x: Vec<Vec<f64>> = (0..8).map(|i| vec![f64::from(i), 7.0]).collect();
        let rows: Vec<&[f64]> = x.iter().map(Vec::as_slice).collect();
        let y: Vec<f64> = x.iter().map(|r| 2.0 + 0.5 * r[0]).collect();
        let light = ridge(&rows, &y, 1e-9);
        assert!(close(light.weights[0], 0.5, 1e-6), "{light:?}");
        assert_eq!(light.weights[1], 0.0);
        assert!(close(light.intercept, 2.0, 1e-6), "{light:?}");
        // A heavy penalty leaves almost only the mean of y (3.75).
        let heavy = ridge(&rows, &y, 1e6);
        assert!(heavy.weights[0].abs() < 1e-5, "{heavy:?}");
        assert!(close(heavy.at([3.5, 7.0].into_iter()), 3.75, 1e-4));
        // Between, the slope is shrunk by var / (var + penalty) on the standardised column.
        let half = ridge(&rows, &y, 1.0);
        assert!(close(half.weights[0], 0.25, 1e-9), "{half:?}");
    }

    #[test]
    fn a_penalty_is_chosen_only_where_the_families_agree() {
        // Errors by family for the plain prior (None) and each penalty.
        let table = |rows: Vec<(Option<f64>, [f64; 5])>| {
            move |c: Option<f64>| {
                rows.iter()
                    .find(|(p, _)| *p == c)
                    .map_or_else(|| vec![0.5; 5], |(_, e)| e.to_vec())
            }
        };
        // Better on every family: the penalty.
        let agree = table(vec![
            (None, [0.20, 0.30, 0.25, 0.22, 0.28]),
            (Some(0.3), [0.15, 0.26, 0.20, 0.18, 0.22]),
        ]);
        assert_eq!(choose(agree), Some(0.3));
        // Better on average by one family's large gain, worse on the others: the plain prior.
        let one = table(vec![
            (None, [0.20, 0.30, 0.25, 0.22, 0.60]),
            (Some(0.3), [0.22, 0.32, 0.27, 0.24, 0.30]),
        ]);
        assert_eq!(choose(one), None);
        // Two penalties that both help, the heavier within noise of the lighter: the heavier.
        let both = table(vec![
            (None, [0.20, 0.30, 0.25, 0.22, 0.28]),
            (Some(3.0), [0.151, 0.259, 0.201, 0.181, 0.219]),
            (Some(0.03), [0.15, 0.26, 0.20, 0.18, 0.22]),
        ]);
        assert_eq!(choose(both), Some(3.0));
    }

    /// Directed rows (job, partner, ln speed) and the workloads' profiles of a device.
    type Device = (Vec<(String, String, f64)>, BTreeMap<String, Profile>);

    /// A device of `families` families of three workloads each, every directed pair measured:
    /// ln speed = -0.5 + own(a) + partner(b), with the effects given by each workload's profile
    /// value `x` (`own_of`, `partner_of`).
    fn device(
        families: usize,
        own_of: impl Fn(f64, usize) -> f64,
        partner_of: impl Fn(f64, usize) -> f64,
    ) -> Device {
        let mut profiles = BTreeMap::new();
        let mut effects = BTreeMap::new();
        for f in 0..families {
            for k in 0..3 {
                let i = f * 3 + k;
                #[allow(clippy::cast_precision_loss)]
                let x = (i as f64 * 0.37).sin() * 2.0;
                let id = format!("w{i}");
                profiles.insert(
                    id.clone(),
                    Profile {
                        group: format!("family {f}"),
                        x: vec![x],
                    },
                );
                effects.insert(id, (own_of(x, i), partner_of(x, i)));
            }
        }
        let mut rows = Vec::new();
        for (a, (own, _)) in &effects {
            for (b, (_, partner)) in &effects {
                rows.push((a.clone(), b.clone(), -0.5 + own + partner));
            }
        }
        (rows, profiles)
    }

    fn fitted(
        rows: &[(String, String, f64)],
        profiles: &BTreeMap<String, Profile>,
    ) -> Option<ProfileEffects> {
        let effect_rows: Vec<EffectRow> = rows
            .iter()
            .map(|(a, b, ln_speed)| EffectRow {
                gpu: "v100",
                a,
                b,
                ln_speed: *ln_speed,
            })
            .collect();
        let prior = super::super::FamilyPrior::fit_with_profiles(
            effect_rows,
            &super::super::Profiles {
                columns: vec![0],
                workloads: profiles.clone(),
            },
        );
        prior.devices["v100"].profile.clone()
    }

    #[test]
    fn a_profile_that_tells_the_effects_is_fitted_and_predicts_a_new_job() {
        let (rows, profiles) = device(5, |x, _| 0.3 * x, |x, _| -0.2 * x);
        let p = fitted(&rows, &profiles).expect("the profile transfers");
        assert_eq!(
            (p.workloads, p.families, p.columns.clone()),
            (15, 5, vec![0])
        );
        // The lightest penalty tried, the effects near the truth for a profile never seen
        // (effects are over the device's mean, so about the workloads' mean profile).
        assert_eq!(p.penalty, PENALTIES[0]);
        #[allow(clippy::cast_precision_loss)]
        let centre = profiles.values().map(|w| w.x[0]).sum::<f64>() / profiles.len() as f64;
        let (own, partner) = p.effects(&[1.5]).expect("one column");
        assert!(close(own, 0.3 * (1.5 - centre), 0.02), "{own}");
        assert!(close(partner, -0.2 * (1.5 - centre), 0.02), "{partner}");
        // An encoding without the column: nothing.
        assert_eq!(p.effects(&[]), None);
    }

    #[test]
    fn a_profile_that_tells_nothing_leaves_the_plain_prior() {
        // Effects that alternate with the workload's number, whatever its profile.
        let sign = |i: usize| if i.is_multiple_of(2) { 0.4 } else { -0.4 };
        let (rows, profiles) = device(5, |_, i| sign(i), |_, i| -sign(i / 2));
        assert_eq!(fitted(&rows, &profiles), None);
        // Too few families to choose on: none either, however well the profile would do.
        let (rows, profiles) = device(2, |x, _| 0.3 * x, |x, _| -0.2 * x);
        assert_eq!(fitted(&rows, &profiles), None);
    }

    #[test]
    fn a_sparse_or_unprofiled_workload_is_not_fitted_on() {
        let (mut rows, mut profiles) = device(5, |x, _| 0.3 * x, |x, _| -0.2 * x);
        // A workload measured in two pair settings as job a, and one with no profile.
        rows.push(("few".into(), "w0".into(), 3.0));
        rows.push(("few".into(), "w1".into(), 3.0));
        rows.push(("w2".into(), "few".into(), -0.5));
        profiles.insert(
            "few".into(),
            Profile {
                group: "family 9".into(),
                x: vec![0.0],
            },
        );
        rows.push(("bare".into(), "w0".into(), -0.5));
        let p = fitted(&rows, &profiles).expect("the profile transfers");
        assert_eq!((p.workloads, p.families), (15, 5));
    }
}
