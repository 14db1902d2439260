//! The effects prior's weights in the evaluation (`duet_model::prior`): each fold's new-family
//! and probed rows weighed as the shipped model will answer them, by weights chosen on the other
//! folds' rows (nested), before their scores calibrate anything.

use std::collections::{BTreeMap, BTreeSet};

use duet_model::network::OUT_LOG_SPEED;
use duet_model::prior::{Basis, Candidate, Weights, weigh_in};

use super::{Fold, FoldScores, MlpRow, Split};
use crate::corpus::Corpus;
use crate::rows::Example;

/// Weighs every new-family row's network outputs with its fold's effects prior, as the shipped
/// model will. In the leave-one-family-out folds each fold's weights are chosen on the other
/// families' rows that touch none of its workloads; a new-family row of another split (a
/// workload alone in its family, held out by `unseen_workloads`) takes the weights its family's
/// fold was scored with. Returns every family fold's rows (for the shipped weights) and the
/// weights each held-out family was scored with.
pub(super) fn weigh_family_priors(
    corpus: &Corpus,
    runs: &mut [(Split, Vec<Fold>, Vec<FoldScores>)],
) -> (Vec<Candidate>, BTreeMap<String, Weights>) {
    let Some(family) = corpus.family.clone() else {
        return (Vec::new(), BTreeMap::new());
    };
    let is_family_split =
        |split: &Split| matches!(split, Split::UnseenGroup(g) if g.feature() == family);
    let values = corpus.values_of(&family);
    let mut by_family: BTreeMap<String, Weights> = BTreeMap::new();
    let mut all = Vec::new();
    if let Some((_, folds, results)) = runs.iter_mut().find(|(split, ..)| is_family_split(split)) {
        let per_fold: Vec<Vec<(usize, Candidate)>> = folds
            .iter()
            .zip(results.iter())
            .map(|(fold, scored)| {
                let unit = fold.value.clone().unwrap_or_default();
                candidates(corpus, fold, &scored.mlp, Basis::NewFamily, |_| {
                    unit.clone()
                })
            })
            .collect();
        for (k, (fold, scored)) in folds.iter().zip(results.iter_mut()).enumerate() {
            // The other families' rows, but none touching this one (a pair of the two is a
            // test row of both folds): no row of the fold chooses its own weight.
            let held = fold.value.as_ref();
            let weights = nested(
                &per_fold,
                k,
                |e| {
                    let value = |id: &str| values[e.dataset].get(id);
                    value(&e.a) == held || value(&e.b) == held
                },
                corpus,
            );
            apply_prior(corpus, fold, &mut scored.mlp, Basis::NewFamily, |_| {
                &weights
            });
            by_family.insert(fold.value.clone().unwrap_or_default(), weights);
        }
        all = per_fold.into_iter().flatten().map(|(_, c)| c).collect();
    }
    let pooled = Weights::choose(&all);
    for (split, folds, results) in runs.iter_mut() {
        if is_family_split(split) {
            continue;
        }
        for (fold, scored) in folds.iter().zip(results.iter_mut()) {
            apply_prior(corpus, fold, &mut scored.mlp, Basis::NewFamily, |e| {
                let held = fold.workload.as_deref().unwrap_or_default();
                let value = values[e.dataset].get(held);
                value.and_then(|v| by_family.get(v)).unwrap_or(&pooled)
            });
        }
    }
    (all, by_family)
}

/// Weighs every probed row's network outputs with its fold's effects prior, as the shipped
/// model will answer a job measured in few settings. In the probed-workloads folds each fold's
/// weights are chosen on the other folds' rows that touch none of its held workloads, each
/// probed workload weighing the same; a probed row of another split (a workload thinned by its
/// fold) takes the weights chosen on every probed fold's rows. Returns those rows, for the
/// shipped model's probed weights.
pub(super) fn weigh_probed_priors(
    corpus: &Corpus,
    runs: &mut [(Split, Vec<Fold>, Vec<FoldScores>)],
) -> Vec<Candidate> {
    let mut all = Vec::new();
    if let Some((_, folds, results)) = runs
        .iter_mut()
        .find(|(split, ..)| *split == Split::ProbedWorkloads)
    {
        let per_fold: Vec<Vec<(usize, Candidate)>> = folds
            .iter()
            .zip(results.iter())
            .map(|(fold, scored)| {
                candidates(corpus, fold, &scored.mlp, Basis::Probed, |e| {
                    probed_unit(&fold.probed, e)
                })
            })
            .collect();
        for (k, (fold, scored)) in folds.iter().zip(results.iter_mut()).enumerate() {
            let held = &fold.probed;
            let weights = nested(
                &per_fold,
                k,
                |e| held.contains(&e.a) || held.contains(&e.b),
                corpus,
            );
            apply_prior(corpus, fold, &mut scored.mlp, Basis::Probed, |_| &weights);
        }
        all = per_fold.into_iter().flatten().map(|(_, c)| c).collect();
    }
    let pooled = Weights::choose(&all);
    for (split, folds, results) in runs.iter_mut() {
        if *split == Split::ProbedWorkloads {
            continue;
        }
        for (fold, scored) in folds.iter().zip(results.iter_mut()) {
            apply_prior(corpus, fold, &mut scored.mlp, Basis::Probed, |_| &pooled);
        }
    }
    all
}

/// The unit a probed row weighs as in the choice of a weight: the held workload it touches.
fn probed_unit(held: &BTreeSet<String>, e: &Example) -> String {
    [&e.a, &e.b]
        .into_iter()
        .find(|id| held.contains(id.as_str()))
        .map_or_else(|| format!("pair {}", e.pair), |id| format!("probed {id}"))
}

/// Fold `k`'s weights: chosen on the other folds' rows, leaving out any the fold's own held
/// units touch (`touches`), so no row of the fold chooses its own weight.
fn nested(
    per_fold: &[Vec<(usize, Candidate)>],
    k: usize,
    touches: impl Fn(&Example) -> bool,
    corpus: &Corpus,
) -> Weights {
    let others: Vec<Candidate> = per_fold
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != k)
        .flat_map(|(_, c)| c.iter())
        .filter(|(i, _)| !touches(&corpus.examples[*i]))
        .map(|(_, c)| c.clone())
        .collect();
    Weights::choose(&others)
}

/// The rows of a fold's test set that have a prior on `basis` and a measured speed, as weights
/// are chosen on them (each weighing as its `unit`), each with its example.
fn candidates(
    corpus: &Corpus,
    fold: &Fold,
    mlp: &[MlpRow],
    basis: Basis,
    unit: impl Fn(&Example) -> String,
) -> Vec<(usize, Candidate)> {
    fold.test
        .iter()
        .zip(mlp)
        .filter_map(|(&i, r)| {
            let e = &corpus.examples[i];
            let (prior, b) = r.prior?;
            if b != basis {
                return None;
            }
            let candidate = Candidate {
                family: unit(e),
                gpu: e.gpu.clone(),
                network: f64::from(r.out[OUT_LOG_SPEED]),
                prior,
                ln_speed: e.speed?.ln(),
            };
            Some((i, candidate))
        })
        .collect()
}

/// Each of a fold's rows with a prior on `basis`: its ln speed and ln p10 speed weighed with
/// the prior (`weigh_outputs`) by the weight `weights` gives for its example.
fn apply_prior<'w>(
    corpus: &Corpus,
    fold: &Fold,
    mlp: &mut [MlpRow],
    basis: Basis,
    weights: impl Fn(&Example) -> &'w Weights,
) {
    for (&i, r) in fold.test.iter().zip(mlp) {
        let Some((prior, b)) = r.prior else { continue };
        if b != basis {
            continue;
        }
        let e = &corpus.examples[i];
        let (w, _) = weights(e).of(&e.gpu);
        weigh_in(&mut r.out, w, prior);
    }
}
