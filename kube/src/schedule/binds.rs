//! The bindings `duet schedule` has sent: each (duet's record, then the binding, within
//! `bind::TIME_LIMIT`) runs on its own, up to [`BIND_AT_ONCE`] at a time, and a step waits for
//! its own at most [`GRACE`], so a binding the API server is slow to answer holds back neither
//! the step's other bindings nor the next steps. A pod whose binding is in flight is assumed
//! placed in the view meanwhile (no round plans it again, its GPU is taken); what the binding
//! comes to is taken in by the step that sees it finish (`take_in`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::Client;
use tokio::task::JoinSet;

use crate::bind::{self, BindError};
use crate::cluster::PodInfo;
use crate::contract;
use crate::metrics::Metrics;
use crate::watch::View;

use super::Bound;
use super::queue::{self, Backlog};

/// Bindings in flight at once, over every step: an API server that does not answer holds this
/// many for their time limit, and the pods planned beyond it wait for a later step. As many as
/// the kube-scheduler's own binding cycles by default (`parallelism: 16`).
pub const BIND_AT_ONCE: usize = 16;

/// Of those, the most that may be bindings of pods whose binding failed before: however many
/// pods a policy keeps refusing, slowly, ahead of the others, the rest of the places go to pods
/// tried for the first time (which are sent first).
pub const RETRIES_AT_ONCE: usize = BIND_AT_ONCE / 2;

/// The longest a step waits for the bindings it sent before it ends (those still unanswered go
/// on, and a later step takes in what they come to).
pub const GRACE: Duration = Duration::from_secs(1);

/// A binding finished: the plan's, the pod as it was sent, and what the API server said.
#[derive(Debug)]
pub struct Outcome {
    pub planned: Bound,
    pub pod: PodInfo,
    pub result: Result<bool, BindError>,
}

/// The bindings sent and not yet taken in: their tasks, and for each its pod (UID) and whether
/// the pod's binding had failed before.
#[derive(Debug, Default)]
pub struct InFlight {
    tasks: JoinSet<Outcome>,
    pods: HashMap<tokio::task::Id, (String, bool)>,
}

impl InFlight {
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Bindings in flight of pods whose binding had failed before.
    pub fn retries(&self) -> usize {
        self.pods.values().filter(|(_, retry)| *retry).count()
    }

    /// Whether the binding of the pod `uid` is in flight.
    pub fn holds(&self, uid: &str) -> bool {
        self.pods.values().any(|(p, _)| p == uid)
    }

    /// Sends the binding `planned` of `pod`, assumed made in `view` meanwhile; `retry`: the
    /// pod's binding failed before.
    pub fn send(&mut self, kube: &Client, view: &View, planned: &Bound, pod: PodInfo, retry: bool) {
        let (beside, speed) = planned.shape.beside();
        let annotations =
            contract::assignment_annotations(&planned.shape.assignment(), beside.as_deref(), speed);
        view.write()
            .assume(pod.clone(), &planned.node, planned.shape.assignment());
        let (kube, planned) = (kube.clone(), planned.clone());
        let uid = planned.pod.clone();
        let task = self.tasks.spawn(async move {
            let result = bind::bind(&kube, &pod, &planned.node, annotations).await;
            Outcome {
                planned,
                pod,
                result,
            }
        });
        self.pods.insert(task.id(), (uid, retry));
    }

    /// The next binding to finish, waiting until `deadline` at most (none: every binding is
    /// answered); `None` where none finished by then or none is in flight.
    pub async fn next(&mut self, deadline: Option<Instant>) -> Option<Outcome> {
        loop {
            let joined = match deadline {
                Some(d) => tokio::time::timeout_at(d.into(), self.tasks.join_next_with_id())
                    .await
                    .ok()??,
                None => self.tasks.join_next_with_id().await?,
            };
            match joined {
                Ok((id, outcome)) => {
                    self.pods.remove(&id);
                    return Some(outcome);
                }
                // A binding's task cannot fail but by a panic; its pod's assumption lapses.
                Err(e) => {
                    self.pods.remove(&e.id());
                    tracing::warn!("a binding's task: {e}");
                }
            }
        }
    }
}

/// What a step does with one binding's outcome, over what it carries between steps.
pub struct TakeIn<'a> {
    pub view: &'a View,
    pub metrics: &'a Metrics,
    pub backlog: &'a mut Backlog,
    pub gpu_jobs: usize,
    /// `duet schedule --once`: a failed binding is not tried again.
    pub once: bool,
}

impl TakeIn<'_> {
    /// Takes in `outcome`: a binding made is counted and its pod's failures forgotten; one the
    /// API server refused or never got is no longer assumed (the room it held is not counted
    /// as room freed), and its pod is held back (`Backlog::failed`); one sent and not answered
    /// stands as made until the watch shows the pod or the assumption lapses, rather than be
    /// planned again elsewhere under a record rewritten. Returns, for a failure, the message
    /// for the pod's Event.
    pub fn outcome(&mut self, outcome: Outcome) -> Option<(PodInfo, String)> {
        let Outcome {
            planned,
            pod,
            result,
        } = outcome;
        let e = match result {
            Ok(recorded) => {
                if !recorded {
                    self.metrics.record_failures.inc();
                }
                self.backlog.bound(&planned.pod);
                self.metrics.bound(planned.shape.kind());
                return None;
            }
            Err(e) => e,
        };
        self.metrics.bind_failures.inc();
        // A pod the watch saw deleted (or bound) meanwhile is not held, assumed or told.
        let waiting = self
            .view
            .read()
            .pod(&planned.pod)
            .is_some_and(|p| p.node.is_none());
        if !waiting {
            self.view.write().forget_assumed(&planned.pod);
            tracing::warn!("{e}; the pod is gone or bound meanwhile");
            return None;
        }
        let wait = self.backlog.failed(&planned.pod, Instant::now());
        let then = if matches!(e, BindError::Unanswered { .. }) {
            self.view
                .write()
                .assume(pod.clone(), &planned.node, planned.shape.assignment());
            "it stands as made until the watch shows the pod or 60 s pass".to_string()
        } else {
            let freed = {
                let mut cluster = self.view.write();
                let room = |c: &crate::cluster::Cluster| {
                    c.node(&planned.node)
                        .map_or(0, |n| queue::room_on(c, n, self.gpu_jobs))
                };
                let before = room(&cluster);
                cluster.forget_assumed(&planned.pod);
                room(&cluster).saturating_sub(before)
            };
            self.backlog.unbound(&planned.node, freed);
            if self.once {
                "not tried again (duet schedule --once)".to_string()
            } else {
                format!("planned again in {} s at the earliest", wait.as_secs())
            }
        };
        tracing::warn!("{e}; {then}");
        Some((pod, format!("duet: {e}; {then}")))
    }
}
