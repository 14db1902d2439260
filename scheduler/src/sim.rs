//! The trace-driven cluster simulator: the trace's pods as jobs on a cluster drawn from the
//! trace's nodes, placed by a policy, progressing at the speeds the oracle (a dataset's measured
//! pairs) says, never at the speeds a model predicts.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::predictor::{Oracle, Outlook, PairKey, Predictor, Query, Sharing};
use crate::pricing::{self, FreeNode, Placement, PricingConfig, Resident, Waiting};
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
            let (mut lo, mut hi) = (1e-3f64, 1e6f64);
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

/// The GPUs of the simulated cluster, by node, drawn from the trace's nodes (seeded).
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// GPUs per node, in order; GPU ids count up across nodes.
    pub nodes: Vec<u32>,
    pub models: Vec<String>,
}

impl Cluster {
    /// Nodes drawn at random from `trace` until they hold `gpus` GPUs (the last node drawn is
    /// cut to fit).
    pub fn draw(trace: &Trace, gpus: u32, seed: u64) -> Result<Cluster> {
        if gpus == 0 {
            bail!("--gpus: a cluster needs at least one GPU");
        }
        let total: u32 = trace.nodes.iter().map(|n| n.gpus).sum();
        if gpus > total {
            bail!("--gpus {gpus}: the trace's nodes hold {total} GPUs; choose at most that many");
        }
        let mut order: Vec<usize> = (0..trace.nodes.len()).collect();
        Rng::new(seed).shuffle(&mut order);
        let mut nodes = Vec::new();
        let mut models = Vec::new();
        let mut have = 0;
        for i in order {
            if have == gpus {
                break;
            }
            let n = trace.nodes[i].gpus.min(gpus - have);
            nodes.push(n);
            models.push(trace.nodes[i].model.clone());
            have += n;
        }
        Ok(Cluster { nodes, models })
    }

    pub fn gpus(&self) -> u32 {
        self.nodes.iter().sum()
    }

    /// Refuses a cluster where some job can never run: more GPUs than any node holds.
    pub fn check_fits(&self, jobs: &[Job]) -> Result<()> {
        let largest_node = self.nodes.iter().copied().max().unwrap_or(0);
        if let Some(job) = jobs.iter().max_by_key(|j| j.gpus)
            && job.gpus > largest_node
        {
            bail!(
                "the cluster ({} GPUs, at most {largest_node} on one node) is smaller than the \
                 largest job: pod `{}` needs {} GPUs on one node; simulate more GPUs or another \
                 --seed",
                self.gpus(),
                job.pod,
                job.gpus
            );
        }
        Ok(())
    }
}

/// How jobs are placed.
#[derive(Debug)]
pub enum Policy<'p> {
    /// Whole GPUs only, first come first served (a later job that fits may start first).
    Exclusive,
    /// One-GPU pods that asked for part of a GPU are packed best-fit by their request, blind to
    /// interference; others take whole GPUs.
    Packing,
    /// The pricing loop, its slowdowns from this predictor.
    Pricing(&'p mut dyn Predictor),
}

/// Knobs of one simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The minimum speed of inference jobs.
    pub slo: f64,
    /// Priority weight of inference (LS) jobs; training jobs weigh 1.
    pub inference_weight: f64,
    /// A waiting job's weight grows by its own size every this many seconds.
    pub aging: f64,
    pub pricing: PricingConfig,
    /// Points of the utilisation series kept for the report.
    pub series_points: usize,
    /// Give the pricing loop the queue's state (GPU release rate, typical runtime).
    pub queue_aware: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            slo: 0.6,
            inference_weight: 2.0,
            aging: 3600.0,
            pricing: PricingConfig::default(),
            series_points: 400,
            queue_aware: true,
        }
    }
}

/// Which policy an outcome is, as the report tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    Exclusive,
    Packing,
    /// The pricing loop on a predictor's slowdowns.
    Duet,
    /// The pricing loop on the measured slowdowns.
    Oracle,
}

impl PolicyKind {
    /// Its name in legends.
    pub fn label(self) -> &'static str {
        match self {
            PolicyKind::Exclusive => "exclusive",
            PolicyKind::Packing => "packing",
            PolicyKind::Duet => "pricing + duet",
            PolicyKind::Oracle => "pricing + oracle",
        }
    }
}

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

#[derive(Debug, Clone)]
struct Running {
    remaining: f64,
    speed: f64,
    since: f64,
    version: u64,
    gpus: Vec<usize>,
    start: f64,
    below_slo_since: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Ordered before arrivals at the same instant: freed GPUs are seen by the round.
    Done {
        job: usize,
        version: u64,
    },
    Arrive {
        job: usize,
    },
}

/// A predictor that also knows which pairs already failed in this simulation.
#[derive(Debug)]
struct Remembering<'p, 'f> {
    inner: &'p mut dyn Predictor,
    failed: &'f HashSet<PairKey>,
}

impl Predictor for Remembering<'_, '_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        let mut out = self.inner.predict(gpu, queries)?;
        if !self.failed.is_empty() {
            for (o, q) in out.iter_mut().zip(queries) {
                if self
                    .failed
                    .contains(&(q.a.to_string(), q.b.to_string(), q.sharing.key()))
                {
                    o.feasible = false;
                }
            }
        }
        Ok(out)
    }
}

/// The simulator's state under one policy.
#[derive(Debug)]
struct World<'a> {
    jobs: &'a [Job],
    oracle: &'a Oracle,
    settings: &'a Settings,
    node_of: Vec<usize>,
    /// The jobs on each GPU (at most two).
    on_gpu: Vec<Vec<usize>>,
    running: Vec<Option<Running>>,
    finished: Vec<Option<f64>>,
    started: Vec<Option<f64>>,
    waiting: Vec<usize>,
    events: BinaryHeap<Reverse<(u64, Event)>>,
    failed: HashSet<PairKey>,
    co_located: usize,
    failed_placements: usize,
    slo_jobs_violated: HashSet<usize>,
    slo_below_time: f64,
    slo_run_time: f64,
    busy_area: f64,
    goodput_area: f64,
    window_busy_area: f64,
    window_goodput_area: f64,
    /// The arrival window: utilisation is reported over it.
    window: (f64, f64),
    last_t: f64,
    /// When jobs finished, in order, and the GPUs freed up to each (the queue estimate's rate).
    finish_times: Vec<f64>,
    freed_gpus: Vec<u64>,
    /// Runtimes (alone) of the finished jobs, sorted (the queue estimate's typical runtime).
    finished_runtimes: Vec<f64>,
    trace: Vec<(f64, f64, f64)>,
}

/// Event times as ordered integers (microseconds): exact ties, no float ordering trouble.
fn tick(t: f64) -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let us = (t * 1e6).round().max(0.0) as u64;
    us
}

/// The mean of `values` over the inference jobs (`inference`) or the training jobs.
fn class_mean(values: &[f64], jobs: &[Job], inference: bool) -> f64 {
    let picked: Vec<f64> = values
        .iter()
        .zip(jobs)
        .filter(|(_, j)| j.inference == inference)
        .map(|(v, _)| *v)
        .collect();
    picked.iter().sum::<f64>() / picked.len().max(1) as f64
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl<'a> World<'a> {
    fn new(
        cluster: &Cluster,
        jobs: &'a [Job],
        window: (f64, f64),
        oracle: &'a Oracle,
        settings: &'a Settings,
    ) -> Self {
        let mut node_of = Vec::new();
        for (n, &count) in cluster.nodes.iter().enumerate() {
            node_of.extend(std::iter::repeat_n(n, count as usize));
        }
        let mut events = BinaryHeap::new();
        for (j, job) in jobs.iter().enumerate() {
            events.push(Reverse((tick(job.arrival), Event::Arrive { job: j })));
        }
        World {
            jobs,
            oracle,
            settings,
            on_gpu: vec![Vec::new(); node_of.len()],
            node_of,
            running: vec![None; jobs.len()],
            finished: vec![None; jobs.len()],
            started: vec![None; jobs.len()],
            waiting: Vec::new(),
            events,
            failed: HashSet::new(),
            co_located: 0,
            failed_placements: 0,
            slo_jobs_violated: HashSet::new(),
            slo_below_time: 0.0,
            slo_run_time: 0.0,
            busy_area: 0.0,
            goodput_area: 0.0,
            window_busy_area: 0.0,
            window_goodput_area: 0.0,
            window,
            last_t: 0.0,
            finish_times: Vec::new(),
            freed_gpus: Vec::new(),
            finished_runtimes: Vec::new(),
            trace: Vec::new(),
        }
    }

    /// Accumulates utilisation from the last instant up to `t`.
    fn advance_to(&mut self, t: f64) {
        let dt = t - self.last_t;
        if dt > 0.0 {
            let gpus = self.on_gpu.len() as f64;
            let busy = self.on_gpu.iter().filter(|g| !g.is_empty()).count() as f64 / gpus;
            let goodput: f64 = self
                .running
                .iter()
                .flatten()
                .map(|r| r.speed * r.gpus.len() as f64)
                .sum::<f64>()
                / gpus;
            self.busy_area += busy * dt;
            self.goodput_area += goodput * dt;
            let inside = (t.min(self.window.1) - self.last_t.max(self.window.0)).max(0.0);
            self.window_busy_area += busy * inside;
            self.window_goodput_area += goodput * inside;
            self.trace.push((self.last_t, busy, goodput));
            self.last_t = t;
        }
    }

    /// Sets a running job's speed at `t`: its progress so far is booked and its completion
    /// rescheduled.
    fn set_speed(&mut self, j: usize, speed: f64, t: f64) {
        let slo = self.settings.slo;
        let inference = self.jobs[j].inference;
        let Some(run) = self.running[j].as_mut() else {
            return;
        };
        run.remaining = (run.remaining - run.speed * (t - run.since)).max(0.0);
        run.since = t;
        run.speed = speed;
        run.version += 1;
        if inference {
            match (run.below_slo_since, speed < slo - 1e-9) {
                (None, true) => {
                    run.below_slo_since = Some(t);
                    self.slo_jobs_violated.insert(j);
                }
                (Some(since), false) => {
                    self.slo_below_time += t - since;
                    run.below_slo_since = None;
                }
                _ => {}
            }
        }
        let done = t + run.remaining / speed;
        self.events.push(Reverse((
            tick(done),
            Event::Done {
                job: j,
                version: run.version,
            },
        )));
    }

    fn start(&mut self, j: usize, gpus: Vec<usize>, speed: f64, t: f64) {
        for &g in &gpus {
            self.on_gpu[g].push(j);
        }
        self.started[j] = Some(t);
        self.running[j] = Some(Running {
            remaining: self.jobs[j].work,
            speed: 1.0,
            since: t,
            version: 0,
            gpus,
            start: t,
            below_slo_since: None,
        });
        self.set_speed(j, speed, t);
    }

    fn finish(&mut self, j: usize, t: f64) {
        let Some(run) = self.running[j].take() else {
            return;
        };
        if self.jobs[j].inference {
            self.slo_run_time += t - run.start;
            if let Some(since) = run.below_slo_since {
                self.slo_below_time += t - since;
            }
        }
        self.finished[j] = Some(t);
        let freed = self.freed_gpus.last().copied().unwrap_or(0) + u64::from(self.jobs[j].gpus);
        self.finish_times.push(t);
        self.freed_gpus.push(freed);
        let work = self.jobs[j].work;
        let at = self.finished_runtimes.partition_point(|r| *r < work);
        self.finished_runtimes.insert(at, work);
        for &g in &run.gpus {
            self.on_gpu[g].retain(|&x| x != j);
            // A job left alone runs at full speed again.
            if let Some(&other) = self.on_gpu[g].first() {
                self.set_speed(other, 1.0, t);
            }
        }
    }

    /// Places `j` on `gpu` next to its resident under `sharing`, at the oracle's speeds; a
    /// pair the oracle says fails puts `j` back in line and is remembered.
    fn place_beside(&mut self, j: usize, gpu: usize, sharing: Sharing, t: f64) -> bool {
        let Some(&resident) = self.on_gpu[gpu].first() else {
            return false;
        };
        let (a, b) = (&self.jobs[j].workload, &self.jobs[resident].workload);
        match self.oracle.lookup(a, b, sharing) {
            Some(truth) if truth.feasible => {
                self.co_located += 1;
                self.set_speed(resident, truth.speed_b, t);
                self.start(j, vec![gpu], truth.speed_a, t);
                true
            }
            _ => {
                self.failed_placements += 1;
                self.failed.insert((a.clone(), b.clone(), sharing.key()));
                false
            }
        }
    }

    fn free_nodes(&self) -> Vec<FreeNode> {
        let nodes = self.node_of.last().map_or(0, |n| n + 1);
        let mut free = vec![Vec::new(); nodes];
        for (g, on) in self.on_gpu.iter().enumerate() {
            if on.is_empty() {
                free[self.node_of[g]].push(g);
            }
        }
        free.into_iter()
            .filter(|f| !f.is_empty())
            .map(|gpus| FreeNode { gpus })
            .collect()
    }

    /// Whole GPUs for the waiting jobs that fit, in order; used by exclusive and packing.
    fn take_whole(&mut self, j: usize, free: &mut [FreeNode], t: f64) -> bool {
        let need = self.jobs[j].gpus as usize;
        let Some(node) = free
            .iter_mut()
            .filter(|n| n.gpus.len() >= need)
            .min_by_key(|n| n.gpus.len())
        else {
            return false;
        };
        let gpus = node.gpus.split_off(node.gpus.len() - need);
        self.start(j, gpus, 1.0, t);
        true
    }

    fn exclusive_round(&mut self, t: f64) {
        let mut free = self.free_nodes();
        let mut left = Vec::with_capacity(self.waiting.len());
        let waiting = std::mem::take(&mut self.waiting);
        for j in waiting {
            if free.iter().all(|n| n.gpus.is_empty()) || !self.take_whole(j, &mut free, t) {
                left.push(j);
            }
        }
        self.waiting = left;
    }

    /// The dataset's sharing closest to a request of `milli` thousandths of a GPU.
    fn sharing_for(&self, milli: u32) -> Option<Sharing> {
        let want = f64::from(milli) / 10.0;
        self.oracle.sharings().iter().copied().min_by(|x, y| {
            let d = |s: &Sharing| s.share_a.map_or(0.0, |a| (a - want).abs());
            d(x).total_cmp(&d(y))
        })
    }

    fn packing_round(&mut self, t: f64) {
        let mut free = self.free_nodes();
        // GPUs holding one pod that asked for part of a GPU, with the thousandths it uses.
        let mut hosts: Vec<(usize, u32)> = self
            .on_gpu
            .iter()
            .enumerate()
            .filter_map(|(g, on)| match on[..] {
                [r] if self.jobs[r].gpus == 1 && self.jobs[r].gpu_milli < 1000 => {
                    Some((g, self.jobs[r].gpu_milli))
                }
                _ => None,
            })
            .collect();
        let waiting = std::mem::take(&mut self.waiting);
        let mut left = Vec::with_capacity(waiting.len());
        for j in waiting {
            let any_free = free.iter().any(|n| !n.gpus.is_empty());
            if !any_free && hosts.is_empty() {
                left.push(j);
                continue;
            }
            let job = &self.jobs[j];
            let (milli, sharer) = (job.gpu_milli, job.gpus == 1 && job.gpu_milli < 1000);
            if sharer {
                // Best fit: the shared GPU with the least room left that still holds the request.
                let best = hosts
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, used))| used + milli <= 1000)
                    .min_by_key(|(_, (_, used))| 1000 - used - milli)
                    .map(|(i, (g, _))| (i, *g));
                if let Some((i, g)) = best
                    && let Some(sharing) = self.sharing_for(milli)
                {
                    let r = self.on_gpu[g][0];
                    let key = (
                        job.workload.clone(),
                        self.jobs[r].workload.clone(),
                        sharing.key(),
                    );
                    if !self.failed.contains(&key) && self.place_beside(j, g, sharing, t) {
                        hosts.swap_remove(i);
                        continue;
                    }
                }
            }
            if any_free && self.take_whole(j, &mut free, t) {
                if sharer && let Some(&g) = self.running[j].as_ref().and_then(|r| r.gpus.first()) {
                    hosts.push((g, milli));
                }
                continue;
            }
            left.push(j);
        }
        self.waiting = left;
    }

    fn pricing_round(
        &mut self,
        t: f64,
        predictor: &mut dyn Predictor,
        gpu_model: &str,
        stats: &mut RoundLog,
    ) -> Result<()> {
        let free = self.free_nodes();
        let residents: Vec<Resident> = self
            .on_gpu
            .iter()
            .enumerate()
            .filter_map(|(g, on)| match on[..] {
                [r] if self.jobs[r].gpus == 1 => Some(Resident {
                    gpu: g,
                    workload: self.jobs[r].workload.clone(),
                    weight: self.weight(r, None),
                    slo: self.jobs[r].inference.then_some(self.settings.slo),
                    memory_mib: self.jobs[r].memory_mib,
                }),
                _ => None,
            })
            .collect();
        if free.is_empty() && residents.is_empty() {
            return Ok(());
        }
        let waiting: Vec<Waiting> = self
            .waiting
            .iter()
            .map(|&j| Waiting {
                id: j,
                workload: self.jobs[j].workload.clone(),
                gpus: self.jobs[j].gpus,
                weight: self.weight(j, Some(t)),
                priority: self.weight(j, None),
                slo: self.jobs[j].inference.then_some(self.settings.slo),
                memory_mib: self.jobs[j].memory_mib,
            })
            .collect();
        let sharings = self.oracle.sharings();
        let mut remembering = Remembering {
            inner: predictor,
            failed: &self.failed,
        };
        let mut config = self.settings.pricing.clone();
        if self.settings.queue_aware {
            config.queue = self.queue_estimate(t);
        }
        let (decisions, round) = pricing::round(
            gpu_model,
            &waiting,
            &free,
            &residents,
            sharings,
            &mut remembering,
            &config,
        )?;
        stats.record(&round);
        let mut placed = HashSet::new();
        for d in decisions {
            let ok = match d.placement {
                Placement::Whole { gpus } => {
                    self.start(d.job, gpus, 1.0, t);
                    true
                }
                Placement::Beside { gpu, sharing, .. } => self.place_beside(d.job, gpu, sharing, t),
            };
            if ok {
                placed.insert(d.job);
            }
        }
        self.waiting.retain(|j| !placed.contains(j));
        Ok(())
    }

    /// The queue as a scheduler sees it at `t`: GPUs freed over the last hour, and the median
    /// runtime (alone) of the jobs finished so far; `None` before there is any.
    fn queue_estimate(&self, t: f64) -> Option<pricing::Queue> {
        let since = (t - 3600.0).max(0.0);
        // Finish times only grow: the last hour's releases are a suffix of the record.
        let before = self.finish_times.partition_point(|f| *f <= since);
        let total = self.freed_gpus.last().copied().unwrap_or(0);
        let freed = total - before.checked_sub(1).map_or(0, |i| self.freed_gpus[i]);
        if freed == 0 {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        let releases_per_s = freed as f64 / (t - since).max(1.0);
        Some(pricing::Queue {
            releases_per_s,
            typical_runtime: self.finished_runtimes[self.finished_runtimes.len() / 2],
        })
    }

    /// A job's priority weight; a waiting job's grows with its wait.
    fn weight(&self, j: usize, now: Option<f64>) -> f64 {
        let job = &self.jobs[j];
        let base = if job.inference {
            self.settings.inference_weight
        } else {
            1.0
        };
        match now {
            Some(t) => base * (1.0 + (t - job.arrival).max(0.0) / self.settings.aging),
            None => base,
        }
    }
}

#[derive(Debug, Default)]
struct RoundLog {
    times: Vec<f64>,
    predictor: Duration,
    calls: usize,
    queries: usize,
}

impl RoundLog {
    fn record(&mut self, round: &pricing::RoundStats) {
        self.times.push(round.time.as_secs_f64() * 1e3);
        self.predictor += round.predict_time;
        if round.queries > 0 {
            self.calls += 1;
        }
        self.queries += round.queries;
    }
}

/// Runs every job to completion under `policy`; utilisation is reported over `window`.
pub fn simulate(
    cluster: &Cluster,
    jobs: &[Job],
    window: (f64, f64),
    oracle: &Oracle,
    policy: Policy<'_>,
    settings: &Settings,
) -> Result<Outcome> {
    let wall = Instant::now();
    cluster.check_fits(jobs)?;
    let (kind, name, mut predictor) = match policy {
        Policy::Exclusive => (PolicyKind::Exclusive, "exclusive".to_string(), None),
        Policy::Packing => (PolicyKind::Packing, "packing".to_string(), None),
        Policy::Pricing(p) => {
            let kind = if p.is_measured() {
                PolicyKind::Oracle
            } else {
                PolicyKind::Duet
            };
            (kind, format!("pricing ({})", p.describe()), Some(p))
        }
    };
    let described = predictor.as_ref().map(|p| p.describe());
    let mut world = World::new(cluster, jobs, window, oracle, settings);
    let mut log = RoundLog::default();
    let mut placement_times = Vec::new();
    while let Some(Reverse((now, _))) = world.events.peek().copied() {
        #[allow(clippy::cast_precision_loss)]
        let t = now as f64 / 1e6;
        world.advance_to(t);
        let mut changed = false;
        while let Some(Reverse((at, event))) = world.events.peek().copied() {
            if at != now {
                break;
            }
            world.events.pop();
            match event {
                Event::Arrive { job } => {
                    world.waiting.push(job);
                    changed = true;
                }
                Event::Done { job, version } => {
                    if world.running[job]
                        .as_ref()
                        .is_some_and(|r| r.version == version)
                    {
                        world.finish(job, t);
                        changed = true;
                    }
                }
            }
        }
        if !changed || world.waiting.is_empty() {
            continue;
        }
        let round_started = Instant::now();
        match (kind, predictor.as_deref_mut()) {
            (_, Some(p)) => world.pricing_round(t, p, &oracle.gpu, &mut log)?,
            (PolicyKind::Exclusive, None) => world.exclusive_round(t),
            (_, None) => world.packing_round(t),
        }
        placement_times.push(round_started.elapsed().as_secs_f64() * 1e3);
        if world.running.iter().all(Option::is_none) && !world.waiting.is_empty() {
            let j = world.waiting[0];
            bail!(
                "policy {name}: pod `{}` cannot be placed on an idle cluster",
                jobs[j].pod
            );
        }
    }
    let makespan = world.last_t;
    let jct: Vec<f64> = jobs
        .iter()
        .enumerate()
        .map(|(j, job)| world.finished[j].unwrap_or(makespan) - job.arrival)
        .collect();
    let waits: Vec<f64> = jobs
        .iter()
        .enumerate()
        .map(|(j, job)| world.started[j].unwrap_or(makespan) - job.arrival)
        .collect();
    let mut sorted = jct.clone();
    sorted.sort_by(f64::total_cmp);
    let n = jobs.len().max(1) as f64;
    let span = makespan.max(1e-9);
    let window_span = (window.1.min(makespan) - window.0).max(1e-9);
    let rounds = if predictor.is_some() {
        &log.times
    } else {
        &placement_times
    };
    let mut round_sorted = rounds.clone();
    round_sorted.sort_by(f64::total_cmp);
    // The series at evenly spaced instants over the arrival window and a quarter beyond it
    // (the weeks after, with a few long jobs left, would flatten the picture).
    let plot_end = (window.1 + 0.25 * (window.1 - window.0)).min(makespan);
    let points = settings.series_points.max(2);
    let series = (0..points)
        .filter_map(|k| {
            #[allow(clippy::cast_precision_loss)]
            let t = window.0 + (plot_end - window.0) * k as f64 / (points - 1) as f64;
            let i = world.trace.partition_point(|(at, _, _)| *at <= t);
            i.checked_sub(1)
                .map(|i| (t, world.trace[i].1, world.trace[i].2))
        })
        .collect();
    let inference_jobs = jobs.iter().filter(|j| j.inference).count();
    Ok(Outcome {
        kind,
        policy: name,
        predictor: described,
        avg_jct: jct.iter().sum::<f64>() / n,
        p50_jct: quantile(&sorted, 0.5),
        p99_jct: quantile(&sorted, 0.99),
        avg_wait: waits.iter().sum::<f64>() / n,
        avg_jct_inference: class_mean(&jct, jobs, true),
        avg_jct_training: class_mean(&jct, jobs, false),
        jct,
        jobs: jobs.len(),
        makespan,
        jobs_per_hour: world
            .finished
            .iter()
            .flatten()
            .filter(|&&t| t >= window.0 && t <= window.1)
            .count() as f64
            / (window_span / 3600.0),
        busy: world.window_busy_area / window_span,
        goodput: world.window_goodput_area / window_span,
        busy_makespan: world.busy_area / span,
        inference_jobs,
        slo_violations: world.slo_jobs_violated.len(),
        slo_violation_time: if world.slo_run_time > 0.0 {
            world.slo_below_time / world.slo_run_time
        } else {
            0.0
        },
        co_located: world.co_located,
        failed_placements: world.failed_placements,
        rounds: rounds.len(),
        round_mean_ms: rounds.iter().sum::<f64>() / rounds.len().max(1) as f64,
        round_p99_ms: quantile(&round_sorted, 0.99),
        predictor_calls: log.calls,
        predictor_ms: log.predictor.as_secs_f64() * 1e3,
        queries: log.queries,
        wall_s: wall.elapsed().as_secs_f64(),
        series,
    })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use duet_core::dataset::Dataset;

    use super::*;

    fn repo(path: &str) -> PathBuf {
        Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("..")
        .join(path)
    }

    struct Setup {
        cluster: Cluster,
        jobs: Vec<Job>,
        workload: Workload,
        oracle: Oracle,
    }

    /// The real trace's first `n` jobs on `gpus` GPUs at `load`, truth from gavel-v100.
    fn setup(n: usize, gpus: u32, load: f64) -> Setup {
        let dir = repo("datasets/gavel-v100");
        let dataset = Dataset::read(&dir).expect("test input");
        setup_on(&dir, &dataset, Some(n), gpus, load)
    }

    /// The real trace's first `n` jobs (all with `None`) on `gpus` GPUs at `load`, truth from
    /// `dataset` (read from `dir`).
    fn setup_on(dir: &Path, dataset: &Dataset, n: Option<usize>, gpus: u32, load: f64) -> Setup {
        let trace = Trace::read(&repo("traces/alibaba-gpu-v2023"), None).expect("test input");
        let oracle = Oracle::new(dir, dataset).expect("test input");
        let kinds = DatasetWorkload::of(dataset);
        let cluster = Cluster::draw(&trace, gpus, 7).expect("test input");
        let (jobs, workload) =
            jobs(&trace, gpus, Some(load), None, &kinds, 7, n).expect("test input");
        Setup {
            cluster,
            jobs,
            workload,
            oracle,
        }
    }

    fn run(s: &Setup, policy: Policy<'_>) -> Outcome {
        run_with(s, policy, &Settings::default())
    }

    fn run_with(s: &Setup, policy: Policy<'_>, settings: &Settings) -> Outcome {
        simulate(
            &s.cluster,
            &s.jobs,
            s.workload.window,
            &s.oracle,
            policy,
            settings,
        )
        .expect("test input")
    }

    #[test]
    fn the_load_asked_for_is_the_load_offered_and_the_draw_is_seeded() {
        let s = setup(1500, 64, 1.3);
        assert!((s.workload.load - 1.3).abs() < 1e-3, "{:?}", s.workload);
        assert_eq!(s.jobs.len(), 1500);
        assert_eq!(s.cluster.gpus(), 64);
        let again = setup(1500, 64, 1.3);
        assert_eq!(again.jobs, s.jobs);
        assert_eq!(again.cluster, s.cluster);
    }

    #[test]
    fn every_policy_finishes_every_job_no_faster_than_alone() {
        let s = setup(1500, 64, 1.3);
        let mut oracle = s.oracle.clone();
        for policy in [
            Policy::Exclusive,
            Policy::Packing,
            Policy::Pricing(&mut oracle),
        ] {
            let o = run(&s, policy);
            assert_eq!(o.jct.len(), s.jobs.len());
            for (jct, job) in o.jct.iter().zip(&s.jobs) {
                assert!(
                    *jct >= job.work - 1e-3,
                    "{}: {jct} < {}",
                    o.policy,
                    job.work
                );
            }
            assert!(o.busy > 0.0 && o.busy <= 1.0, "{o:?}");
        }
    }

    #[test]
    fn exclusive_never_shares_and_the_oracle_pricing_never_breaks_an_objective() {
        let s = setup(1500, 64, 1.3);
        let exclusive = run(&s, Policy::Exclusive);
        assert_eq!(exclusive.co_located, 0);
        assert_eq!(exclusive.slo_violations, 0);
        assert!((exclusive.goodput - exclusive.busy).abs() < 1e-9);
        let mut oracle = s.oracle.clone();
        let priced = run(&s, Policy::Pricing(&mut oracle));
        assert!(priced.co_located > 0, "{priced:?}");
        assert_eq!(priced.slo_violations, 0);
        assert_eq!(
            priced.failed_placements, 0,
            "the oracle knows which pairs fail"
        );
        assert!(priced.rounds > 0 && priced.predictor_calls > 0);
        // Interference-blind packing pairs jobs that break their objective.
        let packing = run(&s, Policy::Packing);
        assert!(packing.slo_violations > 0, "{packing:?}");
        // Under load, pricing with the truth beats both.
        assert!(
            priced.avg_jct < exclusive.avg_jct,
            "{priced:?} {exclusive:?}"
        );
        assert!(priced.avg_jct < packing.avg_jct);
    }

    #[test]
    fn footprints_that_do_not_fit_together_keep_jobs_apart() {
        let dir = repo("datasets/gavel-v100");
        let mut dataset = Dataset::read(&dir).expect("gavel");
        for w in &mut dataset.workloads {
            w.features.insert(
                "mem_used_mib".into(),
                duet_core::dataset::FeatureValue::Number(Some(30_000.0)),
            );
        }
        assert!(
            DatasetWorkload::of(&dataset)
                .iter()
                .all(|w| w.memory_mib == Some(30_000.0))
        );
        let s = setup_on(&dir, &dataset, Some(1500), 64, 1.3);
        let co_located = |memory: f64| {
            let mut settings = Settings::default();
            settings.pricing.gpu_memory_mib = Some(memory);
            let mut p = s.oracle.clone();
            run_with(&s, Policy::Pricing(&mut p), &settings).co_located
        };
        assert_eq!(co_located(50_000.0), 0);
        assert!(co_located(80_000.0) > 0);
    }

    #[test]
    fn where_sharing_barely_pays_the_queue_estimate_keeps_the_loop_from_losing() {
        // cpu-dev2c: every pair but one does 0.7 to 1.2 jobs' work.
        let dir = repo("datasets/cpu-dev2c");
        let dataset = Dataset::read(&dir).expect("cpu-dev2c");
        let s = setup_on(&dir, &dataset, None, 64, 1.0);
        let avg_jct = |policy: Policy<'_>, queue_aware: bool| {
            let settings = Settings {
                queue_aware,
                ..Settings::default()
            };
            run_with(&s, policy, &settings).avg_jct
        };
        let exclusive = avg_jct(Policy::Exclusive, true);
        let mut p = s.oracle.clone();
        let aware = avg_jct(Policy::Pricing(&mut p), true);
        let mut p = s.oracle.clone();
        let blind = avg_jct(Policy::Pricing(&mut p), false);
        assert!(aware < exclusive, "{aware} >= {exclusive}");
        assert!(blind > 1.5 * exclusive, "{blind} vs {exclusive}");
    }

    #[test]
    fn a_simulation_is_reproducible() {
        let s = setup(1500, 64, 1.3);
        let mut a = s.oracle.clone();
        let mut b = s.oracle.clone();
        let first = run(&s, Policy::Pricing(&mut a));
        let second = run(&s, Policy::Pricing(&mut b));
        assert_eq!(first.jct, second.jct);
    }

    #[test]
    fn a_cluster_smaller_than_the_largest_job_is_refused() {
        let s = setup(6203, 64, 1.0);
        let small = Cluster {
            nodes: vec![4, 4],
            models: vec!["V100M16".into(); 2],
        };
        let e = simulate(
            &small,
            &s.jobs,
            s.workload.window,
            &s.oracle,
            Policy::Exclusive,
            &Settings::default(),
        )
        .expect_err("must fail")
        .to_string();
        assert!(
            e.contains("smaller than the largest job") && e.contains("needs 8 GPUs"),
            "{e}"
        );
        let trace = Trace::read(&repo("traces/alibaba-gpu-v2023"), None).expect("test input");
        let e = Cluster::draw(&trace, 1_000_000, 1)
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("--gpus 1000000"), "{e}");
    }
}
