//! What a simulation reports under one policy, and the statistics behind it.

use super::PolicyKind;
use super::jobs::Job;

/// What happened under one policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Outcome {
    pub kind: PolicyKind,
    pub policy: String,
    pub predictor: Option<String>,
    /// Per job, in the order of `jobs`: completion minus arrival, seconds.
    #[serde(skip)]
    pub jct: Vec<f64>,
    pub jobs: usize,
    pub avg_jct: f64,
    pub p50_jct: f64,
    pub p99_jct: f64,
    pub avg_wait: f64,
    /// Average JCT of the inference jobs and of the training jobs.
    pub avg_jct_inference: f64,
    pub avg_jct_training: f64,
    /// Last completion, seconds from the first arrival (a job of months sets it).
    pub makespan: f64,
    /// Jobs completed per hour during the arrival window.
    pub jobs_per_hour: f64,
    /// Time-average share of GPUs running at least one job, from the first to the last arrival
    /// (after it, a few jobs that run for weeks leave the cluster nearly idle).
    pub busy: f64,
    /// Time-average true normalised throughput delivered per GPU over the same window (can pass
    /// the busy share where pairs do more than one job alone).
    pub goodput: f64,
    /// `busy` over the whole makespan.
    pub busy_makespan: f64,
    pub inference_jobs: usize,
    /// Inference jobs whose true speed fell below the objective at some point.
    pub slo_violations: usize,
    /// Share of inference job running time spent below the objective.
    pub slo_violation_time: f64,
    /// Placements next to a resident job.
    pub co_located: usize,
    /// Of those, placements with two or more residents (a GPU holding three jobs or more), and
    /// how many of them had a measured truth (the others: composed from measured pairs).
    pub joined: usize,
    pub joined_measured: usize,
    /// The most jobs one GPU held at once.
    pub peak_gpu_jobs: usize,
    /// Placements that the oracle says fail (out of memory): the newcomer is put back in line.
    pub failed_placements: usize,
    pub rounds: usize,
    pub round_mean_ms: f64,
    pub round_p99_ms: f64,
    pub predictor_calls: usize,
    pub predictor_ms: f64,
    pub queries: usize,
    pub wall_s: f64,
    /// (time, busy share, goodput) at `series_points` instants from the start of the arrival
    /// window to a quarter of its length past its end.
    pub series: Vec<(f64, f64, f64)>,
}

/// The mean of `values` over the inference jobs (`inference`) or the training jobs.
pub(super) fn class_mean(values: &[f64], jobs: &[Job], inference: bool) -> f64 {
    let picked: Vec<f64> = values
        .iter()
        .zip(jobs)
        .filter(|(_, j)| j.inference == inference)
        .map(|(v, _)| *v)
        .collect();
    picked.iter().sum::<f64>() / picked.len().max(1) as f64
}

/// `q` quantile of ascending `sorted` by nearest rank.
pub(super) fn quantile(sorted: &[f64], q: f64) -> f64 {
    duet_core::stats::nearest_rank(sorted, q)
}
