//! Training examples: every co-location measurement seen from each of its two jobs.

use duet_core::dataset::{Dataset, Mode, Status, speed};

/// One job `a` running next to `b`: the unit the model predicts.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Index of the dataset the measurement comes from.
    pub dataset: usize,
    /// Index of the unordered pair setting (a pair and its mirror share it).
    pub setting: usize,
    /// Index of the unordered pair of workload ids, across datasets, devices, modes and shares:
    /// the same two workloads measured on another GPU share it.
    pub pair: usize,
    pub a: String,
    pub b: String,
    pub gpu: String,
    pub mode: Mode,
    pub share_a: Option<f64>,
    pub share_b: Option<f64>,
    /// Whether the two jobs ran together (status `ok`); `oom` rows are infeasible.
    pub feasible: bool,
    /// Co-located over solo throughput of `a`, for feasible rows.
    pub speed: Option<f64>,
}

/// Both directions of every `ok` and `oom` pair of every dataset. Crashed and timed-out runs say
/// nothing about interference and are left out.
pub fn examples(datasets: &[Dataset]) -> Vec<Example> {
    let mut out = Vec::new();
    let mut setting = 0;
    let mut pairs: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for (index, d) in datasets.iter().enumerate() {
        for p in &d.pairs {
            if !matches!(p.status, Status::Ok | Status::Oom) {
                continue;
            }
            let (Some(wa), Some(wb)) = (d.workload(&p.a), d.workload(&p.b)) else {
                continue;
            };
            let feasible = p.status == Status::Ok;
            let key = if p.a <= p.b {
                (p.a.clone(), p.b.clone())
            } else {
                (p.b.clone(), p.a.clone())
            };
            let next = pairs.len();
            let pair = *pairs.entry(key).or_insert(next);
            for (a, b, ta, sa, sb, solo) in [
                (
                    &p.a,
                    &p.b,
                    p.throughput_a,
                    p.share_a,
                    p.share_b,
                    wa.solo_throughput,
                ),
                (
                    &p.b,
                    &p.a,
                    p.throughput_b,
                    p.share_b,
                    p.share_a,
                    wb.solo_throughput,
                ),
            ] {
                out.push(Example {
                    dataset: index,
                    setting,
                    pair,
                    a: a.clone(),
                    b: b.clone(),
                    gpu: p.gpu.clone(),
                    mode: p.mode,
                    share_a: sa,
                    share_b: sb,
                    feasible,
                    speed: feasible.then(|| speed(ta, solo)),
                });
            }
            setting += 1;
        }
    }
    out
}

/// One job of a measured group of three or more: a training row of a network that learns
/// groups (one row per job: the job, its co-runners pooled). A group's jobs are consecutive, in
/// the group's order.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupExample {
    /// Index of the dataset the measurement comes from.
    pub dataset: usize,
    /// The group's number among the corpus's groups (its jobs share it).
    pub group: usize,
    /// Jobs in the group.
    pub size: usize,
    pub workload: String,
    pub gpu: String,
    pub mode: Mode,
    pub share: Option<f64>,
    /// Whether the group ran (status `ok`); `oom` groups are infeasible.
    pub feasible: bool,
    /// Co-located over solo throughput, for feasible groups.
    pub speed: Option<f64>,
}

/// Every job of every `ok` and `oom` group of every dataset whose workloads it declares.
pub fn group_examples(datasets: &[Dataset]) -> Vec<GroupExample> {
    let mut out = Vec::new();
    let mut number = 0;
    for (index, d) in datasets.iter().enumerate() {
        for g in &d.groups {
            if !matches!(g.status, Status::Ok | Status::Oom) {
                continue;
            }
            let Some(solos) = d.group_solos(g) else {
                continue;
            };
            let feasible = g.status == Status::Ok;
            for (job, solo) in g.jobs.iter().zip(&solos) {
                out.push(GroupExample {
                    dataset: index,
                    group: number,
                    size: g.jobs.len(),
                    workload: job.workload.clone(),
                    gpu: g.gpu.clone(),
                    mode: g.mode,
                    share: job.share,
                    feasible,
                    speed: feasible.then(|| speed(job.throughput, *solo)),
                });
            }
            number += 1;
        }
    }
    out
}
