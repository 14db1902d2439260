//! What one pending pod can have on each candidate node, and what it is worth by the pricing
//! loop's own rule (`duet_scheduler::pricing::value_beside`): a whole free GPU is worth the pod's
//! weight; a share beside a resident is worth the weighted speed it buys minus what the
//! resident loses, and is not offered where it breaks either pod's objective on the p90, does
//! not fit the GPU's memory, or adds nothing. Every pair of one call goes to the predictor in
//! one request.
//!
//! It runs in three steps so that no lock is held while the predictor answers: `survey` reads
//! the cluster, `Survey::queries` are predicted, `Survey::verdicts` judges.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::{Result, anyhow};
use duet_core::dataset::Mode;
use duet_scheduler::predictor::{
    GroupOutlook, GroupQuery, InlineJobs, Outlook, Predictor, Query, Sharing, SharingKey,
};
use duet_scheduler::pricing::{self, PricingConfig, Resident, Waiting};

use crate::cluster::{Cluster, GpuUse, PodInfo, gpu_count_text};
use crate::contract::{Assignment, JobSpec};
use crate::devices::DeviceMap;
use crate::known::{self, Known, Unknown};

/// Where a pod goes on a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// These GPUs, alone.
    Whole {
        gpus: Vec<u32>,
        /// The MPS share it is started with, where the node's strategy gives one.
        mps_share: Option<f64>,
    },
    /// Beside the resident of `gpu`.
    Beside {
        gpu: u32,
        /// The resident, `namespace/name`.
        resident: String,
        sharing: Sharing,
        speed: f64,
        resident_speed: f64,
    },
    /// With the two or more residents of `gpu` (`duet schedule --gpu-jobs` above 2), under their
    /// mode; `share` is the pod's MPS share.
    Join {
        gpu: u32,
        /// The residents, `namespace/name`.
        residents: Vec<String>,
        mode: Mode,
        share: Option<f64>,
        speed: f64,
        resident_speeds: Vec<f64>,
    },
}

impl Shape {
    /// Its kind, for metrics: `whole`, `beside` or `join`.
    pub fn kind(&self) -> &'static str {
        match self {
            Shape::Whole { .. } => "whole",
            Shape::Beside { .. } => "beside",
            Shape::Join { .. } => "join",
        }
    }

    /// The residents it shares a GPU with (`duet.io/beside`) and its predicted speed there.
    pub fn beside(&self) -> (Option<String>, Option<f64>) {
        match self {
            Shape::Whole { .. } => (None, None),
            Shape::Beside {
                resident, speed, ..
            } => (Some(resident.clone()), Some(*speed)),
            Shape::Join {
                residents, speed, ..
            } => (Some(residents.join(",")), Some(*speed)),
        }
    }

    /// How the pod's annotations record it.
    pub fn assignment(&self) -> Assignment {
        match self {
            Shape::Whole { gpus, mps_share } => Assignment {
                gpus: gpus.clone(),
                sharing: None,
                mps_share: *mps_share,
            },
            Shape::Beside { gpu, sharing, .. } => Assignment {
                gpus: vec![*gpu],
                sharing: Some(sharing.mode),
                mps_share: sharing.share_a,
            },
            Shape::Join {
                gpu, mode, share, ..
            } => Assignment {
                gpus: vec![*gpu],
                sharing: Some(*mode),
                mps_share: *share,
            },
        }
    }
}

/// What duet says of one node for the pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// duet cannot judge (a pod or a device it does not know): it passes the filter with the
    /// middle score. The reason is held once however many nodes share it.
    Neutral(Arc<str>),
    /// The best shape there; `value` is in units of the pod's weight (a whole GPU: 1).
    Fits { value: f64, shape: Shape },
    /// Nothing there for the pod, and why.
    Fails(Arc<str>),
}

impl Verdict {
    /// The extender's score, 0 to 10: ten times the value in units of the pod's weight (a
    /// whole GPU scores 10), 5 where duet cannot judge, 0 where nothing fits.
    pub fn score(&self) -> i64 {
        match self {
            Verdict::Neutral(_) => 5,
            #[allow(clippy::cast_possible_truncation)]
            Verdict::Fits { value, .. } => (value * 10.0).round().clamp(0.0, 10.0) as i64,
            Verdict::Fails(_) => 0,
        }
    }
}

/// A share beside one resident under one sharing, waiting for its prediction.
#[derive(Debug, Clone)]
struct Option_ {
    gpu: u32,
    resident: Resident,
    resident_name: String,
    sharing: Sharing,
    query: usize,
}

/// A place with the two or more residents of one GPU under their mode, waiting for the group's
/// predictions as it runs (`now`) and with the pod first (`with`).
#[derive(Debug, Clone)]
struct JoinOption {
    gpu: u32,
    residents: Vec<Resident>,
    names: Vec<String>,
    mode: Mode,
    share: Option<f64>,
    now: usize,
    with: usize,
}

/// A group asked of the predictor: device, jobs, mode, each job's MPS share.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAsk {
    pub device: String,
    pub jobs: Vec<String>,
    pub mode: Mode,
    pub shares: Option<Vec<f64>>,
}

/// A group ask as a map key: its shares by their bits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey(String, Vec<String>, Mode, Option<Vec<u64>>);

impl GroupKey {
    fn of(ask: &GroupAsk) -> GroupKey {
        GroupKey(
            ask.device.clone(),
            ask.jobs.clone(),
            ask.mode,
            ask.shares
                .as_ref()
                .map(|s| s.iter().map(|v| v.to_bits()).collect()),
        )
    }
}

/// What the predictor said of a survey's pairs and groups, in the order asked.
#[derive(Debug, Clone, Default)]
pub struct Predicted {
    pub pairs: Vec<Outlook>,
    pub groups: Vec<GroupOutlook>,
}

/// Pairs, each on its device (device, newcomer, resident, sharing), predicted in one
/// `predict_on` call.
pub fn predict_pairs_on(
    predictor: &mut dyn Predictor,
    pairs: &[(String, String, String, Sharing)],
) -> Result<Vec<Outlook>> {
    let queries: Vec<(&str, Query<'_>)> = pairs
        .iter()
        .map(|(device, a, b, sharing)| {
            (
                device.as_str(),
                Query {
                    a,
                    b,
                    sharing: *sharing,
                },
            )
        })
        .collect();
    predictor.predict_on(&queries)
}

/// `asks` predicted with one `predict_groups` call per device, answered in their order.
pub fn predict_groups_on(
    predictor: &mut dyn Predictor,
    asks: &[GroupAsk],
) -> Result<Vec<GroupOutlook>> {
    let mut by_device: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, a) in asks.iter().enumerate() {
        by_device.entry(a.device.as_str()).or_default().push(i);
    }
    let mut out = vec![None; asks.len()];
    for (device, indices) in by_device {
        let queries: Vec<GroupQuery<'_>> = indices
            .iter()
            .map(|&i| GroupQuery {
                jobs: asks[i].jobs.iter().map(String::as_str).collect(),
                mode: asks[i].mode,
                shares: asks[i].shares.clone(),
            })
            .collect();
        for (i, o) in indices
            .into_iter()
            .zip(predictor.predict_groups(device, &queries)?)
        {
            out[i] = Some(o);
        }
    }
    out.into_iter()
        .map(|o| o.ok_or_else(|| anyhow!("the predictor answered fewer groups than asked")))
        .collect()
}

#[derive(Debug, Clone)]
enum NodeSurvey {
    Neutral(Arc<str>),
    Judged {
        gpus: u32,
        free: Vec<u32>,
        whole_share: Option<f64>,
        memory_mib: Option<f64>,
        options: Vec<Option_>,
        joins: Vec<JoinOption>,
        /// Why GPUs with a resident offer nothing, before any prediction.
        closed: Vec<String>,
    },
}

/// One pod's candidate nodes, read from the cluster.
#[derive(Debug, Clone)]
pub struct Survey {
    job: Waiting,
    /// Each node once, in the order first listed.
    nodes: Vec<(String, NodeSurvey)>,
    /// Each listed name's place in `nodes` (a name listed twice is surveyed once).
    listed: Vec<usize>,
    queries: Vec<(String, String, String, Sharing)>,
    groups: Vec<GroupAsk>,
    /// Jobs one GPU may hold.
    gpu_jobs: usize,
    /// The inline features its queries name.
    pub inline: InlineJobs,
    /// Why duet does not know the pod, on the first device where it does not.
    pub unknown: Option<Unknown>,
}

/// The pricing loop's view of a pod's request.
pub fn waiting(pod: &PodInfo, key: String) -> Waiting {
    let job = pod.job.clone().unwrap_or_else(|_| JobSpec::unknown());
    Waiting {
        id: 0,
        workload: key,
        gpus: pod.gpus.max(1),
        weight: job.priority,
        priority: job.priority,
        slo: job.objective,
        memory_mib: job.memory_mib,
    }
}

/// The pricing loop's view of a resident that may take a neighbour.
pub fn resident(pod: &PodInfo, gpu: usize, key: String) -> Resident {
    let job = pod.job.clone().unwrap_or_else(|_| JobSpec::unknown());
    Resident {
        gpu,
        mode: pod.assignment.as_ref().and_then(|a| a.sharing),
        workload: key,
        weight: job.priority,
        slo: job.objective,
        memory_mib: job.memory_mib,
        share: pod.assignment.as_ref().and_then(|a| a.mps_share),
    }
}

/// Reads what `pod` could have on each of `nodes`, where a GPU may hold `gpu_jobs` pods.
pub fn survey(
    cluster: &Cluster,
    map: &DeviceMap,
    known: &Known,
    pod: &PodInfo,
    nodes: &[String],
    gpu_jobs: usize,
) -> Survey {
    let mut out = Survey {
        job: waiting(pod, String::new()),
        nodes: Vec::new(),
        listed: Vec::with_capacity(nodes.len()),
        queries: Vec::new(),
        groups: Vec::new(),
        gpu_jobs,
        inline: known::inline_jobs([pod]),
        unknown: None,
    };
    let mut query_of: HashMap<(String, String, SharingKey), usize> = HashMap::new();
    let mut group_of: HashMap<GroupKey, usize> = HashMap::new();
    let mut place_of: HashMap<&str, usize> = HashMap::new();
    // The reasons that name the pod's own annotations, once per device.
    let mut unknown_on: HashMap<&str, Arc<str>> = HashMap::new();
    let not_seen: Arc<str> = Arc::from("not in duet's view of the cluster yet");
    let mut residents_inline = Vec::new();
    for name in nodes {
        if let Some(&i) = place_of.get(name.as_str()) {
            out.listed.push(i);
            continue;
        }
        place_of.insert(name, out.nodes.len());
        out.listed.push(out.nodes.len());
        let Some(node) = cluster.node(name) else {
            out.nodes
                .push((name.clone(), NodeSurvey::Neutral(not_seen.clone())));
            continue;
        };
        let Some(device) = node.device.as_deref() else {
            let what = node.product.as_deref().map_or_else(
                || format!("no {} label", map.labels.product),
                |p| format!("GPU product {p} is not in the device mapping"),
            );
            out.nodes
                .push((name.clone(), NodeSurvey::Neutral(what.into())));
            continue;
        };
        let key = match known.key(pod, device) {
            Ok(key) => key,
            Err(why) => {
                let text = unknown_on
                    .entry(device)
                    .or_insert_with(|| {
                        format!("duet does not know this pod on {device}: {why}").into()
                    })
                    .clone();
                out.unknown.get_or_insert(why);
                out.nodes.push((name.clone(), NodeSurvey::Neutral(text)));
                continue;
            }
        };
        out.job.workload.clone_from(&key);
        let Some(strategy) = map.strategy(&node.strategy) else {
            out.nodes.push((
                name.clone(),
                NodeSurvey::Neutral(
                    format!(
                        "sharing strategy {} is not in the device mapping",
                        node.strategy
                    )
                    .into(),
                ),
            ));
            continue;
        };
        let uses = cluster.gpus_of(node);
        #[allow(clippy::cast_possible_truncation)]
        let free: Vec<u32> = uses
            .iter()
            .enumerate()
            .filter(|(_, u)| **u == GpuUse::Free)
            .map(|(g, _)| g as u32)
            .collect();
        let sharings = known.sharings(strategy);
        let mut options = Vec::new();
        let mut joins = Vec::new();
        let mut closed = Vec::new();
        if pod.gpus <= 1 {
            for (g, u) in uses.iter().enumerate() {
                #[allow(clippy::cast_possible_truncation)]
                let gpu = g as u32;
                if let GpuUse::Shared { pods } = u
                    && pods.len() < gpu_jobs
                {
                    match join_options(cluster, known, device, &key, gpu, pods, &sharings) {
                        Ok((found, asks, members)) => {
                            // Each group asked once, however many GPUs or nodes hold it.
                            let at: Vec<usize> = asks
                                .into_iter()
                                .map(|ask| {
                                    *group_of.entry(GroupKey::of(&ask)).or_insert_with(|| {
                                        out.groups.push(ask);
                                        out.groups.len() - 1
                                    })
                                })
                                .collect();
                            joins.extend(found.into_iter().map(|mut j| {
                                j.now = at[j.now];
                                j.with = at[j.with];
                                j
                            }));
                            residents_inline.extend(members);
                        }
                        Err(why) => closed.push(format!("GPU {g}: {why}")),
                    }
                    continue;
                }
                let GpuUse::Alone { pod: uid } = u else {
                    continue;
                };
                let Some(r) = cluster.pod(uid) else { continue };
                let r_key = match known.key(r, device) {
                    Ok(k) => k,
                    Err(why) => {
                        closed.push(format!("GPU {g}: beside {}, {why}", r.key()));
                        continue;
                    }
                };
                residents_inline.push(r.clone());
                let resident = resident(r, g, r_key.clone());
                let mut offered = false;
                for sharing in &sharings {
                    if !pricing::keeps_resident_share(&resident, *sharing) {
                        continue;
                    }
                    offered = true;
                    let q = *query_of
                        .entry((key.clone(), r_key.clone(), sharing.key()))
                        .or_insert_with(|| {
                            out.queries.push((
                                device.to_string(),
                                key.clone(),
                                r_key.clone(),
                                *sharing,
                            ));
                            out.queries.len() - 1
                        });
                    #[allow(clippy::cast_possible_truncation)]
                    options.push(Option_ {
                        gpu: g as u32,
                        resident: resident.clone(),
                        resident_name: r.key(),
                        sharing: *sharing,
                        query: q,
                    });
                }
                if !offered {
                    closed.push(if strategy.sharings.is_empty() {
                        format!(
                            "GPU {g}: held by {}, and strategy {} shares no GPU",
                            r.key(),
                            node.strategy
                        )
                    } else if sharings.is_empty() {
                        format!(
                            "GPU {g}: held by {}, and the model predicts none of strategy {}'s modes (it knows {})",
                            r.key(),
                            node.strategy,
                            known.modes()
                        )
                    } else {
                        format!(
                            "GPU {g}: held by {}, whose MPS share no sharing of strategy {} keeps",
                            r.key(),
                            node.strategy
                        )
                    });
                }
            }
        }
        out.nodes.push((
            name.clone(),
            NodeSurvey::Judged {
                gpus: node.gpus,
                free,
                whole_share: strategy.whole_share,
                memory_mib: node.memory_mib,
                options,
                joins,
                closed,
            },
        ));
    }
    out.inline.extend(known::inline_jobs(&residents_inline));
    out
}

/// The places beside the residents `pods` of GPU `gpu` for the pod known as `key`: one per
/// newcomer share of the residents' mode, with the groups to ask (as it runs first, then with
/// the pod), and the residents' pods; or why there is none.
#[allow(clippy::type_complexity)]
fn join_options(
    cluster: &Cluster,
    known: &Known,
    device: &str,
    key: &str,
    gpu: u32,
    pods: &[String],
    sharings: &[Sharing],
) -> Result<(Vec<JoinOption>, Vec<GroupAsk>, Vec<PodInfo>), String> {
    let mut members = Vec::new();
    let mut residents = Vec::new();
    for uid in pods {
        let r = cluster
            .pod(uid)
            .ok_or_else(|| format!("with {uid}, not in duet's view"))?;
        let r_key = known
            .key(r, device)
            .map_err(|why| format!("with {}, {why}", r.key()))?;
        residents.push(resident(r, 0, r_key));
        members.push(r.clone());
    }
    let names: Vec<String> = members.iter().map(PodInfo::key).collect();
    let Some(mode) = pricing::shared_mode(&residents) else {
        return Err(format!(
            "held by {}, which share it under no one mode",
            names.join(", ")
        ));
    };
    let shares: Option<Vec<f64>> = residents.iter().map(|r| r.share).collect();
    if mode == Mode::Mps && shares.is_none() {
        return Err(format!(
            "held by {} under mps, not every one with a known share",
            names.join(", ")
        ));
    }
    let jobs: Vec<String> = residents.iter().map(|r| r.workload.clone()).collect();
    let mut asks = vec![GroupAsk {
        device: device.to_string(),
        jobs: jobs.clone(),
        mode,
        shares: shares.clone().filter(|_| mode == Mode::Mps),
    }];
    let mut found = Vec::new();
    for (_, share, with_shares) in pricing::join_sharings(mode, shares.as_deref(), sharings) {
        asks.push(GroupAsk {
            device: device.to_string(),
            jobs: std::iter::once(key.to_string())
                .chain(jobs.iter().cloned())
                .collect(),
            mode,
            shares: with_shares,
        });
        found.push(JoinOption {
            gpu,
            residents: residents.clone(),
            names: names.clone(),
            mode,
            share,
            now: 0,
            with: asks.len() - 1,
        });
    }
    if found.is_empty() {
        return Err(format!(
            "held by {} under {mode}, which no sharing the model predicts here continues",
            names.join(", ")
        ));
    }
    Ok((found, asks, members))
}

impl Survey {
    /// How many pairs and groups it asks the predictor about.
    pub fn query_count(&self) -> usize {
        self.queries.len() + self.groups.len()
    }

    /// Its groups, each with its device.
    pub fn owned_groups(&self) -> Vec<GroupAsk> {
        self.groups.clone()
    }

    /// Its pairs: device, the pod's id, the resident's id, the sharing.
    pub fn owned_queries(&self) -> Vec<(String, String, String, Sharing)> {
        self.queries.clone()
    }

    /// Its pairs' outlooks in one predictor call (none where it has no pair), and its groups'
    /// in one more per device (none where it has no group).
    pub fn predict(&self, predictor: &mut dyn Predictor) -> Result<Predicted> {
        let pairs = self.predict_pairs(predictor)?;
        let groups = if self.groups.is_empty() {
            Vec::new()
        } else {
            predict_groups_on(predictor, &self.groups)?
        };
        Ok(Predicted { pairs, groups })
    }

    fn predict_pairs(&self, predictor: &mut dyn Predictor) -> Result<Vec<Outlook>> {
        predict_pairs_on(predictor, &self.queries)
    }

    /// Each listed node's verdict, in the order listed (a name listed twice, twice), given what
    /// was predicted of its pairs and groups.
    pub fn verdicts(&self, outlooks: &Predicted) -> Vec<(String, Verdict)> {
        let judged: Vec<Verdict> = self
            .nodes
            .iter()
            .map(|(_, survey)| self.verdict(survey, outlooks))
            .collect();
        self.listed
            .iter()
            .map(|&i| (self.nodes[i].0.clone(), judged[i].clone()))
            .collect()
    }

    fn verdict(&self, survey: &NodeSurvey, predicted: &Predicted) -> Verdict {
        let outlooks = &predicted.pairs;
        let NodeSurvey::Judged {
            gpus,
            free,
            whole_share,
            memory_mib,
            options,
            joins,
            closed,
        } = survey
        else {
            let NodeSurvey::Neutral(why) = survey else {
                unreachable!()
            };
            return Verdict::Neutral(why.clone());
        };
        let job = &self.job;
        let need = job.gpus as usize;
        let mut best: Option<(f64, Shape)> = None;
        if free.len() >= need {
            best = Some((
                1.0,
                Shape::Whole {
                    gpus: free[..need].to_vec(),
                    mps_share: *whole_share,
                },
            ));
        }
        let config = PricingConfig {
            gpu_memory_mib: *memory_mib,
            ..PricingConfig::default()
        };
        let mut refusals = closed.clone();
        for o in options {
            let Some(outlook) = outlooks.get(o.query) else {
                continue;
            };
            match pricing::value_beside(job, &o.resident, outlook, 0, &config) {
                Ok(value) => {
                    let value = value / job.weight;
                    if best.as_ref().is_none_or(|(v, _)| value > *v) {
                        best = Some((
                            value,
                            Shape::Beside {
                                gpu: o.gpu,
                                resident: o.resident_name.clone(),
                                sharing: o.sharing,
                                speed: outlook.speed_a,
                                resident_speed: outlook.speed_b,
                            },
                        ));
                    }
                }
                Err(refusal) => refusals.push(format!(
                    "GPU {} beside {} ({}): {refusal}",
                    o.gpu,
                    o.resident_name,
                    describe(o.sharing)
                )),
            }
        }
        for j in joins {
            let (Some(now), Some(with)) =
                (predicted.groups.get(j.now), predicted.groups.get(j.with))
            else {
                continue;
            };
            let members: Vec<&Resident> = j.residents.iter().collect();
            match pricing::value_among(job, &members, now, with, 0, &config) {
                Ok(value) => {
                    let value = value / job.weight;
                    if best.as_ref().is_none_or(|(v, _)| value > *v) {
                        best = Some((
                            value,
                            Shape::Join {
                                gpu: j.gpu,
                                residents: j.names.clone(),
                                mode: j.mode,
                                share: j.share,
                                speed: with.speeds[0],
                                resident_speeds: with.speeds[1..].to_vec(),
                            },
                        ));
                    }
                }
                Err(refusal) => refusals.push(format!(
                    "GPU {} with {} ({}{}): {refusal}",
                    j.gpu,
                    j.names.join(", "),
                    j.mode,
                    j.share.map_or(String::new(), |s| format!(" {s}%"))
                )),
            }
        }
        match best {
            Some((value, shape)) => Verdict::Fits { value, shape },
            None => {
                let mut why = if need > 1 {
                    format!(
                        "needs {} free GPUs, {} of {gpus} free",
                        gpu_count_text(job.gpus),
                        free.len()
                    )
                } else {
                    format!("no free GPU of {gpus}")
                };
                if need == 1 {
                    let full = gpus.saturating_sub(u32::try_from(free.len()).unwrap_or(0));
                    let judged = refusals.len();
                    if judged == 0 && full > 0 {
                        why.push_str(&format!(
                            "; every GPU holds {} pods or one of several GPUs",
                            self.gpu_jobs
                        ));
                    }
                    for r in refusals.iter().take(3) {
                        why.push_str("; ");
                        why.push_str(r);
                    }
                    if refusals.len() > 3 {
                        why.push_str(&format!("; and {} more", refusals.len() - 3));
                    }
                }
                Verdict::Fails(why.into())
            }
        }
    }
}

/// A sharing in words: `space`, `mps 30%/70%`.
pub fn describe(sharing: Sharing) -> String {
    match (sharing.share_a, sharing.share_b) {
        (Some(a), Some(b)) => format!("{} {a}%/{b}%", sharing.mode),
        _ => sharing.mode.to_string(),
    }
}

#[cfg(test)]
mod tests;
