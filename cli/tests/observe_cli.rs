//! The feedback loop across processes: a real `duet serve` (SQLite store) receives what the
//! cluster measured through `duet observe`, `duet dataset export` turns the store into a dataset,
//! and `duet train` learns from it beside a campaign dataset.

mod support;

use std::fmt::Write as _;
use std::path::Path;

use duet_core::Dataset;
use serde_json::{Value, json};
use support::{Server, duet, path};

/// Observations of the V100 pairs among `workloads`, from Gavel's measured throughputs, each
/// setting seen twice (the second 2% faster), with the solo throughputs reported beside them.
fn observed_lines(workloads: &[&str]) -> (String, usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/gavel-v100");
    let dataset = Dataset::read(&root).expect("the committed V100 dataset");
    let solo = |id: &str| {
        dataset
            .workload(id)
            .expect("a Gavel workload")
            .solo_throughput
    };
    let mut out = String::new();
    let mut settings = 0;
    for p in &dataset.pairs {
        if !(workloads.contains(&p.a.as_str()) && workloads.contains(&p.b.as_str()))
            || p.throughput_a <= 0.0
        {
            continue;
        }
        settings += 1;
        for (k, factor) in [(0, 1.0), (1, 1.02)] {
            let o = json!({
                "id": format!("{}-{}-{k}", p.a, p.b), "gpu": "v100", "mode": "space",
                "a": {"workload": p.a}, "b": {"workload": p.b},
                "throughput_a": p.throughput_a * factor, "throughput_b": p.throughput_b * factor,
                "solo_throughput_a": solo(&p.a), "solo_throughput_b": solo(&p.b),
                "window_s": 10.0, "observed_at": format!("2026-11-30T10:0{k}:00Z"),
            });
            let _ = writeln!(out, "{o}");
        }
    }
    (out, settings)
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = duet().args(args).output().expect("duet runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn observations_become_a_dataset_the_trainer_takes() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(tmp.path().join("token"), "feedback-token\n").expect("token");
    let server = Server::start(tmp.path());
    let token = tmp.path().join("token");
    let observe = |file: &Path, extra: &[&str]| {
        let mut args = vec![
            "observe",
            "--server",
            &server.base,
            "--token-file",
            path(&token),
        ];
        args.extend(["--file", path(file)]);
        args.extend(extra);
        run(&args)
    };
    let workloads = [
        "a3c",
        "cyclegan",
        "resnet-50-bs64",
        "transformer-bs32",
        "lm-bs20",
    ];
    let (mut lines, settings) = observed_lines(&workloads);
    assert!(settings >= 10, "{settings} settings");
    // One pair without solo throughputs, of a workload never seen alone: left out, counted.
    let _ = writeln!(
        lines,
        "{}",
        json!({"id": "no-solo", "gpu": "v100", "mode": "space",
               "a": {"workload": "a3c"}, "b": {"workload": "recommendation-bs512"},
               "throughput_a": 1.0, "throughput_b": 2.0, "window_s": 10.0,
               "observed_at": "2026-11-30T11:00:00Z"})
    );
    // A job given by its features, seen alone and next to a3c.
    let inline = json!({"solo_throughput": 4.0, "model": "ResNet-50", "batch_size": 32});
    for o in [
        json!({"id": "inline-solo", "gpu": "v100", "a": {"features": inline},
               "throughput_a": 4.1, "window_s": 10.0, "observed_at": "2026-11-30T11:00:00Z"}),
        json!({"id": "inline-pair", "gpu": "v100", "mode": "space",
               "a": {"features": inline}, "b": {"workload": "a3c"},
               "throughput_a": 2.0, "throughput_b": 5.0, "solo_throughput_b": 8.0,
               "window_s": 10.0, "observed_at": "2026-11-30T11:00:00Z"}),
    ] {
        let _ = writeln!(lines, "{o}");
    }
    // A group of three seen twice, its jobs in another order the second time (one setting),
    // and a group with a job never seen alone (left out, counted).
    let group = |id: &str, jobs: [&str; 3], at: &str| {
        let job = |k: usize| json!({"workload": jobs[k]});
        json!({"id": id, "gpu": "v100", "mode": "space", "a": job(0), "b": job(1),
               "others": [{"job": job(2), "throughput": 1.5, "solo_throughput": 3.0}],
               "throughput_a": 0.5, "throughput_b": 1.0,
               "solo_throughput_a": 1.0, "solo_throughput_b": 2.0,
               "window_s": 10.0, "observed_at": at})
    };
    let mut no_solo = group(
        "group-no-solo",
        ["a3c", "cyclegan", "recommendation-bs512"],
        "2026-11-30T11:02:00Z",
    );
    no_solo["others"][0]
        .as_object_mut()
        .expect("a job")
        .remove("solo_throughput");
    for o in [
        group(
            "group-1",
            ["a3c", "cyclegan", "lm-bs20"],
            "2026-11-30T11:00:00Z",
        ),
        group(
            "group-2",
            ["lm-bs20", "a3c", "cyclegan"],
            "2026-11-30T11:01:00Z",
        ),
        no_solo,
    ] {
        let _ = writeln!(lines, "{o}");
    }
    let file = tmp.path().join("observed.jsonl");
    std::fs::write(&file, &lines).expect("observations");

    // A line that is not an observation: nothing is sent, the line is named.
    let broken = tmp.path().join("broken.jsonl");
    let first = lines.lines().next().unwrap_or("");
    std::fs::write(
        &broken,
        format!("{first}\n{{\"id\": 3}}\n{first} trailing\n"),
    )
    .expect("broken file");
    let (ok, _, err) = observe(&broken, &[]);
    assert!(!ok, "a broken file was sent");
    assert!(
        err.contains("2 of its lines")
            && err.contains("broken.jsonl line 2 field `id`")
            && err.contains("broken.jsonl line 3")
            && err.contains("nothing was sent"),
        "{err}"
    );
    assert_eq!(
        server.metric("duet_observations_total{outcome=\"stored\"}"),
        0.0
    );

    let (ok, out, err) = observe(&file, &["--batch", "7"]);
    assert!(ok, "{out}{err}\n{}", server.log());
    let total = 2 * settings + 6;
    assert!(
        out.starts_with(&format!("{total} stored, 0 stored before")),
        "{out}"
    );
    // Sent again, in other batches: nothing stored twice.
    let (ok, out, err) = observe(&file, &["--batch", "1000"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.starts_with(&format!("0 stored, {total} stored before")),
        "{out}"
    );

    // A refusal by the server names the file's line; the rest is stored.
    let refused = tmp.path().join("refused.jsonl");
    std::fs::write(
        &refused,
        format!(
            "{}\n{}\n",
            json!({"id": "late-solo", "gpu": "v100", "a": {"workload": "a3c"},
                   "throughput_a": 9.0, "window_s": 10.0, "observed_at": "2026-11-30T12:00:00Z"}),
            json!({"id": "stranger", "gpu": "v100", "a": {"workload": "not-registered"},
                   "throughput_a": 9.0, "window_s": 10.0, "observed_at": "2026-11-30T12:00:00Z"}),
        ),
    )
    .expect("refused file");
    let (ok, out, err) = observe(&refused, &[]);
    assert!(!ok, "{out}");
    assert!(
        out.starts_with("1 stored, 0 stored before (unchanged), 1 refused"),
        "{out}"
    );
    assert!(
        err.contains("refused.jsonl line 2: observations[1].a.workload")
            && err.contains("not-registered"),
        "{err}"
    );
    // A batch the server cannot read (an id over its 65,536 bytes) is refused whole: counted and
    // named by its line, never reported as stored. (It was: `0 refused`, exit 0.)
    let solo = |id: &str| {
        json!({"id": id, "gpu": "v100", "a": {"workload": "a3c"}, "throughput_a": 9.0,
               "window_s": 10.0, "observed_at": "2026-11-30T12:00:00Z"})
    };
    let long = tmp.path().join("long-id.jsonl");
    std::fs::write(
        &long,
        format!(
            "{}\n{}\n{}\n{}\n",
            solo("batch-1"),
            solo("batch-2"),
            solo("batch-3"),
            solo(&"x".repeat(70_000))
        ),
    )
    .expect("long-id file");
    let (ok, out, err) = observe(&long, &["--batch", "2"]);
    assert!(!ok, "{out}");
    assert!(
        out.starts_with("2 stored, 0 stored before (unchanged), 2 refused"),
        "{out}"
    );
    assert!(
        err.contains("long-id.jsonl line 4: observations[1].id")
            && err.contains("the whole batch of lines 3 to 4 was refused"),
        "{err}"
    );

    let (status, drift) = get_json(&server.url("/v1/drift"));
    assert_eq!(status, 200);
    assert_eq!(
        drift["pairs"].as_u64(),
        Some((2 * settings + 5) as u64),
        "{drift}"
    );
    drop(server);

    // The store, exported: one setting per pair (two observations pooled), solo throughputs
    // from what was observed, the pair without them left out.
    let exported = tmp.path().join("observed-2026-11-30");
    let state = tmp.path().join("registry.sqlite");
    let export = |state: &Path, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "dataset",
            "export",
            "--state",
            path(state),
            "--out",
            path(out),
        ];
        args.extend(extra);
        run(&args)
    };
    let (ok, out, err) = export(&state, &exported, &["--json"]);
    assert!(ok, "{out}{err}");
    let summary: Value = serde_json::from_str(&out).expect("summary JSON");
    assert_eq!(summary["settings_without_solo"], 2, "{summary}");
    assert_eq!(
        (
            &summary["group_runs"],
            &summary["group_settings"],
            &summary["groups_written"]
        ),
        (&json!(3), &json!(2), &json!(1)),
        "{summary}"
    );
    assert_eq!(
        summary["settings"].as_u64(),
        Some(settings as u64 + 2),
        "{summary}"
    );
    // inline-solo, late-solo, and batch-1 and batch-2 (stored before the batch refused whole).
    assert_eq!(summary["solo_runs"], 4, "{summary}");
    let dataset = Dataset::read(&exported).expect("a valid dataset");
    assert_eq!(dataset.pairs.len(), settings + 1);
    assert_eq!(dataset.meta.provenance.gpu, "v100");
    let source = &dataset.meta.provenance.source;
    assert!(
        source.starts_with("observed: ") && source.contains("registry.sqlite"),
        "{source}"
    );
    let first = dataset
        .pairs
        .iter()
        .find(|p| p.a == "a3c" && p.b == "cyclegan")
        .expect("a3c next to cyclegan");
    assert_eq!(first.repetitions, Some(2));
    assert!(first.throughput_a_std.is_some_and(|s| s > 0.0));
    // The group pooled over both orders of its jobs: one setting, two repetitions.
    assert_eq!(dataset.groups.len(), 1);
    let g = &dataset.groups[0];
    let jobs: Vec<(&str, f64)> = g
        .jobs
        .iter()
        .map(|j| (j.workload.as_str(), j.throughput))
        .collect();
    assert_eq!(g.repetitions, Some(2));
    let mut expected = vec![("a3c", 0.5), ("cyclegan", 1.0), ("lm-bs20", 1.5)];
    // The two orders gave each workload another position's throughput.
    expected[0].1 = f64::midpoint(0.5, 1.0);
    expected[1].1 = f64::midpoint(1.0, 1.5);
    expected[2].1 = f64::midpoint(1.5, 0.5);
    assert_eq!(jobs, expected, "{g:?}");
    let a3c = dataset.workload("a3c").expect("a3c");
    // a3c's solo throughput pools every report of it: Gavel's (beside each pair) and 9.0 alone.
    assert_eq!(a3c.repetitions.map(|r| r > 2), Some(true));
    assert!(
        dataset
            .workloads
            .iter()
            .any(|w| w.workload.starts_with("inline-") && (w.solo_throughput - 4.1).abs() < 1e-9)
    );
    let (ok, _, err) = run(&["dataset", "validate", path(&exported)]);
    assert!(ok, "{err}");
    // Exporting into an existing folder, or from a file that is not there, is refused.
    let (ok, _, err) = export(&state, &exported, &[]);
    assert!(!ok && err.contains("exists"), "{err}");
    let missing = tmp.path().join("missing.sqlite");
    let (ok, _, err) = export(&missing, &tmp.path().join("x"), &[]);
    assert!(
        !ok && err.contains("missing.sqlite") && err.contains("no such file"),
        "{err}"
    );
    assert!(!missing.exists(), "export never creates a store");
    // A time range with only a solo run in it has nothing to learn from; one with nothing, too.
    for (since, says) in [
        ("2026-11-30T11:30:00Z", "nothing to learn from"),
        ("2026-12-30T00:00:00Z", "in the time range"),
    ] {
        let (ok, _, err) = export(&state, &tmp.path().join("late"), &["--since", since]);
        assert!(!ok && err.contains(says), "{err}");
    }
    let (ok, _, err) = export(&state, &tmp.path().join("late"), &["--since", "yesterday"]);
    assert!(
        !ok && err.contains("--since") && err.contains("RFC 3339"),
        "{err}"
    );
    assert!(!tmp.path().join("late").exists());

    // The trainer takes it beside a campaign dataset, with no special case.
    let gavel = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/gavel-v100");
    let model = tmp.path().join("model");
    let (ok, out, err) = run(&[
        "train",
        "--data",
        path(&gavel),
        "--data",
        path(&exported),
        "--out",
        path(&model),
        "--final-only",
        "--ensemble",
        "2",
        "--max-epochs",
        "40",
        "--hidden",
        "16",
    ]);
    assert!(ok, "{out}{err}");
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(model.join("model.json")).expect("model.json"),
    )
    .expect("JSON");
    let names = meta.to_string();
    assert!(
        names.contains("observed-2026-11-30"),
        "the model names the observed dataset"
    );
}

fn get_json(url: &str) -> (u16, Value) {
    let response = ureq::get(url).call().expect("GET");
    let status = response.status();
    (status, response.into_json().expect("JSON"))
}
