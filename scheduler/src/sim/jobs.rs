//! The simulation's jobs: the trace's GPU pods that ran, each with a workload of the dataset
//! drawn for it, and arrivals compressed to a target offered load.

use anyhow::{Result, bail};

use crate::trace::{Pod, Trace};
use duet_core::rng::Rng;

/// A job of the simulation, the same for every policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The pod it comes from.
    pub pod: String,
    /// Seconds from the start of the (compressed) trace.
    pub arrival: f64,
    /// Seconds of work at full speed: the pod's runtime in the trace.
    pub work: f64,
    pub gpus: u32,
    /// Thousandths of a GPU the pod asked for (1000: whole GPUs).
    pub gpu_milli: u32,
    /// An inference service (LS pods), with the speed objective; otherwise a training job.
    pub inference: bool,
    /// The dataset workload it runs.
    pub workload: String,
    /// That workload's device memory, where the dataset measured it (`mem_used_mib`).
    pub memory_mib: Option<f64>,
}

/// A workload of the ground-truth dataset, as jobs are given them.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetWorkload {
    pub id: String,
    pub inference: bool,
    pub memory_mib: Option<f64>,
}

impl DatasetWorkload {
    /// The workloads of `dataset`, their footprint from its `mem_used_mib` feature.
    pub fn of(dataset: &duet_core::dataset::Dataset) -> Vec<DatasetWorkload> {
        dataset
            .workloads
            .iter()
            .map(|w| DatasetWorkload {
                id: w.workload.clone(),
                inference: w.kind == duet_core::dataset::JobKind::Infer,
                memory_mib: w
                    .features
                    .get("mem_used_mib")
                    .and_then(duet_core::dataset::FeatureValue::as_number),
            })
            .collect()
    }
}

/// How the trace became jobs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Workload {
    pub pods: usize,
    pub jobs: usize,
    pub cpu_only: usize,
    pub never_ran: usize,
    /// Arrival times are divided by this.
    pub compression: f64,
    /// The arrival window after compression (seconds from the first arrival), over which load
    /// and utilisation are reported.
    pub window: (f64, f64),
    /// The offered load: GPUs the jobs would hold if each started on arrival, averaged between
    /// the first and the last arrival, over the cluster's GPUs.
    pub load: f64,
}

/// The arrival window of `pods`, uncompressed: from the 1st percentile of creation times to the
/// last. (The trace is a snapshot: its first pods are the few long-lived survivors of the
/// previous months, and 98% of the pods arrive in its last five weeks.)
fn arrival_window(pods: &[&Pod]) -> (f64, f64) {
    let mut times: Vec<f64> = pods.iter().map(|p| p.creation).collect();
    times.sort_by(f64::total_cmp);
    let start = times[times.len() / 100];
    (start, times[times.len() - 1])
}

/// The offered load of `pods` with arrivals compressed `c` times: the GPUs they would hold if
/// each started on arrival, averaged over the arrival window, over the cluster's `gpus`.
fn offered_load(pods: &[&Pod], first: f64, c: f64, gpus: u32) -> f64 {
    let (from, to) = arrival_window(pods);
    let (from, to) = ((from - first) / c, (to - first) / c);
    let span = (to - from).max(1.0);
    let held: f64 = pods
        .iter()
        .map(|p| {
            let start = (p.creation - first) / c;
            let stop = (start + p.runtime().unwrap_or(0.0)).min(to);
            f64::from(p.num_gpu) * (stop - start.max(from)).max(0.0)
        })
        .sum();
    held / (span * f64::from(gpus))
}

/// The range of the arrivals' compression: the `--load` search's, and `--compression`'s (a
/// trace's seconds divided by 1e-308 are infinite).
pub const MIN_COMPRESSION: f64 = 1e-3;
pub const MAX_COMPRESSION: f64 = 1e6;

/// Turns the trace's pods into jobs: GPU pods that ran, arrivals compressed so that the offered
/// load on `gpus` GPUs is `load` (or by `compression` when given), each job given a workload of
/// the dataset (inference workloads for LS pods where the dataset has any), seeded; `limit` keeps
/// the first jobs by arrival.
pub fn jobs(
    trace: &Trace,
    gpus: u32,
    load: Option<f64>,
    compression: Option<f64>,
    oracle_workloads: &[DatasetWorkload],
    seed: u64,
    limit: Option<usize>,
) -> Result<(Vec<Job>, Workload)> {
    let mut ran: Vec<&Pod> = trace
        .pods
        .iter()
        .filter(|p| p.num_gpu > 0 && p.runtime().is_some_and(|r| r > 0.0))
        .collect();
    ran.sort_by(|a, b| a.creation.total_cmp(&b.creation).then(a.name.cmp(&b.name)));
    if let Some(n) = limit {
        ran.truncate(n);
    }
    let cpu_only = trace.pods.iter().filter(|p| p.num_gpu == 0).count();
    let never_ran = trace
        .pods
        .iter()
        .filter(|p| p.num_gpu > 0 && !p.runtime().is_some_and(|r| r > 0.0))
        .count();
    if ran.is_empty() {
        bail!(
            "{}: no GPU pod that ran: nothing to simulate",
            trace.dir.display()
        );
    }
    let first = ran.iter().map(|p| p.creation).fold(f64::INFINITY, f64::min);
    let load_at = |c: f64| offered_load(&ran, first, c, gpus);
    let compression = match (compression, load) {
        (Some(c), _) => c,
        (None, Some(target)) => {
            // The load grows with the compression: bisect on its logarithm.
            let (mut lo, mut hi) = (MIN_COMPRESSION, MAX_COMPRESSION);
            if load_at(hi) < target {
                bail!(
                    "--load {target}: the trace cannot offer that much to {gpus} GPUs (at most \
                     {:.2}, with arrivals compressed {hi}x)",
                    load_at(hi)
                );
            }
            for _ in 0..100 {
                let mid = (lo * hi).sqrt();
                if load_at(mid) < target {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            hi
        }
        (None, None) => 1.0,
    };
    let inference: Vec<&DatasetWorkload> =
        oracle_workloads.iter().filter(|w| w.inference).collect();
    let training: Vec<&DatasetWorkload> =
        oracle_workloads.iter().filter(|w| !w.inference).collect();
    let all: Vec<&DatasetWorkload> = oracle_workloads.iter().collect();
    if all.is_empty() {
        bail!("the dataset has no workload to give the jobs");
    }
    let mut jobs: Vec<Job> = ran
        .iter()
        .map(|p| {
            let is_inference = p.qos.is_latency_sensitive();
            let pool = match (is_inference, inference.is_empty(), training.is_empty()) {
                (true, false, _) => &inference,
                (false, _, false) => &training,
                _ => &all,
            };
            // Seeded by the pod's name: the same pod runs the same workload in every run.
            let mut rng = Rng::new(
                seed ^ duet_core::hash::fnv1a(p.name.as_bytes(), duet_core::hash::FNV_OFFSET),
            );
            let workload = pool[rng.below(pool.len())];
            Job {
                pod: p.name.clone(),
                arrival: (p.creation - first) / compression,
                work: p.runtime().unwrap_or(0.0),
                gpus: p.num_gpu,
                gpu_milli: if p.num_gpu == 1 {
                    p.gpu_milli.max(1)
                } else {
                    1000
                },
                inference: is_inference,
                workload: workload.id.clone(),
                memory_mib: workload.memory_mib,
            }
        })
        .collect();
    jobs.sort_by(|a, b| a.arrival.total_cmp(&b.arrival).then(a.pod.cmp(&b.pod)));
    Ok((
        jobs,
        Workload {
            pods: trace.pods.len(),
            jobs: ran.len(),
            cpu_only,
            never_ran,
            compression,
            window: {
                let (from, to) = arrival_window(&ran);
                ((from - first) / compression, (to - first) / compression)
            },
            load: load_at(compression),
        },
    ))
}
