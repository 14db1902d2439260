//! The bindings `duet schedule` has sent: each (duet's record, then the binding, within
//! `bind::TIME_LIMIT`) runs on its own, up to [`BIND_AT_ONCE`] at a time, and a step waits for
//! its own at most [`GRACE`], so a binding the API server is slow to answer holds back neither
//! the step's other bindings nor the next steps. A pod whose binding is in flight is assumed
//! placed in the view meanwhile (no round plans it again, its GPU is taken); what the binding
//! comes to is taken in by the step that sees it finish (`take_in`).

use std::collections::{HashMap, HashSet};
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

/// Of those, the most that may be bindings of pods whose binding failed before, and the most
/// that may be first tries while pods tried again wait in the plan: however many pods a policy
/// keeps refusing, slowly, ahead of the others, pods tried for the first time keep 8 places, and
/// however many new pods it refuses, pods tried again (a pod of high priority refused once) keep
/// 4. A plan with no pod tried again sends first tries into all 16 (BENCHMARKS.md: kept to 12,
/// a backlog behind a slow webhook was bound a quarter slower).
pub const RETRIES_AT_ONCE: usize = BIND_AT_ONCE / 2;
pub const FIRST_TRIES_AT_ONCE: usize = BIND_AT_ONCE * 3 / 4;

/// The longest a step waits for the bindings it sent before it ends (those still unanswered go
/// on, and a later step takes in what they come to).
pub const GRACE: Duration = Duration::from_secs(1);

/// A pod's priority: its PriorityClass's, then its `duet.io/priority`.
type Rank = (i32, f64);

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

    /// Bindings in flight of pods tried for the first time.
    pub fn first_tries(&self) -> usize {
        self.len().saturating_sub(self.retries())
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

impl<'a> TakeIn<'a> {
    /// For a step of `duet schedule` under `config`.
    pub fn new(
        view: &'a View,
        metrics: &'a Metrics,
        backlog: &'a mut Backlog,
        config: &super::ScheduleConfig,
    ) -> TakeIn<'a> {
        TakeIn {
            view,
            metrics,
            backlog,
            gpu_jobs: config.pricing.gpu_jobs,
            once: config.once,
        }
    }

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

/// Why a binding planned was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsent {
    /// The places for a binding of its kind stayed taken until the step's grace ran out.
    NoPlace(Places),
    /// A pod it was planned beside was not bound (refused, unreachable, or not sent).
    BesideFailed,
    /// The bindings of pods it was planned beside were not answered within the step.
    BesideUnbound,
}

/// Which of the places for bindings in flight were all taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Places {
    /// All of them ([`BIND_AT_ONCE`]).
    All,
    /// Those of first tries while pods tried again wait ([`FIRST_TRIES_AT_ONCE`]).
    FirstTries,
    /// Those of pods tried again ([`RETRIES_AT_ONCE`]).
    Retries,
}

impl Places {
    /// Which places a binding (`retry`: of a pod whose binding failed before) waits for while
    /// `in_flight` holds what it does, `retries_planned` where pods tried again wait in the plan;
    /// `None` where it has one.
    fn taken(in_flight: &InFlight, retry: bool, retries_planned: bool) -> Option<Places> {
        if in_flight.len() >= BIND_AT_ONCE {
            Some(Places::All)
        } else if retry {
            (in_flight.retries() >= RETRIES_AT_ONCE).then_some(Places::Retries)
        } else {
            (retries_planned && in_flight.first_tries() >= FIRST_TRIES_AT_ONCE)
                .then_some(Places::FirstTries)
        }
    }
}

impl Unsent {
    /// What the Event of a pod planned on `node` and not sent says (`once`: under `duet
    /// schedule --once`, which has no next step).
    pub fn message(self, node: &str, once: bool) -> String {
        let why = match self {
            Unsent::NoPlace(Places::All) => {
                format!("all {BIND_AT_ONCE} places for bindings in flight stayed taken")
            }
            Unsent::NoPlace(Places::FirstTries) => format!(
                "the {FIRST_TRIES_AT_ONCE} places for first tries stayed taken (the other {} of \
                 the {BIND_AT_ONCE} are kept for pods tried again)",
                BIND_AT_ONCE - FIRST_TRIES_AT_ONCE
            ),
            Unsent::NoPlace(Places::Retries) => {
                format!("the {RETRIES_AT_ONCE} places for pods tried again stayed taken")
            }
            Unsent::BesideFailed => "a pod it was to join was not bound".to_string(),
            Unsent::BesideUnbound => {
                "the bindings of the pods it was to join were not answered yet".to_string()
            }
        };
        let then = if once {
            "not tried again (duet schedule --once)"
        } else {
            "planned again at the next step"
        };
        format!("duet: planned on {node}, but its binding was not sent: {why}; {then}")
    }
}

/// What a step's bindings came to: sent, planned and not sent (and why), made, and
/// the pods not bound (refused, unreachable or not sent: the room they were to take stays free,
/// and is not taken for room freed at the next step); the failures with what to tell their pods.
#[derive(Debug, Default)]
pub struct Sent {
    pub sent: usize,
    pub not_sent: Vec<(Bound, Unsent)>,
    pub bound: usize,
    pub not_bound: Vec<String>,
    pub failed: Vec<(PodInfo, String)>,
}

/// Sends the bindings of `planned` (a plan's, in its order) and waits for them until `grace`
/// (none: until each is answered), taking in through `take_in` what they and older bindings come
/// to. Pods tried for the first time are sent first, then those whose binding failed before,
/// each by priority; each kind keeps places of its own ([`FIRST_TRIES_AT_ONCE`] where retries
/// are planned, [`RETRIES_AT_ONCE`]), a pod waiting (until `grace`) for one of its kind while the
/// other kind goes on. A pod planned beside pods whose bindings are in flight (of `planned` or
/// sent before) is sent once they are made (until `grace`), and not where one is refused or not
/// sent: its record names them and its predicted speed assumes them.
pub async fn send_plan(
    planned: &[Bound],
    in_flight: &mut InFlight,
    kube: &Client,
    take_in: &mut TakeIn<'_>,
    grace: Option<Instant>,
) -> Sent {
    let mut failed: Vec<(PodInfo, String)> = Vec::new();
    let view = take_in.view;
    let failed_before: HashMap<&str, u32> = planned
        .iter()
        .map(|b| (b.pod.as_str(), take_in.backlog.failures(&b.pod)))
        .collect();
    let mut bound = 0;
    let mut not_bound: Vec<String> = Vec::new();
    let mut outcome_of = |outcome: Outcome, not_bound: &mut Vec<String>| {
        if matches!(
            outcome.result,
            Err(BindError::Refused { .. } | BindError::Unreachable { .. })
        ) {
            not_bound.push(outcome.planned.pod.clone());
        } else if outcome.result.is_ok() {
            bound += 1;
        }
        take_in.outcome(outcome)
    };
    // Each kind by priority (the PriorityClass's, then `duet.io/priority`), then the plan's order.
    let (uid_of, rank): (HashMap<String, &str>, HashMap<&str, Rank>) = {
        let c = view.read();
        let pods = || planned.iter().filter_map(|b| Some((b, c.pod(&b.pod)?)));
        (
            pods().map(|(b, p)| (p.key(), b.pod.as_str())).collect(),
            pods()
                .map(|(b, p)| {
                    let weight = p.job.as_ref().map_or(1.0, |j| j.priority);
                    (b.pod.as_str(), (p.class_priority, weight))
                })
                .collect(),
        )
    };
    let by_priority = |a: &&Bound, b: &&Bound| {
        let (ra, rb) = (rank.get(a.pod.as_str()), rank.get(b.pod.as_str()));
        let (ra, rb) = (
            ra.copied().unwrap_or((0, 1.0)),
            rb.copied().unwrap_or((0, 1.0)),
        );
        rb.0.cmp(&ra.0).then(rb.1.total_cmp(&ra.1))
    };
    let (mut first_tries, mut retries): (Vec<&Bound>, Vec<&Bound>) = planned
        .iter()
        .partition(|b| failed_before[b.pod.as_str()] == 0);
    let retries_planned = !retries.is_empty();
    first_tries.sort_by(by_priority);
    retries.sort_by(by_priority);
    // The pods (UIDs) each binding's pod was planned beside: of the plan, or assumed on its
    // node. Worked out once, before any outcome is taken in: a refused pod's assumption is
    // dropped as its outcome is, and it would then no longer be found on its node.
    let residents: HashMap<&str, Vec<String>> = {
        let c = view.read();
        planned
            .iter()
            .map(|b| {
                let (beside, _) = b.shape.beside();
                let on_node = c.on_node(&b.node);
                let uids = beside
                    .iter()
                    .flat_map(|names| names.split(','))
                    .filter_map(|name| match uid_of.get(name) {
                        Some(uid) => Some(uid.to_string()),
                        None => on_node
                            .iter()
                            .find(|p| p.key() == name)
                            .map(|p| p.uid.clone()),
                    })
                    .collect();
                (b.pod.as_str(), uids)
            })
            .collect()
    };
    let in_plan: HashSet<&str> = planned.iter().map(|b| b.pod.as_str()).collect();
    let mut sent_now: HashSet<&str> = HashSet::new();
    let mut not_sent: Vec<(Bound, Unsent)> = Vec::new();
    // What a binding not sent in a pass waits for: a place of its kind, or its residents.
    enum Wait {
        Place,
        Residents,
    }
    let mut to_send: Vec<&Bound> = first_tries.into_iter().chain(retries).collect();
    loop {
        let mut later: Vec<(&Bound, Wait)> = Vec::new();
        let before = sent_now.len();
        for b in to_send {
            // A pod planned beside others goes once their bindings are made (its record names
            // them and its predicted speed assumes them), and not where one is refused.
            let after_them = &residents[b.pod.as_str()];
            if after_them.iter().any(|u| not_bound.contains(u)) {
                not_bound.push(b.pod.clone());
                not_sent.push((b.clone(), Unsent::BesideFailed));
                continue;
            }
            if after_them.iter().any(|u| {
                in_flight.holds(u)
                    || (in_plan.contains(u.as_str()) && !sent_now.contains(u.as_str()))
            }) {
                later.push((b, Wait::Residents));
                continue;
            }
            // A kind whose places are taken waits; the other kind goes on.
            let retry = failed_before[b.pod.as_str()] > 0;
            if Places::taken(in_flight, retry, retries_planned).is_some() {
                later.push((b, Wait::Place));
                continue;
            }
            let Some(pod) = view.read().pod(&b.pod).cloned() else {
                not_bound.push(b.pod.clone());
                continue;
            };
            in_flight.send(kube, view, b, pod, retry);
            sent_now.insert(&b.pod);
        }
        if later.is_empty() {
            break;
        }
        // Nothing sent this pass: the pods left wait for a binding in flight to finish (a place
        // freed, a resident answered), until `grace`; where none waits on one, for a step.
        if sent_now.len() == before {
            let waits_on_flight = later.iter().any(|(b, wait)| match wait {
                Wait::Place => true,
                Wait::Residents => residents[b.pod.as_str()].iter().any(|u| in_flight.holds(u)),
            });
            let outcome = if waits_on_flight {
                in_flight.next(grace).await
            } else {
                None
            };
            let place_freed = || {
                later.iter().any(|(b, wait)| {
                    matches!(wait, Wait::Place)
                        && Places::taken(
                            in_flight,
                            failed_before[b.pod.as_str()] > 0,
                            retries_planned,
                        )
                        .is_none()
                })
            };
            if let Some(outcome) = outcome {
                failed.extend(outcome_of(outcome, &mut not_bound));
            } else if !place_freed() {
                // Those waiting for a place first, so that a pod waiting for one of them is
                // told that it was not bound.
                let (places, beside): (Vec<_>, Vec<_>) = later
                    .into_iter()
                    .partition(|(_, w)| matches!(w, Wait::Place));
                for (b, _) in places {
                    let retry = failed_before[b.pod.as_str()] > 0;
                    let taken =
                        Places::taken(in_flight, retry, retries_planned).unwrap_or(Places::All);
                    not_bound.push(b.pod.clone());
                    not_sent.push((b.clone(), Unsent::NoPlace(taken)));
                }
                for (b, _) in beside {
                    let why = if residents[b.pod.as_str()]
                        .iter()
                        .any(|u| not_bound.contains(u))
                    {
                        Unsent::BesideFailed
                    } else {
                        Unsent::BesideUnbound
                    };
                    not_bound.push(b.pod.clone());
                    not_sent.push((b.clone(), why));
                }
                break;
            }
        }
        to_send = later.into_iter().map(|(b, _)| b).collect();
    }
    let sent = sent_now.len();
    // The step waits for its own bindings (older ones are taken in as they finish meanwhile).
    while sent_now.iter().any(|uid| in_flight.holds(uid)) {
        let Some(outcome) = in_flight.next(grace).await else {
            break;
        };
        failed.extend(outcome_of(outcome, &mut not_bound));
    }
    Sent {
        sent,
        not_sent,
        bound,
        not_bound,
        failed,
    }
}
