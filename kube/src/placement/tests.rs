//! The survey's and the verdicts' tests: tables of predictions and small clusters.

use super::*;
use crate::cluster::tests::{node, pod};
use crate::contract::Identity;

/// Speeds by (a, b): the newcomer's and the resident's, and their p10s.
#[derive(Debug)]
struct Table(HashMap<(String, String), [f64; 4]>, usize);

impl Predictor for Table {
    fn describe(&self) -> String {
        "table".into()
    }
    fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        self.1 += 1;
        Ok(queries
            .iter()
            .map(|q| {
                let [a, b, sa, sb] = self.0[&(q.a.to_string(), q.b.to_string())];
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

fn map() -> DeviceMap {
    DeviceMap::parse(
        "[[device]]\nmatch = \"V100\"\ndevice = \"v100\"\n[[strategy]]\nname = \"mps\"\nsharings = [{ mode = \"space\" }]",
    )
    .expect("valid")
}

fn on(mut p: PodInfo, gpu: u32) -> PodInfo {
    p.assignment = Some(Assignment {
        gpus: vec![gpu],
        sharing: None,
        mps_share: None,
    });
    p
}

fn judge(
    cluster: &Cluster,
    known: &Known,
    p: &PodInfo,
    table: &mut Table,
) -> Vec<(String, Verdict)> {
    judge_with(cluster, known, p, table, 2)
}

fn judge_with(
    cluster: &Cluster,
    known: &Known,
    p: &PodInfo,
    table: &mut Table,
    gpu_jobs: usize,
) -> Vec<(String, Verdict)> {
    let nodes: Vec<String> = cluster.nodes().map(|n| n.name.clone()).collect();
    let s = survey(cluster, &map(), known, p, &nodes, gpu_jobs);
    let outlooks = s.predict(table).expect("predict");
    s.verdicts(&outlooks)
}

#[test]
fn a_third_pod_joins_two_that_share_a_gpu_only_where_the_gpu_may_hold_three() {
    let mut c = Cluster::default();
    c.apply_node(node("trio", 1));
    for r in ["r1", "r2"] {
        let mut p = on(pod(r, Some("trio"), 1, "x"), 0);
        if let Some(a) = p.assignment.as_mut() {
            a.sharing = Some(Mode::Space);
        }
        c.apply_pod(p);
    }
    let known = Known::of(&[("w", &["v100"]), ("x", &["v100"])]);
    let mut table = Table(
        [
            (("w".into(), "x".into()), [0.9, 0.9, 0.9, 0.9]),
            (("x".into(), "x".into()), [0.8, 0.8, 0.8, 0.8]),
        ]
        .into_iter()
        .collect(),
        0,
    );
    let newcomer = pod("p", None, 1, "w");
    let v = judge_with(&c, &known, &newcomer, &mut table, 2);
    let Verdict::Fails(why) = &v[0].1 else {
        panic!("{v:?}")
    };
    assert!(why.contains("every GPU holds 2 pods"), "{why}");
    // Three to a GPU: w runs at 1 / (1 + 2/9) = 0.818 with the pair, each x at
    // 1 / (1 + 1/9 + 1/4) = 0.735 instead of 0.8: worth 0.818 - 2 (0.8 - 0.735) = 0.69.
    let v = judge_with(&c, &known, &newcomer, &mut table, 3);
    let Verdict::Fits { value, shape } = &v[0].1 else {
        panic!("{v:?}")
    };
    let each = 1.0 / (1.0 + 1.0 / 9.0 + 0.25);
    assert!((value - (1.0 / (1.0 + 2.0 / 9.0) - 2.0 * (0.8 - each))).abs() < 1e-9);
    let Shape::Join {
        gpu,
        residents,
        mode,
        share,
        ..
    } = shape
    else {
        panic!("{shape:?}")
    };
    assert_eq!((*gpu, *mode, *share), (0, Mode::Space, None));
    assert_eq!(residents, &["ns/r1".to_string(), "ns/r2".to_string()]);
    assert_eq!(shape.assignment().sharing, Some(Mode::Space));
    // Two pods that share a GPU under no one mode take nobody, and the verdict says why.
    let mut c = Cluster::default();
    c.apply_node(node("trio", 1));
    c.apply_pod(on(pod("r1", Some("trio"), 1, "x"), 0));
    c.apply_pod(on(pod("r2", Some("trio"), 1, "x"), 0));
    let v = judge_with(&c, &known, &newcomer, &mut table, 3);
    let Verdict::Fails(why) = &v[0].1 else {
        panic!("{v:?}")
    };
    assert!(why.contains("under no one mode"), "{why}");
}

#[test]
fn a_free_gpu_scores_ten_and_a_share_what_the_pair_adds() {
    let mut c = Cluster::default();
    c.apply_node(node("free", 1));
    c.apply_node(node("good", 1));
    c.apply_node(node("bad", 1));
    c.apply_pod(on(pod("r1", Some("good"), 1, "x"), 0));
    c.apply_pod(on(pod("r2", Some("bad"), 1, "y"), 0));
    let known = Known::of(&[("w", &["v100"]), ("x", &["v100"]), ("y", &["v100"])]);
    let mut table = Table(
        [
            (("w".into(), "x".into()), [0.9, 0.8, 0.85, 0.75]),
            (("w".into(), "y".into()), [0.5, 0.4, 0.45, 0.35]),
        ]
        .into_iter()
        .collect(),
        0,
    );
    let v = judge(&c, &known, &pod("p", None, 1, "w"), &mut table);
    assert_eq!(table.1, 1, "one predictor call");
    let score = |n: &str| v.iter().find(|(m, _)| m == n).expect("node").1.score();
    assert_eq!(score("free"), 10);
    assert_eq!(score("good"), 7); // 0.9 - (1 - 0.8)
    assert_eq!(score("bad"), 0);
    let Verdict::Fails(why) = &v.iter().find(|(m, _)| m == "bad").expect("node").1 else {
        panic!("{v:?}")
    };
    assert!(
        why.contains("beside ns/r2") && why.contains("adds"),
        "{why}"
    );
    // An objective the p90 breaks fails the node, naming the objective.
    let mut strict = pod("q", None, 1, "w");
    strict.job = Ok(JobSpec {
        identity: Identity::Workload("w".into()),
        objective: Some(0.88),
        ..JobSpec::unknown()
    });
    let v = judge(&c, &known, &strict, &mut table);
    let Verdict::Fails(why) = &v.iter().find(|(m, _)| m == "good").expect("node").1 else {
        panic!("{v:?}")
    };
    assert!(why.contains("objective 0.88"), "{why}");
}

#[test]
fn an_unknown_pod_or_device_is_neutral() {
    let mut c = Cluster::default();
    c.apply_node(node("a", 1));
    let mut other = node("b", 1);
    other.device = None;
    other.product = Some("Radeon".into());
    c.apply_node(other);
    let known = Known::of(&[("w", &["v100"])]);
    let mut table = Table(HashMap::new(), 0);
    let v = judge(&c, &known, &pod("p", None, 1, "nobody"), &mut table);
    assert!(v.iter().all(|(_, v)| v.score() == 5), "{v:?}");
    let v = judge(&c, &known, &pod("p", None, 1, "w"), &mut table);
    assert_eq!(v[0].1.score(), 10);
    let Verdict::Neutral(why) = &v[1].1 else {
        panic!("{v:?}")
    };
    assert!(why.contains("Radeon"), "{why}");
    assert_eq!(table.1, 0, "no pair, no call");
}

#[test]
fn a_resident_duet_does_not_know_takes_no_neighbour() {
    let mut c = Cluster::default();
    c.apply_node(node("a", 2));
    c.apply_pod(on(pod("r", Some("a"), 1, "mystery"), 0));
    c.apply_pod(on(pod("s", Some("a"), 1, "w"), 1));
    c.apply_pod(on(pod("t", Some("a"), 1, "w"), 1));
    let known = Known::of(&[("w", &["v100"])]);
    let v = judge(
        &c,
        &known,
        &pod("p", None, 1, "w"),
        &mut Table(HashMap::new(), 0),
    );
    let Verdict::Fails(why) = &v[0].1 else {
        panic!("{v:?}")
    };
    assert!(why.contains("no free GPU of 2"), "{why}");
    assert!(why.contains("ns/r") && why.contains("mystery"), "{why}");
}

#[test]
fn a_pod_of_several_gpus_needs_them_free() {
    let mut c = Cluster::default();
    c.apply_node(node("a", 4));
    c.apply_pod(on(pod("r", Some("a"), 1, "w"), 0));
    let known = Known::of(&[("w", &["v100"])]);
    let mut table = Table(HashMap::new(), 0);
    let v = judge(&c, &known, &pod("p", None, 3, "w"), &mut table);
    assert_eq!(
        v[0].1,
        Verdict::Fits {
            value: 1.0,
            shape: Shape::Whole {
                gpus: vec![1, 2, 3],
                mps_share: None
            }
        }
    );
    let v = judge(&c, &known, &pod("p", None, 4, "w"), &mut table);
    assert_eq!(
        v[0].1,
        Verdict::Fails("needs 4 free GPUs, 3 of 4 free".into())
    );
}

#[test]
fn a_node_listed_many_times_is_surveyed_once_and_alike_groups_asked_once() {
    let mut c = Cluster::default();
    for n in ["trio-1", "trio-2"] {
        c.apply_node(node(n, 1));
        for r in ["r1", "r2"] {
            let mut p = on(pod(&format!("{n}-{r}"), Some(n), 1, "x"), 0);
            if let Some(a) = p.assignment.as_mut() {
                a.sharing = Some(Mode::Space);
            }
            c.apply_pod(p);
        }
    }
    let known = Known::of(&[("w", &["v100"]), ("x", &["v100"])]);
    let mut names = vec!["trio-1".to_string(); 1000];
    names.extend(["ghost", "trio-2", "ghost"].map(String::from));
    let newcomer = pod("p", None, 1, "w");
    let s = survey(&c, &map(), &known, &newcomer, &names, 3);
    assert_eq!(s.nodes.len(), 3, "each name surveyed once");
    // Both nodes hold the same pair: the group as it runs and with the pod, asked once.
    assert_eq!(s.owned_groups().len(), 2, "{:?}", s.owned_groups());
    let mut table = Table(
        [
            (("w".into(), "x".into()), [0.9, 0.9, 0.9, 0.9]),
            (("x".into(), "x".into()), [0.8, 0.8, 0.8, 0.8]),
        ]
        .into_iter()
        .collect(),
        0,
    );
    let v = s.verdicts(&s.predict(&mut table).expect("predict"));
    // One answer per listed name, in the order listed.
    let answered: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        answered,
        names.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(v[..1000].iter().all(|(_, x)| x == &v[0].1));
    assert!(matches!(v[0].1, Verdict::Fits { .. }), "{:?}", v[0].1);
    assert_eq!(
        v[1001].1.score(),
        v[0].1.score(),
        "the same pair, the same value"
    );
    let (Verdict::Neutral(a), Verdict::Neutral(b)) = (&v[1000].1, &v[1002].1) else {
        panic!("{v:?}")
    };
    assert!(Arc::ptr_eq(a, b), "the reason is held once");
}

#[test]
fn a_long_workload_id_is_quoted_short_and_its_reason_held_once() {
    let mut c = Cluster::default();
    for n in ["a", "b"] {
        c.apply_node(node(n, 1));
    }
    let id = "w".repeat(100 << 10);
    let names = vec!["a".to_string(), "b".to_string(), "a".to_string()];
    let s = survey(
        &c,
        &map(),
        &Known::default(),
        &pod("p", None, 1, &id),
        &names,
        2,
    );
    let v = s.verdicts(&Predicted::default());
    let reasons: Vec<&Arc<str>> = v
        .iter()
        .map(|(_, v)| match v {
            Verdict::Neutral(why) => why,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(reasons.iter().all(|r| Arc::ptr_eq(r, reasons[0])));
    assert!(reasons[0].len() < 600, "{} bytes", reasons[0].len());
    assert!(reasons[0].contains("bytes more"), "{}", reasons[0]);
}
