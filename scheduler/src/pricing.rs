//! The elastic co-location pricing loop.
//!
//! Each waiting job is offered a family of shapes: whole GPUs; a share of a GPU next to a job
//! already running there, under each way of sharing the dataset knows (mode and MPS shares);
//! or waiting. A shape's value is the normalised throughput it buys, weighted by priority: a whole
//! GPU is worth the job's weight per GPU; a share is worth the job's weighted speed there minus
//! what the resident job loses (`w_j s_j + w_r (s_r - 1)`). A share is only offered where it
//! raises the weighted throughput at the jobs' base priorities (`p_j s_j + p_r (s_r - 1) > 0`):
//! the weight a waiting job gains by waiting decides who gets a GPU first, never whether a pair
//! that does less work than the resident alone is worth forming. Each GPU carries a shadow price; jobs pick the shape
//! that maximises value minus price, and the price of a GPU that more jobs want than it can hold
//! rises (an auction: the asynchronous form of dual ascent, which ends with every GPU's demand
//! within its capacity and each job within `epsilon` of its best shape at the final prices).
//! All slowdowns of a round come from one `Predictor` call for pairs (and one for groups). A
//! shape whose conservative (p10) speed would break a job's speed objective, the newcomer's or
//! a resident's, is never offered.
//!
//! Where a GPU may hold more than two jobs (`PricingConfig::gpu_jobs`), a GPU with several
//! residents is offered too: the newcomer joins them under their mode, valued by its weighted
//! speed in the group minus what every resident loses against its speed in the group as it is
//! (`w_j s_j - sum_r w_r (now_r - s_r)`), both predicted in the same round.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Result;

use duet_core::dataset::Mode;

use crate::predictor::{GroupOutlook, GroupQuery, Outlook, Predictor, Query, Sharing};

/// A job waiting to be placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// The caller's handle, returned in decisions.
    pub id: usize,
    /// Its workload id (known to the predictor).
    pub workload: String,
    /// Whole GPUs it needs; a job of more than one GPU is only ever given whole GPUs.
    pub gpus: u32,
    /// Priority weight it bids with (the caller may let it grow with waiting time).
    pub weight: f64,
    /// Its base priority, on the residents' scale: judges whether a pair is worth forming.
    pub priority: f64,
    /// Minimum speed it must keep (inference jobs), judged on the conservative prediction.
    pub slo: Option<f64>,
    /// Device memory it holds, where known: a pair must fit `gpu_memory_mib` together.
    pub memory_mib: Option<f64>,
}

/// A job running on one GPU that may take a neighbour: alone, or (where a GPU may hold more
/// than two jobs) with the other residents that name the same `gpu`.
#[derive(Debug, Clone, PartialEq)]
pub struct Resident {
    /// The GPU, in the caller's numbering.
    pub gpu: usize,
    /// How it shares its GPU with the other residents there (`None` alone); residents of one GPU
    /// share under one mode, and a newcomer joins under it.
    pub mode: Option<Mode>,
    pub workload: String,
    pub weight: f64,
    pub slo: Option<f64>,
    pub memory_mib: Option<f64>,
    /// Its MPS active-thread share where it was started with one: a running process keeps its
    /// share, so only sharings that leave it this share are offered beside it.
    pub share: Option<f64>,
}

/// The free GPUs of one node (a job of several GPUs takes them on one node).
#[derive(Debug, Clone, PartialEq)]
pub struct FreeNode {
    pub gpus: Vec<usize>,
}

/// Where a job goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// These whole GPUs, alone.
    Whole { gpus: Vec<usize> },
    /// Next to the resident of `gpu`; `sharing.share_a` is the newcomer's share.
    Beside {
        gpu: usize,
        sharing: Sharing,
        /// The predicted speeds of the newcomer and the resident.
        speed: f64,
        resident_speed: f64,
    },
    /// With the residents of `gpu` (two or more), under their `mode`; `share` is the
    /// newcomer's MPS share.
    Join {
        gpu: usize,
        mode: Mode,
        share: Option<f64>,
        /// The predicted speed of the newcomer.
        speed: f64,
        /// Each resident's predicted speed in the group: (its index in the round's residents,
        /// speed).
        resident_speeds: Vec<(usize, f64)>,
        /// What it adds to the predicted weighted throughput: the newcomer's weighted speed
        /// less every resident's loss against the group as it runs.
        value: f64,
    },
}

impl Placement {
    /// The GPUs it takes or joins.
    pub fn gpus(&self) -> Vec<usize> {
        match self {
            Placement::Whole { gpus } => gpus.clone(),
            Placement::Beside { gpu, .. } | Placement::Join { gpu, .. } => vec![*gpu],
        }
    }
}

/// One job placed by a round (jobs not named wait).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub job: usize,
    pub placement: Placement,
}

/// Tuning of the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct PricingConfig {
    /// The bid increment (in units of weighted normalised throughput).
    pub epsilon: f64,
    /// At most this many waiting jobs, in the order given, are priced in one round.
    pub window: usize,
    /// A pair is only formed where it adds at least this share of the resident's weighted
    /// throughput (0: any gain).
    pub min_gain: f64,
    /// Device memory of one GPU; with both jobs' footprints known, a pair that does not fit is
    /// never offered (otherwise the predictor's `feasible` decides alone).
    pub gpu_memory_mib: Option<f64>,
    /// What the queue looks like, where the caller knows: a pair is then only formed where the
    /// wait it saves the newcomer outweighs what it costs both jobs in speed.
    pub queue: Option<Queue>,
    /// Jobs one GPU may hold: 2 forms pairs only; more lets a newcomer join a GPU that already
    /// holds two or more (up to `duet_core::dataset::MAX_GROUP_SIZE`, what the model answers).
    pub gpu_jobs: usize,
}

/// The caller's view of its queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queue {
    /// GPUs coming free per second lately.
    pub releases_per_s: f64,
    /// A typical job's runtime alone, seconds (the median of the jobs finished so far).
    pub typical_runtime: f64,
}

impl Default for PricingConfig {
    fn default() -> Self {
        PricingConfig {
            epsilon: 0.01,
            window: 1024,
            min_gain: 0.0,
            gpu_memory_mib: None,
            queue: None,
            gpu_jobs: 2,
        }
    }
}

/// What one round did and cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundStats {
    /// Distinct pairs and groups sent to the predictor.
    pub queries: usize,
    pub bids: usize,
    pub predict_time: Duration,
    pub time: Duration,
}

/// What decides the value of a pair beside a resident.
type GroupKey<'a> = (&'a str, u64, Option<u64>, Option<u64>, Option<u64>);

fn group_key(r: &Resident) -> GroupKey<'_> {
    (
        r.workload.as_str(),
        r.weight.to_bits(),
        r.slo.map(f64::to_bits),
        r.memory_mib.map(f64::to_bits),
        r.share.map(f64::to_bits),
    )
}

/// Whether `sharing` (newcomer `a`, resident `b`) leaves the resident the share it runs with
/// (only MPS has shares).
pub fn keeps_resident_share(resident: &Resident, sharing: Sharing) -> bool {
    sharing.mode != Mode::Mps
        || resident
            .share
            .is_none_or(|share| sharing.share_b == Some(share))
}

/// Why the loop does not offer a share beside a resident.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// Both footprints are known and exceed the GPU's memory.
    Memory { need_mib: f64, capacity_mib: f64 },
    /// The predictor expects the pair to fail (out of memory, say).
    Infeasible,
    /// The newcomer's conservative (p10) speed is below its objective.
    Objective { speed: f64, objective: f64 },
    /// The resident's conservative speed is below its objective.
    ResidentObjective { speed: f64, objective: f64 },
    /// Together they do less weighted work than the resident alone (or less than `min_gain`).
    Loses { gain: f64 },
    /// Waiting for a whole GPU is expected to cost the newcomer less than pairing costs both.
    WaitIsShorter { wait_s: f64, cost_s: f64 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Memory {
                need_mib,
                capacity_mib,
            } => write!(
                f,
                "needs {need_mib:.0} MiB together, the GPU has {capacity_mib:.0} MiB"
            ),
            Refusal::Infeasible => f.write_str("predicted to fail together (infeasible)"),
            Refusal::Objective { speed, objective } => write!(
                f,
                "breaks this pod's objective {objective} (p90 speed {speed:.2})"
            ),
            Refusal::ResidentObjective { speed, objective } => write!(
                f,
                "breaks the resident's objective {objective} (p90 speed {speed:.2})"
            ),
            Refusal::Loses { gain } => write!(
                f,
                "the placement adds {gain:.2} of a job's weighted throughput, not more than the residents as they are"
            ),
            Refusal::WaitIsShorter { wait_s, cost_s } => write!(
                f,
                "waiting for a free GPU (about {wait_s:.0} s) costs less than pairing ({cost_s:.0} s)"
            ),
        }
    }
}

/// What placing `job` (`position`-th in line) beside `resident` is worth under outlook `o`
/// (`a` the newcomer, `b` the resident): the weighted speed it buys minus what the resident
/// loses, or why the loop does not offer it.
pub fn value_beside(
    job: &Waiting,
    resident: &Resident,
    o: &Outlook,
    position: usize,
    config: &PricingConfig,
) -> Result<f64, Refusal> {
    if let (Some(capacity), Some(a), Some(b)) =
        (config.gpu_memory_mib, job.memory_mib, resident.memory_mib)
        && a + b > capacity
    {
        return Err(Refusal::Memory {
            need_mib: a + b,
            capacity_mib: capacity,
        });
    }
    if !o.feasible || o.speed_a <= 0.0 || o.speed_b <= 0.0 {
        return Err(Refusal::Infeasible);
    }
    if let Some(objective) = job.slo.filter(|m| o.safe_speed_a < *m) {
        return Err(Refusal::Objective {
            speed: o.safe_speed_a,
            objective,
        });
    }
    if let Some(objective) = resident.slo.filter(|m| o.safe_speed_b < *m) {
        return Err(Refusal::ResidentObjective {
            speed: o.safe_speed_b,
            objective,
        });
    }
    // Waiting for a whole GPU takes the newcomer about its place in line over the rate GPUs
    // come free; paired, a typical job takes 1/s_j of its length and delays the resident by
    // (1 - s_r)/s_j of it.
    if let Some(q) = config.queue
        && q.releases_per_s > 0.0
    {
        #[allow(clippy::cast_precision_loss)]
        let wait_s = (position + 1) as f64 / q.releases_per_s;
        let cost_s = q.typical_runtime * ((2.0 - o.speed_b.min(1.0)) / o.speed_a - 1.0);
        if wait_s <= cost_s {
            return Err(Refusal::WaitIsShorter { wait_s, cost_s });
        }
    }
    let loss = resident.weight * (1.0 - o.speed_b.min(1.0));
    let gain = job.priority * o.speed_a - loss;
    if gain <= config.min_gain * resident.weight {
        return Err(Refusal::Loses { gain });
    }
    Ok(job.weight * o.speed_a - loss)
}

/// What placing `job` (`position`-th in line) with `members` on their GPU is worth, where `now`
/// predicts the members as they run and `o` the group with the newcomer first (then the
/// members, in order): the weighted speed it buys minus what every member loses, or why the
/// loop does not offer it.
pub fn value_among(
    job: &Waiting,
    members: &[&Resident],
    now: &GroupOutlook,
    o: &GroupOutlook,
    position: usize,
    config: &PricingConfig,
) -> Result<f64, Refusal> {
    if let (Some(capacity), Some(a), Some(rest)) = (
        config.gpu_memory_mib,
        job.memory_mib,
        members.iter().map(|r| r.memory_mib).sum::<Option<f64>>(),
    ) && a + rest > capacity
    {
        return Err(Refusal::Memory {
            need_mib: a + rest,
            capacity_mib: capacity,
        });
    }
    let n = members.len();
    if !o.feasible
        || !now.feasible
        || o.speeds.len() != n + 1
        || now.speeds.len() != n
        || o.speeds.iter().chain(&now.speeds).any(|s| *s <= 0.0)
    {
        return Err(Refusal::Infeasible);
    }
    if let Some(objective) = job.slo.filter(|m| o.safe_speeds[0] < *m) {
        return Err(Refusal::Objective {
            speed: o.safe_speeds[0],
            objective,
        });
    }
    for (r, safe) in members.iter().zip(&o.safe_speeds[1..]) {
        if let Some(objective) = r.slo.filter(|m| *safe < *m) {
            return Err(Refusal::ResidentObjective {
                speed: *safe,
                objective,
            });
        }
    }
    // What each member gives up: its speed as it runs now less its speed in the group.
    let lost: Vec<f64> = now
        .speeds
        .iter()
        .zip(&o.speeds[1..])
        .map(|(before, after)| (before.min(1.0) - after.min(before.min(1.0))).max(0.0))
        .collect();
    let speed = o.speeds[0];
    if let Some(q) = config.queue
        && q.releases_per_s > 0.0
    {
        #[allow(clippy::cast_precision_loss)]
        let wait_s = (position + 1) as f64 / q.releases_per_s;
        let cost_s =
            q.typical_runtime * ((1.0 - speed.min(1.0)) + lost.iter().sum::<f64>()) / speed;
        if wait_s <= cost_s {
            return Err(Refusal::WaitIsShorter { wait_s, cost_s });
        }
    }
    let loss: f64 = members.iter().zip(&lost).map(|(r, l)| r.weight * l).sum();
    let gain = job.priority * speed - loss;
    let weights: f64 = members.iter().map(|r| r.weight).sum();
    if gain <= config.min_gain * weights {
        return Err(Refusal::Loses { gain });
    }
    Ok(job.weight * speed - loss)
}

/// The mode the residents of one GPU share it under: the one mode of those placed to share it.
/// One resident without a mode is the GPU's first, placed alone, which the others joined under
/// that mode (a cluster records a placement on the pod placed, not on those it joined); `None`
/// where none has a mode, more than one has none, or they disagree.
pub fn shared_mode<'r>(residents: impl IntoIterator<Item = &'r Resident>) -> Option<Mode> {
    let mut mode = None;
    let mut alone = 0;
    for r in residents {
        match (r.mode, mode) {
            (None, _) => {
                alone += 1;
                if alone > 1 {
                    return None;
                }
            }
            (Some(m), None) => mode = Some(m),
            (Some(m), Some(first)) if m != first => return None,
            (Some(_), Some(_)) => {}
        }
    }
    mode
}

/// The ways a newcomer may join residents sharing a GPU under `mode` whose MPS shares are
/// `theirs` (in order; `None` where one is unknown): each of `sharings` of that mode, once per
/// newcomer share, as (its index in `sharings`, the newcomer's share, the group's shares with
/// the newcomer first). Under MPS none without every share known.
pub fn join_sharings(
    mode: Mode,
    theirs: Option<&[f64]>,
    sharings: &[Sharing],
) -> Vec<(usize, Option<f64>, Option<Vec<f64>>)> {
    let mut seen: BTreeSet<Option<u64>> = BTreeSet::new();
    sharings
        .iter()
        .enumerate()
        .filter(|(_, s)| s.mode == mode && seen.insert(s.share_a.map(f64::to_bits)))
        .filter_map(|(k, s)| match (mode, s.share_a, theirs) {
            (Mode::Mps, Some(own), Some(theirs)) => Some((
                k,
                s.share_a,
                Some(std::iter::once(own).chain(theirs.iter().copied()).collect()),
            )),
            (Mode::Mps, _, _) => None,
            _ => Some((k, s.share_a, None)),
        })
        .collect()
}

/// The residents of one GPU, sorted by what decides their value (so that alike GPUs list them
/// alike), with their indices in the round's residents.
struct Host<'r> {
    gpu: usize,
    members: Vec<(usize, &'r Resident)>,
}

impl Host<'_> {
    fn residents(&self) -> Vec<&Resident> {
        self.members.iter().map(|(_, r)| *r).collect()
    }

    /// The mode its residents share under; `None` for one resident, or where they disagree.
    fn mode(&self) -> Option<Mode> {
        shared_mode(self.members.iter().map(|(_, r)| *r))
    }

    /// The shares its residents run with, where the mode has them (`None` where one is unknown).
    fn shares(&self) -> Option<Vec<f64>> {
        self.members.iter().map(|(_, r)| r.share).collect()
    }
}

/// What a newcomer is offered on one class of alike GPUs.
#[derive(Debug, Clone)]
enum Offer {
    Pair(usize, Outlook),
    /// Under `mode` with the newcomer's `share`; `query` indexes the round's group outlooks.
    Group {
        mode: Mode,
        share: Option<f64>,
        query: usize,
    },
}

/// One pricing round: decisions for `waiting` (in priority order) over the free GPUs and the
/// residents that may take a neighbour, on device `gpu_model`.
pub fn round(
    gpu_model: &str,
    waiting: &[Waiting],
    free: &[FreeNode],
    residents: &[Resident],
    sharings: &[Sharing],
    predictor: &mut dyn Predictor,
    config: &PricingConfig,
) -> Result<(Vec<Decision>, RoundStats)> {
    let started = Instant::now();
    let mut stats = RoundStats::default();
    let mut decisions = Vec::new();
    let waiting = &waiting[..waiting.len().min(config.window)];

    // Jobs of several GPUs first, in order, on one node each: they cannot share.
    let mut free: Vec<Vec<usize>> = free.iter().map(|n| n.gpus.clone()).collect();
    for job in waiting.iter().filter(|j| j.gpus > 1) {
        let need = job.gpus as usize;
        // Best fit: the node with the fewest free GPUs that still has enough.
        if let Some(node) = free
            .iter_mut()
            .filter(|n| n.len() >= need)
            .min_by_key(|n| n.len())
        {
            let gpus = node.split_off(node.len() - need);
            decisions.push(Decision {
                job: job.id,
                placement: Placement::Whole { gpus },
            });
        }
    }
    let singles: Vec<&Waiting> = waiting.iter().filter(|j| j.gpus == 1).collect();
    let empties: Vec<usize> = free.into_iter().flatten().collect();
    if singles.is_empty() || (empties.is_empty() && residents.is_empty()) {
        stats.time = started.elapsed();
        return Ok((decisions, stats));
    }

    // Each GPU's residents; GPUs grouped by what decides a newcomer's value there (workloads,
    // weights, objectives, memory, shares and, for several residents, their mode). A GPU
    // already holding `gpu_jobs` jobs, or several under no one mode, takes nobody.
    let mut host_of: HashMap<usize, usize> = HashMap::new();
    let mut hosts: Vec<Host<'_>> = Vec::new();
    for (i, r) in residents.iter().enumerate() {
        let h = *host_of.entry(r.gpu).or_insert_with(|| {
            hosts.push(Host {
                gpu: r.gpu,
                members: Vec::new(),
            });
            hosts.len() - 1
        });
        hosts[h].members.push((i, r));
    }
    for host in &mut hosts {
        host.members
            .sort_by(|x, y| group_key(x.1).cmp(&group_key(y.1)));
    }
    type ClassKey<'k> = (Option<Mode>, Vec<GroupKey<'k>>);
    let mut class_of: HashMap<ClassKey<'_>, usize> = HashMap::new();
    // Each class: one host standing for it, and its hosts.
    let mut classes: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut class_of_host: Vec<Option<usize>> = vec![None; hosts.len()];
    for (h, host) in hosts.iter().enumerate() {
        let open = host.members.len() == 1
            || (host.members.len() < config.gpu_jobs && host.mode().is_some());
        if !open {
            continue;
        }
        let key: ClassKey<'_> = (
            host.mode(),
            host.members.iter().map(|(_, r)| group_key(r)).collect(),
        );
        let c = *class_of.entry(key).or_insert_with(|| {
            classes.push((h, Vec::new()));
            classes.len() - 1
        });
        classes[c].1.push(h);
        class_of_host[h] = Some(c);
    }

    // Every distinct (newcomer workload, resident workload, sharing) in one predictor call, and
    // every group (each class as it runs, and with each newcomer workload) in one more.
    let workloads: BTreeSet<&str> = singles.iter().map(|j| j.workload.as_str()).collect();
    let mut query_of: HashMap<(&str, &str, usize), usize> = HashMap::new();
    let mut queries: Vec<Query<'_>> = Vec::new();
    let mut group_queries: Vec<GroupQuery<'_>> = Vec::new();
    // For a class of several residents: its query as it runs, and per (newcomer, sharing) the
    // query with the newcomer.
    let mut now_of: HashMap<usize, usize> = HashMap::new();
    let mut joined_of: HashMap<(&str, usize, usize), usize> = HashMap::new();
    let pair_residents: BTreeSet<&str> = classes
        .iter()
        .filter(|(h, _)| hosts[*h].members.len() == 1)
        .map(|(h, _)| hosts[*h].members[0].1.workload.as_str())
        .collect();
    for a in &workloads {
        for b in &pair_residents {
            for (s, sharing) in sharings.iter().enumerate() {
                query_of.insert((a, b, s), queries.len());
                queries.push(Query {
                    a,
                    b,
                    sharing: *sharing,
                });
            }
        }
    }
    for (c, (h, _)) in classes.iter().enumerate() {
        let host = &hosts[*h];
        let Some(mode) = host.mode().filter(|_| host.members.len() > 1) else {
            continue;
        };
        let members: Vec<&str> = host
            .members
            .iter()
            .map(|(_, r)| r.workload.as_str())
            .collect();
        let shares = host.shares();
        if mode == Mode::Mps && shares.is_none() {
            continue; // an MPS group whose shares are not all known is not priced
        }
        now_of.insert(c, group_queries.len());
        group_queries.push(GroupQuery {
            jobs: members.clone(),
            mode,
            shares: shares.clone().filter(|_| mode == Mode::Mps),
        });
        for (s, _, with_share) in join_sharings(mode, shares.as_deref(), sharings) {
            for a in &workloads {
                joined_of.insert((a, c, s), group_queries.len());
                group_queries.push(GroupQuery {
                    jobs: std::iter::once(*a).chain(members.iter().copied()).collect(),
                    mode,
                    shares: with_share.clone(),
                });
            }
        }
    }
    let predict_started = Instant::now();
    let outlooks = predictor.predict(gpu_model, &queries)?;
    let group_outlooks = if group_queries.is_empty() {
        Vec::new()
    } else {
        predictor.predict_groups(gpu_model, &group_queries)?
    };
    stats.predict_time = predict_started.elapsed();
    stats.queries = queries.len() + group_queries.len();

    // The best offer of each (job, class), by value, among the shapes that keep objectives.
    let class_members: Vec<Vec<&Resident>> =
        classes.iter().map(|(h, _)| hosts[*h].residents()).collect();
    let best_offer = |position: usize, job: &Waiting, c: usize| -> Option<(f64, Offer)> {
        let host = &hosts[classes[c].0];
        let mut best: Option<(f64, Offer)> = None;
        let mut consider = |value: f64, offer: Offer| {
            if best.as_ref().is_none_or(|(v, _)| value > *v) {
                best = Some((value, offer));
            }
        };
        if let [(_, resident)] = host.members[..] {
            for (s, sharing) in sharings.iter().enumerate() {
                if !keeps_resident_share(resident, *sharing) {
                    continue;
                }
                let Some(&q) =
                    query_of.get(&(job.workload.as_str(), resident.workload.as_str(), s))
                else {
                    continue;
                };
                let o = outlooks[q];
                if let Ok(value) = value_beside(job, resident, &o, position, config) {
                    consider(value, Offer::Pair(s, o));
                }
            }
            return best;
        }
        let now = &group_outlooks[*now_of.get(&c)?];
        let members = &class_members[c];
        for (s, sharing) in sharings.iter().enumerate() {
            let Some(&q) = joined_of.get(&(job.workload.as_str(), c, s)) else {
                continue;
            };
            let o = &group_outlooks[q];
            if let Ok(value) = value_among(job, members, now, o, position, config) {
                consider(
                    value,
                    Offer::Group {
                        mode: sharing.mode,
                        share: sharing.share_a,
                        query: q,
                    },
                );
            }
        }
        best
    };
    let values: Vec<Vec<Option<(f64, Offer)>>> = singles
        .iter()
        .enumerate()
        .map(|(k, j)| (0..classes.len()).map(|c| best_offer(k, j, c)).collect())
        .collect();

    // The auction. Objects: each empty GPU, each open resident GPU; prices start at zero.
    let n_empty = empties.len();
    let mut price = vec![0.0f64; n_empty + hosts.len()];
    let mut owner: Vec<Option<usize>> = vec![None; price.len()];
    let key = |p: f64, o: usize| (p.to_bits(), o);
    let mut empty_set: BTreeSet<(u64, usize)> = (0..n_empty).map(|o| key(0.0, o)).collect();
    let mut class_sets: Vec<BTreeSet<(u64, usize)>> = classes
        .iter()
        .map(|(_, members)| members.iter().map(|&h| key(0.0, n_empty + h)).collect())
        .collect();
    let mut unassigned: Vec<usize> = (0..singles.len()).rev().collect();
    while let Some(j) = unassigned.pop() {
        stats.bids += 1;
        let job = singles[j];
        // Best and second-best net value; waiting (0) is always there.
        let mut best: Option<(f64, usize)> = None;
        let mut second = 0.0f64;
        let mut consider = |net: f64, object: usize, best: &mut Option<(f64, usize)>| match best {
            Some((b, _)) if net <= *b => second = second.max(net),
            _ => {
                if let Some((b, _)) = *best {
                    second = second.max(b);
                }
                *best = Some((net, object));
            }
        };
        let mut cheapest = empty_set.iter();
        for &(p, o) in cheapest.by_ref().take(2) {
            consider(job.weight - f64::from_bits(p), o, &mut best);
        }
        for (c, set) in class_sets.iter().enumerate() {
            if let Some((value, _)) = values[j][c] {
                for &(p, o) in set.iter().take(2) {
                    consider(value - f64::from_bits(p), o, &mut best);
                }
            }
        }
        let Some((net, object)) = best.filter(|(net, _)| *net > 0.0) else {
            continue; // it waits: prices only rise, so nothing will tempt it later this round
        };
        let old = price[object];
        let new = old + (net - second) + config.epsilon;
        let set = if object < n_empty {
            &mut empty_set
        } else {
            let Some(c) = class_of_host[object - n_empty] else {
                continue;
            };
            &mut class_sets[c]
        };
        set.remove(&key(old, object));
        set.insert(key(new, object));
        price[object] = new;
        if let Some(previous) = owner[object].replace(j) {
            unassigned.push(previous);
        }
    }

    for (object, holder) in owner.iter().enumerate() {
        let Some(j) = *holder else { continue };
        let job = singles[j];
        let placement = if object < n_empty {
            Placement::Whole {
                gpus: vec![empties[object]],
            }
        } else {
            let host = &hosts[object - n_empty];
            let Some(Some((value, offer))) = class_of_host[object - n_empty].map(|c| &values[j][c])
            else {
                continue;
            };
            match offer {
                Offer::Pair(s, o) => Placement::Beside {
                    gpu: host.gpu,
                    sharing: sharings[*s],
                    speed: o.speed_a,
                    resident_speed: o.speed_b,
                },
                Offer::Group { mode, share, query } => Placement::Join {
                    gpu: host.gpu,
                    mode: *mode,
                    share: *share,
                    speed: group_outlooks[*query].speeds[0],
                    resident_speeds: host
                        .members
                        .iter()
                        .zip(&group_outlooks[*query].speeds[1..])
                        .map(|((i, _), s)| (*i, *s))
                        .collect(),
                    value: *value,
                },
            }
        };
        decisions.push(Decision {
            job: job.id,
            placement,
        });
    }
    stats.time = started.elapsed();
    Ok((decisions, stats))
}

#[cfg(test)]
mod tests;
