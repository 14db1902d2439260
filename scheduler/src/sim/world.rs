//! The event loop: arrivals and completions in time order, a placement round after each, jobs
//! progressing at the oracle's speeds.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::time::Duration;

use anyhow::Result;

use duet_core::dataset::Mode;

use crate::predictor::{
    GroupKey, GroupOutlook, GroupQuery, Oracle, Outlook, PairKey, Predictor, Query, Sharing, Truth,
};
use crate::pricing::{self, FreeNode, Placement, Resident, Waiting};

use super::Settings;
use super::cluster::Cluster;
use super::feedback::Seen;
use super::jobs::Job;

#[derive(Debug, Clone)]
pub(super) struct Running {
    pub(super) remaining: f64,
    pub(super) speed: f64,
    pub(super) since: f64,
    pub(super) version: u64,
    pub(super) gpus: Vec<usize>,
    pub(super) start: f64,
    pub(super) below_slo_since: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// Ordered before arrivals at the same instant: freed GPUs are seen by the round.
    Done {
        job: usize,
        version: u64,
    },
    Arrive {
        job: usize,
    },
}

/// A predictor that also knows which pairs and groups already failed in this simulation.
#[derive(Debug)]
pub(super) struct Remembering<'p, 'f> {
    inner: &'p mut dyn Predictor,
    failed: &'f HashSet<PairKey>,
    failed_groups: &'f HashSet<GroupKey>,
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

    fn predict_groups(
        &mut self,
        gpu: &str,
        groups: &[GroupQuery<'_>],
    ) -> Result<Vec<GroupOutlook>> {
        let mut out = self.inner.predict_groups(gpu, groups)?;
        if !self.failed_groups.is_empty() {
            for (o, q) in out.iter_mut().zip(groups) {
                if self.failed_groups.contains(&q.key()) {
                    o.feasible = false;
                }
            }
        }
        Ok(out)
    }
}

/// The simulator's state under one policy.
#[derive(Debug)]
pub(super) struct World<'a> {
    pub(super) jobs: &'a [Job],
    pub(super) oracle: &'a Oracle,
    pub(super) settings: &'a Settings,
    pub(super) node_of: Vec<usize>,
    /// The jobs on each GPU (at most the pricing's `gpu_jobs`).
    pub(super) on_gpu: Vec<Vec<usize>>,
    /// The mode the jobs of a shared GPU run under (`None` for an idle or unshared one).
    pub(super) gpu_mode: Vec<Option<Mode>>,
    /// Each job's MPS share where it was placed with one.
    pub(super) share: Vec<Option<f64>>,
    pub(super) running: Vec<Option<Running>>,
    pub(super) finished: Vec<Option<f64>>,
    pub(super) started: Vec<Option<f64>>,
    pub(super) waiting: Vec<usize>,
    pub(super) events: BinaryHeap<Reverse<(u64, Event)>>,
    pub(super) failed: HashSet<PairKey>,
    pub(super) failed_groups: HashSet<GroupKey>,
    pub(super) co_located: usize,
    /// Placements with two or more residents, and how many of those had a measured truth.
    pub(super) joined: usize,
    pub(super) joined_measured: usize,
    /// The most jobs one GPU has held at once.
    pub(super) peak_gpu_jobs: usize,
    pub(super) failed_placements: usize,
    pub(super) slo_jobs_violated: HashSet<usize>,
    pub(super) slo_below_time: f64,
    pub(super) slo_run_time: f64,
    pub(super) busy_area: f64,
    pub(super) goodput_area: f64,
    pub(super) window_busy_area: f64,
    pub(super) window_goodput_area: f64,
    /// The arrival window: utilisation is reported over it.
    pub(super) window: (f64, f64),
    pub(super) last_t: f64,
    /// When jobs finished, in order, and the GPUs freed up to each (the queue estimate's rate).
    pub(super) finish_times: Vec<f64>,
    pub(super) freed_gpus: Vec<u64>,
    /// Runtimes (alone) of the finished jobs, sorted (the queue estimate's typical runtime).
    pub(super) finished_runtimes: Vec<f64>,
    pub(super) trace: Vec<(f64, f64, f64)>,
    /// What the cluster sees of its one-GPU jobs (solo runs and co-locations at their true
    /// speeds), kept while a learning predictor wants it.
    pub(super) seen: Option<Vec<Seen>>,
}

/// Event times as ordered integers (microseconds): exact ties, no float ordering trouble.
pub(super) fn tick(t: f64) -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let us = (t * 1e6).round().max(0.0) as u64;
    us
}

impl<'a> World<'a> {
    pub(super) fn new(
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
            gpu_mode: vec![None; node_of.len()],
            share: vec![None; jobs.len()],
            node_of,
            running: vec![None; jobs.len()],
            finished: vec![None; jobs.len()],
            started: vec![None; jobs.len()],
            waiting: Vec::new(),
            events,
            failed: HashSet::new(),
            failed_groups: HashSet::new(),
            co_located: 0,
            joined: 0,
            joined_measured: 0,
            peak_gpu_jobs: 0,
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
            seen: None,
        }
    }

    /// Accumulates utilisation from the last instant up to `t`.
    pub(super) fn advance_to(&mut self, t: f64) {
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
    pub(super) fn set_speed(&mut self, j: usize, speed: f64, t: f64) {
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

    pub(super) fn start(&mut self, j: usize, gpus: Vec<usize>, speed: f64, t: f64) {
        for &g in &gpus {
            self.on_gpu[g].push(j);
            self.peak_gpu_jobs = self.peak_gpu_jobs.max(self.on_gpu[g].len());
        }
        self.started[j] = Some(t);
        if let (Some(seen), [g]) = (self.seen.as_mut(), &gpus[..])
            && self.on_gpu[*g].len() == 1
        {
            seen.push(Seen {
                t,
                a: self.jobs[j].workload.clone(),
                b: None,
                speed_a: 1.0,
                speed_b: 1.0,
                others: Vec::new(),
            });
        }
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

    pub(super) fn finish(&mut self, j: usize, t: f64) {
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
            match self.on_gpu[g][..] {
                // A job left alone runs at full speed again.
                [other] => {
                    self.set_speed(other, 1.0, t);
                    self.gpu_mode[g] = None;
                }
                [] => self.gpu_mode[g] = None,
                // Those left together run at their truth as the smaller group.
                _ => self.regroup(g, t),
            }
        }
    }

    /// The query for the jobs on `gpu` with `newcomer` (first, with its share) where given.
    fn group_query(
        &self,
        gpu: usize,
        mode: Mode,
        newcomer: Option<(usize, Option<f64>)>,
    ) -> GroupQuery<'a> {
        let jobs = self.jobs;
        let members = newcomer
            .iter()
            .map(|(j, share)| (*j, *share))
            .chain(self.on_gpu[gpu].iter().map(|&r| (r, self.share[r])));
        let (ids, shares): (Vec<usize>, Vec<Option<f64>>) = members.unzip();
        GroupQuery {
            jobs: ids.iter().map(|&j| jobs[j].workload.as_str()).collect(),
            mode,
            shares: if mode == Mode::Mps {
                shares.into_iter().collect()
            } else {
                None
            },
        }
    }

    /// A group that just formed (the newcomer first, as `group_query` orders it), as the cluster
    /// reports it to the learner: the newcomer as `a`, the first resident as `b`, the rest as
    /// `others`.
    fn see_group(&mut self, q: &GroupQuery<'_>, speeds: &[f64], t: f64) {
        let Some(seen) = self.seen.as_mut() else {
            return;
        };
        if q.jobs.len() < 3 || speeds.len() != q.jobs.len() {
            return;
        }
        seen.push(Seen {
            t,
            a: q.jobs[0].to_string(),
            b: Some((q.jobs[1].to_string(), q.sharing(0, 1))),
            speed_a: speeds[0],
            speed_b: speeds[1],
            others: (2..q.jobs.len())
                .map(|k| (q.jobs[k].to_string(), q.share(k), speeds[k]))
                .collect(),
        });
    }

    /// Sets the speeds of the jobs left on `gpu` to the truth of their smaller group; where the
    /// dataset has none (a pair it never measured), they keep their speeds.
    fn regroup(&mut self, gpu: usize, t: f64) {
        let Some(mode) = self.gpu_mode[gpu] else {
            return;
        };
        let q = self.group_query(gpu, mode, None);
        if let Some((truth, _)) = self.oracle.lookup_group(&q).filter(|(o, _)| o.feasible) {
            for (r, speed) in self.on_gpu[gpu].clone().into_iter().zip(truth.speeds) {
                self.set_speed(r, speed, t);
            }
        }
    }

    /// Places `j` on `gpu` with its two or more residents under `mode` (`share`: its MPS share),
    /// at the truth of the group: measured where the dataset has the group, else composed from
    /// its measured pairs. A group that fails puts `j` back in line and is remembered.
    pub(super) fn place_among(
        &mut self,
        j: usize,
        gpu: usize,
        mode: Mode,
        share: Option<f64>,
        t: f64,
    ) -> bool {
        if self.on_gpu[gpu].len() < 2 || self.gpu_mode[gpu] != Some(mode) {
            return false;
        }
        let q = self.group_query(gpu, mode, Some((j, share)));
        match self.oracle.lookup_group(&q) {
            Some((truth, source)) if truth.feasible => {
                self.co_located += 1;
                self.joined += 1;
                if source == Truth::Measured {
                    self.joined_measured += 1;
                    // What a cluster can report is a measurement: a group composed from its
                    // pairs is the simulator's stand-in, not something to learn from.
                    self.see_group(&q, &truth.speeds, t);
                }
                for (r, speed) in self.on_gpu[gpu].clone().into_iter().zip(&truth.speeds[1..]) {
                    self.set_speed(r, *speed, t);
                }
                self.share[j] = share;
                self.start(j, vec![gpu], truth.speeds[0], t);
                true
            }
            _ => {
                self.failed_placements += 1;
                self.failed_groups.insert(q.key());
                false
            }
        }
    }

    /// Places `j` on `gpu` next to its resident under `sharing`, at the oracle's speeds; a
    /// pair the oracle says fails puts `j` back in line and is remembered.
    pub(super) fn place_beside(&mut self, j: usize, gpu: usize, sharing: Sharing, t: f64) -> bool {
        let Some(&resident) = self.on_gpu[gpu].first() else {
            return false;
        };
        let (a, b) = (&self.jobs[j].workload, &self.jobs[resident].workload);
        match self.oracle.lookup(a, b, sharing) {
            Some(truth) if truth.feasible => {
                self.co_located += 1;
                if let Some(seen) = self.seen.as_mut() {
                    seen.push(Seen {
                        t,
                        a: a.clone(),
                        b: Some((b.clone(), sharing)),
                        speed_a: truth.speed_a,
                        speed_b: truth.speed_b,
                        others: Vec::new(),
                    });
                }
                self.set_speed(resident, truth.speed_b, t);
                self.gpu_mode[gpu] = Some(sharing.mode);
                self.share[resident] = sharing.share_b;
                self.share[j] = sharing.share_a;
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

    pub(super) fn free_nodes(&self) -> Vec<FreeNode> {
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
    pub(super) fn take_whole(&mut self, j: usize, free: &mut [FreeNode], t: f64) -> bool {
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

    pub(super) fn exclusive_round(&mut self, t: f64) {
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
    pub(super) fn sharing_for(&self, milli: u32) -> Option<Sharing> {
        let want = f64::from(milli) / 10.0;
        self.oracle.sharings().iter().copied().min_by(|x, y| {
            let d = |s: &Sharing| s.share_a.map_or(0.0, |a| (a - want).abs());
            d(x).total_cmp(&d(y))
        })
    }

    pub(super) fn packing_round(&mut self, t: f64) {
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

    pub(super) fn pricing_round(
        &mut self,
        t: f64,
        predictor: &mut dyn Predictor,
        gpu_model: &str,
        stats: &mut RoundLog,
    ) -> Result<()> {
        let free = self.free_nodes();
        // Every one-GPU job on a GPU that holds fewer than `gpu_jobs`: a job alone keeps no
        // share (a newcomer may take any), jobs together keep theirs.
        let room = self.settings.pricing.gpu_jobs.max(2);
        let this = &*self;
        let residents: Vec<Resident> = this
            .on_gpu
            .iter()
            .enumerate()
            .filter(|(_, on)| {
                !on.is_empty() && on.len() < room && on.iter().all(|&r| this.jobs[r].gpus == 1)
            })
            .flat_map(|(g, on)| {
                on.iter().map(move |&r| Resident {
                    gpu: g,
                    mode: this.gpu_mode[g],
                    workload: this.jobs[r].workload.clone(),
                    weight: this.weight(r, None),
                    slo: this.jobs[r].inference.then_some(this.settings.slo),
                    memory_mib: this.jobs[r].memory_mib,
                    share: if on.len() > 1 { this.share[r] } else { None },
                })
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
            failed_groups: &self.failed_groups,
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
                Placement::Join {
                    gpu, mode, share, ..
                } => self.place_among(d.job, gpu, mode, share, t),
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
    pub(super) fn queue_estimate(&self, t: f64) -> Option<pricing::Queue> {
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
    pub(super) fn weight(&self, j: usize, now: Option<f64>) -> f64 {
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
pub(super) struct RoundLog {
    pub(super) times: Vec<f64>,
    pub(super) predictor: Duration,
    pub(super) calls: usize,
    pub(super) queries: usize,
}

impl RoundLog {
    pub(super) fn record(&mut self, round: &pricing::RoundStats) {
        self.times.push(round.time.as_secs_f64() * 1e3);
        self.predictor += round.predict_time;
        if round.queries > 0 {
            self.calls += 1;
        }
        self.queries += round.queries;
    }
}
