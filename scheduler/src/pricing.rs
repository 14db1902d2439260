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
//! All slowdowns of a round come from one `Predictor` call. A shape whose conservative (p10)
//! speed would break a job's speed objective, the newcomer's or the resident's, is never offered.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Result;

use duet_core::dataset::Mode;

use crate::predictor::{Outlook, Predictor, Query, Sharing};

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

/// A job running alone on one GPU that may take a neighbour.
#[derive(Debug, Clone, PartialEq)]
pub struct Resident {
    /// The GPU, in the caller's numbering.
    pub gpu: usize,
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
        }
    }
}

/// What one round did and cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundStats {
    /// Distinct pairs sent to the predictor.
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
                "the pair adds {gain:.2} of a job's weighted throughput, not more than the resident alone"
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

    // Residents grouped by what decides a pair's value: workload, weight, objective, memory.
    let mut group_of: HashMap<GroupKey<'_>, usize> = HashMap::new();
    let mut groups: Vec<(&Resident, Vec<usize>)> = Vec::new();
    for (i, r) in residents.iter().enumerate() {
        let g = *group_of.entry(group_key(r)).or_insert_with(|| {
            groups.push((r, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(i);
    }

    // Every distinct (newcomer workload, resident workload, sharing) in one predictor call.
    let mut query_of: HashMap<(&str, &str, usize), usize> = HashMap::new();
    let mut queries: Vec<Query<'_>> = Vec::new();
    if !groups.is_empty() {
        let workloads: BTreeSet<&str> = singles.iter().map(|j| j.workload.as_str()).collect();
        let residents_wl: BTreeSet<&str> =
            groups.iter().map(|(r, _)| r.workload.as_str()).collect();
        for a in &workloads {
            for b in &residents_wl {
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
    }
    let predict_started = Instant::now();
    let outlooks = predictor.predict(gpu_model, &queries)?;
    stats.predict_time = predict_started.elapsed();
    stats.queries = queries.len();

    // The best sharing of each (job, group), by value, among the shapes that keep objectives.
    let best_beside =
        |position: usize, job: &Waiting, resident: &Resident| -> Option<(f64, usize, Outlook)> {
            let mut best: Option<(f64, usize, Outlook)> = None;
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
                let Ok(value) = value_beside(job, resident, &o, position, config) else {
                    continue;
                };
                if best.as_ref().is_none_or(|(v, _, _)| value > *v) {
                    best = Some((value, s, o));
                }
            }
            best
        };
    let values: Vec<Vec<Option<(f64, usize, Outlook)>>> = singles
        .iter()
        .enumerate()
        .map(|(k, j)| groups.iter().map(|(r, _)| best_beside(k, j, r)).collect())
        .collect();

    // The auction. Objects: each empty GPU, each resident's GPU; prices start at zero.
    let n_empty = empties.len();
    let mut price = vec![0.0f64; n_empty + residents.len()];
    let mut owner: Vec<Option<usize>> = vec![None; price.len()];
    let key = |p: f64, o: usize| (p.to_bits(), o);
    let mut empty_set: BTreeSet<(u64, usize)> = (0..n_empty).map(|o| key(0.0, o)).collect();
    let mut group_sets: Vec<BTreeSet<(u64, usize)>> = groups
        .iter()
        .map(|(_, members)| members.iter().map(|&m| key(0.0, n_empty + m)).collect())
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
        for (g, set) in group_sets.iter().enumerate() {
            if let Some((value, _, _)) = values[j][g] {
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
            let r = object - n_empty;
            let g = group_of[&group_key(&residents[r])];
            &mut group_sets[g]
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
            let r = &residents[object - n_empty];
            let g = group_of[&group_key(r)];
            let Some((_, s, o)) = values[j][g] else {
                continue;
            };
            Placement::Beside {
                gpu: r.gpu,
                sharing: sharings[s],
                speed: o.speed_a,
                resident_speed: o.speed_b,
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
mod tests {
    use super::*;

    /// A predictor from a fixed table: (a, b) -> (speed a, speed b, safe a, safe b).
    #[derive(Debug)]
    struct Table(HashMap<(String, String), (f64, f64, f64, f64)>, usize);

    impl Predictor for Table {
        fn describe(&self) -> String {
            "table".into()
        }
        fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
            self.1 += 1;
            Ok(queries
                .iter()
                .map(|q| {
                    let (a, b, sa, sb) = self.0[&(q.a.to_string(), q.b.to_string())];
                    Outlook {
                        feasible: true,
                        speed_a: a,
                        speed_b: b,
                        safe_speed_a: sa,
                        safe_speed_b: sb,
                    }
                })
                .collect())
        }
    }

    fn table(rows: &[(&str, &str, f64, f64, f64, f64)]) -> Table {
        Table(
            rows.iter()
                .map(|(a, b, x, y, sx, sy)| ((a.to_string(), b.to_string()), (*x, *y, *sx, *sy)))
                .collect(),
            0,
        )
    }

    fn job(id: usize, workload: &str, weight: f64, slo: Option<f64>) -> Waiting {
        Waiting {
            id,
            workload: workload.into(),
            gpus: 1,
            weight,
            priority: weight,
            slo,
            memory_mib: None,
        }
    }

    fn resident(gpu: usize, workload: &str) -> Resident {
        Resident {
            gpu,
            workload: workload.into(),
            weight: 1.0,
            slo: None,
            memory_mib: None,
            share: None,
        }
    }

    const SPACE: Sharing = Sharing {
        mode: Mode::Space,
        share_a: None,
        share_b: None,
    };

    /// One round in space sharing with the default configuration; its decisions.
    fn decide(
        p: &mut dyn Predictor,
        waiting: &[Waiting],
        free: &[FreeNode],
        residents: &[Resident],
    ) -> Vec<Decision> {
        round(
            "g",
            waiting,
            free,
            residents,
            &[SPACE],
            p,
            &PricingConfig::default(),
        )
        .expect("round")
        .0
    }

    #[test]
    fn free_gpus_go_first_and_then_the_pairs_that_gain_the_most() {
        // One free GPU, two residents; three waiting jobs.
        let mut p = table(&[
            ("x", "r", 0.9, 0.9, 0.8, 0.8), // gains 0.8
            ("y", "r", 0.5, 0.4, 0.4, 0.3), // loses: never paired
            ("z", "r", 0.7, 0.8, 0.6, 0.7), // gains 0.5
        ]);
        let waiting = [
            job(0, "y", 1.0, None),
            job(1, "x", 1.0, None),
            job(2, "z", 1.0, None),
        ];
        let (decisions, stats) = round(
            "g",
            &waiting,
            &[FreeNode { gpus: vec![7] }],
            &[resident(3, "r"), resident(4, "r")],
            &[SPACE],
            &mut p,
            &PricingConfig::default(),
        )
        .expect("test input");
        assert_eq!(p.1, 1, "one predictor call per round");
        assert_eq!(stats.queries, 3);
        // y can only use the free GPU; x and z take the two residents' GPUs.
        let of = |id| {
            decisions
                .iter()
                .find(|d| d.job == id)
                .map(|d| d.placement.clone())
        };
        assert_eq!(of(0), Some(Placement::Whole { gpus: vec![7] }));
        assert!(matches!(of(1), Some(Placement::Beside { .. })));
        assert!(matches!(of(2), Some(Placement::Beside { .. })));
        let gpus: BTreeSet<usize> = decisions
            .iter()
            .map(|d| match &d.placement {
                Placement::Whole { gpus } => gpus[0],
                Placement::Beside { gpu, .. } => *gpu,
            })
            .collect();
        assert_eq!(gpus.len(), 3, "no GPU given twice: {decisions:?}");
    }

    #[test]
    fn the_heavier_job_wins_a_contested_gpu_and_the_other_waits() {
        let mut p = table(&[]);
        let waiting = [job(0, "a", 1.0, None), job(1, "b", 2.0, None)];
        let decisions = decide(&mut p, &waiting, &[FreeNode { gpus: vec![0] }], &[]);
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].job, 1);
    }

    #[test]
    fn waiting_longer_never_makes_a_losing_pair_worth_forming() {
        // Together the two do 0.8 of one job's work: a loss at any priority.
        let mut p = table(&[("w", "r", 0.4, 0.4, 0.4, 0.4)]);
        let mut aged = job(0, "w", 10.0, None);
        aged.priority = 1.0;
        let decisions = decide(&mut p, &[aged.clone()], &[], &[resident(0, "r")]);
        assert!(decisions.is_empty(), "{decisions:?}");
        // A pair that gains is formed, and the aged job outbids a fresh one for it.
        let mut p = table(&[("w", "r", 0.8, 0.8, 0.8, 0.8)]);
        let decisions = decide(
            &mut p,
            &[job(1, "w", 1.0, None), aged],
            &[],
            &[resident(0, "r")],
        );
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].job, 0);
    }

    #[test]
    fn a_pair_is_formed_only_where_the_wait_it_saves_outweighs_the_slowdown() {
        // Paired, a typical job of 600 s costs 600 * ((2 - 0.8) / 0.8 - 1) = 300 s.
        let mut p = table(&[("w", "r", 0.8, 0.8, 0.8, 0.8)]);
        let config = |releases_per_s| PricingConfig {
            queue: Some(Queue {
                releases_per_s,
                typical_runtime: 600.0,
            }),
            ..PricingConfig::default()
        };
        // First in line, one GPU free every 100 s: the wait (100 s) is shorter, so it waits.
        // One every 1,000 s: the wait is longer, so it pairs.
        for (rate, pairs) in [(1.0 / 100.0, 0), (1.0 / 1000.0, 1)] {
            let (decisions, _) = round(
                "g",
                &[job(0, "w", 1.0, None)],
                &[],
                &[resident(0, "r")],
                &[SPACE],
                &mut p,
                &config(rate),
            )
            .expect("round");
            assert_eq!(decisions.len(), pairs, "{rate}: {decisions:?}");
        }
        // Far down the line (400th), even the faster rate means a long wait: it pairs.
        let mut line: Vec<Waiting> = (0..400).map(|i| job(i, "x", 1.0, None)).collect();
        line.push(job(400, "w", 1.0, None));
        let mut p = table(&[
            ("w", "r", 0.8, 0.8, 0.8, 0.8),
            ("x", "r", 0.1, 0.1, 0.1, 0.1),
        ]);
        let (decisions, _) = round(
            "g",
            &line,
            &[],
            &[resident(0, "r")],
            &[SPACE],
            &mut p,
            &config(1.0 / 100.0),
        )
        .expect("round");
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].job, 400);
    }

    #[test]
    fn a_conservative_prediction_below_the_objective_is_never_picked() {
        // The mean speed keeps the objective 0.7, the p10 speed does not.
        let mut p = table(&[("i", "r", 0.9, 0.95, 0.65, 0.9)]);
        let waiting = [job(0, "i", 2.0, Some(0.7))];
        let decisions = decide(&mut p, &waiting, &[], &[resident(0, "r")]);
        assert!(decisions.is_empty(), "{decisions:?}");
        // The resident's objective counts too.
        let mut p = table(&[("t", "r", 0.9, 0.9, 0.9, 0.6)]);
        let mut r = resident(0, "r");
        r.slo = Some(0.7);
        let decisions = decide(&mut p, &[job(0, "t", 1.0, None)], &[], &[r]);
        assert!(decisions.is_empty(), "{decisions:?}");
    }

    /// Per-sharing predictions: the newcomer's MPS share decides the speeds.
    #[derive(Debug)]
    struct ByShare;

    impl Predictor for ByShare {
        fn describe(&self) -> String {
            "by share".into()
        }
        fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
            Ok(queries
                .iter()
                .map(|q| {
                    let share = q.sharing.share_a.unwrap_or(50.0) / 100.0;
                    // The newcomer gains with its share, the resident loses a little less.
                    let (a, b) = (0.2 + 0.7 * share, 1.0 - 0.5 * share);
                    Outlook {
                        feasible: true,
                        speed_a: a,
                        speed_b: b,
                        safe_speed_a: a - 0.05,
                        safe_speed_b: b - 0.05,
                    }
                })
                .collect())
        }
    }

    #[test]
    fn the_share_that_adds_the_most_value_is_chosen_within_the_objective() {
        let mps = |a: f64, b: f64| Sharing {
            mode: Mode::Mps,
            share_a: Some(a),
            share_b: Some(b),
        };
        let sharings = [mps(20.0, 80.0), mps(50.0, 50.0), mps(80.0, 20.0)];
        // Values: 20% -> 0.34 - 0.1 = 0.24; 50% -> 0.55 - 0.25 = 0.30; 80% -> 0.76 - 0.4 = 0.36.
        let (decisions, _) = round(
            "g",
            &[job(0, "a", 1.0, None)],
            &[],
            &[resident(5, "r")],
            &sharings,
            &mut ByShare,
            &PricingConfig::default(),
        )
        .expect("round");
        let Placement::Beside { gpu, sharing, .. } = &decisions[0].placement else {
            panic!("{decisions:?}")
        };
        assert_eq!((*gpu, sharing.share_a), (5, Some(80.0)));
        // A resident with an objective of 0.6 keeps at least 0.6 at p10: 80% (0.55) is out.
        let mut r = resident(5, "r");
        r.slo = Some(0.6);
        let (decisions, _) = round(
            "g",
            &[job(0, "a", 1.0, None)],
            &[],
            &[r],
            &sharings,
            &mut ByShare,
            &PricingConfig::default(),
        )
        .expect("round");
        let Placement::Beside { sharing, .. } = &decisions[0].placement else {
            panic!("{decisions:?}")
        };
        assert_eq!(sharing.share_a, Some(50.0));
    }

    #[test]
    fn a_pair_whose_footprints_do_not_fit_the_gpu_is_never_offered() {
        let mut p = table(&[("w", "r", 0.9, 0.9, 0.9, 0.9)]);
        let mut newcomer = job(0, "w", 1.0, None);
        newcomer.memory_mib = Some(50_000.0);
        let mut r = resident(0, "r");
        r.memory_mib = Some(40_000.0);
        let config = |cap| PricingConfig {
            gpu_memory_mib: Some(cap),
            ..PricingConfig::default()
        };
        for (capacity, pairs) in [(80_000.0, 0), (96_000.0, 1)] {
            let (decisions, _) = round(
                "g",
                std::slice::from_ref(&newcomer),
                &[],
                std::slice::from_ref(&r),
                &[SPACE],
                &mut p,
                &config(capacity),
            )
            .expect("round");
            assert_eq!(decisions.len(), pairs, "{capacity}: {decisions:?}");
        }
    }

    #[test]
    fn jobs_of_several_gpus_take_whole_gpus_on_one_node() {
        let mut p = table(&[]);
        let mut big = job(0, "a", 1.0, None);
        big.gpus = 4;
        let (decisions, _) = round(
            "g",
            &[big, job(1, "b", 1.0, None)],
            &[
                FreeNode { gpus: vec![0, 1] },
                FreeNode {
                    gpus: vec![2, 3, 4, 5],
                },
            ],
            &[],
            &[SPACE],
            &mut p,
            &PricingConfig::default(),
        )
        .expect("test input");
        assert_eq!(
            decisions[0].placement,
            Placement::Whole {
                gpus: vec![2, 3, 4, 5]
            }
        );
        assert_eq!(decisions.len(), 2);
    }
}
