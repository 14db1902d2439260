//! The p90 of a group of three or more jobs, calibrated on the training data's measured groups.
//! The server answers a group from its pairs (`duet_model::group`: each job's slowdown 1 plus
//! each co-runner's extra slowdown in a pair, its p90 the same sum of the pairs' p90 excesses);
//! here every successful measured group is answered the same way by the final model, and the
//! conformal quantile of `ln composed p10 speed - ln measured speed` over the jobs of each group
//! size becomes that size's shift (`Calibration::groups`). Groups are no training rows: the
//! network never saw them, so the shift is split-conformal over groups of workloads it knows
//! (their pairs are training rows, as a served group of known workloads' are). A K-fold over
//! the groups says how well the shift covers groups it was not fitted on.
//!
//! The shift only widens (it is at least 0): the pairs' p90s it composes are calibrated
//! already, and the jobs of one group are no independent draws (three jobs of one group share
//! its contention), so a job-level quantile from a few groups can narrow by luck. Trained with
//! 14 of the 56 committed triples, an unfloored shift covered 77% to 94% of the other 42 over
//! five draws (BENCHMARKS.md, "Groups of three or more").

use std::collections::BTreeMap;

use duet_core::Status;
use duet_core::dataset::speed;
use duet_core::rng::Rng;
use duet_model::calibration::{ALPHA, Offset, conformal_shift};
use duet_model::group::{RULE, pairs_of};
use duet_model::network::{OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS};

use crate::corpus::{Corpus, Trained};
use crate::rows::Example;

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
}

/// Every job of every successful group of the corpus's datasets whose mode the model knows,
/// answered by `trained` from its pairs (encoded as the corpus's rows are: with identities
/// where the model has them).
pub fn scored(corpus: &Corpus, trained: &Trained) -> Vec<Scored> {
    let mut examples = Vec::new();
    // (device, mode, measured speed of each job)
    let mut groups: Vec<(String, duet_core::dataset::Mode, Vec<f64>)> = Vec::new();
    for (d, dataset) in corpus.datasets.iter().enumerate() {
        for g in dataset.groups.iter().filter(|g| g.status == Status::Ok) {
            if !trained.spec.modes.contains(&g.mode) {
                continue;
            }
            let solos: Option<Vec<f64>> = g
                .jobs
                .iter()
                .map(|j| dataset.workload(&j.workload).map(|w| w.solo_throughput))
                .collect();
            let Some(solos) = solos else { continue };
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
                .map(|(j, solo)| speed(j.throughput, *solo))
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
        for (k, m) in measured.into_iter().enumerate() {
            scored.push(Scored {
                group: number,
                gpu: gpu.clone(),
                mode,
                size,
                ln_p10: RULE.speed(&p10s[k]).ln(),
                point: RULE.speed(&points[k]),
                measured: m,
            });
        }
    }
    scored
}

/// The shift of each group size the corpus has measured groups of, with its K-fold coverage;
/// `seed` draws the folds.
pub fn calibrate(corpus: &Corpus, trained: &Trained, seed: u64) -> Vec<GroupFit> {
    let scored = scored(corpus, trained);
    let mut by_size: BTreeMap<usize, Vec<&Scored>> = BTreeMap::new();
    for s in &scored {
        by_size.entry(s.size).or_default().push(s);
    }
    let mut fits = Vec::new();
    for (size, jobs) in by_size {
        let score = |s: &Scored| s.ln_p10 - s.measured.ln();
        let scores: Vec<f64> = jobs.iter().map(|s| score(s)).collect();
        let mut numbers: Vec<usize> = jobs.iter().map(|s| s.group).collect();
        numbers.dedup();
        let groups = numbers.len();
        let mut rng = Rng::new(seed ^ 0x6120_0095);
        rng.shuffle(&mut numbers);
        let fold_of: BTreeMap<usize, usize> = numbers
            .iter()
            .enumerate()
            .map(|(k, &g)| (g, k % FOLDS))
            .collect();
        let mut covered = 0usize;
        for fold in 0..FOLDS {
            let (held, rest): (Vec<&Scored>, Vec<&Scored>) = jobs
                .iter()
                .copied()
                .partition(|s| fold_of[&s.group] == fold);
            let others: Vec<f64> = rest.iter().map(|s| score(s)).collect();
            // A fold whose others are too few for a bound covers none of its jobs.
            if let Some(shift) = conformal_shift(&others, ALPHA).map(|s| s.max(0.0)) {
                covered += held.iter().filter(|s| score(s) <= shift).count();
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let share = |n: usize| n as f64 / jobs.len().max(1) as f64;
        let offset = conformal_shift(&scores, ALPHA)
            .map(|s| s.max(0.0))
            .map_or_else(
                || Offset {
                    fallback: Some(format!(
                        "{} jobs of {groups} groups of {size}: too few for a 90% bound",
                        jobs.len()
                    )),
                    ..Offset::default()
                },
                |shift| Offset {
                    shift,
                    rows: jobs.len(),
                    groups,
                    fallback: None,
                },
            );
        #[allow(clippy::cast_precision_loss)]
        let mape = jobs
            .iter()
            .map(|s| (s.point - s.measured).abs() / s.measured)
            .sum::<f64>()
            / jobs.len().max(1) as f64;
        fits.push(GroupFit {
            size,
            offset,
            coverage: share(covered),
            coverage_composed: share(scores.iter().filter(|&&s| s <= 0.0).count()),
            mape_speed: mape,
        });
    }
    fits
}
