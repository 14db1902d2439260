//! How pairwise speeds compose into the speed of a job among several co-runners: the two rules
//! that use pairs alone, the baselines a model for groups is measured against.
//!
//! For job `i` among co-runners `j`, with `s_ij` its speed next to `j` alone:
//! - **product**: `s_i = prod_j s_ij` (each co-runner takes its own fraction of what is left);
//! - **excess**: `1 / s_i = 1 + sum_j (1 / s_ij - 1)` (each co-runner adds the slowdown it adds
//!   in a pair: what time-slicing of independent jobs gives).

use std::collections::HashMap;

use serde::Serialize;

use super::Dataset;
use super::types::{Group, Mode};

/// A rule that composes pairwise speeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Composition {
    Product,
    Excess,
}

impl Composition {
    pub const ALL: [Composition; 2] = [Composition::Product, Composition::Excess];

    pub fn as_str(self) -> &'static str {
        match self {
            Composition::Product => "product",
            Composition::Excess => "excess",
        }
    }

    /// The speed of a job next to co-runners whose pairwise speeds (the job's own speed next to
    /// each alone) are `pairwise`; 1 (alone) for none.
    pub fn speed(self, pairwise: &[f64]) -> f64 {
        match self {
            Composition::Product => pairwise.iter().product(),
            Composition::Excess => {
                1.0 / (1.0 + pairwise.iter().map(|s| 1.0 / s - 1.0).sum::<f64>())
            }
        }
    }
}

type PairKey = (String, Mode, String, Option<u64>, String, Option<u64>);

fn pair_key(
    gpu: &str,
    mode: Mode,
    (job, share): (&str, Option<f64>),
    (other, other_share): (&str, Option<f64>),
) -> PairKey {
    (
        gpu.to_string(),
        mode,
        job.to_string(),
        share.map(f64::to_bits),
        other.to_string(),
        other_share.map(f64::to_bits),
    )
}

/// The measured pairwise speeds of a dataset, looked up by device, mode, the job and its share,
/// and the co-runner and its share; a setting measured in both orders (a workload next to
/// itself) is the mean of the two.
#[derive(Debug, Clone, Default)]
pub struct PairSpeeds {
    speeds: HashMap<PairKey, (f64, u32)>,
}

impl PairSpeeds {
    pub fn of(dataset: &Dataset) -> PairSpeeds {
        let mut speeds: HashMap<PairKey, (f64, u32)> = HashMap::new();
        for d in dataset.directed_speeds() {
            let (own, other) = if d.job == d.pair.a && d.other == d.pair.b {
                (d.pair.share_a, d.pair.share_b)
            } else {
                (d.pair.share_b, d.pair.share_a)
            };
            let key = pair_key(&d.pair.gpu, d.pair.mode, (d.job, own), (d.other, other));
            let entry = speeds.entry(key).or_insert((0.0, 0));
            entry.0 += d.speed;
            entry.1 += 1;
        }
        PairSpeeds { speeds }
    }

    /// The speed of `job` (at `share`) next to `other` (at `other_share`) alone.
    pub fn get(
        &self,
        gpu: &str,
        mode: Mode,
        job: (&str, Option<f64>),
        other: (&str, Option<f64>),
    ) -> Option<f64> {
        self.speeds
            .get(&pair_key(gpu, mode, job, other))
            .map(|(sum, n)| sum / f64::from(*n))
    }

    /// The pairwise speeds of job `index` of `group` next to each other job; `None` where a pair
    /// was not measured.
    pub fn of_job(&self, group: &Group, index: usize) -> Option<Vec<f64>> {
        let job = &group.jobs[index];
        group
            .jobs
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != index)
            .map(|(_, other)| {
                self.get(
                    &group.gpu,
                    group.mode,
                    (&job.workload, job.share),
                    (&other.workload, other.share),
                )
            })
            .collect()
    }
}

/// How well one rule composes a dataset's measured pairs into its measured groups of one
/// device, mode and size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompositionError {
    pub gpu: String,
    pub mode: Mode,
    /// Jobs in the group.
    pub size: usize,
    pub rule: Composition,
    /// Jobs of successful groups whose every pair was measured.
    pub jobs: usize,
    /// Jobs of successful groups with a pair not measured (left out).
    pub without_pairs: usize,
    /// Mean absolute percentage error of the composed speed; `None` (null in JSON) when no job
    /// had every pair measured (`jobs` is 0), so nothing was scored.
    pub mape_speed: Option<f64>,
    /// Mean of composed minus measured speed (positive: the rule is optimistic); `None` (null)
    /// when `jobs` is 0.
    pub bias_speed: Option<f64>,
}

/// Each rule's error on each device, mode and group size of `dataset` that has a successful
/// group.
pub fn composition_errors(dataset: &Dataset) -> Vec<CompositionError> {
    let pairs = PairSpeeds::of(dataset);
    let speeds = dataset.group_speeds();
    let mut kinds: Vec<(String, Mode, usize)> = speeds
        .iter()
        .map(|s| (s.group.gpu.clone(), s.group.mode, s.group.jobs.len()))
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut out = Vec::new();
    for (gpu, mode, size) in kinds {
        for rule in Composition::ALL {
            let (mut errors, mut biases, mut missing) = (Vec::new(), Vec::new(), 0);
            for s in speeds.iter().filter(|s| {
                s.group.jobs.len() == size && s.group.mode == mode && s.group.gpu == gpu
            }) {
                match pairs.of_job(s.group, s.index) {
                    Some(pairwise) => {
                        let composed = rule.speed(&pairwise);
                        errors.push((composed - s.speed).abs() / s.speed);
                        biases.push(composed - s.speed);
                    }
                    None => missing += 1,
                }
            }
            #[allow(clippy::cast_precision_loss)]
            let mean =
                |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
            out.push(CompositionError {
                gpu: gpu.clone(),
                mode,
                size,
                rule,
                jobs: errors.len(),
                without_pairs: missing,
                mape_speed: mean(&errors),
                bias_speed: mean(&biases),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Composition;

    #[test]
    fn the_rules_compose_as_documented() {
        // Two co-runners that each halve the job: a quarter by product, a third by excess.
        assert!((Composition::Product.speed(&[0.5, 0.5]) - 0.25).abs() < 1e-12);
        assert!((Composition::Excess.speed(&[0.5, 0.5]) - 1.0 / 3.0).abs() < 1e-12);
        // One co-runner: both are the pair's own speed; none: alone.
        for rule in Composition::ALL {
            assert!((rule.speed(&[0.7]) - 0.7).abs() < 1e-12);
            assert!((rule.speed(&[]) - 1.0).abs() < 1e-12);
        }
    }
}
