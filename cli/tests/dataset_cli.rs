//! The `duet dataset` commands as a user runs them: the real binary, real files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use duet_core::dataset::{Dataset, Status, modes_present};
use duet_core::import::gavel;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
}

fn gavel_json() -> PathBuf {
    repo().join("datasets/sources/gavel/simulation_throughputs.json")
}

fn duet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(args)
        .output()
        .expect("run duet")
}

fn ok(args: &[&str]) -> String {
    let out = duet(args);
    assert!(
        out.status.success(),
        "duet {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs a command that must fail; returns its one-line error.
fn fails(args: &[&str]) -> String {
    let out = duet(args);
    assert_eq!(out.status.code(), Some(1), "duet {args:?} should fail");
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn source() -> Value {
    serde_json::from_str(&fs::read_to_string(gavel_json()).expect("read")).expect("json")
}

/// Single-GPU job keys of one device's table, in file order.
fn single_gpu_keys(table: &serde_json::Map<String, Value>) -> Vec<&String> {
    table.keys().filter(|k| k.ends_with(", 1)")).collect()
}

fn import_gavel(gpu: &str, out: &Path) {
    import_gavel_from(&gavel_json(), gpu, out);
}

fn import_gavel_from(json: &Path, gpu: &str, out: &Path) {
    ok(&[
        "dataset",
        "import",
        "gavel",
        s(json),
        "--gpu",
        gpu,
        "--out",
        s(out),
    ]);
}

#[test]
fn inspect_counts_match_the_source_json_for_every_gpu() {
    let root = source();
    let tmp = tempfile::tempdir().expect("tmp");
    for gpu in ["k80", "p100", "v100"] {
        let table = root[gpu].as_object().expect("table");
        let keys = single_gpu_keys(table);
        let (mut feasible, mut infeasible) = (0, 0);
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i..] {
                let v = &table[a.as_str()][b.as_str()];
                if v[0].as_f64() == Some(0.0) && v[1].as_f64() == Some(0.0) {
                    infeasible += 1;
                } else {
                    feasible += 1;
                }
            }
        }
        let out = tmp.path().join(gpu);
        import_gavel(gpu, &out);
        for dir in [out, repo().join(format!("datasets/gavel-{gpu}"))] {
            let summary: Value =
                serde_json::from_str(&ok(&["dataset", "inspect", s(&dir), "--json"]))
                    .expect("json");
            assert_eq!(summary["workloads"], 26, "{gpu}");
            assert_eq!(keys.len(), 26);
            assert_eq!(summary["feasible"], feasible, "{gpu} {}", dir.display());
            assert_eq!(summary["infeasible"], infeasible, "{gpu} {}", dir.display());
            assert_eq!(summary["pairs"], feasible + infeasible);
        }
    }
}

#[test]
fn import_write_read_gives_back_the_source_numbers_exactly() {
    let root = source();
    let tmp = tempfile::tempdir().expect("tmp");
    for gpu in ["k80", "p100", "v100"] {
        let out = tmp.path().join(gpu);
        import_gavel(gpu, &out);
        let dataset = Dataset::read(&out).expect("read");
        let table = root[gpu].as_object().expect("table");
        let keys = single_gpu_keys(table);
        let id_of = |key: &str| {
            let (job, _) = gavel::parse_job_key(key).expect("key");
            gavel::workload_id(&job)
        };
        for key in &keys {
            let w = dataset.workload(&id_of(key)).expect("workload present");
            assert_eq!(
                Some(w.solo_throughput),
                table[key.as_str()]["null"].as_f64()
            );
        }
        let mut checked = 0;
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i..] {
                let v = &table[a.as_str()][b.as_str()];
                let pair = dataset
                    .pairs
                    .iter()
                    .find(|p| p.a == id_of(a) && p.b == id_of(b))
                    .expect("pair present");
                assert_eq!(Some(pair.throughput_a), v[0].as_f64(), "{gpu} {a} {b}");
                assert_eq!(Some(pair.throughput_b), v[1].as_f64(), "{gpu} {a} {b}");
                let infeasible = pair.throughput_a == 0.0 && pair.throughput_b == 0.0;
                assert_eq!(pair.status == Status::Oom, infeasible);
                checked += 1;
            }
        }
        assert_eq!(checked, dataset.pairs.len());
        // The licence notice of the source travels with the data.
        let licence = fs::read_to_string(out.join("LICENSE")).expect("LICENSE");
        assert!(licence.starts_with("MIT License"));
        assert_eq!(dataset.meta.provenance.licence, "MIT");
    }
}

#[test]
fn committed_gavel_datasets_equal_a_fresh_import() {
    let tmp = tempfile::tempdir().expect("tmp");
    // The source saved by an editor that puts a byte-order mark first reads the same.
    let marked = tmp.path().join("simulation_throughputs.json");
    let text = fs::read_to_string(gavel_json()).expect("read");
    fs::write(&marked, format!("\u{feff}{text}")).expect("write");
    for gpu in ["k80", "p100", "v100"] {
        let out = tmp.path().join(format!("gavel-{gpu}"));
        let json = if gpu == "k80" {
            marked.clone()
        } else {
            gavel_json()
        };
        import_gavel_from(&json, gpu, &out);
        let fresh = Dataset::read(&out).expect("fresh");
        let committed =
            Dataset::read(&repo().join(format!("datasets/gavel-{gpu}"))).expect("committed");
        assert_eq!(fresh.workloads, committed.workloads, "{gpu}");
        assert_eq!(fresh.pairs, committed.pairs, "{gpu}");
    }
}

#[test]
fn inspect_prints_a_readable_table() {
    let text = ok(&["dataset", "inspect", s(&repo().join("datasets/gavel-v100"))]);
    assert!(text.contains("workloads   26 (train 26)"), "{text}");
    assert!(
        text.contains("pairs       351 (feasible 330, infeasible 21, failed 0)"),
        "{text}"
    );
    let space = text
        .lines()
        .find(|l| l.starts_with("space"))
        .expect("space row");
    let cells: Vec<&str> = space.split_whitespace().collect();
    assert_eq!(
        &cells[..6],
        ["space", "351", "330", "21", "0", "0"],
        "{text}"
    );
}

#[test]
fn unknown_gpu_and_existing_output_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("x");
    let err = fails(&[
        "dataset",
        "import",
        "gavel",
        s(&gavel_json()),
        "--gpu",
        "h100",
        "--out",
        s(&out),
    ]);
    assert!(
        err.contains("no table for gpu `h100`; the file has: k80, k80_unconsolidated, p100"),
        "{err}"
    );
    assert!(!out.exists());

    fs::create_dir(&out).expect("mkdir");
    let err = fails(&[
        "dataset",
        "import",
        "gavel",
        s(&gavel_json()),
        "--gpu",
        "v100",
        "--out",
        s(&out),
    ]);
    assert!(err.contains("output folder already exists"), "{err}");
    assert!(entries(&out).is_empty());
}

const WORKLOADS_CSV: &str = "\
workload,kind,solo_throughput,solo_throughput_std,repetitions,gpu_util,model,framework:categorical,queue:numeric:requests
bert,infer,120.5,1.5,3,71.2,bert,torch,4
resnet,train,40,,3,95,resnet,jax,
gpt,train,8.25,0.1,3,,gpt,torch,1
";

const PAIRS_CSV: &str = "\
a,b,mode,share_a,share_b,throughput_a,throughput_b,status,power_w
bert,resnet,mps,50,50,90,30,,250.5
bert,gpt,mps,50,50,0,0,oom,
resnet,gpt,timeslice,,,20,5,ok,300
";

fn write_csvs(dir: &Path, workloads: &str, pairs: &str) -> (PathBuf, PathBuf) {
    let (w, p) = (dir.join("w.csv"), dir.join("p.csv"));
    fs::write(&w, workloads).expect("write");
    fs::write(&p, pairs).expect("write");
    (w, p)
}

fn import_csv(w: &Path, p: &Path, out: &Path) -> Output {
    duet(&[
        "dataset",
        "import",
        "csv",
        "--workloads",
        s(w),
        "--pairs",
        s(p),
        "--gpu",
        "a100",
        "--out",
        s(out),
    ])
}

#[test]
fn csv_import_keeps_declared_columns_and_values() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (w, p) = write_csvs(tmp.path(), WORKLOADS_CSV, PAIRS_CSV);
    let out = tmp.path().join("mine");
    let result = import_csv(&w, &p, &out);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let d = Dataset::read(&out).expect("read");
    let names: Vec<&str> = d
        .meta
        .workload_features
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["gpu_util", "model", "framework", "queue"]);
    assert_eq!(
        d.meta.workload_features[3].unit.as_deref(),
        Some("requests")
    );
    assert_eq!(d.meta.pair_counters[0].name, "power_w");
    assert_eq!(d.workloads[0].solo_throughput, 120.5);
    assert_eq!(d.workloads[1].solo_throughput_std, None);
    assert!(d.workloads[2].features["gpu_util"].is_missing());
    assert_eq!(
        d.workloads[1].features["framework"].as_category(),
        Some("jax")
    );
    assert_eq!(
        d.pairs[0].status,
        Status::Ok,
        "derived from positive throughputs"
    );
    assert_eq!(d.pairs[0].gpu, "a100");
    assert_eq!(d.pairs[0].counters["power_w"], Some(250.5));
    assert_eq!(d.pairs[2].share_a, None);
    assert_eq!(d.meta.modes, modes_present(&d.pairs));
    ok(&["dataset", "validate", s(&out)]);
}

/// A table may come from a pipe (`--pairs <(...)`, here stdin), and a `dataset.json` saved by
/// an editor that puts a byte-order mark first reads as it did before.
#[test]
fn csv_from_a_pipe_and_a_marked_dataset_json_are_read() {
    use std::io::Write;
    let tmp = tempfile::tempdir().expect("tmp");
    let (w, _) = write_csvs(tmp.path(), WORKLOADS_CSV, PAIRS_CSV);
    let out = tmp.path().join("piped");
    let mut child = Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(["dataset", "import", "csv", "--workloads", s(&w)])
        .args(["--pairs", "/dev/stdin", "--gpu", "a100", "--out", s(&out)])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("duet");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(PAIRS_CSV.as_bytes()).expect("pipe");
    drop(stdin);
    let result = child.wait_with_output().expect("wait");
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let piped = Dataset::read(&out).expect("read");
    assert_eq!(piped.pairs.len(), PAIRS_CSV.lines().count() - 1);

    let meta_path = out.join("dataset.json");
    let text = fs::read_to_string(&meta_path).expect("read");
    fs::write(&meta_path, format!("\u{feff}{text}")).expect("write");
    ok(&["dataset", "validate", s(&out)]);
    assert_eq!(Dataset::read(&out).expect("marked"), piped);
}

/// Each bad CSV gets one line naming the file, the column and the line, and leaves nothing.
#[test]
fn bad_csv_input_is_named_and_leaves_nothing() {
    let cases: [(&str, &str, &str); 11] = [
        (
            &WORKLOADS_CSV.replace("120.5", "fast"),
            PAIRS_CSV,
            "w.csv: column `solo_throughput`, line 2: `fast` is not a number",
        ),
        (
            WORKLOADS_CSV,
            &PAIRS_CSV.replace(",90,", ",NaN,"),
            "p.csv: column `throughput_a`, line 2: `NaN` is not a finite number",
        ),
        (
            &WORKLOADS_CSV.replace("gpt,train", "bert,train"),
            PAIRS_CSV,
            "w.csv: column `workload`, line 4 (workload `bert`): duplicate workload id, first seen in row 1",
        ),
        (
            WORKLOADS_CSV,
            &PAIRS_CSV.replace("resnet,gpt", "resnet,llama"),
            "p.csv: column `b`, line 4 (pair `resnet` + `llama`): unknown workload `llama`",
        ),
        (
            WORKLOADS_CSV,
            &PAIRS_CSV.replace("timeslice", "warp"),
            "p.csv: column `mode`, line 4: unknown mode `warp`",
        ),
        (
            &WORKLOADS_CSV.replace("gpu_util", "sm_magic"),
            PAIRS_CSV,
            "w.csv: column `sm_magic`, line 1: not a known column; declare its kind",
        ),
        (
            &WORKLOADS_CSV.replace("kind,", "type,"),
            PAIRS_CSV,
            "w.csv: column `kind`, line 1: missing column",
        ),
        // The line a row starts on, after a blank line and a quoted cell over two lines.
        (
            &WORKLOADS_CSV
                .replace("gpt,train", "bert,train")
                .replace("3,95,resnet,", "3,95,\"res\nnet\",")
                .replace("\nresnet,", "\n\nresnet,"),
            PAIRS_CSV,
            "w.csv: column `workload`, line 6 (workload `bert`): duplicate workload id",
        ),
        (
            WORKLOADS_CSV,
            &PAIRS_CSV.replace("\nresnet,gpt", "\n\n\nresnet,llama"),
            "p.csv: column `b`, line 6 (pair `resnet` + `llama`): unknown workload `llama`",
        ),
        // A fixed column given twice is refused, not read from its first place only.
        (
            &WORKLOADS_CSV.replace("solo_throughput_std,", "solo_throughput,"),
            PAIRS_CSV,
            "w.csv: column `solo_throughput`, line 1: appears twice in the header",
        ),
        (
            WORKLOADS_CSV,
            &PAIRS_CSV.replace(",power_w", ",throughput_a"),
            "p.csv: column `throughput_a`, line 1: appears twice in the header",
        ),
    ];
    for (workloads, pairs, expected) in cases {
        let tmp = tempfile::tempdir().expect("tmp");
        let (w, p) = write_csvs(tmp.path(), workloads, pairs);
        let out = tmp.path().join("mine");
        let result = import_csv(&w, &p, &out);
        assert_eq!(result.status.code(), Some(1));
        let err = String::from_utf8_lossy(&result.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
        assert_eq!(
            entries(tmp.path()),
            ["p.csv", "w.csv"],
            "nothing left behind"
        );
    }
}

/// The flags of `dataset import csv` are named when they are bad, before anything is read.
#[test]
fn bad_csv_import_flags_are_named_and_leave_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (w, p) = write_csvs(tmp.path(), WORKLOADS_CSV, PAIRS_CSV);
    let out = tmp.path().join("mine");
    for (flags, expected) in [
        (["--gpu", ""], "--gpu: empty"),
        (["--name", " "], "--name: empty"),
        (
            ["--date", "2026-02-30"],
            "--date: `2026-02-30`: no such date",
        ),
        (
            ["--date", "30/11/2026"],
            "--date: `30/11/2026` is not a date written YYYY-MM-DD",
        ),
        (
            ["--date", "2026-1-30"],
            "--date: `2026-1-30` is not a date written YYYY-MM-DD",
        ),
    ] {
        let mut args = vec![
            "dataset",
            "import",
            "csv",
            "--workloads",
            s(&w),
            "--pairs",
            s(&p),
            "--out",
            s(&out),
        ];
        if flags[0] != "--gpu" {
            args.extend(["--gpu", "a100"]);
        }
        args.extend(flags);
        let err = fails(&args);
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
        assert_eq!(
            entries(tmp.path()),
            ["p.csv", "w.csv"],
            "nothing left behind"
        );
    }
    let err = fails(&[
        "dataset",
        "import",
        "gavel",
        s(&gavel_json()),
        "--gpu",
        "v100",
        "--out",
        s(&out),
        "--date",
        "2026-11-31",
    ]);
    assert!(err.contains("--date: `2026-11-31`: no such date"), "{err}");
    assert!(!out.exists());
}

#[test]
fn validate_names_a_truncated_table() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("v100");
    import_gavel("v100", &out);
    ok(&["dataset", "validate", s(&out)]);
    let path = out.join("workloads.parquet");
    let bytes = fs::read(&path).expect("read");
    fs::write(&path, &bytes[..100]).expect("truncate");
    // dataset.json lists what the import wrote: the change is named before the file is decoded.
    let err = fails(&["dataset", "validate", s(&out)]);
    assert!(
        err.contains("workloads.parquet: damaged or changed since it was written: 100 bytes"),
        "{err}"
    );
    // With its entry deleted from `tables` (as for a change made on purpose), it is decoded.
    let meta_path = out.join("dataset.json");
    let mut meta: Value =
        serde_json::from_str(&fs::read_to_string(&meta_path).expect("read")).expect("json");
    let tables = meta["tables"].as_object_mut().expect("tables");
    assert!(tables.remove("workloads.parquet").is_some());
    fs::write(&meta_path, meta.to_string()).expect("write");
    let err = fails(&["dataset", "validate", s(&out)]);
    assert!(
        err.contains("workloads.parquet: not a readable Parquet file"),
        "{err}"
    );
}

#[test]
fn merging_two_shards_gives_the_unsharded_pairs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let whole = Dataset::read(&repo().join("datasets/gavel-p100")).expect("read");
    let mut shards = Vec::new();
    for i in 0..2 {
        let mut shard = whole.clone();
        shard.pairs = whole
            .pairs
            .iter()
            .enumerate()
            .filter(|(k, _)| k % 2 == i)
            .map(|(_, p)| p.clone())
            .collect();
        shard.meta.modes = modes_present(&shard.pairs);
        // The second shard was stopped early: the merge says so, though it is not first.
        if i == 1 {
            shard.meta.description =
                format!("PARTIAL (2 of 9 measurements): {}", shard.meta.description);
        }
        let dir = tmp.path().join(format!("shard-{i}"));
        // The first shard keeps raw counter series of a run.
        let samples = [duet_core::dataset::Sample {
            run: "solo/a3c/0".into(),
            source: "a3c".into(),
            t: 0.5,
            counter: "cpu_util".into(),
            value: 93.0,
        }];
        let samples = if i == 0 { &samples[..] } else { &[] };
        shard
            .write_with_samples(&dir, samples)
            .expect("write shard");
        shards.push(dir);
    }
    let out = tmp.path().join("merged");
    let merging = duet(&[
        "dataset",
        "merge",
        s(&shards[0]),
        s(&shards[1]),
        "--out",
        s(&out),
    ]);
    assert!(merging.status.success(), "{merging:?}");
    // What is not carried is said, not dropped silently.
    let said = String::from_utf8_lossy(&merging.stderr);
    assert!(
        said.contains("shard-0/samples.parquet (the shard's raw counter series) is not carried"),
        "{said}"
    );
    assert!(!said.contains("shard-1"), "{said}");
    let merged = Dataset::read(&out).expect("read merged");
    assert!(
        merged.meta.description.starts_with(&format!(
            "PARTIAL ({} is a stopped campaign's): ",
            shards[1].display()
        )),
        "{}",
        merged.meta.description
    );
    assert_eq!(merged.workloads, whole.workloads);
    let key = |p: &duet_core::Pair| (p.a.clone(), p.b.clone());
    let mut got: Vec<_> = merged.pairs.clone();
    let mut want: Vec<_> = whole.pairs.clone();
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);

    // Shards of different devices are refused with the folder and field named.
    let other = tmp.path().join("k80");
    import_gavel("k80", &other);
    let out2 = tmp.path().join("merged2");
    let err = fails(&[
        "dataset",
        "merge",
        s(&shards[0]),
        s(&other),
        "--out",
        s(&out2),
    ]);
    assert!(
        err.contains("k80/dataset.json: column `provenance.gpu`: gpu `k80` differs"),
        "{err}"
    );
    assert!(!out2.exists());
}

const GROUPS_CSV: &str = "\
group,workload,mode,share,throughput,status
g1,bert,mps,33,70,
g1,resnet,mps,33,22,
g1,gpt,mps,33,4,
g2,resnet,timeslice,,15,ok
g2,gpt,timeslice,,3,ok
g2,gpt,timeslice,,3.2,ok
";

fn import_with_groups(dir: &Path, groups: &str) -> (Output, PathBuf) {
    let (w, p) = write_csvs(dir, WORKLOADS_CSV, PAIRS_CSV);
    let g = dir.join("g.csv");
    fs::write(&g, groups).expect("write");
    let out = dir.join("grouped");
    let result = duet(&[
        "dataset",
        "import",
        "csv",
        "--workloads",
        s(&w),
        "--pairs",
        s(&p),
        "--groups",
        s(&g),
        "--gpu",
        "a100",
        "--out",
        s(&out),
    ]);
    (result, out)
}

#[test]
fn csv_groups_import_and_inspect_counts_them_by_size() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (result, out) = import_with_groups(tmp.path(), GROUPS_CSV);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let d = Dataset::read(&out).expect("read");
    assert_eq!(d.groups.len(), 2);
    assert_eq!(d.groups[0].jobs[2].share, Some(33.0));
    assert_eq!(
        d.groups[0].status,
        Status::Ok,
        "derived from the throughputs"
    );
    assert_eq!(d.groups[1].jobs[2].workload, "gpt");
    let text = ok(&["dataset", "inspect", s(&out)]);
    assert!(
        text.contains("2 (pairs)") && text.contains("\n3 "),
        "{text}"
    );
    let json: Value =
        serde_json::from_str(&ok(&["dataset", "inspect", s(&out), "--json"])).expect("json");
    let sizes: Vec<(u64, u64)> = json["by_group_size"]
        .as_array()
        .expect("sizes")
        .iter()
        .map(|g| {
            (
                g["size"].as_u64().expect("size"),
                g["settings"].as_u64().expect("n"),
            )
        })
        .collect();
    assert_eq!(sizes, [(2, 3), (3, 2)]);
    // g1's pairs were never measured at its shares: no job to score, so no MAPE or bias (not 0).
    assert!(
        text.contains("MAPE      -, bias - (0 jobs, 3 without every pair)"),
        "{text}"
    );
    let compositions = json["compositions"].as_array().expect("compositions");
    for c in compositions {
        let scored = c["jobs"].as_u64().expect("jobs") > 0;
        assert_eq!(c["mape_speed"].is_f64(), scored, "{c}");
        assert_eq!(c["bias_speed"].is_f64(), scored, "{c}");
        assert!(scored || c["mape_speed"].is_null(), "{c}");
    }
    assert!(compositions.iter().any(|c| c["mape_speed"].is_null()));
    assert!(compositions.iter().any(|c| c["mape_speed"].is_f64()));
    ok(&["dataset", "validate", s(&out)]);
}

#[test]
fn bad_csv_groups_are_named_by_file_column_and_line_and_leave_nothing() {
    for (groups, expected) in [
        (
            GROUPS_CSV.replace("g2,gpt,timeslice,,3.2,ok", "g2,gpt,mps,,3.2,ok"),
            "g.csv: column `mode`, line 7: differs from group `g2`'s first row (line 5)",
        ),
        (
            GROUPS_CSV.replace("g2,gpt,timeslice,,3.2,ok", "g2,llama,timeslice,,3.2,ok"),
            "g.csv: column `workload`, line 7",
        ),
        (
            GROUPS_CSV.replace("g1,gpt,mps,33,4,", "g1,gpt,mps,,4,"),
            "g.csv: column `share`, line 4",
        ),
        (
            "group,workload,mode,throughput,extra\ng,bert,mps,1,2\n".to_string(),
            "g.csv: column `extra`, line 1: not a column of groups.csv",
        ),
        (
            "group,workload,mode,throughput\ng,bert,mps,1\ng,gpt,mps,2\n".to_string(),
            "a group holds 3 to 8 jobs, this one 2",
        ),
        (
            GROUPS_CSV.replace("throughput,status", "throughput,throughput"),
            "g.csv: column `throughput`, line 1: appears twice in the header",
        ),
    ] {
        let tmp = tempfile::tempdir().expect("tmp");
        let (result, out) = import_with_groups(tmp.path(), &groups);
        let err = String::from_utf8_lossy(&result.stderr);
        assert!(
            !result.status.success() && err.contains(expected),
            "{expected}\n{err}"
        );
        assert!(!out.exists());
    }
}

/// Every dataset committed under `datasets/` validates, and the first GPU campaign's holds what
/// its campaign measured: seven workloads three times alone each, ten pair settings in
/// time-slicing and MPS at 50%, with NVML's, GPM's and the per-process counters.
#[test]
fn every_committed_dataset_validates_and_the_h200_campaign_is_whole() {
    let root = repo().join("datasets");
    let mut checked = Vec::new();
    for entry in fs::read_dir(&root).expect("datasets/") {
        let dir = entry.expect("entry").path();
        if dir.join("dataset.json").is_file() {
            let said = ok(&["dataset", "validate", s(&dir)]);
            assert!(said.contains(": valid ("), "{said}");
            // Its raw counter series are read too, where it has them.
            assert_eq!(
                said.contains(" counter samples)"),
                dir.join("samples.parquet").is_file(),
                "{said}"
            );
            checked.push(
                dir.file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    assert!(
        checked.iter().any(|n| n == "h200-2026-12-04"),
        "{checked:?}"
    );
    let d = Dataset::read(&root.join("h200-2026-12-04")).expect("read");
    assert_eq!((d.workloads.len(), d.pairs.len()), (7, 10));
    assert!(d.workloads.iter().all(|w| w.repetitions == Some(3)));
    assert!(
        d.pairs
            .iter()
            .all(|p| p.gpu == "h200" && p.status == Status::Ok)
    );
    let modes: Vec<String> = modes_present(&d.pairs)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(modes, ["timeslice", "mps"]);
    let names: Vec<&str> = d
        .meta
        .workload_features
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    for counter in [
        "gpu_util",
        "sm_active",
        "tensor_active",
        "dram_active",
        "process_sm_util",
    ] {
        assert!(names.contains(&counter), "{counter} missing from {names:?}");
    }
    assert_eq!(d.meta.provenance.driver.as_deref(), Some("580.159.04"));
}

/// A damaged `samples.parquet` fails `duet dataset validate`, naming the file.
#[test]
fn validate_reads_the_raw_counter_series_too() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = repo().join("datasets/cpu-dev2c-triples");
    let copy = tmp.path().join("triples");
    fs::create_dir(&copy).expect("folder");
    for entry in fs::read_dir(&src).expect("the committed dataset") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
    }
    let samples = copy.join("samples.parquet");
    let bytes = fs::read(&samples).expect("samples.parquet");
    fs::write(&samples, &bytes[..bytes.len() / 2]).expect("truncated");
    let err = fails(&["dataset", "validate", s(&copy)]);
    assert!(err.contains("samples.parquet"), "{err}");
    assert!(err.contains("not a readable Parquet file"), "{err}");
}

/// A Parquet table damaged where polars' reader panics is one line naming the file, exit 1:
/// no panic report, no crash.
#[test]
fn a_damaged_table_is_one_line_naming_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let copy = tmp.path().join("k80");
    fs::create_dir(&copy).expect("folder");
    for entry in fs::read_dir(repo().join("datasets/gavel-k80")).expect("the committed dataset") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
    }
    let pairs = copy.join("pairs.parquet");
    let mut bytes = fs::read(&pairs).expect("pairs.parquet");
    bytes[7859] = 0xBF;
    bytes[8568] = 0x45;
    fs::write(&pairs, &bytes).expect("damaged");
    for command in ["validate", "inspect"] {
        let err = fails(&["dataset", command, s(&copy)]);
        assert!(
            err.contains("pairs.parquet: not a readable Parquet file: damaged"),
            "{err}"
        );
    }
}

/// Read through a pipe whose reader has gone (`duet dataset inspect ... | head -1`), the command
/// ends quietly by SIGPIPE, as Unix tools do (it panicked: "failed printing to stdout: Broken
/// pipe", exit 101).
#[cfg(unix)]
#[test]
fn a_reader_that_stops_ends_the_command_quietly() {
    use std::io::Read as _;
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::Stdio;
    let data = repo().join("datasets/gavel-k80");
    let mut child = Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(["dataset", "inspect"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run duet");
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("duet ends");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        // 13: SIGPIPE.
        status.success() || status.signal() == Some(13),
        "{status:?}: {stderr}"
    );
}
