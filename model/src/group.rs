//! A group of three or more jobs on one device, answered from the model's pairwise predictions:
//! each job's slowdown is 1 plus the extra slowdown each co-runner causes it in a pair (the
//! excess rule of `duet_core::dataset::compose`), for the point and the p90 alike. The rule is
//! order-invariant and holds any group size; which rule composes best is measured against
//! measured groups (BENCHMARKS.md, "Groups of three or more"). Where the model was trained with
//! measured groups of the size, the composed p90 carries their conformal shift
//! (`Calibration::group_shift`), never narrower than the point. A model whose network learned
//! groups of a size answers that size itself, one row per job (`from_network`; chosen by the
//! trainer where it beat this composition on measured groups it was not trained on).

use duet_core::api::{Calibration, GroupJobPrediction, GroupPrediction, Prediction};
use duet_core::dataset::MAX_GROUP_SIZE;
use duet_core::dataset::compose::Composition;

/// The rule the answers compose by.
pub const RULE: Composition = Composition::Excess;

/// The pairs within a group of `size` jobs: `size (size - 1) / 2`.
pub fn pairs_in(size: usize) -> usize {
    size * size.saturating_sub(1) / 2
}

/// A composed p10 speed after a group shift of its ln, never above the point (`speed`): the p90
/// slowdown is never narrower than the predicted slowdown.
pub fn shifted_p10(p10: f64, speed: f64, shift: f64) -> f64 {
    (p10.ln() - shift).exp().min(speed)
}

/// The unordered pairs `(i, j)`, `i < j`, of a group of `size` jobs, in the order their
/// predictions are read by [`compose`].
pub fn pairs_of(size: usize) -> Vec<(usize, usize)> {
    (0..size)
        .flat_map(|i| (i + 1..size).map(move |j| (i, j)))
        .collect()
}

/// The answer for a group of `size` jobs from the predictions of its pairs in [`pairs_of`]
/// order (job `i` as `a`, `j` as `b`): each job's composed ln speed and ln p10 speed moved by
/// its group effect (`effects[k]`, `Calibration::group_effect`; none where `effects` is
/// empty), then the ln p10 shifted by `shift` (and the count of groups that fitted it) where
/// the model has one for the size. `feasible` says every
/// pair fits (necessary, not sufficient: memory is known pairwise only); the probability and
/// the calibration class are the least of the pairs'. `None` where the count does not match or
/// the group holds more than `MAX_GROUP_SIZE` jobs.
pub fn compose(
    size: usize,
    predictions: &[Prediction],
    shift: Option<(f64, usize)>,
    effects: &[f64],
) -> Option<GroupPrediction> {
    if pairs_in(size) != predictions.len() || !(2..=MAX_GROUP_SIZE).contains(&size) {
        return None;
    }
    // Each job's pairwise speeds and p10s, on the stack: a large request composes many groups.
    let mut speeds = [[0f64; MAX_GROUP_SIZE]; MAX_GROUP_SIZE];
    let mut p90s = [[0f64; MAX_GROUP_SIZE]; MAX_GROUP_SIZE];
    let mut filled = [0usize; MAX_GROUP_SIZE];
    let mut measured = [None; MAX_GROUP_SIZE];
    let mut next = predictions.iter();
    for i in 0..size {
        for j in i + 1..size {
            let p = next.next()?;
            measured[i] = measured[i].or(p.measured_a);
            measured[j] = measured[j].or(p.measured_b);
            speeds[i][filled[i]] = f64::from(p.speed_a);
            p90s[i][filled[i]] = 1.0 / f64::from(p.slowdown_a_p90);
            filled[i] += 1;
            speeds[j][filled[j]] = f64::from(p.speed_b);
            p90s[j][filled[j]] = 1.0 / f64::from(p.slowdown_b_p90);
            filled[j] += 1;
        }
    }
    #[allow(clippy::cast_possible_truncation)]
    let jobs: Vec<GroupJobPrediction> = (0..size)
        .map(|k| {
            let moved = effects.get(k).map_or(1.0, |e| e.exp());
            let speed = RULE.speed(&speeds[k][..filled[k]]) * moved;
            let p10 = RULE.speed(&p90s[k][..filled[k]]) * moved;
            let p10 = shift.map_or(p10, |(by, _)| shifted_p10(p10, speed, by));
            GroupJobPrediction {
                speed: speed as f32,
                slowdown: (1.0 / speed) as f32,
                slowdown_p90: (1.0 / p10) as f32,
                measured: measured[k],
            }
        })
        .collect();
    Some(GroupPrediction {
        feasible: predictions.iter().all(|p| p.feasible),
        feasible_probability: predictions
            .iter()
            .map(|p| p.feasible_probability)
            .fold(1.0, f32::min),
        combined: jobs.iter().map(|j| j.speed).sum(),
        calibration: predictions
            .iter()
            .map(|p| p.calibration)
            .max()
            .unwrap_or(Calibration::Known),
        composition: if effects.iter().any(|e| *e != 0.0) {
            format!("{}+effects", RULE.as_str())
        } else {
            RULE.as_str().to_string()
        },
        p90_groups: shift.map_or(0, |(_, n)| u32::try_from(n).unwrap_or(u32::MAX)),
        jobs,
    })
}

/// How the network's rows of one group become its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkDecode {
    /// The group's class: its least known job's.
    pub class: Calibration,
    /// The shift of every job's ln(p10 speed).
    pub shift: f64,
    /// Measured groups that calibrated the shift.
    pub groups: usize,
    /// Each job's measured pair settings, in the group's order.
    pub measured: Vec<Option<u32>>,
}

impl NetworkDecode {
    /// The decoding of a group of `jobs` (each one job's encoding under `spec`) on `gpu`: the
    /// class of its least known job, and its size's group shift widened by as much as that
    /// class widens a pair over a known one on the device.
    pub fn of_group(
        spec: &crate::encoding::FeatureSpec,
        calibration: &crate::calibration::Calibration,
        jobs: &[&[f32]],
        gpu: &str,
    ) -> NetworkDecode {
        let novelty = jobs
            .iter()
            .map(|j| spec.novelty(j, Some(gpu)))
            .max()
            .unwrap_or(crate::encoding::Novelty::Known);
        let (class, class_shift) = calibration.resolve(novelty.class(), Some(gpu));
        let known_shift = calibration.shift(Calibration::Known, Some(gpu));
        let (group_shift, groups) = calibration.group_shift(jobs.len()).unwrap_or((0.0, 0));
        NetworkDecode {
            class,
            shift: group_shift + (class_shift - known_shift).max(0.0),
            groups,
            measured: jobs
                .iter()
                .map(|j| spec.measured_of(j, Some(gpu)))
                .collect(),
        }
    }
}

/// One group's answer from its jobs' network outputs (`rows`, one per job, in the group's
/// order): each job's speed and its p10 shifted by `d.shift` (never above the point), the
/// group feasible where every job's row says so.
pub fn from_network(d: &NetworkDecode, rows: &[&[f32]]) -> GroupPrediction {
    use crate::network::{OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUT_LOG_SPEED_P10, bounded_exp};
    let mut probability = 1.0f32;
    #[allow(clippy::cast_possible_truncation)]
    let jobs: Vec<GroupJobPrediction> = rows
        .iter()
        .zip(&d.measured)
        .map(|(o, measured)| {
            let logit = f64::from(o[OUT_FEASIBLE_LOGIT]);
            probability = probability.min((1.0 / (1.0 + (-logit).exp())) as f32);
            let speed = bounded_exp(o[OUT_LOG_SPEED]);
            // Never narrower than the point.
            let p90 = bounded_exp(d.shift - f64::from(o[OUT_LOG_SPEED_P10])).max(1.0 / speed);
            GroupJobPrediction {
                speed: speed as f32,
                slowdown: (1.0 / speed) as f32,
                slowdown_p90: p90 as f32,
                measured: *measured,
            }
        })
        .collect();
    GroupPrediction {
        feasible: probability >= 0.5,
        feasible_probability: probability,
        combined: jobs.iter().map(|j| j.speed).sum(),
        calibration: d.class,
        composition: NETWORK.to_string(),
        p90_groups: u32::try_from(d.groups).unwrap_or(u32::MAX),
        jobs,
    }
}

/// `GroupPrediction::composition` of a group the network answered itself.
pub const NETWORK: &str = "network";

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(speed_a: f32, speed_b: f32, calibration: Calibration) -> Prediction {
        Prediction {
            feasible: true,
            feasible_probability: 0.9,
            speed_a,
            speed_b,
            slowdown_a: 1.0 / speed_a,
            slowdown_b: 1.0 / speed_b,
            slowdown_a_p90: 1.25 / speed_a,
            slowdown_b_p90: 1.25 / speed_b,
            combined: speed_a + speed_b,
            calibration,
            measured_a: None,
            measured_b: None,
        }
    }

    #[test]
    fn a_pair_is_answered_as_its_prediction_and_a_triple_adds_each_excess() {
        let alone = compose(2, &[pair(0.8, 0.6, Calibration::Known)], None, &[]).expect("a pair");
        assert!((alone.jobs[0].speed - 0.8).abs() < 1e-6);
        assert!((alone.jobs[1].slowdown_p90 - 1.25 / 0.6).abs() < 1e-5);
        // Job 0 next to 1 (0.5) and 2 (0.5): slowdown 1 + 1 + 1 = 3.
        let triple = compose(
            3,
            &[
                pair(0.5, 0.8, Calibration::Known),
                pair(0.5, 0.9, Calibration::New),
                pair(0.7, 0.7, Calibration::Known),
            ],
            None,
            &[],
        )
        .expect("a triple");
        assert!((triple.jobs[0].slowdown - 3.0).abs() < 1e-5);
        // Job 0's p90: 1 + 2 * (2.5 - 1).
        assert!((triple.jobs[0].slowdown_p90 - 4.0).abs() < 1e-4);
        assert_eq!(triple.calibration, Calibration::New);
        assert!(triple.jobs.iter().all(|j| j.slowdown_p90 >= j.slowdown));
        assert_eq!(triple.p90_groups, 0);
        assert!(compose(3, &[pair(0.5, 0.5, Calibration::Known)], None, &[]).is_none());
        // A group shift of ln 2 doubles job 0's p90 slowdown; one of -ln 10 would undercut the
        // point, and stops there.
        let three = [
            pair(0.5, 0.8, Calibration::Known),
            pair(0.5, 0.9, Calibration::Known),
            pair(0.7, 0.7, Calibration::Known),
        ];
        let wider = compose(3, &three, Some((2f64.ln(), 56)), &[]).expect("a triple");
        assert!((wider.jobs[0].slowdown_p90 - 8.0).abs() < 1e-3);
        assert_eq!(wider.p90_groups, 56);
        let narrow = compose(3, &three, Some((-(10f64.ln()), 56)), &[]).expect("a triple");
        assert!((narrow.jobs[0].slowdown_p90 - narrow.jobs[0].slowdown).abs() < 1e-5);
        // A group effect of ln 0.5 on job 1 halves its speed and its p10 (so doubles both
        // slowdowns), before the shift; the others' answers stand.
        let moved = compose(3, &three, None, &[0.0, 0.5f64.ln(), 0.0]).expect("a triple");
        let plain = compose(3, &three, None, &[]).expect("a triple");
        assert!((moved.jobs[1].slowdown - 2.0 * plain.jobs[1].slowdown).abs() < 1e-4);
        assert!((moved.jobs[1].slowdown_p90 - 2.0 * plain.jobs[1].slowdown_p90).abs() < 1e-4);
        assert_eq!(moved.jobs[0], plain.jobs[0]);
        assert_eq!(
            (moved.composition.as_str(), plain.composition.as_str()),
            ("excess+effects", "excess")
        );
        assert_eq!(
            pairs_of(4),
            [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
        );
    }

    #[test]
    fn the_networks_rows_answer_each_job_and_its_p90_is_never_narrower_than_the_point() {
        let d = NetworkDecode {
            class: Calibration::Known,
            shift: 0.1,
            groups: 56,
            measured: vec![Some(5), None, Some(7)],
        };
        // ln speed, ln p10, feasibility logit per job; the third's p10 above its point.
        let rows: [[f32; 3]; 3] = [[-0.5, -0.7, 3.0], [-1.0, -1.2, 2.0], [-0.2, 0.3, -1.0]];
        let refs: Vec<&[f32]> = rows.iter().map(|r| &r[..]).collect();
        let g = from_network(&d, &refs);
        assert_eq!(g.composition, NETWORK);
        assert_eq!(g.p90_groups, 56);
        assert!((f64::from(g.jobs[0].speed) - (-0.5f64).exp()).abs() < 1e-6);
        assert!((f64::from(g.jobs[0].slowdown_p90) - 0.8f64.exp()).abs() < 1e-5);
        assert!((f64::from(g.jobs[2].slowdown_p90) - f64::from(g.jobs[2].slowdown)).abs() < 1e-6);
        assert_eq!(g.jobs[1].measured, None);
        // One job's row says it does not fit: neither does the group.
        assert!(!g.feasible);
        assert!((f64::from(g.feasible_probability) - 1.0 / (1.0 + 1f64.exp())).abs() < 1e-6);
        let sum: f32 = g.jobs.iter().map(|j| j.speed).sum();
        assert!((g.combined - sum).abs() < 1e-6);
    }
}
