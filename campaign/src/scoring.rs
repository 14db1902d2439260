//! The model a campaign fits on what it has measured (the trainer's final-only fit, on the known
//! datasets and any earlier ones), and its predictions for settings it has not measured: every
//! ensemble member's ln(speed) in both directions, the ensemble's outputs and the p90 shift.

use std::collections::BTreeMap;

use burn::backend::Flex;
use duet_core::dataset::{Dataset, Status};
use duet_model::accuracy::Scored;
use duet_model::encoding::JobFeatures;
use duet_model::network::{OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUTPUTS, TrainConfig, forward};
use duet_trainer::corpus::{Corpus, Trained};
use duet_trainer::eval::{family_feature, mlp_scored};
use duet_trainer::training::TrainError;

use crate::settings::Candidate;

/// Fewer feasible measured settings than this (with no earlier dataset) fit no model: the
/// first round is then chosen by the design rule alone.
pub const MIN_FEASIBLE_SETTINGS: usize = 4;

/// A model fitted on the measured settings.
#[derive(Debug)]
pub struct Scorer {
    trained: Trained,
    /// The known datasets' jobs (solo throughput, features, identity), by dataset index.
    jobs: Vec<BTreeMap<String, JobFeatures>>,
}

/// One direction of a setting (`a` next to `b`, or `b` next to `a`) as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Direction {
    /// ln(speed) by each ensemble member.
    pub members: Vec<f64>,
    /// The ensemble's mean outputs (`OUTPUTS` of them).
    pub out: [f32; OUTPUTS],
    /// The conformal shift of its conservative output (0 for an uncalibrated fit).
    pub shift: f64,
}

impl Direction {
    /// The population variance of the members' ln(speed).
    pub fn variance(&self) -> f64 {
        let n = self.members.len();
        if n < 2 {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let n = n as f64;
        let mean = self.members.iter().sum::<f64>() / n;
        self.members.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n
    }

    /// The prediction as the accuracy measures score it, against `speed` (None: infeasible).
    pub fn scored(&self, speed: Option<f64>) -> Scored {
        mlp_scored(&self.out, speed, self.shift)
    }

    /// The predicted speed (the ensemble's mean ln(speed), exponentiated).
    pub fn speed(&self) -> f64 {
        f64::from(self.out[OUT_LOG_SPEED]).exp()
    }
}

/// Both directions of one setting: `[a next to b, b next to a]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub directions: [Direction; 2],
}

impl Prediction {
    /// How much the ensemble members disagree on this setting: the root mean over both
    /// directions of the variance of their ln(speed) (about the relative spread of the
    /// members' speeds).
    pub fn disagreement(&self) -> f64 {
        ((self.directions[0].variance() + self.directions[1].variance()) / 2.0).sqrt()
    }
}

/// Feasible measured settings in `datasets`.
fn feasible_settings(datasets: &[Dataset]) -> usize {
    datasets
        .iter()
        .map(|d| d.pairs.iter().filter(|p| p.status == Status::Ok).count())
        .sum()
}

impl Scorer {
    /// Fits the model on every measured setting of `known` and `priors` (earlier datasets:
    /// more to learn from, never candidates). `calibrated`: the final-only fit as `duet train
    /// --final-only` ships it (an ensemble per calibration fold to calibrate the p90
    /// cross-conformally, then the refit); otherwise the refit's networks alone, uncalibrated (half the cost; enough for
    /// the members' disagreement and the point predictions). None where too little is known
    /// to fit anything: fewer than [`MIN_FEASIBLE_SETTINGS`] feasible settings in `known` and in
    /// `priors`.
    pub fn fit(
        known: &[Dataset],
        priors: &[Dataset],
        config: &TrainConfig,
        calibrated: bool,
        workers: usize,
    ) -> Result<Option<Scorer>, TrainError> {
        if feasible_settings(known) < MIN_FEASIBLE_SETTINGS
            && feasible_settings(priors) < MIN_FEASIBLE_SETTINGS
        {
            return Ok(None);
        }
        let mut corpus = Corpus::new(known.iter().chain(priors).cloned().collect());
        if calibrated {
            // As `duet train --final-only` ships it: the default family feature, whose held-out
            // families calibrate `new_family`.
            corpus.family = family_feature(&corpus, None).ok().flatten();
        }
        let rows: Vec<usize> = (0..corpus.examples.len()).collect();
        let trained = if calibrated {
            corpus.train_on(&rows, config, workers)?
        } else {
            corpus.fit(&rows, config, workers)?
        };
        let jobs = corpus.jobs[..known.len()].to_vec();
        Ok(Some(Scorer { trained, jobs }))
    }

    /// Predictions for `candidates`, in order.
    pub fn predict(&self, candidates: &[Candidate]) -> Vec<Prediction> {
        let spec = &self.trained.spec;
        let width = spec.pair_width();
        let mut inputs = Vec::with_capacity(candidates.len() * 2 * width);
        let mut encoded = vec![false; candidates.len()];
        for (i, c) in candidates.iter().enumerate() {
            let s = &c.setting;
            let jobs = self.jobs.get(c.dataset);
            let (Some(a), Some(b)) = (
                jobs.and_then(|j| j.get(&s.a)),
                jobs.and_then(|j| j.get(&s.b)),
            ) else {
                continue;
            };
            spec.encode_pair(a, b, &s.gpu, s.mode, s.share_a, s.share_b, &mut inputs);
            spec.encode_pair(b, a, &s.gpu, s.mode, s.share_b, s.share_a, &mut inputs);
            encoded[i] = true;
        }
        let device = Default::default();
        let members: Vec<Vec<f32>> = self
            .trained
            .nets
            .iter()
            .map(|net| forward::<Flex>(net, &inputs, width, &device))
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let count = members.len().max(1) as f32;
        // The members' mean outputs, decoded as the shipped model answers them (a new family's
        // weighed with the effects prior), and each row's p90 shift.
        let rows = inputs.len() / width.max(1);
        let mut means = vec![0.0f32; rows * OUTPUTS];
        for m in &members {
            for (x, y) in means.iter_mut().zip(m) {
                *x += y / count;
            }
        }
        let shifts = self.trained.decode(&inputs, &mut means);
        let mut out = Vec::with_capacity(candidates.len());
        let mut row = 0;
        for &known in &encoded {
            if !known {
                // A workload the known datasets do not hold: nothing to say (no speed, no
                // disagreement); callers only pass settings of known workloads.
                let none = Direction {
                    members: Vec::new(),
                    out: [0.0; OUTPUTS],
                    shift: 0.0,
                };
                out.push(Prediction {
                    directions: [none.clone(), none],
                });
                continue;
            }
            let direction = |r: usize| {
                let mut out = [0.0f32; OUTPUTS];
                out.copy_from_slice(&means[r * OUTPUTS..(r + 1) * OUTPUTS]);
                Direction {
                    members: members
                        .iter()
                        .map(|m| f64::from(m[r * OUTPUTS + OUT_LOG_SPEED]))
                        .collect(),
                    out,
                    shift: shifts[r],
                }
            };
            out.push(Prediction {
                directions: [direction(row), direction(row + 1)],
            });
            row += 2;
        }
        out
    }
}

/// The noise assumed of a measured ln(speed): duet's default precision target (`duet profile
/// --precision 0.02`, a 2% relative standard error per rate).
pub const MEASUREMENT_SD: f64 = 0.02;

/// What the ensemble does not know about a pool of unmeasured settings, for choosing among
/// them: each direction's member deviations from the members' mean ln(speed) (the members as
/// samples of the model's uncertainty), and each setting's probability to run.
#[derive(Debug, Clone)]
pub struct Spread {
    /// Per setting and direction, the members' deviations.
    deviations: Vec<[Vec<f64>; 2]>,
    /// Per setting, the ensemble's probability that it runs (the mean over both directions of
    /// the sigmoid of the mean feasibility logit).
    feasible: Vec<f64>,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn dot(u: &[f64], v: &[f64]) -> f64 {
    u.iter().zip(v).map(|(a, b)| a * b).sum()
}

impl Spread {
    pub fn new(predictions: &[Prediction]) -> Spread {
        let deviations = predictions
            .iter()
            .map(|p| {
                p.directions.clone().map(|d| {
                    #[allow(clippy::cast_precision_loss)]
                    let mean = d.members.iter().sum::<f64>() / d.members.len().max(1) as f64;
                    d.members.iter().map(|x| x - mean).collect()
                })
            })
            .collect();
        let feasible = predictions
            .iter()
            .map(|p| {
                p.directions
                    .iter()
                    .map(|d| sigmoid(f64::from(d.out[OUT_FEASIBLE_LOGIT])))
                    .sum::<f64>()
                    / 2.0
            })
            .collect();
        Spread {
            deviations,
            feasible,
        }
    }

    /// Setting `i`'s observation as the members see it: the sum of its two directions'
    /// deviations, and its variance with the measurement noise.
    fn observation(&self, i: usize) -> (Vec<f64>, f64) {
        let [a, b] = &self.deviations[i];
        let z: Vec<f64> = a.iter().zip(b).map(|(x, y)| x + y).collect();
        #[allow(clippy::cast_precision_loss)]
        let m = z.len().max(1) as f64;
        let variance = dot(&z, &z) / m + 2.0 * MEASUREMENT_SD * MEASUREMENT_SD;
        (z, variance)
    }

    /// How much measuring setting `i` is expected to reduce the ensemble's variance of
    /// ln(speed), summed over both directions of every setting of the pool: the integrated
    /// variance reduction `sum_t p_t cov(z_i, y_t)^2 / var(z_i)`, `z_i` the sum of i's two
    /// directions, weighted by each setting's probability to run (an infeasible setting has no
    /// speed to predict, and measuring one reveals none). A setting the members disagree on
    /// but whose disagreement says nothing about the others scores low; one that resolves the
    /// disagreement of many scores high.
    pub fn reduction(&self, i: usize) -> f64 {
        let (z, variance) = self.observation(i);
        #[allow(clippy::cast_precision_loss)]
        let m = z.len().max(1) as f64;
        let explained: f64 = self
            .deviations
            .iter()
            .zip(&self.feasible)
            .map(|(t, p)| p * t.iter().map(|e| (dot(&z, e) / m).powi(2)).sum::<f64>())
            .sum();
        self.feasible[i] * explained / variance
    }

    /// [`Spread::reduction`] of every setting still `open` (0 for the others).
    pub fn reductions(&self, open: &[bool]) -> Vec<f64> {
        (0..self.deviations.len())
            .map(|i| if open[i] { self.reduction(i) } else { 0.0 })
            .collect()
    }

    /// Conditions the members on setting `i` being measured (its outcome not known yet): every
    /// deviation loses the part `i`'s observation explains (the ensemble Kalman update), so
    /// the next pick of a round is not a near copy of this one.
    pub fn observe(&mut self, i: usize) {
        let (z, variance) = self.observation(i);
        #[allow(clippy::cast_precision_loss)]
        let m = z.len().max(1) as f64;
        for t in &mut self.deviations {
            for e in t.iter_mut() {
                if e.len() != z.len() {
                    continue;
                }
                let gain = dot(&z, e) / m / variance;
                for (x, y) in e.iter_mut().zip(&z) {
                    *x -= gain * y;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setting whose members' ln(speed) are `members` in both directions, surely feasible.
    fn setting(members: &[f64]) -> Prediction {
        let mut out = [0.0; OUTPUTS];
        out[OUT_FEASIBLE_LOGIT] = 20.0;
        let d = Direction {
            members: members.to_vec(),
            out,
            shift: 0.0,
        };
        Prediction {
            directions: [d.clone(), d],
        }
    }

    #[test]
    fn the_score_prefers_what_settles_many_predictions() {
        // Settings 0 to 3: the members disagree the same way on each (one shared unknown);
        // setting 4: more disagreement, unrelated to theirs.
        let shared = [0.1, -0.1, 0.05, -0.05];
        let alone = [0.12, 0.12, -0.12, -0.12];
        let mut pool: Vec<Prediction> = (0..4).map(|_| setting(&shared)).collect();
        pool.push(setting(&alone));
        assert!(pool[4].disagreement() > pool[0].disagreement());
        let mut spread = Spread::new(&pool);
        let open = vec![true; 5];
        let r = spread.reductions(&open);
        assert!(r.iter().all(|x| x.is_finite() && *x >= 0.0));
        assert!(r[0] > r[4], "{r:?}");
        // Once one of the four is measured, the others have little left to teach; the lone
        // one is untouched.
        spread.observe(0);
        let after = spread.reductions(&open);
        assert!(after[1] < 0.01 * r[1], "{after:?}");
        assert!(
            (after[4] - r[4]).abs() < 1e-9 * r[4].max(1.0),
            "{after:?} {r:?}"
        );
        assert!(after[4] > after[1]);
        // A setting that will not run teaches no speed.
        let mut infeasible = setting(&alone);
        for d in &mut infeasible.directions {
            d.out[OUT_FEASIBLE_LOGIT] = -20.0;
        }
        let spread = Spread::new(&[setting(&alone), infeasible]);
        let r = spread.reductions(&[true, true]);
        assert!(r[1] < 1e-6 * r[0], "{r:?}");
    }
}
