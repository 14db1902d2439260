//! Probe curves: a workload (or a family) held out of the known settings and of the priors,
//! then given K probes chosen by the ensemble's disagreement or at random, scored on its other
//! settings.

use std::collections::{BTreeMap, BTreeSet};

use duet_core::dataset::{Dataset, FeatureKind};
use duet_core::rng::Rng;
use duet_model::accuracy::Metrics;
use duet_model::network::TrainConfig;

use crate::CampaignError;
use crate::choose::{Select, choose_with};
use crate::replay::options::ReplayOptions;
use crate::replay::oracle::{Oracle, mix, scored};
use crate::replay::outcome::ProbeUnit;
use crate::scoring::{Prediction, Scorer};
use crate::settings::Setting;

/// A held-out unit's probe curves: every setting of `held` leaves the known ones; each held
/// workload then gets K = 1..max probes (settings with a known workload), chosen by the
/// ensemble's disagreement (the same `choose`, one fit per K) or drawn at random.
#[allow(clippy::too_many_arguments)]
pub(super) fn probe(
    oracle: &Oracle,
    options: &ReplayOptions,
    world: &[Dataset],
    config: &TrainConfig,
    seed: u64,
    selectable: &[usize],
    test: &[usize],
    unit: &str,
    held: &BTreeSet<String>,
) -> Result<ProbeUnit, CampaignError> {
    let holds = |i: usize| {
        let s = &oracle.settings[i].setting;
        held.contains(&s.a) || held.contains(&s.b)
    };
    let base: Vec<usize> = selectable.iter().copied().filter(|&i| !holds(i)).collect();
    // Each held workload's probe candidates: with one known workload.
    let candidates_of = |h: &str| -> Vec<usize> {
        selectable
            .iter()
            .copied()
            .filter(|&i| {
                let s = &oracle.settings[i].setting;
                s.touches(h) && !held.contains(s.partner(h))
            })
            .collect()
    };
    let all: Vec<usize> = {
        let mut v: Vec<usize> = selectable
            .iter()
            .chain(test)
            .copied()
            .filter(|&i| holds(i))
            .collect();
        v.sort_unstable();
        v
    };
    let all_candidates = oracle.candidates(&all);
    // A new job is in no earlier dataset either: the held workloads leave the priors too.
    let priors: Vec<Dataset> = options
        .priors
        .iter()
        .map(|(_, d)| without_workloads(d, held))
        .collect();
    let fit = |probes: &[usize]| {
        let mut rows = base.clone();
        rows.extend(probes);
        Scorer::fit(
            &oracle.known(world, &rows),
            &priors,
            config,
            options.probe_coverage,
            options.workers,
        )
    };
    let max = options.max_probes;
    // Chosen: one fit per K; the fit that scores K probes also chooses the next ones.
    let mut chosen: Vec<usize> = Vec::new();
    let mut chosen_predictions = Vec::new();
    for k in 0..=max {
        let scorer = fit(&chosen)?;
        chosen_predictions.push(scorer.as_ref().map(|s| s.predict(&all_candidates)));
        if k == max {
            break;
        }
        let mut rows = base.clone();
        rows.extend(&chosen);
        let known = oracle.known(world, &rows);
        for h in held {
            let taken: BTreeSet<usize> = chosen.iter().copied().collect();
            let left: Vec<usize> = candidates_of(h)
                .into_iter()
                .filter(|i| !taken.contains(i))
                .collect();
            let picks = choose_with(
                scorer.as_ref(),
                &known,
                &oracle.candidates(&left),
                1,
                Select::Uncertainty,
                mix(seed, 7, k as u64),
                options.min_pairs,
            );
            chosen.extend(picks.iter().filter_map(|c| oracle.index_of(&c.candidate)));
        }
    }
    // Random: each held workload's candidates in a seeded order, the first K.
    let mut rng = Rng::new(mix(seed, 8, 0));
    let orders: Vec<Vec<usize>> = held
        .iter()
        .map(|h| {
            let mut c = candidates_of(h);
            rng.shuffle(&mut c);
            c
        })
        .collect();
    let random_at = |k: usize| -> Vec<usize> {
        orders
            .iter()
            .flat_map(|o| o.iter().take(k).copied())
            .collect()
    };
    let mut random_predictions = vec![chosen_predictions[0].clone()];
    for k in 1..=max {
        let scorer = fit(&random_at(k))?;
        random_predictions.push(scorer.as_ref().map(|s| s.predict(&all_candidates)));
    }
    let random = random_at(max);
    let probed: BTreeSet<usize> = chosen.iter().chain(&random).copied().collect();
    let keep: Vec<bool> = all.iter().map(|i| !probed.contains(i)).collect();
    let scored_indices: Vec<usize> = all
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(i, _)| *i)
        .collect();
    let metrics = |predictions: &Option<Vec<Prediction>>| {
        let p = predictions.as_ref()?;
        let kept: Vec<Prediction> = p
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(p, _)| p.clone())
            .collect();
        Some(Metrics::of(&scored(
            oracle,
            &scored_indices,
            &kept,
            &oracle.truth,
        )))
    };
    let mape = |p: &Option<Vec<Prediction>>| {
        let m = metrics(p)?;
        m.mape_speed.is_finite().then_some(m.mape_speed)
    };
    let coverage = |all: &[Option<Vec<Prediction>>]| -> Vec<Option<f64>> {
        if !options.probe_coverage {
            return Vec::new();
        }
        all.iter()
            .map(|p| metrics(p)?.p90_coverage.filter(|c| c.is_finite()))
            .collect()
    };
    let settings_of = |v: &[usize]| -> Vec<Setting> {
        v.iter()
            .map(|&i| oracle.settings[i].setting.clone())
            .collect()
    };
    Ok(ProbeUnit {
        seed,
        unit: unit.to_string(),
        held: held.iter().cloned().collect(),
        scored: scored_indices.len(),
        chosen: chosen_predictions.iter().map(mape).collect(),
        random: random_predictions.iter().map(mape).collect(),
        chosen_coverage: coverage(&chosen_predictions),
        random_coverage: coverage(&random_predictions),
        chosen_probes: settings_of(&chosen),
        random_probes: settings_of(&random),
    })
}

/// Each value of the categorical feature `feature` and the workloads holding it (by id, across
/// the datasets).
pub(super) fn family_values(
    oracle: &Oracle,
    feature: &str,
) -> Result<BTreeMap<String, BTreeSet<String>>, CampaignError> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in &oracle.truth {
        match d.meta.workload_features.iter().find(|f| f.name == feature) {
            Some(f) if f.kind == FeatureKind::Categorical => {}
            Some(_) => {
                return Err(CampaignError::Invalid(format!(
                    "--group-by {feature}: `{feature}` is numeric in dataset `{}`; families \
                     need a categorical feature such as `model`",
                    d.meta.name
                )));
            }
            None => {
                return Err(CampaignError::Invalid(format!(
                    "--group-by {feature}: dataset `{}` declares no workload feature \
                     `{feature}`",
                    d.meta.name
                )));
            }
        }
        for w in &d.workloads {
            if let Some(v) = w.features.get(feature).and_then(|v| v.as_category()) {
                out.entry(v.to_string())
                    .or_default()
                    .insert(w.workload.clone());
            }
        }
    }
    if out.len() < 2 {
        return Err(CampaignError::Invalid(format!(
            "--group-by {feature}: the workloads have {} value(s) of `{feature}`; holding a \
             family out needs at least 2",
            out.len()
        )));
    }
    Ok(out)
}

/// `d` without the workloads of `held`: their solo rows and every pair with one of them.
pub(super) fn without_workloads(d: &Dataset, held: &BTreeSet<String>) -> Dataset {
    let pairs: Vec<_> = d
        .pairs
        .iter()
        .filter(|p| !held.contains(&p.a) && !held.contains(&p.b))
        .cloned()
        .collect();
    let mut out = d.with_pairs(pairs);
    out.workloads.retain(|w| !held.contains(&w.workload));
    out
}
