//! Which settings to measure next: one function for the replay and for a real campaign.
//!
//! `uncertainty` fits the model on what is measured and treats its ensemble's members as samples
//! of what it does not know: the spread of their ln(speed) over the unmeasured settings, both
//! directions of each pair. A setting's score is how much of that disagreement measuring it is
//! expected to remove over the whole pool (the integrated variance reduction, [`Spread`]), each
//! setting weighted by its predicted probability to run: not the setting the members disagree
//! on most (often an outlier, or a pair that will not run and so teaches no speed), but the one
//! whose outcome would settle the most predictions. After each pick the members are conditioned
//! on it (the ensemble Kalman update), so a round does not pick near copies. Two rules hold
//! whatever the dataset:
//!
//! - coverage: a workload measured in fewer than `min_pairs` settings gets its best-scored
//!   setting first (least-covered workload first), so that no workload is left with nothing to
//!   learn its identity from, however confident the members are about it;
//! - spread: within one round a workload appears at most about `2k / workloads` times, so that
//!   one uncertain workload does not take the whole round (the next round's fit will have
//!   learned from its first picks).
//!
//! Before a model can be fitted (no pair measured yet, and no earlier dataset), the design rule
//! picks alone: the least-measured workload with its least-measured partner in the
//! least-measured context (device, mode, shares), ties broken by a seeded order, so that every
//! workload appears about equally often and every mode early. `random` draws uniformly.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use duet_core::dataset::Dataset;
use duet_core::rng::Rng;
use duet_model::network::TrainConfig;
use serde::{Deserialize, Serialize};

use crate::CampaignError;
use crate::scoring::{Scorer, Spread};
use crate::settings::{Candidate, Context, Setting, SettingKey};

/// How a campaign selects what to measure (`--select`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Select {
    /// The ensemble's expected variance reduction, under the coverage and spread rules.
    Uncertainty,
    /// Uniformly at random among the unmeasured settings.
    Random,
}

impl Select {
    pub const ALL: [Select; 2] = [Select::Uncertainty, Select::Random];

    pub fn as_str(self) -> &'static str {
        match self {
            Select::Uncertainty => "uncertainty",
            Select::Random => "random",
        }
    }
}

impl FromStr for Select {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Select::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("unknown selection `{s}`, expected uncertainty or random"))
    }
}

impl fmt::Display for Select {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The rule that chose one setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rule {
    /// Before any model: spread over workloads and contexts.
    Design,
    /// A workload below `min_pairs` measured settings: its best-scored setting.
    Coverage,
    /// The highest expected variance reduction left, within the round's spread.
    Uncertainty,
    /// Drawn uniformly.
    Random,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Design => "design",
            Rule::Coverage => "coverage",
            Rule::Uncertainty => "uncertainty",
            Rule::Random => "random",
        }
    }
}

/// One chosen setting, why, and its score (the expected variance reduction, where a model
/// scored it).
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub candidate: Candidate,
    pub rule: Rule,
    pub score: Option<f64>,
}

/// What [`choose`] needs beside the data.
#[derive(Debug, Clone)]
pub struct ChooseOptions {
    pub select: Select,
    /// Seeds the tie-breaking order (and `random`'s draw); give each round its own.
    pub seed: u64,
    /// Every workload is brought to this many measured settings before disagreement ranks the
    /// rest ([`MIN_PAIRS`] by default).
    pub min_pairs: usize,
    /// How the model is fitted (the shipped recipe by default).
    pub config: TrainConfig,
    /// Threads for the ensemble's members.
    pub workers: usize,
}

/// The default of `min_pairs`: every workload in at least three measured settings.
pub const MIN_PAIRS: usize = 3;

impl ChooseOptions {
    pub fn new(select: Select, seed: u64) -> ChooseOptions {
        ChooseOptions {
            select,
            seed,
            min_pairs: MIN_PAIRS,
            config: TrainConfig::default(),
            workers: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        }
    }
}

/// Chooses up to `k` of `candidates` to measure next, given what `known` holds (every solo
/// run and the settings measured so far, one dataset per device or source; a candidate's
/// `dataset` indexes it) and `priors` (earlier datasets the model also learns from). A
/// candidate `known` already holds is never chosen. With `uncertainty` the model is fitted
/// here ([`Scorer::fit`], uncalibrated: its disagreement is all that is used).
pub fn choose(
    known: &[Dataset],
    priors: &[Dataset],
    candidates: &[Candidate],
    k: usize,
    options: &ChooseOptions,
) -> Result<Vec<Choice>, CampaignError> {
    if let Some(c) = candidates.iter().find(|c| c.dataset >= known.len()) {
        return Err(CampaignError::Invalid(format!(
            "candidate {} names dataset {} of {}",
            c.setting,
            c.dataset,
            known.len()
        )));
    }
    let scorer = match options.select {
        Select::Uncertainty if k > 0 && !candidates.is_empty() => {
            Scorer::fit(known, priors, &options.config, false, options.workers)?
        }
        _ => None,
    };
    Ok(choose_with(
        scorer.as_ref(),
        known,
        candidates,
        k,
        options.select,
        options.seed,
        options.min_pairs,
    ))
}

/// A workload of one of the known datasets.
type Workload = (usize, String);

/// [`choose`] with the model already fitted (`None`: nothing to fit yet, the design rule
/// picks), for callers that score several choices with one fit (the probe curves).
pub fn choose_with(
    scorer: Option<&Scorer>,
    known: &[Dataset],
    candidates: &[Candidate],
    k: usize,
    select: Select,
    seed: u64,
    min_pairs: usize,
) -> Vec<Choice> {
    let measured: BTreeSet<(usize, SettingKey)> = known
        .iter()
        .enumerate()
        .flat_map(|(d, data)| data.pairs.iter().map(move |p| (d, Setting::of(p).key())))
        .collect();
    let mut available: Vec<bool> = candidates
        .iter()
        .map(|c| !measured.contains(&(c.dataset, c.setting.key())))
        .collect();
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    rng.shuffle(&mut order);
    if select == Select::Random {
        return order
            .into_iter()
            .filter(|&i| available[i])
            .take(k)
            .map(|i| Choice {
                candidate: candidates[i].clone(),
                rule: Rule::Random,
                score: None,
            })
            .collect();
    }
    let mut rank = vec![0; candidates.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    let mut spread: Option<Spread> = scorer.map(|s| Spread::new(&s.predict(candidates)));

    // Measured settings per workload and per context, this round's picks included.
    let mut count: BTreeMap<Workload, usize> = BTreeMap::new();
    let mut contexts: BTreeMap<(usize, Context), usize> = BTreeMap::new();
    for (d, data) in known.iter().enumerate() {
        for p in &data.pairs {
            let s = Setting::of(p);
            for w in sides(&s) {
                *count.entry((d, w.to_string())).or_default() += 1;
            }
            *contexts.entry((d, s.context())).or_default() += 1;
        }
    }
    let workloads: Vec<Workload> = candidates
        .iter()
        .flat_map(|c| sides(&c.setting).map(|w| (c.dataset, w.to_string())))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut workload_rank: BTreeMap<Workload, usize> = BTreeMap::new();
    let mut shuffled = workloads.clone();
    rng.shuffle(&mut shuffled);
    for (r, w) in shuffled.into_iter().enumerate() {
        workload_rank.insert(w, r);
    }
    let mut in_round: BTreeMap<Workload, usize> = BTreeMap::new();
    let mut cap = (2 * k).div_ceil(workloads.len().max(1)).max(1);
    let of = |map: &BTreeMap<Workload, usize>, d: usize, w: &str| {
        map.get(&(d, w.to_string())).copied().unwrap_or(0)
    };

    let mut picks = Vec::with_capacity(k);
    while picks.len() < k {
        let scores: Option<Vec<f64>> = spread.as_ref().map(|s| s.reductions(&available));
        // The least-measured workload that still has a candidate, and whether it is short of
        // `min_pairs`.
        let least = candidates
            .iter()
            .zip(&available)
            .filter(|(_, a)| **a)
            .flat_map(|(c, _)| sides(&c.setting).map(move |w| (c.dataset, w)))
            .min_by_key(|&(d, w)| {
                (
                    of(&count, d, w),
                    workload_rank.get(&(d, w.to_string())).copied().unwrap_or(0),
                )
            })
            .map(|(d, w)| (d, w.to_string()));
        let Some((d, w)) = least else { break };
        let short = of(&count, d, &w) < min_pairs;
        let touching = |i: usize| {
            available[i] && candidates[i].dataset == d && candidates[i].setting.touches(&w)
        };
        let pick = match &scores {
            None => {
                // Design: the least-measured partner (a workload with itself counts as one more
                // of it), then the least-measured context.
                let best = (0..candidates.len())
                    .filter(|&i| touching(i))
                    .min_by_key(|&i| {
                        let s = &candidates[i].setting;
                        let partner = s.partner(&w);
                        (
                            of(&count, d, partner) + usize::from(partner == w),
                            contexts.get(&(d, s.context())).copied().unwrap_or(0),
                            rank[i],
                        )
                    });
                best.map(|i| (i, Rule::Design))
            }
            Some(scores) if short => {
                let under = |i: &usize| {
                    let s = &candidates[*i].setting;
                    of(&in_round, d, s.partner(&w)) < cap
                };
                let best = |pool: &mut dyn Iterator<Item = usize>| {
                    pool.max_by(|&i, &j| by_score(scores, &rank, i, j))
                };
                best(&mut (0..candidates.len()).filter(|&i| touching(i)).filter(under))
                    .or_else(|| best(&mut (0..candidates.len()).filter(|&i| touching(i))))
                    .map(|i| (i, Rule::Coverage))
            }
            Some(scores) => {
                let best = (0..candidates.len())
                    .filter(|&i| available[i])
                    .filter(|&i| {
                        let c = &candidates[i];
                        sides(&c.setting).all(|x| of(&in_round, c.dataset, x) < cap)
                    })
                    .max_by(|&i, &j| by_score(scores, &rank, i, j));
                match best {
                    Some(i) => Some((i, Rule::Uncertainty)),
                    None => {
                        cap += 1;
                        continue;
                    }
                }
            }
        };
        let Some((i, rule)) = pick else { break };
        available[i] = false;
        if let Some(s) = &mut spread {
            s.observe(i);
        }
        let c = &candidates[i];
        for x in sides(&c.setting) {
            *count.entry((c.dataset, x.to_string())).or_default() += 1;
            *in_round.entry((c.dataset, x.to_string())).or_default() += 1;
        }
        *contexts
            .entry((c.dataset, c.setting.context()))
            .or_default() += 1;
        picks.push(Choice {
            candidate: c.clone(),
            rule,
            score: scores.as_ref().map(|s| s[i]),
        });
    }
    picks
}

/// The workloads of a setting, a workload with itself once.
fn sides(s: &Setting) -> impl Iterator<Item = &str> {
    std::iter::once(s.a.as_str()).chain((s.b != s.a).then_some(s.b.as_str()))
}

/// Higher score first; equal scores in the seeded order.
fn by_score(scores: &[f64], rank: &[usize], i: usize, j: usize) -> Ordering {
    scores[i]
        .total_cmp(&scores[j])
        .then_with(|| rank[j].cmp(&rank[i]))
}

#[cfg(test)]
mod tests {
    use duet_core::dataset::{Mode, Pair};

    use super::*;
    use crate::testdata::{quick, synthetic, with_pairs};

    fn options(select: Select, seed: u64) -> ChooseOptions {
        ChooseOptions {
            config: quick(),
            workers: 1,
            ..ChooseOptions::new(select, seed)
        }
    }

    /// Every setting of `full` that `known` does not hold, as candidates of dataset 0.
    fn rest(full: &Dataset, known: &Dataset) -> Vec<Candidate> {
        let held: BTreeSet<SettingKey> = known.pairs.iter().map(|p| Setting::of(p).key()).collect();
        full.pairs
            .iter()
            .map(Setting::of)
            .filter(|s| !held.contains(&s.key()))
            .map(|setting| Candidate {
                dataset: 0,
                setting,
            })
            .collect()
    }

    fn appearances(choices: &[Choice]) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in choices {
            for w in sides(&c.candidate.setting) {
                *out.entry(w.to_string()).or_default() += 1;
            }
        }
        out
    }

    #[test]
    fn the_first_round_spreads_over_workloads_and_modes() {
        let full = synthetic(8, &[Mode::Timeslice, Mode::Mps]);
        let none = with_pairs(&full, |_| false);
        let candidates = rest(&full, &none);
        let picks = choose(
            std::slice::from_ref(&none),
            &[],
            &candidates,
            8,
            &options(Select::Uncertainty, 7),
        )
        .expect("chosen");
        assert_eq!(picks.len(), 8);
        assert!(
            picks
                .iter()
                .all(|c| c.rule == Rule::Design && c.score.is_none())
        );
        // Every workload twice (8 settings, 16 places, 8 workloads), each mode 4 times.
        let seen = appearances(&picks);
        assert_eq!(seen.len(), 8, "{seen:?}");
        assert!(seen.values().all(|&n| n == 2), "{seen:?}");
        let mps = picks
            .iter()
            .filter(|c| c.candidate.setting.mode == Mode::Mps)
            .count();
        assert_eq!(mps, 4);
    }

    #[test]
    fn choices_are_seeded_counted_and_only_of_unmeasured_candidates() {
        let full = synthetic(7, &[Mode::Space]);
        // Every other setting measured; the candidates also list some measured ones.
        let known = with_pairs(&full, |p| (p.a.as_bytes()[1] + p.b.as_bytes()[1]) % 2 == 0);
        let candidates: Vec<Candidate> = full
            .pairs
            .iter()
            .map(|p| Candidate {
                dataset: 0,
                setting: Setting::of(p),
            })
            .collect();
        let measured: BTreeSet<SettingKey> =
            known.pairs.iter().map(|p| Setting::of(p).key()).collect();
        for select in Select::ALL {
            let a = choose(
                std::slice::from_ref(&known),
                &[],
                &candidates,
                5,
                &options(select, 11),
            )
            .expect("chosen");
            let b = choose(
                std::slice::from_ref(&known),
                &[],
                &candidates,
                5,
                &options(select, 11),
            )
            .expect("chosen");
            assert_eq!(a, b, "{select}: the same seed chooses the same");
            assert_eq!(a.len(), 5);
            let keys: BTreeSet<SettingKey> = a.iter().map(|c| c.candidate.setting.key()).collect();
            assert_eq!(keys.len(), 5, "{select}: chosen twice");
            assert!(
                keys.iter().all(|k| !measured.contains(k)),
                "{select}: chose a measured one"
            );
            assert!(a.iter().all(|c| candidates.contains(&c.candidate)));
            match select {
                Select::Random => assert!(a.iter().all(|c| c.rule == Rule::Random)),
                Select::Uncertainty => assert!(a.iter().all(|c| {
                    matches!(c.rule, Rule::Coverage | Rule::Uncertainty)
                        && c.score.is_some_and(|s| s.is_finite() && s >= 0.0)
                })),
            }
        }
        // Random draws differ with the seed; k is a ceiling.
        let x = choose(
            std::slice::from_ref(&known),
            &[],
            &candidates,
            5,
            &options(Select::Random, 1),
        )
        .expect("chosen");
        let y = choose(
            std::slice::from_ref(&known),
            &[],
            &candidates,
            5,
            &options(Select::Random, 2),
        )
        .expect("chosen");
        assert_ne!(x, y);
        let all = choose(
            std::slice::from_ref(&known),
            &[],
            &candidates,
            1000,
            &options(Select::Random, 1),
        )
        .expect("chosen");
        assert_eq!(all.len(), candidates.len() - measured.len());
        let bad = [Candidate {
            dataset: 1,
            setting: candidates[0].setting.clone(),
        }];
        assert!(choose(&[known], &[], &bad, 1, &options(Select::Random, 1)).is_err());
    }

    #[test]
    fn coverage_comes_first_and_a_round_spreads_over_workloads() {
        let full = synthetic(8, &[Mode::Space]);
        // Half of the pairs among w0..w6 measured, none of w7's.
        let seven = |p: &Pair| p.a == "w7" || p.b == "w7";
        let known = with_pairs(&full, |p| {
            !seven(p) && (p.a.as_bytes()[1] + p.b.as_bytes()[1]) % 2 == 0
        });
        let candidates = rest(&full, &known);
        let picks = choose(
            &[known],
            &[],
            &candidates,
            6,
            &options(Select::Uncertainty, 3),
        )
        .expect("chosen");
        assert_eq!(picks.len(), 6);
        // w7 is brought to three settings first, by its best-scored ones.
        for c in &picks[..3] {
            assert_eq!(c.rule, Rule::Coverage, "{c:?}");
            assert!(c.candidate.setting.touches("w7"));
        }
        let scores = |pool: &[Choice]| {
            pool.iter()
                .map(|c| c.score.expect("scored"))
                .collect::<Vec<_>>()
        };
        assert!(scores(&picks).iter().all(|s| s.is_finite()));
        // Then disagreement, at most ceil(2 * 6 / 8) = 2 appearances per workload this round,
        // so none of w7's (already 3).
        for c in &picks[3..] {
            assert_eq!(c.rule, Rule::Uncertainty, "{c:?}");
            assert!(!c.candidate.setting.touches("w7"), "{c:?}");
        }
        let seen = appearances(&picks[3..]);
        assert!(seen.values().all(|&n| n <= 2), "{seen:?}");
    }
}
