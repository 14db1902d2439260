//! `duet schedule`: a second scheduler (`schedulerName: duet`) that prices every pending duet pod
//! at once. Each pass runs the pricing loop's round (`duet_scheduler::pricing::round`) over the
//! pending pods for each group of alike nodes (device, sharing strategy, GPU memory), and runs
//! again while rounds still place pods (a pod placed alone this pass may take a neighbour in the
//! next); then it binds what it decided through the pods' `binding` subresource with duet's
//! annotations, side by side (`binds`). A pod it cannot place stays Pending with an Event that
//! says why; one whose binding failed sits out some steps (`queue`). Its state is the API
//! server's: a restarted scheduler reads where every pod is from duet's record in each pod.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use duet_scheduler::client::PredictClient;
use duet_scheduler::predictor::{
    GroupOutlook, GroupQuery, HttpPredictor, Outlook, Predictor, Query,
};
use duet_scheduler::pricing::{self, FreeNode, Placement, PricingConfig, Waiting};
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::cluster::{Cluster, GpuUse, PodInfo};
use crate::contract;
use crate::devices::DeviceMap;
use crate::extender::{Probed, probe_routes};
use crate::known::{self, Known, REFRESH};
use crate::metrics::Metrics;
use crate::placement::{self, Shape};
use crate::watch::{Freshness, View};

/// The most passes of one scheduling step (each pass: a round per group of nodes).
pub const MAX_PASSES: usize = 16;

/// One pod bound by a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// The pod's UID.
    pub pod: String,
    pub node: String,
    pub shape: Shape,
    /// What it adds to the cluster's predicted weighted throughput: its weight alone, or its
    /// weighted speed minus what the residents lose.
    pub value: f64,
}

/// What one scheduling step decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub bound: Vec<Bound>,
    /// Pods left pending (UIDs).
    pub unplaced: Vec<String>,
    /// Rounds run and pairs asked of the predictor.
    pub rounds: usize,
    pub queries: usize,
    /// Pods (UIDs) a round of the step weighed, placed or not: inside its window.
    pub weighed: BTreeSet<String>,
}

impl Plan {
    /// The predicted weighted throughput it adds.
    pub fn value(&self) -> f64 {
        self.bound.iter().map(|b| b.value).sum()
    }
}

/// A predictor that never asks about a pod duet does not know: such a pair is infeasible, so
/// the loop gives that pod a whole GPU or nothing.
struct KnownOnly<'a> {
    inner: &'a mut dyn Predictor,
    keys: &'a HashSet<String>,
    asked: usize,
}

impl std::fmt::Debug for KnownOnly<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KnownOnly")
    }
}

impl Predictor for KnownOnly<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        let closed = Outlook {
            feasible: false,
            speed_a: 0.0,
            speed_b: 0.0,
            safe_speed_a: 0.0,
            safe_speed_b: 0.0,
        };
        let asked: Vec<usize> = (0..queries.len())
            .filter(|&i| self.keys.contains(queries[i].a) && self.keys.contains(queries[i].b))
            .collect();
        let mut out = vec![closed; queries.len()];
        if asked.is_empty() {
            return Ok(out);
        }
        let subset: Vec<Query<'_>> = asked.iter().map(|&i| queries[i]).collect();
        self.asked += subset.len();
        for (i, o) in asked.into_iter().zip(self.inner.predict(gpu, &subset)?) {
            out[i] = o;
        }
        Ok(out)
    }

    fn predict_groups(
        &mut self,
        gpu: &str,
        groups: &[GroupQuery<'_>],
    ) -> Result<Vec<GroupOutlook>> {
        let asked: Vec<usize> = (0..groups.len())
            .filter(|&i| groups[i].jobs.iter().all(|j| self.keys.contains(*j)))
            .collect();
        let mut out: Vec<GroupOutlook> = groups
            .iter()
            .map(|g| GroupOutlook {
                feasible: false,
                speeds: vec![0.0; g.jobs.len()],
                safe_speeds: vec![0.0; g.jobs.len()],
            })
            .collect();
        if asked.is_empty() {
            return Ok(out);
        }
        let subset: Vec<GroupQuery<'_>> = asked.iter().map(|&i| groups[i].clone()).collect();
        self.asked += subset.len();
        for (i, o) in asked
            .into_iter()
            .zip(self.inner.predict_groups(gpu, &subset)?)
        {
            out[i] = o;
        }
        Ok(out)
    }
}

/// Nodes that price alike: device, sharing strategy, GPU memory.
type GroupKey = (String, String, Option<u64>);

/// One step over `pending` (in arrival order): rounds until none places a pod.
pub fn plan(
    cluster: &Cluster,
    map: &DeviceMap,
    known: &Known,
    pending: &[PodInfo],
    passed_over: &PassedOver,
    predictor: &mut dyn Predictor,
    config: &PricingConfig,
) -> Result<Plan> {
    let mut local = cluster.clone();
    let mut groups: BTreeMap<GroupKey, Vec<String>> = BTreeMap::new();
    for node in cluster.nodes() {
        if let Some(device) = &node.device
            && node.schedulable
            && node.gpus > 0
            && map.strategy(&node.strategy).is_some()
        {
            groups
                .entry((
                    device.clone(),
                    node.strategy.clone(),
                    node.memory_mib.map(f64::to_bits),
                ))
                .or_default()
                .push(node.name.clone());
        }
    }
    let mut out = Plan::default();
    let mut remaining: Vec<usize> = (0..pending.len())
        .filter(|&i| pending[i].gpus > 0)
        .collect();
    for _ in 0..MAX_PASSES {
        let mut placed_any = false;
        for (group, nodes) in &groups {
            // Pods alike in where they may run (node selector, tolerations) bid together.
            let mut classes: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
            for &i in &remaining {
                let eligible: Vec<String> = nodes
                    .iter()
                    .filter(|n| local.node(n).is_some_and(|n| pending[i].may_run_on(n)))
                    .cloned()
                    .collect();
                if eligible.is_empty() {
                    continue;
                }
                match classes.iter_mut().find(|(e, _)| *e == eligible) {
                    Some((_, members)) => members.push(i),
                    None => classes.push((eligible, vec![i])),
                }
            }
            for (eligible, members) in classes {
                let placed = round_on(
                    &mut local,
                    map,
                    known,
                    (pending, passed_over),
                    &members,
                    group,
                    &eligible,
                    predictor,
                    config,
                    &mut out,
                )?;
                if !placed.is_empty() {
                    placed_any = true;
                    remaining.retain(|i| !placed.contains(i));
                }
            }
        }
        if !placed_any || remaining.is_empty() {
            break;
        }
    }
    // A pod that asks for no GPU is never placed; it is told why.
    out.unplaced = remaining
        .iter()
        .map(|&i| &pending[i])
        .chain(pending.iter().filter(|p| p.gpus == 0))
        .map(|p| p.uid.clone())
        .collect();
    Ok(out)
}

/// One pricing round for the pods `members` of `pending` over `nodes` (one group); what it
/// binds goes into `out` and `local`. Returns the pods it placed.
#[allow(clippy::too_many_arguments)]
fn round_on(
    local: &mut Cluster,
    map: &DeviceMap,
    known: &Known,
    (pending, passed_over): (&[PodInfo], &PassedOver),
    members: &[usize],
    (device, strategy, memory): &GroupKey,
    nodes: &[String],
    predictor: &mut dyn Predictor,
    config: &PricingConfig,
    out: &mut Plan,
) -> Result<Vec<usize>> {
    let sharings = map
        .strategy(strategy)
        .map(|s| known.sharings(s))
        .unwrap_or_default();
    let whole_share = map.strategy(strategy).and_then(|s| s.whole_share);
    // The GPUs of these nodes, numbered for the round.
    let mut gpu_at: Vec<(usize, u32)> = Vec::new();
    let mut free = Vec::new();
    let mut residents = Vec::new();
    let mut keys: HashSet<String> = HashSet::new();
    let mut resident_pods: HashMap<usize, PodInfo> = HashMap::new();
    // Pods of the round's residents, by their index in `residents`.
    let mut resident_of: Vec<PodInfo> = Vec::new();
    for (n, name) in nodes.iter().enumerate() {
        let Some(node) = local.node(name) else {
            continue;
        };
        let mut node_free = Vec::new();
        for (g, used) in local.gpus_of(node).into_iter().enumerate() {
            let index = gpu_at.len();
            #[allow(clippy::cast_possible_truncation)]
            gpu_at.push((n, g as u32));
            match used {
                GpuUse::Free => node_free.push(index),
                GpuUse::Alone { pod } => {
                    let Some(r) = local.pod(&pod) else { continue };
                    if let Ok(key) = known.key(r, device) {
                        keys.insert(key.clone());
                        residents.push(placement::resident(r, index, key));
                        resident_of.push(r.clone());
                        resident_pods.insert(index, r.clone());
                    }
                }
                // Several residents take another only where the GPU may hold more and duet
                // knows every one of them.
                GpuUse::Shared { pods } if pods.len() < config.gpu_jobs => {
                    let group: Vec<(&PodInfo, String)> = pods
                        .iter()
                        .filter_map(|p| local.pod(p))
                        .filter_map(|r| known.key(r, device).ok().map(|k| (r, k)))
                        .collect();
                    if group.len() == pods.len() {
                        for (r, key) in group {
                            keys.insert(key.clone());
                            residents.push(placement::resident(r, index, key));
                            resident_of.push(r.clone());
                        }
                    }
                }
                GpuUse::Shared { .. } | GpuUse::Full => {}
            }
        }
        if !node_free.is_empty() {
            free.push(FreeNode { gpus: node_free });
        }
    }
    if free.is_empty() && residents.is_empty() {
        return Ok(Vec::new());
    }
    // Waiting, by their PriorityClass's priority, then weight, then arrival; where more wait
    // than a round weighs, its window shared among namespaces.
    let mut order = members.to_vec();
    order.sort_by(|&a, &b| {
        let w = |i: usize| pending[i].job.as_ref().map_or(1.0, |j| j.priority);
        (pending[b].class_priority.cmp(&pending[a].class_priority))
            .then(w(b).total_cmp(&w(a)))
            .then(a.cmp(&b))
    });
    let order = fair_window(order, pending, passed_over, config.window);
    out.weighed.extend(
        order[..order.len().min(config.window)]
            .iter()
            .map(|&i| pending[i].uid.clone()),
    );
    let waiting: Vec<Waiting> = order
        .iter()
        .map(|&i| {
            let pod = &pending[i];
            let key = match known.key(pod, device) {
                Ok(key) => {
                    keys.insert(key.clone());
                    key
                }
                Err(_) => format!("unknown:{}", pod.uid),
            };
            Waiting {
                id: i,
                ..placement::waiting(pod, key)
            }
        })
        .collect();
    let mut guarded = KnownOnly {
        inner: predictor,
        keys: &keys,
        asked: 0,
    };
    let config = PricingConfig {
        gpu_memory_mib: memory.map(f64::from_bits),
        ..config.clone()
    };
    let (decisions, _) = pricing::round(
        device,
        &waiting,
        &free,
        &residents,
        &sharings,
        &mut guarded,
        &config,
    )?;
    out.rounds += 1;
    out.queries += guarded.asked;
    let mut placed = Vec::new();
    for d in decisions {
        let pod = &pending[d.job];
        let weight = pod.job.as_ref().map_or(1.0, |j| j.priority);
        let (node, shape, value) = match d.placement {
            Placement::Whole { gpus } => {
                let Some(&(n, _)) = gpus.first().and_then(|g| gpu_at.get(*g)) else {
                    continue;
                };
                let locals = gpus.iter().map(|g| gpu_at[*g].1).collect();
                (
                    nodes[n].clone(),
                    Shape::Whole {
                        gpus: locals,
                        mps_share: whole_share,
                    },
                    weight,
                )
            }
            Placement::Beside {
                gpu,
                sharing,
                speed,
                resident_speed,
            } => {
                let (n, g) = gpu_at[gpu];
                let Some(r) = resident_pods.get(&gpu) else {
                    continue;
                };
                let r_weight = r.job.as_ref().map_or(1.0, |j| j.priority);
                (
                    nodes[n].clone(),
                    Shape::Beside {
                        gpu: g,
                        resident: r.key(),
                        sharing,
                        speed,
                        resident_speed,
                    },
                    weight * speed - r_weight * (1.0 - resident_speed.min(1.0)),
                )
            }
            Placement::Join {
                gpu,
                mode,
                share,
                speed,
                resident_speeds,
                value,
            } => {
                let (n, g) = gpu_at[gpu];
                let residents = resident_speeds
                    .iter()
                    .map(|(i, _)| resident_of[*i].key())
                    .collect();
                (
                    nodes[n].clone(),
                    Shape::Join {
                        gpu: g,
                        residents,
                        mode,
                        share,
                        speed,
                        resident_speeds: resident_speeds.iter().map(|(_, s)| *s).collect(),
                    },
                    value,
                )
            }
        };
        local.assume(pod.clone(), &node, shape.assignment());
        placed.push(d.job);
        out.bound.push(Bound {
            pod: pod.uid.clone(),
            node,
            shape,
            value,
        });
    }
    Ok(placed)
}

/// The same pods bound one at a time in the order they arrived, each by a round of its own on
/// the cluster the ones before it left: what an extender, seeing one pod at a time, can do.
pub fn plan_one_at_a_time(
    cluster: &Cluster,
    map: &DeviceMap,
    known: &Known,
    pending: &[PodInfo],
    passed_over: &PassedOver,
    predictor: &mut dyn Predictor,
    config: &PricingConfig,
) -> Result<Plan> {
    let mut local = cluster.clone();
    let mut out = Plan::default();
    for pod in pending {
        let step = plan(
            &local,
            map,
            known,
            std::slice::from_ref(pod),
            passed_over,
            predictor,
            config,
        )?;
        for b in &step.bound {
            local.assume(pod.clone(), &b.node, b.shape.assignment());
        }
        out.rounds += step.rounds;
        out.queries += step.queries;
        out.bound.extend(step.bound);
        out.unplaced.extend(step.unplaced);
    }
    Ok(out)
}

/// `duet schedule`'s settings.
#[derive(Debug, Clone)]
pub struct ScheduleConfig {
    /// The `schedulerName` of the pods it schedules.
    pub name: String,
    pub predictor: String,
    pub token: Option<String>,
    pub predict_timeout: Duration,
    /// How often it looks for pending pods.
    pub interval: Duration,
    /// One step, then exit.
    pub once: bool,
    /// Also plan each step one pod at a time in arrival order, and print both.
    pub compare: bool,
    /// `/healthz`, `/readyz`, `/metrics`.
    pub listen: Option<SocketAddr>,
    pub pricing: PricingConfig,
}

/// What the scheduler's probes read.
#[derive(Debug)]
struct Scheduler {
    view: View,
    metrics: Metrics,
}

impl Probed for Scheduler {
    fn view(&self) -> &View {
        &self.view
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Runs the scheduler until SIGTERM or Ctrl-C (or after one step with `once`).
pub async fn run(config: ScheduleConfig, view: View, kube: Client) -> Result<()> {
    view.spawn_watches(&kube);
    let state = Arc::new(Scheduler {
        view: view.clone(),
        metrics: Metrics::default(),
    });
    if let Some(listen) = config.listen {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("--listen {listen}"))?;
        tracing::info!(
            "duet schedule: probes on http://{} (/healthz, /readyz, /metrics)",
            listener.local_addr().unwrap_or(listen)
        );
        // The probes are served under the extender's guards at their defaults (header and
        // body timeouts, the connection limit): a slow or idle client holds nothing for long.
        let limits = crate::listen::Limits::default();
        let guards = state.metrics.guards.clone();
        let routes = crate::listen::guarded(
            probe_routes::<Scheduler>().with_state(state.clone()),
            &limits,
            &guards,
        );
        tokio::spawn(async move {
            crate::listen::serve(listener, routes, &limits, &guards, std::future::pending()).await;
        });
    }
    let needed: Vec<_> = crate::access::VIEW
        .into_iter()
        .chain(crate::access::BIND)
        .chain([crate::access::TELL])
        .collect();
    let (checked, asking) = (state.clone(), kube.clone());
    tokio::spawn(async move { crate::access::check(&asking, &needed, &checked.metrics).await });
    let client = PredictClient::new(
        &config.predictor,
        config.token.clone(),
        config.predict_timeout,
    )
    .with_retries(3, Duration::from_millis(200));
    let reporter = Reporter {
        controller: "duet-scheduler".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let teller = Teller::start(Recorder::new(kube.clone(), reporter), view.clone());
    let mut told: HashMap<String, String> = HashMap::new();
    let mut backlog = Backlog::default();
    // Dropped on return: bindings still unanswered at SIGTERM are abandoned where they are.
    let mut in_flight = InFlight::default();
    let mut known = Known::default();
    let shutdown = crate::shutdown_signal();
    tokio::pin!(shutdown);
    tracing::info!(
        "duet schedule: pods of schedulerName {}, predicting with {}",
        config.name,
        config.predictor
    );
    loop {
        match view.health.freshness() {
            Freshness::Current => {}
            Freshness::Syncing => {
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
            Freshness::Stale { for_s, error } => {
                tracing::warn!(
                    "the view has not been kept current for {for_s:.0} s ({error}); waiting"
                );
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    () = tokio::time::sleep(config.interval) => continue,
                }
            }
        }
        // A step stops where it is on SIGTERM: a binding is recorded before it is made.
        let step = tokio::select! {
            () = &mut shutdown => return Ok(()),
            step = step(
                &config,
                &view,
                &client,
                &kube,
                &teller,
                &mut known,
                &mut told,
                &mut backlog,
                &mut in_flight,
                &state.metrics,
            ) => step,
        };
        if config.once {
            // The Events the step queued are written before it exits.
            teller.flush(Duration::from_secs(10)).await;
            return step;
        }
        if let Err(e) = step {
            tracing::warn!("scheduling step: {e:#}; trying again");
        }
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep(config.interval) => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn step(
    config: &ScheduleConfig,
    view: &View,
    client: &PredictClient,
    kube: &Client,
    teller: &Teller,
    known: &mut Known,
    told: &mut HashMap<String, String>,
    backlog: &mut Backlog,
    in_flight: &mut InFlight,
    metrics: &Metrics,
) -> Result<()> {
    // What the bindings sent before and finished since came to (before the view is read: a
    // failed one's pod waits again).
    let mut failures: Vec<(PodInfo, String)> = Vec::new();
    let mut take_in = TakeIn::new(view, metrics, backlog, config);
    while let Some(outcome) = in_flight.next(Some(Instant::now())).await {
        failures.extend(take_in.outcome(outcome));
    }
    let (cluster, pending): (Cluster, Vec<PodInfo>) = {
        let c = view.read();
        let pending = c.pending(&config.name).into_iter().cloned().collect();
        (c.clone(), pending)
    };
    // What was said to pods gone or bound is forgotten (a pod deleted while it waited; not one
    // whose binding is in flight).
    let waiting: HashSet<&str> = pending.iter().map(|p| p.uid.as_str()).collect();
    told.retain(|uid, _| cluster.pod(uid).is_some_and(|p| p.node.is_none()));
    let passed = backlog
        .begin(&cluster, &waiting, config.pricing.gpu_jobs)
        .clone();
    // Pods whose binding failed a moment ago sit this step out (their room goes to others).
    let now = Instant::now();
    let (held_back, pending): (Vec<PodInfo>, Vec<PodInfo>) = pending
        .into_iter()
        .partition(|p| backlog.held_back(&p.uid, now));
    let held_back = held_back.len();
    let explained_before: HashSet<String> = told.keys().cloned().collect();
    if pending.is_empty() {
        teller.tell(told, &failures);
        if held_back > 0 || !failures.is_empty() {
            tracing::info!(
                "step: {held_back} held back after a failed binding, {} failed, no other pod pending",
                failures.len()
            );
        }
        #[allow(clippy::cast_possible_wrap)]
        {
            metrics.unplaced.set(held_back as i64);
            metrics.held_back.set(held_back as i64);
            metrics.in_flight.set(in_flight.len() as i64);
        }
        return Ok(());
    }
    let missing = pending.iter().any(|p| {
        matches!(p.job.as_ref().map(|j| &j.identity), Ok(contract::Identity::Workload(id)) if !known.has_any(id))
    });
    if known.older_than(REFRESH) || (missing && known.older_than(Duration::from_secs(2))) {
        let c = client.clone();
        match tokio::task::spawn_blocking(move || Known::fetch(&c)).await? {
            Ok(k) => *known = k,
            Err(e) if known.is_empty() => bail!("workload catalogue: {e:#}"),
            Err(e) => tracing::warn!("workload catalogue: {e:#}; using the last one"),
        }
    }
    let started = Instant::now();
    let map = view.map.clone();
    let k = known.clone();
    let c = client.clone();
    let compare = config.compare;
    let pricing = config.pricing.clone();
    let (plan, alone, waiting, reasons, mut after) =
        tokio::task::spawn_blocking(move || -> Result<_> {
            let mut predictor = HttpPredictor::from_client(c);
            predictor.inline = known::inline_jobs(&pending);
            for p in cluster.nodes().flat_map(|n| cluster.on_node(&n.name)) {
                predictor.inline.extend(known::inline_jobs([p]));
            }
            let batch = plan(
                &cluster,
                &map,
                &k,
                &pending,
                &passed,
                &mut predictor,
                &pricing,
            )?;
            let alone = if compare {
                Some(plan_one_at_a_time(
                    &cluster,
                    &map,
                    &k,
                    &pending,
                    &passed,
                    &mut predictor,
                    &pricing,
                )?)
            } else {
                None
            };
            let mut after = cluster.clone();
            for b in &batch.bound {
                if let Some(p) = pending.iter().find(|p| p.uid == b.pod) {
                    after.assume(p.clone(), &b.node, b.shape.assignment());
                }
            }
            let unplaced: Vec<PodInfo> = pending
                .iter()
                .filter(|p| batch.unplaced.contains(&p.uid))
                .cloned()
                .collect();
            let waiting = unplaced.len();
            let unplaced = to_explain(unplaced, &explained_before);
            // Why pods wait is told on a best effort: a failure to work it out never holds back
            // the bindings planned.
            let reasons = explain(
                &after,
                &map,
                &k,
                &unplaced,
                &mut predictor,
                &pricing,
                pending.len(),
            )
            .unwrap_or_else(|e| {
                tracing::warn!("why {} pods wait: {e:#}", unplaced.len());
                vec![
                    format!("duet: not placed; why could not be worked out: {e:#}");
                    unplaced.len()
                ]
            });
            Ok((
                batch,
                alone,
                waiting,
                unplaced.into_iter().zip(reasons).collect::<Vec<_>>(),
                after,
            ))
        })
        .await??;
    metrics.rounds.inc_by(plan.rounds as u64);
    let planned = started.elapsed();
    // The plan's bindings are sent side by side (`binds`); the step waits for them `GRACE` at
    // most, and takes in what older ones came to as they finish.
    let grace = (!config.once).then(|| Instant::now() + binds::GRACE);
    let mut take_in = TakeIn::new(view, metrics, backlog, config);
    let Sent {
        sent,
        not_sent,
        bound,
        not_bound,
        failed,
    } = binds::send_plan(&plan.bound, in_flight, kube, &mut take_in, grace).await;
    failures.extend(failed);
    // A pod planned and not sent is told so (its last Event may say it found no place).
    let unsent: Vec<(PodInfo, String)> = {
        let c = view.read();
        not_sent
            .iter()
            .filter_map(|(b, why)| {
                let pod = c.pod(&b.pod).filter(|p| p.node.is_none())?;
                Some((pod.clone(), why.message(&b.node, config.once)))
            })
            .collect()
    };
    let not_sent = not_sent.len();
    let still_sent = in_flight.len();
    for uid in &not_bound {
        after.remove_pod(uid);
    }
    backlog.end(&plan, queue::room(&after, config.pricing.gpu_jobs));
    let unplaced = view.read().pending(&config.name).len();
    #[allow(clippy::cast_possible_wrap)]
    {
        metrics.unplaced.set(unplaced as i64);
        metrics.held_back.set(held_back as i64);
        metrics.in_flight.set(still_sent as i64);
    }
    teller.tell(told, failures.iter().chain(&reasons).chain(&unsent));
    tracing::info!(
        "step: {} pending, {sent} bindings sent, {not_sent} planned and not sent ({BIND_AT_ONCE} in flight at most), {bound} bound, {} failed, {still_sent} unanswered yet, {waiting} left, {} told why, {held_back} held back after a failed binding ({} rounds, {} pairs predicted, planned in {:.1} ms)",
        sent + not_sent + waiting + held_back,
        failures.len(),
        reasons.len(),
        plan.rounds,
        plan.queries,
        planned.as_secs_f64() * 1e3
    );
    if let Some(alone) = alone {
        println!(
            "batch (one pricing round over every pending pod): {} bound, predicted weighted throughput added {:.3}",
            plan.bound.len(),
            plan.value()
        );
        println!(
            "one at a time in arrival order:                     {} bound, predicted weighted throughput added {:.3}",
            alone.bound.len(),
            alone.value()
        );
    }
    if config.once && !failures.is_empty() {
        let said: Vec<&str> = failures.iter().map(|(_, why)| why.as_str()).collect();
        bail!(
            "{} of {sent} bindings failed: {}",
            failures.len(),
            said.join("; ")
        );
    }
    Ok(())
}

mod binds;
use binds::{BIND_AT_ONCE, InFlight, Sent, TakeIn};
mod explain;
pub use explain::{MAX_EXPLAINED, explain};
use explain::{Teller, to_explain};
mod queue;
pub use queue::PassedOver;
use queue::{Backlog, fair_window};

#[cfg(test)]
mod tests;
