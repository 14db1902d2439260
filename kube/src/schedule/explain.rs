//! Why the pods a step left waiting wait: each one's survey of the cluster the plan leaves,
//! asked of the predictor at once, told in the pod's Event (`Teller`, also why a binding failed).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

use anyhow::Result;
use duet_scheduler::predictor::Predictor;
use duet_scheduler::pricing::PricingConfig;

use crate::cluster::{Cluster, GpuUse, PodInfo, gpu_count_text};
use crate::devices::{DeviceMap, NodeInfo};
use crate::known::{self, Known};
use crate::placement::{self, Verdict};
use crate::watch::View;

/// Unplaced pods a step explains at most (those it never explained first): working out why asks
/// a prediction for each pod beside each resident it may join, so a backlog of hundreds would
/// ask tens of thousands each second; the others keep the reason they were last given.
pub const MAX_EXPLAINED: usize = 64;

/// Why each of `pods` found no place on the cluster a plan left (`after`), in one predictor
/// call: the nodes' reasons, or that the places it could have had went to pods of more value
/// (or, where more of the step's `pending` pods wait than a round weighs, `pricing.window`,
/// that it may have been past them).
pub fn explain(
    after: &Cluster,
    map: &DeviceMap,
    known: &Known,
    pods: &[PodInfo],
    predictor: &mut dyn Predictor,
    pricing: &PricingConfig,
    pending: usize,
) -> Result<Vec<String>> {
    let gpu_jobs = pricing.gpu_jobs;
    let crowded = (pending > pricing.window).then_some((pending, pricing.window));
    let gpu_nodes: Vec<&NodeInfo> = after
        .nodes()
        .filter(|n| n.schedulable && n.gpus > 0)
        .collect();
    let eligible: Vec<Vec<String>> = pods
        .iter()
        .map(|p| {
            gpu_nodes
                .iter()
                .filter(|n| p.may_run_on(n))
                .map(|n| n.name.clone())
                .collect()
        })
        .collect();
    let surveys: Vec<placement::Survey> = pods
        .iter()
        .zip(&eligible)
        .map(|(p, nodes)| placement::survey(after, map, known, p, nodes, gpu_jobs))
        .collect();
    let mut inline = known::inline_jobs(pods);
    for s in &surveys {
        inline.extend(s.inline.clone());
    }
    let mut all = Vec::new();
    let mut groups = Vec::new();
    let mut spans = Vec::new();
    for s in &surveys {
        let (start, group_start) = (all.len(), groups.len());
        all.extend(s.owned_queries());
        groups.extend(s.owned_groups());
        spans.push((start..all.len(), group_start..groups.len()));
    }
    let outlooks = placement::predict_pairs_on(predictor, &all)?;
    let group_outlooks = if groups.is_empty() {
        Vec::new()
    } else {
        placement::predict_groups_on(predictor, &groups)?
    };
    Ok(surveys
        .iter()
        .zip(spans)
        .zip(pods.iter().zip(&eligible))
        .map(|((s, span), (pod, nodes))| {
            if pod.gpus == 0 {
                return format!(
                    "duet: it asks for no {}, and duet schedule places only pods that ask for \
                     GPUs (another schedulerName places it)",
                    map.resource
                );
            }
            let excluded = gpu_nodes.len() - nodes.len();
            let mut why = match &s.unknown {
                // duet gives a pod it does not know whole GPUs only.
                Some(unknown) => {
                    let free: usize = nodes
                        .iter()
                        .filter_map(|n| after.node(n))
                        .map(|n| {
                            after
                                .gpus_of(n)
                                .iter()
                                .filter(|u| **u == GpuUse::Free)
                                .count()
                        })
                        .max()
                        .unwrap_or(0);
                    format!(
                        "duet: {unknown}, so it takes only whole free GPUs: it asks for {}, and the most free on one of the {} nodes it may run on is {free}",
                        gpu_count_text(pod.gpus),
                        nodes.len()
                    )
                }
                None => {
                    let predicted = placement::Predicted {
                        pairs: outlooks[span.0].to_vec(),
                        groups: group_outlooks[span.1].to_vec(),
                    };
                    summarise(&s.verdicts(&predicted), nodes.len(), crowded)
                }
            };
            if excluded > 0 {
                why.push_str(&format!(
                    "; {excluded} other GPU nodes excluded by its node selector or their taints"
                ));
            }
            why
        })
        .collect())
}

fn summarise(
    verdicts: &[(String, Verdict)],
    nodes: usize,
    crowded: Option<(usize, usize)>,
) -> String {
    if nodes == 0 {
        return "duet: no GPU node it may run on (its node selector and tolerations let it onto none that is schedulable with GPUs)".into();
    }
    let fits = verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Fits { .. }))
        .count();
    if let (true, Some((waiting, window))) = (fits > 0, crowded) {
        return format!(
            "duet: {fits} of {nodes} nodes could take it; {waiting} pods wait and a round weighs {window} of them by priority, then arrival: their places went to those weighed or of more value; it waits for the next"
        );
    }
    if fits > 0 {
        return format!(
            "duet: {fits} of {nodes} nodes could take it, and their places went to pods of more value this round; it waits for the next"
        );
    }
    let mut out = format!("duet: 0/{nodes} nodes fit");
    let mut shown = 0;
    for (name, v) in verdicts {
        let why = match v {
            Verdict::Fails(why) | Verdict::Neutral(why) => why,
            Verdict::Fits { .. } => continue,
        };
        if shown == 3 {
            out.push_str(&format!("; and {} more", verdicts.len() - 3));
            break;
        }
        out.push_str(&format!("; {name}: {why}"));
        shown += 1;
    }
    out
}

/// The unplaced pods a step explains: those never explained first (in their order), then the
/// others, [`MAX_EXPLAINED`] at most.
pub(super) fn to_explain(
    mut unplaced: Vec<PodInfo>,
    explained_before: &HashSet<String>,
) -> Vec<PodInfo> {
    unplaced.sort_by_key(|p| explained_before.contains(&p.uid));
    unplaced.truncate(MAX_EXPLAINED);
    unplaced
}

/// Events queued for writing at most: beyond it a step leaves the rest to a later step.
pub const EVENTS_QUEUED: usize = 1024;

/// Events written at once: an API server slow to take each (seconds under load) keeps a queue
/// of pods waiting this many times less behind; a pod's own Events are written one after another.
pub const EVENTS_AT_ONCE: usize = 4;

/// A pod (UID) and the message of an Event about it.
type Told = (String, String);

/// What tells pods why they wait: Events written by a task of their own, [`EVENTS_AT_ONCE`] at
/// a time, so an API server slow to take them (the client retries 429 and 503 for minutes on its
/// own) holds back no step, and no write is cut short (one cut short but committed was written
/// again, a second Event with the same message). An Event whose pod is bound or gone by its turn
/// is not written, nor one a later message about its pod has replaced in the queue; one whose
/// write fails is told again at a later step.
#[derive(Debug)]
pub(super) struct Teller {
    queue: mpsc::Sender<Queued>,
    writer: tokio::task::JoinHandle<()>,
    /// The pods (UIDs) and messages whose Events could not be written.
    unwritten: Arc<Mutex<Vec<Told>>>,
    /// For each pod with an Event queued or being written, the last message queued.
    latest: Arc<Mutex<HashMap<String, String>>>,
}

/// Forgets `told` as the last message queued about its pod, where it still is.
fn written(latest: &Mutex<HashMap<String, String>>, (uid, note): &Told) {
    if let Ok(mut latest) = latest.lock()
        && latest.get(uid) == Some(note)
    {
        latest.remove(uid);
    }
}

/// An Event to write: about which pod, and what.
type Queued = (ObjectReference, Event);

/// The task that writes the Events queued, [`EVENTS_AT_ONCE`] at a time: an Event about a pod
/// whose Event is being written waits for it (the last such one only), holding back no other.
struct Writer {
    recorder: Recorder,
    view: View,
    latest: Arc<Mutex<HashMap<String, String>>>,
    unwritten: Arc<Mutex<Vec<Told>>>,
    writing: tokio::task::JoinSet<(Told, Option<String>)>,
    /// The pod (UID) of each write.
    pods: HashMap<tokio::task::Id, String>,
    /// Pods (UIDs) whose Event is being written, each with the next one about it, if any.
    deferred: HashMap<String, Option<Queued>>,
}

impl Writer {
    async fn run(mut self, mut queued: mpsc::Receiver<Queued>) {
        loop {
            tokio::select! {
                Some(joined) = self.writing.join_next_with_id(), if !self.writing.is_empty() => {
                    self.finished(joined);
                }
                received = queued.recv(), if self.writing.len() < EVENTS_AT_ONCE => {
                    match received {
                        Some(next) => self.take(next),
                        None => break,
                    }
                }
            }
        }
        while let Some(joined) = self.writing.join_next_with_id().await {
            self.finished(joined);
        }
    }

    /// Writes `next`, or has it wait for the Event being written about its pod; drops it where
    /// its pod is bound or gone, or a later message about it was queued.
    fn take(&mut self, (reference, event): Queued) {
        let uid = reference.uid.clone().unwrap_or_default();
        let told = (uid, event.note.clone().unwrap_or_default());
        let waiting = self
            .view
            .read()
            .pod(&told.0)
            .is_some_and(|p| p.node.is_none());
        let replaced = self
            .latest
            .lock()
            .is_ok_and(|l| l.get(&told.0).is_some_and(|n| *n != told.1));
        if !waiting || replaced {
            written(&self.latest, &told);
            return;
        }
        if let Some(next) = self.deferred.get_mut(&told.0) {
            *next = Some((reference, event));
            return;
        }
        self.deferred.insert(told.0.clone(), None);
        let recorder = self.recorder.clone();
        let uid = told.0.clone();
        let task = self.writing.spawn(async move {
            let error = recorder.publish(&event, &reference).await.err();
            (told, error.map(|e| e.to_string()))
        });
        self.pods.insert(task.id(), uid);
    }

    /// Takes in a write finished, and starts the next one about its pod.
    fn finished(
        &mut self,
        joined: Result<(tokio::task::Id, (Told, Option<String>)), tokio::task::JoinError>,
    ) {
        let id = match &joined {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let uid = self.pods.remove(&id).unwrap_or_default();
        let next = self.deferred.remove(&uid).flatten();
        match joined {
            Ok((_, (told, error))) => {
                written(&self.latest, &told);
                if let Some(e) = error {
                    tracing::warn!("event for pod {uid}: {e}; told again at a later step");
                    if let Ok(mut failed) = self.unwritten.lock() {
                        failed.push(told);
                    }
                }
            }
            // A write cannot fail but by a panic; its pod is told again once what it is told
            // changes.
            Err(e) => tracing::warn!("an Event's task: {e}"),
        }
        if let Some(next) = next {
            self.take(next);
        }
    }
}

impl Teller {
    /// Starts the task that writes the Events, through `recorder`, of pods still waiting in
    /// `view`.
    pub(super) fn start(recorder: Recorder, view: View) -> Teller {
        let (queue, queued) = mpsc::channel::<Queued>(EVENTS_QUEUED);
        let unwritten: Arc<Mutex<Vec<Told>>> = Arc::default();
        let latest: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let writer = Writer {
            recorder,
            view,
            latest: latest.clone(),
            unwritten: unwritten.clone(),
            writing: tokio::task::JoinSet::new(),
            pods: HashMap::new(),
            deferred: HashMap::new(),
        };
        Teller {
            queue,
            writer: tokio::spawn(writer.run(queued)),
            unwritten,
            latest,
        }
    }

    /// Tells each pod of `said` why it waits (an Event), once for each thing said (`told`, noted
    /// as it is queued, forgotten where its write failed); what the queue has no room for is
    /// told at a later step.
    pub(super) fn tell<'a>(
        &self,
        told: &mut HashMap<String, String>,
        said: impl IntoIterator<Item = &'a (PodInfo, String)>,
    ) {
        if let Ok(mut unwritten) = self.unwritten.lock() {
            for (uid, note) in unwritten.drain(..) {
                if told
                    .get(&uid)
                    .is_some_and(|why| why.chars().take(1000).eq(note.chars()))
                {
                    told.remove(&uid);
                }
            }
        }
        for (pod, why) in said {
            if told.get(&pod.uid) == Some(why) {
                continue;
            }
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: Some(pod.uid.clone()),
                ..ObjectReference::default()
            };
            let event = Event {
                type_: EventType::Warning,
                reason: "FailedScheduling".into(),
                note: Some(why.chars().take(1000).collect()),
                action: "Scheduling".into(),
                secondary: None,
            };
            // Noted before it is queued, so that the writer never takes it for replaced, and
            // under the lock until it is queued or put back: the writer, taking a message of the
            // pod queued before, waits for the note it compares with to be settled.
            let note = event.note.clone().unwrap_or_default();
            let queued = match self.latest.lock() {
                Ok(mut latest) => {
                    let before = latest.insert(pod.uid.clone(), note);
                    let queued = self.queue.try_send((reference, event)).is_ok();
                    if !queued {
                        match before {
                            Some(note) => latest.insert(pod.uid.clone(), note),
                            None => latest.remove(&pod.uid),
                        };
                    }
                    queued
                }
                Err(_) => self.queue.try_send((reference, event)).is_ok(),
            };
            if !queued {
                tracing::warn!(
                    "events: {EVENTS_QUEUED} queued and not yet written; the rest wait for a later \
                     step"
                );
                return;
            }
            told.insert(pod.uid.clone(), why.clone());
        }
    }

    /// Waits, `within` at most, for the Events queued to be written (before `--once` exits).
    pub(super) async fn flush(self, within: std::time::Duration) {
        let Teller { queue, writer, .. } = self;
        drop(queue);
        if tokio::time::timeout(within, writer).await.is_err() {
            tracing::warn!("events: not all written within {} s", within.as_secs());
        }
    }
}
