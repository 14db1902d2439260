//! `duet schedule`'s plan on a small cluster with a table of predictions.

use duet_core::dataset::Mode;

use super::binds::Outcome;
use super::*;
use crate::cluster::tests::{node, pod};
use crate::contract::Assignment;

/// Every pair at 0.9 apart from `x` beside `x` at 0.8: a third pod gains beside two `x`.
#[derive(Debug)]
struct Flat;

impl Predictor for Flat {
    fn describe(&self) -> String {
        "flat".into()
    }
    fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        Ok(queries
            .iter()
            .map(|q| {
                let s = if q.a == "x" && q.b == "x" { 0.8 } else { 0.9 };
                Outlook {
                    feasible: true,
                    speed_a: s,
                    speed_b: s,
                    safe_speed_a: s,
                    safe_speed_b: s,
                }
            })
            .collect())
    }
}

/// One device (`v100`, any V100 product) whose nodes' `mps` strategy offers space sharing.
fn v100_space() -> DeviceMap {
    DeviceMap::parse(
        "[[device]]\nmatch = \"V100\"\ndevice = \"v100\"\n[[strategy]]\nname = \"mps\"\nsharings = [{ mode = \"space\" }]",
    )
    .expect("valid")
}

/// As duet records them: the first resident placed alone (`exclusive`), the second beside it
/// under `space`; or, with `both_shared`, both recorded under `space`.
#[test]
fn a_pod_joins_a_gpu_two_pods_share_where_it_may_hold_three() {
    for both_shared in [false, true] {
        joins_two_residents(both_shared);
    }
}

fn joins_two_residents(both_shared: bool) {
    let mut c = Cluster::default();
    c.apply_node(node("trio", 1));
    for r in ["r1", "r2"] {
        let mut p = pod(r, Some("trio"), 1, "x");
        p.assignment = Some(Assignment {
            gpus: vec![0],
            sharing: (both_shared || r == "r2").then_some(Mode::Space),
            mps_share: None,
        });
        c.apply_pod(p);
    }
    let map = v100_space();
    let known = Known::of(&[("w", &["v100"]), ("x", &["v100"])]);
    let pending = [pod("p", None, 1, "w")];
    let run = |gpu_jobs: usize| {
        let config = PricingConfig {
            gpu_jobs,
            ..PricingConfig::default()
        };
        plan(
            &c,
            &map,
            &known,
            &pending,
            &PassedOver::new(),
            &mut Flat,
            &config,
        )
        .expect("plan")
    };
    assert!(run(2).bound.is_empty());
    let three = run(3);
    let [b] = &three.bound[..] else {
        panic!("{three:?}")
    };
    let Shape::Join { residents, .. } = &b.shape else {
        panic!("{b:?}")
    };
    assert_eq!(residents, &["ns/r1".to_string(), "ns/r2".to_string()]);
    assert_eq!(b.node, "trio");
}

/// A step explains the pods it never explained first, and at most MAX_EXPLAINED of them.
#[test]
fn a_backlog_is_explained_a_slice_at_a_time_new_pods_first() {
    let unplaced: Vec<PodInfo> = (0..MAX_EXPLAINED + 10)
        .map(|k| pod(&format!("p{k}"), None, 1, "w"))
        .collect();
    let before: HashSet<String> = (0..20).map(|k| format!("p{k}")).collect();
    let chosen = to_explain(unplaced, &before);
    assert_eq!(chosen.len(), MAX_EXPLAINED);
    let uids: Vec<&str> = chosen.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids[0], "p20");
    assert!(
        uids[..MAX_EXPLAINED - 10]
            .iter()
            .all(|u| !before.contains(*u))
    );
    assert_eq!(uids[MAX_EXPLAINED - 10], "p0");
}

/// A pod with no GPU node it may run on is told so; where more pods wait than a round weighs, a
/// pod that nodes could take is told it may have been past them.
#[test]
fn a_waiting_pod_is_told_what_kept_it() {
    let map = v100_space();
    let known = Known::of(&[("w", &["v100"])]);
    let waiting = [pod("p", None, 1, "w")];
    let told = |c: &Cluster, pending: usize| {
        explain(
            c,
            &map,
            &known,
            &waiting,
            &mut Flat,
            &PricingConfig::default(),
            pending,
        )
        .expect("explained")
        .remove(0)
    };
    assert!(told(&Cluster::default(), 1).contains("no GPU node it may run on"));
    let mut c = Cluster::default();
    c.apply_node(node("free", 1));
    let window = PricingConfig::default().window;
    let plain = told(&c, 1);
    assert!(
        plain.contains("places went to pods of more value"),
        "{plain}"
    );
    let crowded = told(&c, window + 6);
    assert!(
        crowded.contains(&format!(
            "{} pods wait and a round weighs {window}",
            window + 6
        )),
        "{crowded}"
    );
}

/// Where more pods wait than a round weighs, the window is shared among namespaces in turn, each
/// namespace's pods in rank; below it, the order is as it came.
#[test]
fn a_namespace_of_many_pods_cannot_fill_the_round() {
    let mut pending: Vec<PodInfo> = (0..6)
        .map(|k| pod(&format!("a{k}"), None, 1, "w"))
        .collect();
    for p in &mut pending {
        p.namespace = "many".into();
    }
    let mut late = pod("b0", None, 1, "w");
    late.namespace = "few".into();
    pending.push(late);
    let order: Vec<usize> = (0..pending.len()).collect();
    let none = PassedOver::new();
    assert_eq!(fair_window(order.clone(), &pending, &none, 7), order);
    let fair = fair_window(order.clone(), &pending, &none, 4);
    assert_eq!(&fair[..4], &[0, 1, 2, 6]);
    assert_eq!(&fair[4..], &[3, 4, 5]);
    // Passed over once, a0 and a1 step aside for their namespace's others.
    let passed: PassedOver = [("a0".to_string(), 1), ("a1".to_string(), 1)].into();
    let fair = fair_window(order.clone(), &pending, &passed, 4);
    assert_eq!(&fair[..4], &[2, 3, 4, 6]);
    // More namespaces than places: one whose every pod was passed over goes after the others.
    let mut spread = pending.clone();
    for (k, p) in spread.iter_mut().enumerate() {
        p.namespace = format!("ns{k}");
    }
    let stuck: PassedOver = (0..3).map(|k| (format!("a{k}"), 2)).collect();
    let fair = fair_window(order, &spread, &stuck, 2);
    assert_eq!(&fair[..2], &[3, 4]);
}

/// Within one namespace, pods of more weight that no GPU can take fill the round's window once;
/// in the next step they step aside and the pod behind them is weighed and placed.
#[test]
fn pods_that_cannot_be_placed_step_aside_for_their_namespace_s_others() {
    let mut c = Cluster::default();
    c.apply_node(node("one", 1));
    let map = v100_space();
    let known = Known::of(&[("w", &["v100"])]);
    let mut pending: Vec<PodInfo> = (0..4)
        .map(|k| {
            let mut p = pod(&format!("big{k}"), None, 2, "w");
            if let Ok(job) = &mut p.job {
                job.priority = 5.0;
            }
            p
        })
        .collect();
    pending.push(pod("small", None, 1, "w"));
    let config = PricingConfig {
        window: 4,
        ..PricingConfig::default()
    };
    let mut passed = PassedOver::new();
    let step = |passed: &PassedOver| {
        plan(&c, &map, &known, &pending, passed, &mut Flat, &config).expect("plan")
    };
    let first = step(&passed);
    assert!(first.bound.is_empty(), "{first:?}");
    assert_eq!(
        first.weighed,
        ["big0", "big1", "big2", "big3"].map(String::from).into()
    );
    for uid in &first.weighed {
        *passed.entry(uid.clone()).or_default() += 1;
    }
    let second = step(&passed);
    let bound: Vec<&str> = second.bound.iter().map(|b| b.pod.as_str()).collect();
    assert_eq!(bound, ["small"], "{second:?}");
    // Without the steps passed over, the pod behind them waits for good.
    assert!(step(&PassedOver::new()).bound.is_empty());
}

/// Where more wait than a round weighs, a pod of a higher PriorityClass is weighed before pods of
/// more `duet.io/priority` weight.
#[test]
fn a_higher_priority_class_is_weighed_first() {
    let mut c = Cluster::default();
    c.apply_node(node("one", 1));
    let map = v100_space();
    let known = Known::of(&[("w", &["v100"])]);
    let mut heavy = pod("heavy", None, 1, "w");
    if let Ok(job) = &mut heavy.job {
        job.priority = 5.0;
    }
    let mut critical = pod("critical", None, 1, "w");
    critical.class_priority = 1_000_000;
    let pending = [heavy, critical];
    let bound = |window: usize| {
        let config = PricingConfig {
            window,
            ..PricingConfig::default()
        };
        let plan = plan(
            &c,
            &map,
            &known,
            &pending,
            &PassedOver::new(),
            &mut Flat,
            &config,
        )
        .expect("plan");
        plan.bound
            .iter()
            .map(|b| (b.pod.clone(), matches!(b.shape, Shape::Whole { .. })))
            .collect::<Vec<_>>()
    };
    // The first pass weighs the critical pod alone and gives it the free GPU; the heavy one
    // comes beside it in the next.
    assert_eq!(
        bound(1),
        [("critical".to_string(), true), ("heavy".to_string(), false)]
    );
}

/// The counts of pods passed over grow while the cluster leaves no new room, and are forgotten
/// when room is freed (a pod gone), so the freed GPU goes by priority; pods no longer waiting
/// are forgotten.
#[test]
fn room_freed_clears_the_steps_passed_over() {
    let mut full = Cluster::default();
    full.apply_node(node("one", 1));
    let mut resident = pod("r", Some("one"), 1, "w");
    resident.assignment = Some(Assignment {
        gpus: vec![0],
        sharing: None,
        mps_share: None,
    });
    full.apply_pod(resident);
    let mut freed = full.clone();
    freed.remove_pod("r");
    assert_eq!(queue::room(&full, 2), [("one".to_string(), 1)].into());
    assert_eq!(queue::room(&freed, 2), [("one".to_string(), 2)].into());
    let waiting: HashSet<&str> = ["a", "b"].into();
    let weighed = Plan {
        weighed: ["a", "b"].map(String::from).into(),
        ..Plan::default()
    };
    let mut backlog = Backlog::default();
    assert!(backlog.begin(&full, &waiting, 2).is_empty());
    backlog.end(&weighed, queue::room(&full, 2));
    let counts = backlog.begin(&full, &waiting, 2).clone();
    assert_eq!(counts, [("a".to_string(), 1), ("b".to_string(), 1)].into());
    backlog.end(&weighed, queue::room(&full, 2));
    let only_a: HashSet<&str> = ["a"].into();
    assert_eq!(
        backlog.begin(&full, &only_a, 2).clone(),
        [("a".to_string(), 2)].into()
    );
    backlog.end(&weighed, queue::room(&full, 2));
    assert!(backlog.begin(&freed, &waiting, 2).is_empty());
}

/// A pod whose binding failed is held back for 1 s, then 2, 4, 8, and 10 s at most; its record
/// is forgotten when it is bound or no longer waits.
#[test]
fn a_failed_binding_holds_its_pod_back_for_longer_each_time() {
    use std::time::Duration;
    let mut backlog = Backlog::default();
    let t = Instant::now();
    let s = Duration::from_secs;
    let waits: Vec<Duration> = (0..6).map(|_| backlog.failed("a", t)).collect();
    assert_eq!(waits, [s(1), s(2), s(4), s(8), s(10), s(10)]);
    assert!(backlog.held_back("a", t + s(9)));
    assert!(!backlog.held_back("a", t + s(10)));
    assert!(!backlog.held_back("b", t));
    backlog.bound("a");
    assert_eq!(backlog.failed("a", t), s(1));
    // A pod no longer waiting is forgotten at the next step's start.
    backlog.failed("a", t);
    let none: HashSet<&str> = HashSet::new();
    backlog.begin(&Cluster::default(), &none, 2);
    assert!(!backlog.held_back("a", t));
    assert_eq!(backlog.failed("a", t), s(1));
}

/// A view of one node of one GPU with pod `a` pending, and `a`'s binding to GPU 0 in flight
/// (assumed made).
fn in_flight_on_one_gpu() -> (View, PodInfo, Bound) {
    let view = View::new(v100_space());
    view.write().apply_node(node("one", 1));
    let a = pod("a", None, 1, "w");
    let planned = Bound {
        pod: "a".into(),
        node: "one".into(),
        shape: Shape::Whole {
            gpus: vec![0],
            mps_share: None,
        },
        value: 1.0,
    };
    view.write().apply_pod(a.clone());
    view.write()
        .assume(a.clone(), "one", planned.shape.assignment());
    (view, a, planned)
}

/// What a step makes of the binding `planned` of `pod` failing with `error`, on `view` with
/// `backlog` (two places a GPU): the message for the pod's Event, if any.
fn take_in_failure(
    view: &View,
    backlog: &mut Backlog,
    planned: Bound,
    pod: PodInfo,
    error: crate::bind::BindError,
) -> Option<(PodInfo, String)> {
    let metrics = Metrics::default();
    let mut take_in = TakeIn {
        view,
        metrics: &metrics,
        backlog,
        gpu_jobs: 2,
        once: false,
    };
    take_in.outcome(Outcome {
        planned,
        pod,
        result: Err(error),
    })
}

/// A binding the API server refused, taken in after its step: the pod waits again, held back,
/// and the room its assumed binding held is not read as room freed (the counts of pods passed
/// over stand).
#[test]
fn a_refused_binding_taken_in_late_frees_no_room() {
    use crate::bind::BindError;
    let (view, a, planned) = in_flight_on_one_gpu();
    assert!(view.read().pending("duet").is_empty());
    let mut backlog = Backlog::default();
    let waiting: HashSet<&str> = ["b"].into();
    backlog.begin(&view.read(), &waiting, 2);
    let weighed = Plan {
        weighed: ["b"].map(String::from).into(),
        ..Plan::default()
    };
    backlog.end(&weighed, queue::room(&view.read(), 2));
    let refused = BindError::Refused {
        pod: "default/a".into(),
        node: "one".into(),
        message: "no".into(),
    };
    let told = take_in_failure(&view, &mut backlog, planned, a, refused);
    let (_, why) = told.expect("a failure is told");
    assert!(why.contains("planned again in 1 s"), "{why}");
    assert_eq!(view.read().pending("duet").len(), 1);
    assert!(backlog.held_back("a", Instant::now()));
    let waiting: HashSet<&str> = ["a", "b"].into();
    assert_eq!(
        backlog.begin(&view.read(), &waiting, 2).clone(),
        [("b".to_string(), 1)].into()
    );
}

/// A pod's failed bindings are kept while its next binding is in flight (it is not waiting
/// then), so the backoff grows for a binding refused slowly too; they are forgotten when it is
/// gone.
#[test]
fn failures_outlast_a_binding_in_flight() {
    let mut cluster = Cluster::default();
    cluster.apply_node(node("one", 1));
    let a = pod("a", None, 1, "w");
    cluster.apply_pod(a.clone());
    let gpu0 = Assignment {
        gpus: vec![0],
        sharing: None,
        mps_share: None,
    };
    cluster.assume(a, "one", gpu0);
    assert!(cluster.pending("duet").is_empty());
    let mut backlog = Backlog::default();
    let t = Instant::now();
    backlog.failed("a", t);
    backlog.begin(&cluster, &HashSet::new(), 2);
    assert_eq!(backlog.failures("a"), 1);
    assert_eq!(backlog.failed("a", t), Duration::from_secs(2));
    cluster.remove_pod("a");
    backlog.begin(&cluster, &HashSet::new(), 2);
    assert_eq!(backlog.failures("a"), 0);
}

/// A binding not answered whose pod the watch saw deleted meanwhile is not assumed again (it
/// would hold its GPU 60 s for a pod that is gone), held back or told.
#[test]
fn an_unanswered_binding_of_a_pod_gone_holds_nothing() {
    use crate::bind::BindError;
    let (view, a, planned) = in_flight_on_one_gpu();
    view.write().remove_pod("a");
    let mut backlog = Backlog::default();
    let unanswered = BindError::Unanswered {
        pod: "ns/a".into(),
        node: "one".into(),
        message: "no answer within 10 s".into(),
    };
    let told = take_in_failure(&view, &mut backlog, planned, a, unanswered);
    assert!(told.is_none());
    assert!(view.read().pod("a").is_none());
    assert_eq!(
        queue::room(&view.read(), 2),
        [("one".to_string(), 2)].into()
    );
    assert_eq!(backlog.failures("a"), 0);
}
