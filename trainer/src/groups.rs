//! What the training data's measured groups of three or more jobs teach the model. The server
//! answers a group from its pairs (`duet_model::group`: each job's slowdown 1 plus each
//! co-runner's extra slowdown in a pair, its p90 the same sum of the pairs' p90 excesses);
//! here every successful measured group is answered the same way by the final model. Per group
//! size, each workload's group effect (`Calibration::group_effects`: its jobs' mean residual
//! `ln measured - ln composed`, shrunk by a penalty chosen on folds of groups) corrects what the
//! pairs' rule gets wrong the same way every time, and the conformal quantile of `ln composed
//! p10 speed - ln measured speed` over the jobs (the effects cross-fitted) becomes that size's
//! shift (`Calibration::groups`). Groups are no training rows: the
//! network never saw them, so the shift is split-conformal over groups of workloads it knows
//! (their pairs are training rows, as a served group of known workloads' are). A K-fold over
//! the groups says how well the shift covers groups it was not fitted on.
//!
//! The shift only widens (it is at least 0): the pairs' p90s it composes are calibrated
//! already, and the jobs of one group are no independent draws (three jobs of one group share
//! its contention), so a job-level quantile from a few groups can narrow by luck. Trained with
//! 14 of the 56 committed triples, an unfloored shift covered 77% to 94% of the other 42 over
//! five draws (BENCHMARKS.md, "Groups of three or more").

use std::collections::{BTreeMap, BTreeSet};

use duet_core::Status;
use duet_core::dataset::speed;
use duet_core::rng::Rng;
use duet_model::calibration::{ALPHA, GroupEffects, Offset, conformal_shift};
use duet_model::group::{RULE, pairs_of};
use duet_model::network::{GroupNetwork, OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS, TrainConfig};

use crate::corpus::{Corpus, Trained};
use crate::rows::Example;
use crate::training::TrainError;

/// Folds of the coverage check.
pub const FOLDS: usize = 5;

/// What the measured groups of one size gave.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFit {
    pub size: usize,
    /// The shift and what fitted it (`rows`: jobs, `groups`: groups); empty where the jobs were
    /// too few for a finite 90% bound.
    pub offset: Offset,
    /// Share of jobs whose measured slowdown is at or below the p90 with a shift fitted on the
    /// other folds' groups ([`FOLDS`] folds of whole groups).
    pub coverage: f64,
    /// Share covered by the composed p90 with no shift.
    pub coverage_composed: f64,
    /// MAPE of the composed point speed (the pairs are training rows: in-sample for them).
    pub mape_speed: f64,
    /// MAPE of the speed corrected by the group effects, each fold's jobs by effects fitted on
    /// the other folds' groups (`mape_speed` where there are none).
    pub mape_corrected: f64,
    /// The group effects fitted on every measured group of the size; `None` where they did not
    /// lower the cross-fitted MAPE.
    pub effects: Option<GroupEffects>,
}

/// One job of a measured group answered from its pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The group's number among the scored groups.
    pub group: usize,
    pub gpu: String,
    pub mode: duet_core::dataset::Mode,
    pub size: usize,
    /// The composed ln(p10 speed): the pairs' calibrated p10s composed, before any group shift.
    pub ln_p10: f64,
    /// The composed point speed.
    pub point: f64,
    pub measured: f64,
    /// The job's workload.
    pub workload: String,
}

impl Scored {
    /// The job's ln speed over its composed point: what a group effect corrects.
    fn residual(&self) -> f64 {
        self.measured.ln() - self.point.ln()
    }
}

/// Every job of every successful group of the corpus's datasets whose mode the model knows,
/// answered by `trained` from its pairs (encoded as the corpus's rows are: with identities
/// where the model has them).
pub fn scored(corpus: &Corpus, trained: &Trained) -> Vec<Scored> {
    let mut examples = Vec::new();
    // (device, mode, each job's measured speed and workload)
    type Measured = (String, duet_core::dataset::Mode, Vec<(f64, String)>);
    let mut groups: Vec<Measured> = Vec::new();
    for (d, dataset) in corpus.datasets.iter().enumerate() {
        for g in dataset.groups.iter().filter(|g| g.status == Status::Ok) {
            if !trained.spec.modes.contains(&g.mode) {
                continue;
            }
            let Some(solos) = dataset.group_solos(g) else {
                continue;
            };
            for (i, j) in pairs_of(g.jobs.len()) {
                for (a, b) in [(i, j), (j, i)] {
                    examples.push(Example {
                        dataset: d,
                        setting: 0,
                        pair: 0,
                        a: g.jobs[a].workload.clone(),
                        b: g.jobs[b].workload.clone(),
                        gpu: g.gpu.clone(),
                        mode: g.mode,
                        share_a: g.jobs[a].share,
                        share_b: g.jobs[b].share,
                        feasible: true,
                        speed: None,
                    });
                }
            }
            let measured = g
                .jobs
                .iter()
                .zip(&solos)
                .map(|(j, solo)| (speed(j.throughput, *solo), j.workload.clone()))
                .collect();
            groups.push((g.gpu.clone(), g.mode, measured));
        }
    }
    if examples.is_empty() {
        return Vec::new();
    }
    let batch = corpus.encode_examples(&trained.spec, &examples);
    let mut out = trained.forward(&batch.inputs);
    let shifts = trained.decode(&batch.inputs, &mut out);
    let mut next = 0;
    let mut scored = Vec::new();
    for (number, (gpu, mode, measured)) in groups.into_iter().enumerate() {
        let size = measured.len();
        // Each job's pairwise ln p10 and point speeds, read in the order they were pushed.
        let mut p10s = vec![Vec::new(); size];
        let mut points = vec![Vec::new(); size];
        for (i, j) in pairs_of(size) {
            for job in [i, j] {
                let o = &out[next * OUTPUTS..(next + 1) * OUTPUTS];
                let ln_p10 = f64::from(o[OUT_LOG_SPEED_P10]) - shifts[next];
                p10s[job].push(ln_p10.exp());
                points[job].push(f64::from(o[OUT_LOG_SPEED]).exp());
                next += 1;
            }
        }
        for (k, (m, workload)) in measured.into_iter().enumerate() {
            scored.push(Scored {
                group: number,
                gpu: gpu.clone(),
                mode,
                size,
                ln_p10: RULE.speed(&p10s[k]).ln(),
                point: RULE.speed(&points[k]),
                measured: m,
                workload,
            });
        }
    }
    scored
}

/// Each of the groups `numbers`' fold of [`FOLDS`], drawn with `seed`: the same for the
/// composition's checks and the network's.
fn folds_of(mut numbers: Vec<usize>, seed: u64) -> BTreeMap<usize, usize> {
    Rng::new(seed ^ 0x6120_0095).shuffle(&mut numbers);
    numbers
        .iter()
        .enumerate()
        .map(|(k, &g)| (g, k % FOLDS))
        .collect()
}

/// The conformal shift of `scores` (one per job, `folds[k]` the fold of job `k`'s group) at
/// least `floor`, with what fitted it (`groups` groups of `size` jobs), and the share of jobs
/// covered by a shift fitted the same way on the other folds' scores (a fold whose others are
/// too few for a bound covers none of its jobs).
fn folded_shift(
    scores: &[f64],
    folds: &[usize],
    floor: f64,
    groups: usize,
    size: usize,
) -> (Offset, f64) {
    let mut covered = 0usize;
    for fold in 0..FOLDS {
        let others: Vec<f64> = scores
            .iter()
            .zip(folds)
            .filter(|&(_, &f)| f != fold)
            .map(|(&s, _)| s)
            .collect();
        if let Some(shift) = conformal_shift(&others, ALPHA).map(|s| s.max(floor)) {
            covered += scores
                .iter()
                .zip(folds)
                .filter(|&(&s, &f)| f == fold && s <= shift)
                .count();
        }
    }
    let offset = conformal_shift(scores, ALPHA)
        .map(|s| s.max(floor))
        .map_or_else(
            || Offset {
                fallback: Some(format!(
                    "{} jobs of {groups} groups of {size}: too few for a 90% bound",
                    scores.len()
                )),
                ..Offset::default()
            },
            |shift| Offset {
                shift,
                rows: scores.len(),
                groups,
                fallback: None,
            },
        );
    #[allow(clippy::cast_precision_loss)]
    let coverage = covered as f64 / scores.len().max(1) as f64;
    (offset, coverage)
}

/// The group effects of `jobs` (each workload's residuals summed over its jobs plus
/// `penalty`), by device and workload.
fn effects_of<'a>(jobs: impl Iterator<Item = &'a Scored>, penalty: f64) -> GroupEffects {
    let mut sums: BTreeMap<(&str, &str), (f64, usize)> = BTreeMap::new();
    let mut count = 0;
    for s in jobs {
        let e = sums.entry((&s.gpu, &s.workload)).or_default();
        e.0 += s.residual();
        e.1 += 1;
        count += 1;
    }
    let mut by_device: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((gpu, workload), (sum, n)) in sums {
        #[allow(clippy::cast_precision_loss)]
        let effect = sum / (n as f64 + penalty);
        by_device
            .entry(gpu.to_string())
            .or_default()
            .insert(workload.to_string(), effect);
    }
    GroupEffects {
        penalty,
        jobs: count,
        by_device,
    }
}

/// Each job's group effect fitted on the other folds' groups with `penalty` (`None`: no
/// effects, every one 0), in `jobs`' order.
fn cross_fitted(
    jobs: &[&Scored],
    fold_of: &BTreeMap<usize, usize>,
    penalty: Option<f64>,
) -> Vec<f64> {
    let Some(penalty) = penalty else {
        return vec![0.0; jobs.len()];
    };
    let per_fold: Vec<_> = (0..FOLDS)
        .map(|fold| {
            effects_of(
                jobs.iter().copied().filter(|s| fold_of[&s.group] != fold),
                penalty,
            )
        })
        .collect();
    jobs.iter()
        .map(|s| per_fold[fold_of[&s.group]].of(&s.gpu, &s.workload))
        .collect()
}

#[allow(clippy::cast_precision_loss)]
fn mape(jobs: &[&Scored], effects: &[f64]) -> f64 {
    jobs.iter()
        .zip(effects)
        .map(|(s, e)| (s.point * e.exp() - s.measured).abs() / s.measured)
        .sum::<f64>()
        / jobs.len().max(1) as f64
}

/// The shrinkages a group effect's penalty is chosen from, in jobs (with none at all).
pub const PENALTIES: [f64; 6] = [0.0, 1.0, 3.0, 10.0, 30.0, 100.0];

/// The shift of each group size the corpus has measured groups of, with its K-fold coverage,
/// and the group effects where they help; `seed` draws the folds.
///
/// The effects' penalty is the one of [`PENALTIES`], or none, with the least MAPE of the
/// corrected speed over [`FOLDS`] folds of whole groups (each fold's jobs corrected by effects
/// fitted on the others); where none wins, the size has no effects. The shift and the coverage
/// are those of the scores corrected the same way, cross-fitted, so no job's score is moved by
/// its own measurement.
pub fn calibrate(corpus: &Corpus, trained: &Trained, seed: u64) -> Vec<GroupFit> {
    let scored = scored(corpus, trained);
    let mut by_size: BTreeMap<usize, Vec<&Scored>> = BTreeMap::new();
    for s in &scored {
        by_size.entry(s.size).or_default().push(s);
    }
    let mut fits = Vec::new();
    for (size, jobs) in by_size {
        let mut numbers: Vec<usize> = jobs.iter().map(|s| s.group).collect();
        numbers.dedup();
        let groups = numbers.len();
        let fold_of = folds_of(numbers, seed);
        let candidates = std::iter::once(None).chain(PENALTIES.iter().copied().map(Some));
        let (penalty, corrected, mape_corrected) = candidates
            .map(|p| {
                let e = cross_fitted(&jobs, &fold_of, p);
                let m = mape(&jobs, &e);
                (p, e, m)
            })
            .fold(
                None,
                |best: Option<(Option<f64>, Vec<f64>, f64)>, c| match best {
                    Some(b) if b.2 <= c.2 => Some(b),
                    _ => Some(c),
                },
            )
            .unwrap_or((None, vec![0.0; jobs.len()], f64::NAN));
        let score = |k: usize| jobs[k].ln_p10 + corrected[k] - jobs[k].measured.ln();
        let scores: Vec<f64> = (0..jobs.len()).map(score).collect();
        let folds: Vec<usize> = jobs.iter().map(|s| fold_of[&s.group]).collect();
        // Only widens: the pairs' p90s it composes are calibrated already.
        let (offset, coverage) = folded_shift(&scores, &folds, 0.0, groups, size);
        #[allow(clippy::cast_precision_loss)]
        let share = |n: usize| n as f64 / jobs.len().max(1) as f64;
        let composed_scores = jobs.iter().filter(|s| s.ln_p10 <= s.measured.ln()).count();
        fits.push(GroupFit {
            size,
            offset,
            coverage,
            coverage_composed: share(composed_scores),
            mape_speed: mape(&jobs, &vec![0.0; jobs.len()]),
            mape_corrected,
            effects: penalty.map(|penalty| effects_of(jobs.iter().copied(), penalty)),
        });
    }
    fits
}

/// The fewest measured groups of a size the network may answer it from (`--group-network
/// auto`). Its p90 there rests on its own out-of-fold scores alone (the composition's rests on
/// the pairs' calibrated p90s and only widens), and a group's jobs are no independent draws:
/// twice the 9 exchangeable units a 90% bound needs, so that each of the 5 folds holds out at
/// least 4 whole groups. Trained with a quarter of `cpu-dev2c-fours` (10 groups of each size),
/// a network chosen on its folds covered 72% of the other triples (BENCHMARKS.md).
pub const MIN_NETWORK_GROUPS: usize = 20;

/// What the network that learns groups (`Corpus::fit_with_groups`) did on one group size, on
/// groups it was not trained on.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSize {
    pub size: usize,
    /// MAPE of the network's speed on each fold's groups, trained on every pair and the other
    /// folds' groups ([`FOLDS`] folds of whole groups).
    pub mape_network: f64,
    /// The composition's cross-fitted MAPE on the same size (`GroupFit::mape_corrected`).
    pub mape_composed: f64,
    /// The network answers this size: its MAPE was below the composition's, on at least
    /// [`MIN_NETWORK_GROUPS`] measured groups.
    pub chosen: bool,
    /// Measured groups of the size.
    pub groups: usize,
    /// The shift of the network's ln(p10 speed) fitted on its out-of-fold scores (not floored:
    /// the network's p10 is no calibrated answer of its own).
    pub offset: Offset,
    /// Share of jobs covered with a shift fitted on the other folds' scores.
    pub coverage: f64,
}

/// Each size's comparison of the network that learns groups with the composition (`composed`,
/// `calibrate`'s fits on the same corpus), and that network fitted on everything where it wins
/// some size (none where it wins none: its sizes say why; nothing at all with fewer than
/// [`FOLDS`] groups, or where `config.group_network` is `never`); `always` takes it for every
/// size with a finite p90 shift). `config.seed` draws each size's folds of whole groups as
/// `calibrate` draws them; the folds' ensembles run on `workers` threads.
pub fn network(
    corpus: &Corpus,
    pairs: &Trained,
    composed: &[GroupFit],
    config: &TrainConfig,
    workers: usize,
) -> Result<(Option<Trained>, Vec<NetworkSize>), TrainError> {
    if config.group_network == GroupNetwork::Never {
        return Ok((None, Vec::new()));
    }
    let modes = &pairs.spec.modes;
    // Each size's groups in `calibrate`'s folds (the same where every group ran).
    let mut by_size: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for g in corpus
        .group_examples
        .iter()
        .filter(|g| modes.contains(&g.mode))
    {
        let numbers = by_size.entry(g.size).or_default();
        if numbers.last() != Some(&g.group) {
            numbers.push(g.group);
        }
    }
    let numbers: Vec<usize> = by_size.values().flatten().copied().collect();
    if numbers.len() < FOLDS {
        return Ok((None, Vec::new()));
    }
    let fold_of: BTreeMap<usize, usize> = by_size
        .into_values()
        .flat_map(|n| folds_of(n, config.seed))
        .collect();
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let train_sets: Vec<BTreeSet<usize>> = (0..FOLDS)
        .map(|fold| {
            numbers
                .iter()
                .copied()
                .filter(|g| fold_of[g] != fold)
                .collect()
        })
        .collect();
    let sets: Vec<(&[usize], &BTreeSet<usize>)> =
        train_sets.iter().map(|t| (all.as_slice(), t)).collect();
    let folds = corpus.fit_with_groups(&sets, config, workers)?;
    // Each job's out-of-fold (size, ln point, ln p10, ln measured, fold).
    let mut scored: Vec<(usize, f64, f64, f64, usize)> = Vec::new();
    for (fold, trained) in folds.iter().enumerate() {
        let held: BTreeSet<usize> = numbers
            .iter()
            .copied()
            .filter(|g| fold_of[g] == fold)
            .collect();
        let batch = corpus.encode_group_rows(&trained.spec, &held, true);
        let out = trained.forward(&batch.inputs);
        let jobs = corpus
            .group_examples
            .iter()
            .filter(|g| held.contains(&g.group));
        for (g, o) in jobs.zip(out.chunks_exact(OUTPUTS)) {
            if let Some(speed) = g.speed {
                scored.push((
                    g.size,
                    f64::from(o[OUT_LOG_SPEED]),
                    f64::from(o[OUT_LOG_SPEED_P10]),
                    speed.ln(),
                    fold,
                ));
            }
        }
    }
    let mut sizes = Vec::new();
    for fit in composed {
        let jobs: Vec<&(usize, f64, f64, f64, usize)> =
            scored.iter().filter(|s| s.0 == fit.size).collect();
        if jobs.is_empty() {
            continue;
        }
        #[allow(clippy::cast_precision_loss)]
        let mape_network = jobs
            .iter()
            .map(|s| ((s.1 - s.3).exp() - 1.0).abs())
            .sum::<f64>()
            / jobs.len() as f64;
        let scores: Vec<f64> = jobs.iter().map(|s| s.2 - s.3).collect();
        let folds: Vec<usize> = jobs.iter().map(|s| s.4).collect();
        let groups = corpus
            .group_examples
            .chunk_by(|a, b| a.group == b.group)
            .filter(|g| g[0].size == fit.size && fold_of.contains_key(&g[0].group))
            .count();
        // Not floored: the network's p10 is no calibrated answer of its own.
        let (offset, coverage) = folded_shift(&scores, &folds, f64::NEG_INFINITY, groups, fit.size);
        sizes.push(NetworkSize {
            size: fit.size,
            mape_network,
            mape_composed: fit.mape_corrected,
            chosen: offset.fallback.is_none()
                && match config.group_network {
                    GroupNetwork::Always => true,
                    _ => groups >= MIN_NETWORK_GROUPS && mape_network < fit.mape_corrected,
                },
            groups,
            offset,
            coverage,
        });
    }
    if !sizes.iter().any(|s| s.chosen) {
        return Ok((None, sizes));
    }
    let every: BTreeSet<usize> = numbers.iter().copied().collect();
    let trained = corpus
        .fit_with_groups(&[(all.as_slice(), &every)], config, workers)?
        .pop();
    Ok((trained, sizes))
}

/// Every job of every successful measured group of a size the network of `trained` answers
/// itself (`Calibration::network_answers`), answered as the server answers it
/// (`duet_model::group::from_network`): `(gpu, mode, size, measured speed, speed, p10 speed)`.
pub fn network_answered(
    corpus: &Corpus,
    trained: &Trained,
) -> Vec<(String, duet_core::dataset::Mode, usize, f64, f64, f64)> {
    use duet_model::group::{NetworkDecode, from_network};
    let spec = &trained.spec;
    let calibration = &trained.calibration;
    let mut inputs = Vec::new();
    let mut decodes = Vec::new();
    let mut measured = Vec::new();
    for members in corpus.group_examples.chunk_by(|a, b| a.group == b.group) {
        let g = &members[0];
        if !calibration.network_answers(g.size) || !spec.modes.contains(&g.mode) {
            continue;
        }
        let encoded: Vec<Vec<f32>> = members
            .iter()
            .map(|m| {
                let mut out = Vec::new();
                spec.encode_job(&corpus.jobs[g.dataset][&m.workload], &mut out);
                out
            })
            .collect();
        let jobs: Vec<&[f32]> = encoded.iter().map(Vec::as_slice).collect();
        spec.encode_group(&jobs, |k| members[k].share, &g.gpu, g.mode, &mut inputs);
        decodes.push((
            NetworkDecode::of_group(spec, calibration, &jobs, &g.gpu),
            g.gpu.clone(),
            g.mode,
        ));
        measured.push(members.iter().map(|m| m.speed).collect::<Vec<_>>());
    }
    if inputs.is_empty() {
        return Vec::new();
    }
    let out = trained.forward(&inputs);
    let mut rows = out.chunks_exact(OUTPUTS);
    let mut answered = Vec::new();
    for ((d, gpu, mode), speeds) in decodes.into_iter().zip(measured) {
        let own: Vec<&[f32]> = rows.by_ref().take(speeds.len()).collect();
        let answer = from_network(&d, &own);
        if answer.jobs.len() != speeds.len() {
            continue;
        }
        for (job, speed) in answer.jobs.iter().zip(speeds) {
            if let Some(m) = speed {
                answered.push((
                    gpu.clone(),
                    mode,
                    d.measured.len(),
                    m,
                    f64::from(job.speed),
                    1.0 / f64::from(job.slowdown_p90),
                ));
            }
        }
    }
    answered
}
