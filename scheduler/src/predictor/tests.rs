//! The predictors' tests: the oracle on committed datasets, the model in process, and an
//! unreachable server.

use std::path::{Path, PathBuf};

use super::*;
use duet_model::predict;

/// A path of the repository, found at run time (a build may have moved).
fn repo(path: &str) -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
    .join(path)
}

fn gavel() -> (PathBuf, Dataset) {
    let dir = repo("datasets/gavel-v100");
    let dataset = Dataset::read(&dir).expect("test input");
    (dir, dataset)
}

#[test]
fn the_oracle_answers_both_directions_from_the_measured_pairs() {
    let (dir, dataset) = gavel();
    let oracle = Oracle::new(&dir, &dataset).expect("test input");
    assert_eq!(oracle.gpu, "v100");
    let pair = dataset
        .pairs
        .iter()
        .find(|p| p.status == Status::Ok && p.a != p.b)
        .expect("test input");
    let sharing = oracle.sharings()[0];
    let ab = oracle
        .lookup(&pair.a, &pair.b, sharing)
        .expect("test input");
    let ba = oracle
        .lookup(&pair.b, &pair.a, sharing)
        .expect("test input");
    let solo = |id: &str| dataset.workload(id).expect("test input").solo_throughput;
    assert!((ab.speed_a - pair.throughput_a / solo(&pair.a)).abs() < 1e-12);
    assert_eq!((ab.speed_a, ab.speed_b), (ba.speed_b, ba.speed_a));
    assert!(ab.feasible);
    let failed = dataset
        .pairs
        .iter()
        .find(|p| p.status != Status::Ok)
        .expect("test input");
    assert!(
        !oracle
            .lookup(&failed.a, &failed.b, sharing)
            .expect("test input")
            .feasible
    );
    assert!(oracle.lookup("nobody", &pair.b, sharing).is_none());
}

#[test]
fn the_oracle_answers_a_measured_group_in_any_order_and_composes_the_others() {
    let dir = repo("datasets/cpu-dev2c-triples");
    let dataset = Dataset::read(&dir).expect("test input");
    let oracle = Oracle::new(&dir, &dataset).expect("test input");
    assert!(
        oracle.measured_groups() >= 50,
        "{}",
        oracle.measured_groups()
    );
    let g = dataset
        .groups
        .iter()
        .find(|g| {
            g.status == Status::Ok
                && g.jobs[0].workload != g.jobs[1].workload
                && g.jobs[1].workload != g.jobs[2].workload
                && g.jobs[0].workload != g.jobs[2].workload
        })
        .expect("a group of three distinct workloads");
    let solo = |id: &str| dataset.workload(id).expect("test input").solo_throughput;
    let repeats: Vec<&duet_core::dataset::Group> = dataset
        .groups
        .iter()
        .filter(|h| h.setting_key() == g.setting_key())
        .collect();
    let measured = |w: &str| {
        repeats
            .iter()
            .map(|h| {
                let j = h.jobs.iter().find(|j| j.workload == w).expect("in group");
                speed(j.throughput, solo(w))
            })
            .sum::<f64>()
            / repeats.len() as f64
    };
    let names: Vec<&str> = g.jobs.iter().map(|j| j.workload.as_str()).collect();
    for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
        let q = GroupQuery {
            jobs: order.iter().map(|&k| names[k]).collect(),
            mode: g.mode,
            shares: None,
        };
        let (o, truth) = oracle.lookup_group(&q).expect("measured");
        assert_eq!(truth, Truth::Measured);
        for (w, s) in q.jobs.iter().zip(&o.speeds) {
            assert!((s - measured(w)).abs() < 1e-12, "{w}: {s}");
        }
    }
    // Four jobs were never measured together: composed from the measured pairs.
    let mut four = names.clone();
    four.push(names[0]);
    let q = GroupQuery {
        jobs: four,
        mode: g.mode,
        shares: None,
    };
    let (o, truth) = oracle.lookup_group(&q).expect("composed");
    assert_eq!(truth, Truth::Composed);
    let pairs: Vec<Outlook> = group::pairs_of(4)
        .into_iter()
        .map(|(i, j)| {
            oracle
                .lookup(q.jobs[i], q.jobs[j], q.sharing(i, j))
                .expect("measured pair")
        })
        .collect();
    assert_eq!(o, GroupOutlook::composed(4, &pairs));
    assert!(o.speeds.iter().all(|s| *s > 0.0 && *s < 1.0), "{o:?}");
    // A workload the dataset never ran: no truth.
    let q = GroupQuery {
        jobs: vec![names[0], names[1], "nobody"],
        mode: g.mode,
        shares: None,
    };
    assert!(oracle.lookup_group(&q).is_none());
}

#[test]
fn the_model_in_process_answers_groups_as_the_server_composes_them() {
    let dir = repo("models/default");
    let mut model = ModelPredictor::load(&dir, EngineKind::Burn).expect("default model");
    let (_, dataset) = gavel();
    let ids: Vec<&str> = dataset
        .workloads
        .iter()
        .take(3)
        .map(|w| w.workload.as_str())
        .collect();
    let queries = [
        GroupQuery {
            jobs: ids.clone(),
            mode: Mode::Space,
            shares: None,
        },
        GroupQuery {
            jobs: vec![ids[1], ids[0]],
            mode: Mode::Space,
            shares: None,
        },
    ];
    let answered = model.predict_groups("v100", &queries).expect("groups");
    assert_eq!(answered.len(), 2);
    // The server's way: every pair of the group predicted, composed by
    // `duet_model::group::compose` with the model's shift for the size.
    for (q, a) in queries.iter().zip(&answered) {
        let size = q.jobs.len();
        let pairs: Vec<Query<'_>> = group::pairs_of(size)
            .into_iter()
            .map(|(i, j)| Query {
                a: q.jobs[i],
                b: q.jobs[j],
                sharing: q.sharing(i, j),
            })
            .collect();
        let request = request("v100", &pairs, &InlineJobs::new());
        let predictions =
            predict::predict(&model.model, &model.registry, &request, None).expect("pairs");
        let calibration = &model.model.meta.calibration;
        let shift = calibration.group_shift(size);
        let effects: Vec<f64> = q
            .jobs
            .iter()
            .map(|id| calibration.group_effect(size, "v100", id))
            .collect();
        let server = GroupOutlook::of(
            &group::compose(size, &predictions, shift, &effects).expect("composed"),
        );
        assert_eq!(a.feasible, server.feasible);
        assert_eq!(a.speeds.len(), size);
        for (x, y) in a
            .speeds
            .iter()
            .chain(&a.safe_speeds)
            .zip(server.speeds.iter().chain(&server.safe_speeds))
        {
            // The server answers in single precision.
            assert!((x - y).abs() < 1e-5 * y.max(1.0), "{x} vs {y}");
        }
    }
}

#[test]
fn a_dataset_without_a_successful_pair_is_refused() {
    let (dir, mut dataset) = gavel();
    dataset.pairs.retain(|p| p.status != Status::Ok);
    let e = Oracle::new(&dir, &dataset)
        .expect_err("must fail")
        .to_string();
    assert!(
        e.contains("gavel-v100") && e.contains("no successful pair"),
        "{e}"
    );
    dataset.pairs.clear();
    assert!(Oracle::new(&dir, &dataset).is_err());
}

#[test]
fn an_unreachable_server_is_retried_then_named() {
    // A port nobody listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("test input")
        .local_addr()
        .expect("test input")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut p = HttpPredictor::new(&url, None, Duration::from_secs(2))
        .with_retries(3, Duration::from_millis(10));
    let sharing = Sharing {
        mode: Mode::Space,
        share_a: None,
        share_b: None,
    };
    let e = p
        .predict(
            "v100",
            &[Query {
                a: "x",
                b: "y",
                sharing,
            }],
        )
        .expect_err("must fail")
        .to_string();
    assert!(e.contains(&url) && e.contains("after 3 attempts"), "{e}");
    assert_eq!(p.calls, 1);
}
