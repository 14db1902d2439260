//! `duet train` as a user runs it: a dataset written by `duet dataset import csv`, trained by
//! the real binary, read back as a model folder; and every bad input refused clearly.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use duet_core::progress::Lines;
use serde_json::Value;

fn duet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(args)
        .output()
        .expect("run duet")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Six workloads whose co-located speed follows their utilisation: enough structure to learn.
fn small_dataset(
    dir: &Path,
    name: &str,
    pairs_filter: impl Fn(usize, &str) -> Option<String>,
) -> PathBuf {
    let utils = [20.0, 35.0, 50.0, 65.0, 80.0, 95.0];
    let mut w = String::from("workload,kind,solo_throughput,gpu_util,model\n");
    for (i, u) in utils.iter().enumerate() {
        let kind = if i % 2 == 0 { "train" } else { "infer" };
        let model = ["mlp", "cnn", "llm"][i % 3];
        w.push_str(&format!(
            "w{i},{kind},{},{u},{model}\n",
            10.0 + 5.0 * i as f64
        ));
    }
    let mut p = String::from("a,b,mode,throughput_a,throughput_b\n");
    let mut k = 0;
    for i in 0..utils.len() {
        for j in i..utils.len() {
            let total: f64 = utils[i] + utils[j];
            let speed = if total <= 100.0 { 0.97 } else { 100.0 / total };
            let line = format!(
                "w{i},w{j},timeslice,{},{}",
                (10.0 + 5.0 * i as f64) * speed,
                (10.0 + 5.0 * j as f64) * speed
            );
            if let Some(line) = pairs_filter(k, &line) {
                p.push_str(&line);
                p.push('\n');
            }
            k += 1;
        }
    }
    import(dir, name, &w, &p)
}

/// Quick settings for tests (the defaults are the shipped recipe: three seeds of five members).
const QUICK: [&str; 8] = [
    "--ensemble",
    "2",
    "--max-epochs",
    "80",
    "--hidden",
    "16",
    "--seed",
    "7",
];

fn train(data: &[&Path], out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train"];
    for d in data {
        args.extend(["--data", s(d)]);
    }
    args.extend(["--out", s(out)]);
    args.extend(QUICK);
    args.extend(extra);
    duet(&args)
}

#[test]
fn train_writes_a_complete_model_folder() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = small_dataset(tmp.path(), "six", |_, l| Some(l.to_string()));
    let out = tmp.path().join("model");
    let result = train(&[&data], &out, &[]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let mut files: Vec<String> = fs::read_dir(&out)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "error-cdf.svg",
            "heatmap.svg",
            "held-out.csv",
            "member-0.mpk",
            "member-1.mpk",
            "model.json",
            "model.onnx",
            "report.md",
            "scatter.svg"
        ]
    );
    // Stderr is a pipe: progress comes as plain lines (no bar), the last one at the plan's end.
    let log = String::from_utf8_lossy(&result.stderr);
    let plan = log
        .lines()
        .find_map(|l| {
            l.strip_prefix("train: ")?
                .split_once(" members")?
                .0
                .split_once('/')
        })
        .map(|(_, total)| total.to_string())
        .unwrap_or_else(|| panic!("no progress line: {log}"));
    assert!(
        log.contains(&format!(
            "train: {plan}/{plan} members (100%), final model;"
        )),
        "{log}"
    );
    assert!(
        log.contains("seed 7: evaluated unseen_workloads fold 6/6"),
        "{log}"
    );
    assert!(
        !log.contains('\r') && !log.contains('\u{1b}'),
        "no bar drawn: {log}"
    );
    // The report and figures draw again from the folder alone, as train drew them: from
    // held-out.csv, and without it from the first seed's evaluation run again.
    let figures = [
        "scatter.svg",
        "error-cdf.svg",
        "heatmap.svg",
        "report.md",
        "held-out.csv",
    ];
    let read = |f: &str| fs::read_to_string(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let drawn: Vec<String> = figures.iter().map(|f| read(f)).collect();
    assert!(
        drawn[0].contains(">0.0</text>") && drawn[1].contains(">50%</text>"),
        "numbers on the axes"
    );
    for keep_rows in [true, false] {
        for f in &figures[..if keep_rows { 4 } else { 5 }] {
            fs::remove_file(out.join(f)).expect("remove");
        }
        let mut lines = Vec::new();
        duet_trainer::figures::render(&out, &mut Lines(|l: &str| lines.push(l.to_string())))
            .expect("render");
        assert_eq!(
            lines
                .iter()
                .any(|l| l.contains("running seed 7's evaluation again")),
            !keep_rows,
            "{lines:?}"
        );
        for (f, before) in figures.iter().zip(&drawn) {
            assert!(&read(f) == before, "{f} drawn again differs");
        }
    }
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(out.join("model.json")).expect("read"))
            .expect("json");
    assert_eq!(meta["format"], "duet-model/1");
    assert_eq!(meta["data"][0]["name"], "six");
    assert_eq!(meta["folds"]["unseen_workloads"], 6);
    let splits: Vec<&str> = meta["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter(|r| r["predictor"] == "mlp" && r["gpu"] == "all")
        .map(|r| r["split"].as_str().expect("split"))
        .collect();
    // `model` is the family feature by default: its leave-one-family-out split comes too.
    assert_eq!(
        splits,
        [
            "random",
            "unseen_pairs",
            "unseen_workloads",
            "probed_workloads",
            "unseen_model"
        ]
    );
    // Baselines sit in the same table; this dataset has utilisation, so the rule is there too.
    for predictor in ["ridge", "low_rank", "utilisation_sum", "constant"] {
        assert!(
            meta["metrics"]
                .as_array()
                .expect("metrics")
                .iter()
                .any(|r| r["predictor"] == predictor),
            "{predictor} missing"
        );
    }
    let report = fs::read_to_string(out.join("report.md")).expect("report");
    assert!(
        report.contains("| unseen_workloads | mlp | all | all |"),
        "{report}"
    );
    assert!(report.contains("![Predicted against measured speed"));

    // The same seed gives the same metrics to the last digit.
    let again = tmp.path().join("again");
    assert!(train(&[&data], &again, &[]).status.success());
    let meta2: Value =
        serde_json::from_str(&fs::read_to_string(again.join("model.json")).expect("read"))
            .expect("json");
    assert_eq!(meta["metrics"], meta2["metrics"]);
    assert_eq!(meta["version"], meta2["version"]);
}

fn import(dir: &Path, name: &str, workloads: &str, pairs: &str) -> PathBuf {
    let (wp, pp) = (
        dir.join(format!("{name}-w.csv")),
        dir.join(format!("{name}-p.csv")),
    );
    fs::write(&wp, workloads).expect("write");
    fs::write(&pp, pairs).expect("write");
    let out = dir.join(name);
    let result = duet(&[
        "dataset",
        "import",
        "csv",
        "--workloads",
        s(&wp),
        "--pairs",
        s(&pp),
        "--gpu",
        "cpu",
        "--out",
        s(&out),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

#[test]
fn a_constant_feature_is_left_out_with_a_warning() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = import(
        tmp.path(),
        "flat",
        "workload,kind,solo_throughput,gpu_util\nw0,train,10,50\nw1,infer,20,50\nw2,train,30,50\n",
        "a,b,mode,throughput_a,throughput_b\nw0,w1,cpu,5,15\nw0,w2,cpu,6,20\nw1,w2,cpu,12,18\nw0,w0,cpu,7,7\nw1,w1,cpu,11,11\nw2,w2,cpu,16,16\n",
    );
    let out = tmp.path().join("model");
    let result = train(&[&data], &out, &[]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        err.contains("warning: feature left out: gpu_util: constant (50) in the training data"),
        "{err}"
    );
    let report = fs::read_to_string(out.join("report.md")).expect("report");
    assert!(report.contains("Left out: gpu_util: constant"), "{report}");
}

fn refused(output: &Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    err.lines().last().unwrap_or_default().to_string()
}

#[test]
fn bad_training_input_is_refused_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("model");

    let no_pairs = small_dataset(tmp.path(), "nopairs", |_, _| None);
    let err = refused(&train(&[&no_pairs], &out, &[]));
    assert!(err.contains("nopairs: dataset has no pairs"), "{err}");

    let infeasible = small_dataset(tmp.path(), "oom", |_, l| {
        let cells: Vec<&str> = l.split(',').collect();
        Some(format!("{},{},{},0,0", cells[0], cells[1], cells[2]))
    });
    let err = refused(&train(&[&infeasible], &out, &[]));
    assert!(err.contains("oom: dataset has no feasible pair"), "{err}");

    let data = small_dataset(tmp.path(), "six", |_, l| Some(l.to_string()));
    let err = refused(&train(&[&data], &out, &["--device", "tpu"]));
    assert!(err.contains("--device tpu: unknown device"), "{err}");
    let err = refused(&train(&[&data], &out, &["--device", "cuda"]));
    assert!(err.contains("--device cuda"), "{err}");
    let err = refused(&duet(&[
        "train",
        "--data",
        s(&data),
        "--out",
        s(&out),
        "--ensemble",
        "0",
    ]));
    assert!(err.contains("--ensemble"), "{err}");
    let err = refused(&train(&[&data], &out, &["--learning-rate", "1e30"]));
    assert!(err.contains("training diverged"), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    let err = refused(&train(&[&tmp.path().join("missing")], &out, &[]));
    assert!(err.contains("missing: not a dataset folder"), "{err}");
    assert!(!out.exists(), "no model folder after a refusal");

    let single = import(
        tmp.path(),
        "single",
        "workload,kind,solo_throughput\nw0,train,10\n",
        "a,b,mode,throughput_a,throughput_b\nw0,w0,timeslice,6,6\n",
    );
    let err = refused(&train(&[&single], &out, &[]));
    assert!(
        err.contains("single: dataset has a single workload"),
        "{err}"
    );
    assert!(!out.exists(), "no model folder after a refusal");

    fs::create_dir(&out).expect("mkdir");
    let err = refused(&train(&[&data], &out, &[]));
    assert!(err.contains("output folder already exists"), "{err}");
}

/// What would fail only once the training is done is refused before any training: an `--out`
/// whose parent folder is missing or a file, and a dataset given twice (its rows counted twice).
#[test]
fn a_missing_out_parent_or_a_repeated_dataset_is_refused_before_training() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = small_dataset(tmp.path(), "six", |_, l| Some(l.to_string()));
    let nowhere = tmp.path().join("missing/dir/model");
    let result = train(&[&data], &nowhere, &[]);
    let err = refused(&result);
    assert!(
        err.contains(&format!(
            "--out {}: its parent {} does not exist",
            nowhere.display(),
            tmp.path().join("missing/dir").display()
        )),
        "{err}"
    );
    let log = String::from_utf8_lossy(&result.stderr);
    assert!(
        !log.contains("directed rows"),
        "refused before reading: {log}"
    );

    let file = tmp.path().join("a-file");
    fs::write(&file, "").expect("write");
    let err = refused(&train(&[&data], &file.join("model"), &[]));
    assert!(err.contains("a-file is not a folder"), "{err}");

    let out = tmp.path().join("model");
    let again = tmp.path().join(".").join("six");
    let result = train(&[&data, &again], &out, &[]);
    let err = refused(&result);
    assert!(
        err.contains(&format!(
            "--data {}: the same dataset as --data {}, given twice",
            again.display(),
            data.display()
        )),
        "{err}"
    );
    let log = String::from_utf8_lossy(&result.stderr);
    assert!(
        !log.contains("directed rows"),
        "refused before reading: {log}"
    );
    // Its files copied to another folder count twice as surely (they were trained on twice).
    let copy = tmp.path().join("six-copy");
    fs::create_dir(&copy).expect("mkdir");
    for f in fs::read_dir(&data).expect("dataset") {
        let f = f.expect("entry").path();
        fs::copy(&f, copy.join(f.file_name().expect("name"))).expect("copy");
    }
    let err = refused(&train(&[&data, &copy], &out, &[]));
    assert!(
        err.contains(&format!(
            "--data {}: the same dataset as --data {} (the same files, copied)",
            copy.display(),
            data.display()
        )),
        "{err}"
    );
    assert!(!out.exists(), "no model folder after a refusal");
}

#[test]
fn evaluate_scores_a_model_and_refuses_missing_features() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = small_dataset(tmp.path(), "six", |_, l| Some(l.to_string()));
    let model = tmp.path().join("model");
    assert!(train(&[&data], &model, &[]).status.success());

    let result = duet(&[
        "evaluate",
        "--model",
        s(&model),
        "--data",
        s(&data),
        "--json",
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report: Value = serde_json::from_slice(&result.stdout).expect("json");
    let all = report["table"]
        .as_array()
        .expect("table")
        .iter()
        .find(|r| r["gpu"] == "all")
        .expect("all row");
    assert_eq!(
        all["metrics"]["rows"], 42,
        "21 feasible pairs, both directions"
    );
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(err.contains("in-sample"), "{err}");

    // A dataset without the model's `model` and `gpu_util` features cannot be scored.
    let bare = import(
        tmp.path(),
        "bare",
        "workload,kind,solo_throughput\nx,train,10\ny,infer,20\n",
        "a,b,mode,throughput_a,throughput_b\nx,y,timeslice,5,10\n",
    );
    let err = refused(&duet(&[
        "evaluate",
        "--model",
        s(&model),
        "--data",
        s(&bare),
    ]));
    assert!(
        err.contains("bare/dataset.json: column `workload_features`"),
        "{err}"
    );
    assert!(err.contains("the model needs feature"), "{err}");
}

/// The committed triples: trained on their pairs (the groups are no training rows, and `train`
/// says so), `evaluate` scores the model's pairs composed on every triple beside the two rules
/// on the measured pairs.
#[test]
fn evaluate_scores_groups_from_a_model_of_pairs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = committed("cpu-dev2c-triples");
    let model = tmp.path().join("model");
    let trained = train(&[&data], &model, &["--group-network", "never"]);
    assert!(trained.status.success(), "{}", refused(&trained));
    let said = String::from_utf8_lossy(&trained.stderr);
    assert!(
        said.contains("56 groups of three or more jobs are not training rows"),
        "{said}"
    );
    let result = duet(&[
        "evaluate",
        "--model",
        s(&model),
        "--data",
        s(&data),
        "--json",
    ]);
    assert!(result.status.success(), "{}", refused(&result));
    let report: Value = serde_json::from_slice(&result.stdout).expect("json");
    let groups = report["groups"].as_array().expect("groups");
    let cpu = groups
        .iter()
        .find(|g| g["gpu"] == "cpu" && g["size"] == 3)
        .expect("the cpu triples");
    assert_eq!(cpu["metrics"]["rows"], 168, "56 triples of three jobs");
    // In-sample (the shift was fitted on these very groups, and only widens): at least 90%.
    let coverage = cpu["metrics"]["p90_coverage"].as_f64().expect("coverage");
    assert!(coverage >= 0.89, "{coverage}");
    let mape = cpu["metrics"]["mape_speed"].as_f64().expect("mape");
    assert!(mape > 0.0 && mape < 0.5, "{mape}");
    let rules: Vec<(&str, u64)> = cpu["baselines"]
        .as_array()
        .expect("baselines")
        .iter()
        .map(|b| {
            (
                b["rule"].as_str().expect("rule"),
                b["jobs"].as_u64().expect("jobs"),
            )
        })
        .collect();
    assert_eq!(rules, [("product", 168), ("excess", 168)]);
    let text = duet(&["evaluate", "--model", s(&model), "--data", s(&data)]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("groups: the model's pairs composed by the excess rule"),
        "{text}"
    );
}

fn committed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../datasets")
        .join(name)
}

fn read_meta(dir: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(dir.join("model.json")).expect("read")).expect("json")
}

/// `--final-only` on a committed dataset: the same networks as a full run, shifts from its own
/// calibration folds where the full run's come from the evaluation's (both on every pair and
/// workload), no metrics, an `evaluation` that says so, and a folder the server's model crate
/// loads and predicts with.
#[test]
fn final_only_trains_the_shipped_model_alone_and_it_serves() {
    use duet_core::api::PredictRequest;
    use duet_model::{EngineKind, LoadedModel, Registry, predict};

    let tmp = tempfile::tempdir().expect("tmp");
    let data = committed("cpu-dev2c");
    let fast = tmp.path().join("fast");
    let result = train(&[&data], &fast, &["--final-only", "--name", "m"]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        stdout.contains("no cross-validated evaluation was run"),
        "{stdout}"
    );
    let mut files: Vec<String> = fs::read_dir(&fast)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "heatmap.svg",
            "member-0.mpk",
            "member-1.mpk",
            "model.json",
            "model.onnx",
            "report.md"
        ]
    );
    let meta = read_meta(&fast);
    assert_eq!(meta["evaluation"]["final_only"], true);
    assert!(
        meta["evaluation"]["protocol"]
            .as_str()
            .expect("protocol")
            .starts_with("final-only: no cross-validated evaluation was run"),
        "{}",
        meta["evaluation"]
    );
    assert_eq!(meta["metrics"], serde_json::json!([]));
    assert_eq!(meta["folds"], serde_json::json!({}));
    assert!(meta.get("metrics_sd").is_none());
    let report = fs::read_to_string(fast.join("report.md")).expect("report");
    assert!(report.contains("## Accuracy\n\nNot measured"), "{report}");
    assert!(!report.contains("| split |"), "{report}");

    // A full run with the same seed ships the same networks; its p90 shifts come from the
    // evaluation's out-of-fold scores, so they rest on many more rows and groups, and on this
    // small dataset (21 pairs, 6 workloads) neither kind lacks the rows of a finite bound.
    let full = tmp.path().join("full");
    assert!(train(&[&data], &full, &["--name", "m"]).status.success());
    let full_meta = read_meta(&full);
    for key in ["spec", "training", "config"] {
        assert_eq!(meta[key], full_meta[key], "{key}");
    }
    // Another calibration is another model: the version says so.
    assert_ne!(meta["version"], full_meta["version"]);
    let (fast_cal, full_cal) = (&meta["calibration"], &full_meta["calibration"]);
    assert_eq!(
        fast_cal["method"],
        "cross-conformal over the final fit's folds"
    );
    assert_eq!(full_cal["method"], "cross-conformal");
    // Every workload held out in one of the five folds, and every unordered pair of the others:
    // far more than a split's hold-out of 10% of the 21 pairs (3) and 15% of the 6 workloads (1).
    let groups = |c: &Value, kind: &str| c[kind]["groups"].as_u64().expect("groups");
    assert!(groups(fast_cal, "known") > 3, "{fast_cal}");
    assert!(groups(fast_cal, "new") > 1, "{fast_cal}");
    for kind in ["known", "new"] {
        assert!(full_cal[kind]["shift"].as_f64().expect("shift").is_finite());
        assert!(fast_cal[kind]["shift"].as_f64().expect("shift").is_finite());
    }
    // Every pair is a known-workload group: enough rows and groups for the 90% bound.
    assert!(full_cal["known"].get("fallback").is_none(), "{full_cal}");
    // Every workload held out once; those whose family has a sibling count as new workloads
    // (a workload alone in its family is a new family when held out, and one far outside the
    // other five's range is answered conservatively). Fewer than the 9 a bound over workloads
    // needs: the shift is the widest workload's own quantile, and the note says so.
    let groups = full_cal["new"]["groups"].as_u64().expect("groups");
    assert!((1..=4).contains(&groups), "{full_cal}");
    let note = full_cal["new"]["fallback"].as_str().expect("a note");
    assert!(
        note.contains(&format!("{groups} held-out groups")),
        "{note}"
    );
    // Four families (mlp, conv, matmul, stream): too few to answer a new one with its own p90.
    let note = full_cal["new_family"]["fallback"]
        .as_str()
        .expect("a new-family note");
    assert!(note.contains("fewer than the 5"), "{note}");
    assert!(fast_cal.get("new_family").is_none(), "{fast_cal}");
    assert_eq!(full_meta["evaluation"].get("final_only"), None);

    // The server's model crate loads it, seeds the registry from the dataset and predicts.
    let model = LoadedModel::load(&fast, EngineKind::Burn).expect("the model loads");
    let (registry, warnings) = Registry::build(&model, Default::default());
    assert!(warnings.is_empty(), "{warnings:?}");
    let ids: Vec<String> = registry.list().iter().map(|w| w.workload.clone()).collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    let request: PredictRequest = serde_json::from_value(serde_json::json!({
        "pairs": [{"a": {"workload": ids[0]}, "b": {"workload": ids[1]}, "mode": "cpu"}]
    }))
    .expect("request");
    let p = predict::predict(&model, &registry, &request, None).expect("a prediction");
    assert_eq!(p.len(), 1);
    assert!(p[0].speed_a > 0.0 && p[0].speed_a.is_finite(), "{:?}", p[0]);
    assert!(
        p[0].slowdown_a_p90 > 0.0 && p[0].slowdown_a_p90.is_finite(),
        "{:?}",
        p[0]
    );
    // The full run's networks predict the same speeds to the bit; only the p90 shifts differ.
    let full_model = LoadedModel::load(&full, EngineKind::Burn).expect("the full model loads");
    let (full_registry, _) = Registry::build(&full_model, Default::default());
    let q = predict::predict(&full_model, &full_registry, &request, None).expect("a prediction");
    assert_eq!(
        (p[0].speed_a.to_bits(), p[0].speed_b.to_bits()),
        (q[0].speed_a.to_bits(), q[0].speed_b.to_bits())
    );
}

/// `--no-identities`: no identity slots in the spec (every pair is seen as a new job's), and
/// model.json records the choice; by default the training workloads have their slots.
#[test]
fn no_identities_trains_on_features_alone_and_says_so() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = committed("cpu-dev2c");
    for (flag, slots, recorded) in [
        (None, true, Value::Null),
        (Some("--no-identities"), false, Value::Bool(false)),
    ] {
        let out = tmp.path().join(format!("m-{slots}"));
        let mut extra = vec!["--final-only"];
        extra.extend(flag);
        let result = train(&[&data], &out, &extra);
        assert!(
            result.status.success(),
            "{}",
            String::from_utf8_lossy(&result.stderr)
        );
        let meta = read_meta(&out);
        let identities = meta["spec"]["identities"].as_array().expect("identities");
        assert_eq!(!identities.is_empty(), slots, "{}", meta["spec"]);
        assert_eq!(meta["config"]["identities"], recorded, "{}", meta["config"]);
    }
}

/// `--loss squared` trains other networks than the default absolute loss and model.json says
/// so (the default is not written, so models trained before the flag keep their versions); an
/// unknown loss is refused by name.
#[test]
fn the_point_loss_is_chosen_and_recorded() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = committed("cpu-dev2c");
    let mut versions = Vec::new();
    for (loss, recorded) in [
        ("absolute", Value::Null),
        ("squared", Value::from("squared")),
    ] {
        let out = tmp.path().join(loss);
        let result = train(&[&data], &out, &["--final-only", "--loss", loss]);
        assert!(
            result.status.success(),
            "{}",
            String::from_utf8_lossy(&result.stderr)
        );
        let meta = read_meta(&out);
        assert_eq!(meta["config"]["loss"], recorded, "{}", meta["config"]);
        versions.push((meta["version"].clone(), meta["training"].clone()));
    }
    assert_ne!(versions[0], versions[1]);
    let result = train(&[&data], &tmp.path().join("bad"), &["--loss", "huber"]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("--loss") && stderr.contains("huber"),
        "{stderr}"
    );
}

/// `--group-by model` adds the `unseen_model` split: one fold per model, in model.json and
/// report.md like the other splits; a feature that cannot split is refused by flag and name.
/// Without `--family none`, `model` is the family feature and its split is always evaluated.
#[test]
fn group_by_adds_a_leave_one_model_out_split() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = small_dataset(tmp.path(), "six", |_, l| Some(l.to_string()));
    let out = tmp.path().join("by-model");
    let result = train(&[&data], &out, &["--group-by", "model", "--family", "none"]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let meta = read_meta(&out);
    assert_eq!(meta["folds"]["unseen_model"], 3, "{}", meta["folds"]);
    assert_eq!(meta["folds"]["unseen_workloads"], 6, "{}", meta["folds"]);
    let definition = meta["evaluation"]["splits"]["unseen_model"]
        .as_str()
        .expect("the split's definition");
    assert!(
        definition.contains("`model`") && definition.contains("no identity slot"),
        "{definition}"
    );
    let rows: Vec<&Value> = meta["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter(|r| r["split"] == "unseen_model")
        .collect();
    assert!(
        rows.iter()
            .any(|r| r["predictor"] == "mlp" && r["gpu"] == "all" && r["metrics"]["rows"] == 66),
        "42 directed rows, each tested once per model it touches (24 touch two): {rows:?}"
    );
    let report = fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(
        report.contains("- `unseen_model`: leave one value of the workload feature `model` out")
            && report.contains("| unseen_model | mlp | all | all |"),
        "{report}"
    );

    // The added split changes nothing else: the other splits' figures, the shipped networks
    // and their calibration (and so the version) are those of a run without it.
    let plain = tmp.path().join("plain");
    assert!(
        train(&[&data], &plain, &["--family", "none"])
            .status
            .success()
    );
    let plain = read_meta(&plain);
    assert!(plain["spec"].get("family").is_none(), "{}", plain["spec"]);
    assert!(plain["calibration"].get("new_family").is_none());
    let others: Vec<&Value> = meta["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter(|r| r["split"] != "unseen_model")
        .collect();
    let plain_rows: Vec<&Value> = plain["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .collect();
    assert_eq!(others, plain_rows);
    assert_eq!(meta["calibration"], plain["calibration"]);
    assert_eq!(meta["version"], plain["version"]);

    // By default `model` is the family: its split is evaluated without --group-by, its folds
    // calibrate `new_family`, and with 3 families (fewer than 5) model.json says that a new
    // family gets the widest shift, labelled conservative.
    let family = tmp.path().join("family");
    let result = train(&[&data], &family, &[]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let family = read_meta(&family);
    assert_eq!(family["spec"]["family"], "model", "{}", family["spec"]);
    assert_eq!(family["folds"]["unseen_model"], 3, "{}", family["folds"]);
    let new_family = &family["calibration"]["new_family"];
    assert_eq!(new_family["groups"], 3, "{new_family}");
    let note = new_family["fallback"].as_str().expect("a note");
    assert!(
        note.contains("3 families held out, fewer than the 5") && note.contains("conservative"),
        "{note}"
    );
    assert!(
        String::from_utf8_lossy(&result.stderr).contains("new-family")
            || String::from_utf8_lossy(&result.stdout).contains("new-family"),
        "the run names the new-family calibration"
    );
    // Each seed's line names the weight each family's fold was scored with, per device or, where
    // no device had enough rows of its own, every device together.
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stderr),
        String::from_utf8_lossy(&result.stdout)
    );
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(": new family "))
        .collect();
    assert!(!lines.is_empty(), "{log}");
    for line in lines {
        assert!(
            !line.contains("weight  ")
                && (line.contains(" (every device together ")
                    || line.contains(", every device together (none had 30 rows of its own)")),
            "{line}"
        );
    }
    // A new family's effects prior: every training device's, the network's weight chosen on
    // the held-out families' rows, every training workload's effects.
    let devices = family["calibration"]["family_prior"]["devices"]
        .as_object()
        .expect("a family prior");
    assert!(!devices.is_empty());
    for (gpu, d) in devices {
        let weight = d["weight"].as_f64().expect("weight");
        assert!((0.0..=1.0).contains(&weight), "{gpu}: {d}");
        assert!(d["chosen_on"].as_u64().expect("rows") > 0, "{gpu}: {d}");
        // Every workload well measured: a probed weight chosen on the probed folds' rows.
        let probed = d["probed_weight"].as_f64().expect("probed weight");
        assert!((0.0..=1.0).contains(&probed), "{gpu}: {d}");
        assert!(
            d["probed_chosen_on"].as_u64().expect("rows") > 0,
            "{gpu}: {d}"
        );
        assert!(d["mean"].as_f64().expect("mean").is_finite(), "{gpu}: {d}");
        for effects in ["partner", "own"] {
            assert_eq!(
                d[effects].as_object().map(serde_json::Map::len),
                Some(6),
                "{gpu} {effects}: {d}"
            );
        }
    }
    let report = fs::read_to_string(tmp.path().join("family").join("report.md")).expect("report");
    assert!(
        report.contains("| device | the network's weight, new family | chosen on rows |"),
        "{report}"
    );

    let err = refused(&train(
        &[&data],
        &tmp.path().join("x"),
        &["--group-by", "family"],
    ));
    assert!(
        err.contains("--group-by family: dataset `six` declares no workload feature `family`"),
        "{err}"
    );
    let err = refused(&train(
        &[&data],
        &tmp.path().join("y"),
        &["--group-by", "gpu_util"],
    ));
    assert!(
        err.contains("--group-by gpu_util: `gpu_util` is a numeric feature"),
        "{err}"
    );
    let err = refused(&train(
        &[&data],
        &tmp.path().join("z"),
        &["--family", "gpu_util"],
    ));
    assert!(
        err.contains("--family gpu_util: `gpu_util` is a numeric feature"),
        "{err}"
    );
    assert!(!tmp.path().join("x").exists() && !tmp.path().join("y").exists());
    assert!(!tmp.path().join("z").exists());
}
