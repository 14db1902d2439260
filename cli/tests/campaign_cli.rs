//! `duet campaign replay` as a user runs it: the committed CPU dataset and a dataset written by
//! `duet dataset import csv` (MPS at two shares, time-slicing, an infeasible and a crashed
//! setting), replayed end to end by the real binary with quick training settings; the report's
//! files and the invariants between them; bad input refused by name.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Quick training: every fit a few hundred milliseconds.
const QUICK: [&str; 8] = [
    "--ensemble",
    "3",
    "--max-epochs",
    "60",
    "--hidden",
    "16",
    "--patience",
    "20",
];

fn replay(data: &[&Path], out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["campaign", "replay"];
    for d in data {
        args.extend(["--data", s(d)]);
    }
    args.extend(["--out", s(out)]);
    args.extend(QUICK);
    args.extend(extra);
    duet(&args)
}

fn ok(result: &Output) {
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
}

fn key(s: &Value) -> String {
    format!(
        "{}|{}|{}|{}|{}|{}",
        s["gpu"], s["mode"], s["a"], s["b"], s["share_a"], s["share_b"]
    )
}

fn keys(list: &Value) -> Vec<String> {
    list.as_array().expect("a list").iter().map(key).collect()
}

/// The invariants between the report's parts.
fn check_report(out: &Path, seeds: &[u64]) -> Value {
    let mut files: Vec<String> = fs::read_dir(out)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["budget.svg", "probes.svg", "report.json", "report.md"]
    );
    let r: Value =
        serde_json::from_str(&fs::read_to_string(out.join("report.json")).expect("read"))
            .expect("report.json");
    assert_eq!(r["format"], "duet-campaign-replay/1");
    let selectable = r["selectable"].as_u64().expect("selectable") as usize;
    let full: Vec<&Value> = r["full"]["seeds"]
        .as_array()
        .expect("seeds")
        .iter()
        .collect();
    assert_eq!(full.len(), seeds.len());
    for curve in r["curves"].as_array().expect("curves") {
        let points = curve["points"].as_array().expect("points");
        let last = points.last().expect("a point");
        assert_eq!(last["settings"].as_u64(), Some(selectable as u64));
        // Everything measured at 100% is the full data: the same fit, the same figures.
        for (s, f) in last["seeds"].as_array().expect("seeds").iter().zip(&full) {
            assert_eq!(s["mape"], f["mape"], "{}", curve["select"]);
            assert_eq!(s["p90_coverage"], f["p90_coverage"]);
            assert!(s["mape"].as_f64().is_some_and(|m| m > 0.0 && m < 1.0));
        }
        for p in points {
            for seed in p["seeds"].as_array().expect("seeds") {
                assert_eq!(
                    seed["audited"].as_array().expect("audited").len() as u64,
                    p["audited"].as_u64().expect("audited")
                );
            }
        }
    }
    for c in r["choices"].as_array().expect("choices") {
        let test: BTreeSet<String> = keys(&c["test"]).into_iter().collect();
        let chosen = keys(&c["choices"]);
        assert_eq!(
            chosen.iter().collect::<BTreeSet<_>>().len(),
            chosen.len(),
            "a setting chosen twice"
        );
        assert!(
            chosen.iter().all(|k| !test.contains(k)),
            "a test setting was chosen"
        );
        let curve = r["curves"]
            .as_array()
            .expect("curves")
            .iter()
            .find(|x| x["select"] == c["select"])
            .expect("its curve");
        for p in curve["points"].as_array().expect("points") {
            let n =
                (p["settings"].as_u64().expect("n") - p["audited"].as_u64().expect("a")) as usize;
            let prefix: BTreeSet<&String> = chosen[..n.min(chosen.len())].iter().collect();
            let at = p["seeds"]
                .as_array()
                .expect("seeds")
                .iter()
                .find(|x| x["seed"] == c["seed"])
                .expect("its seed");
            for a in keys(&at["audited"]) {
                assert!(!prefix.contains(&a), "an audited setting was chosen");
                assert!(!test.contains(&a), "a test setting was audited");
            }
        }
    }
    let md = fs::read_to_string(out.join("report.md")).expect("report.md");
    for heading in [
        "## Test-set MAPE of speed against the share measured",
        "## The audit",
        "## Choices",
        "](budget.svg)",
    ] {
        assert!(md.contains(heading), "report.md lacks {heading}");
    }
    for plot in ["budget.svg", "probes.svg"] {
        let svg = fs::read_to_string(out.join(plot)).expect("svg");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<polyline"), "{plot} draws no line");
    }
    r
}

#[test]
fn a_replay_of_the_cpu_dataset_writes_a_consistent_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("replay");
    let data = root().join("datasets/cpu-dev2c");
    let result = replay(
        &[&data],
        &out,
        &[
            "--budget",
            "50%,100%",
            "--seeds",
            "7,8",
            "--rounds",
            "3",
            "--audit",
            "3",
            "--probe-units",
            "1",
            "--max-probes",
            "2",
            "--group-by",
            "model",
        ],
    );
    ok(&result);
    let r = check_report(&out, &[7, 8]);
    let probes = r["probes"].as_array().expect("probes");
    let held: Vec<&str> = probes
        .iter()
        .map(|p| p["held_out"].as_str().expect("held_out"))
        .collect();
    assert_eq!(held, ["model", "workload"]);
    for p in probes {
        assert_eq!(p["chosen"].as_array().expect("K").len(), 3);
        assert_eq!(p["units"].as_array().expect("units").len(), 2);
        // Uncalibrated fits by default: no coverage is claimed.
        assert!(p.get("chosen_coverage").is_none(), "{p}");
    }
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(stdout.contains("full data"), "{stdout}");
    assert!(stdout.contains("audit interval held the truth"), "{stdout}");
    // Progress comes as plain lines on a pipe.
    let log = String::from_utf8_lossy(&result.stderr);
    assert!(log.contains("replay: "), "{log}");
}

#[test]
fn any_imported_dataset_replays() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Eight workloads, one without its feature; time-slicing and MPS at two shares; one pair
    // out of memory, one crashed.
    let mut w = String::from("workload,kind,solo_throughput,framework:categorical,gpu_util\n");
    for i in 0..8 {
        let util = if i == 3 {
            String::new()
        } else {
            format!("{}", 20 + 10 * i)
        };
        w.push_str(&format!(
            "j{i},{},{},{},{util}\n",
            if i % 2 == 0 { "train" } else { "infer" },
            5.0 + i as f64,
            ["torch", "jax"][i % 2]
        ));
    }
    let mut p = String::from("a,b,mode,share_a,share_b,throughput_a,throughput_b,status\n");
    for i in 0..8 {
        for j in i..8 {
            let load = (20.0 + 10.0 * i as f64 + 20.0 + 10.0 * j as f64) / 100.0;
            let speed = 1.0 / (1.0 + 0.5 * load);
            let (ta, tb) = ((5.0 + i as f64) * speed, (5.0 + j as f64) * speed);
            let status = match (i, j) {
                (6, 7) => "oom",
                (5, 7) => "crash",
                _ => "ok",
            };
            let (ta, tb) = if status == "ok" { (ta, tb) } else { (0.0, 0.0) };
            p.push_str(&format!("j{i},j{j},timeslice,,,{ta},{tb},{status}\n"));
            for share in [50, 100] {
                let f = if share == 50 { 0.9 } else { 1.0 };
                p.push_str(&format!(
                    "j{j},j{i},mps,{share},{share},{},{},{status}\n",
                    tb * f,
                    ta * f
                ));
            }
        }
    }
    let (wp, pp) = (tmp.path().join("w.csv"), tmp.path().join("p.csv"));
    fs::write(&wp, w).expect("write");
    fs::write(&pp, p).expect("write");
    let data = tmp.path().join("imported");
    ok(&duet(&[
        "dataset",
        "import",
        "csv",
        "--workloads",
        s(&wp),
        "--pairs",
        s(&pp),
        "--gpu",
        "a100",
        "--out",
        s(&data),
    ]));
    let out = tmp.path().join("replay");
    let result = replay(
        &[&data],
        &out,
        &[
            "--budget",
            "20%,40,100%",
            "--seeds",
            "3",
            "--rounds",
            "2",
            "--probe-units",
            "1",
            "--max-probes",
            "1",
            "--probe-coverage",
            "--noise",
            "0.03",
        ],
    );
    ok(&result);
    let r = check_report(&out, &[3]);
    // `--probe-coverage`: each K's p90 coverage beside its MAPE, from calibrated fits.
    let probes = &r["probes"][0];
    for key in ["chosen_coverage", "random_coverage"] {
        let curve = probes[key].as_array().expect(key);
        assert_eq!(curve.len(), 2, "{probes}");
        for stat in curve {
            let c = stat["mean"].as_f64().expect("a coverage");
            assert!((0.0..=1.0).contains(&c), "{probes}");
        }
        let unit = probes["units"][0][key].as_array().expect(key);
        assert_eq!(unit.len(), 2);
    }
    let report = fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(
        report.contains("p90 coverage on the same settings"),
        "{report}"
    );
    assert_eq!(r["settings"], 108);
    assert_eq!(r["noise"], 0.03);
    let budgets: Vec<&str> = r["curves"][0]["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| p["budget"].as_str().expect("label"))
        .collect();
    assert_eq!(budgets, ["20%", "40", "100%"]);
}

#[test]
fn bad_replays_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = root().join("datasets/cpu-dev2c");
    let out = tmp.path().join("r");
    for (extra, expected) in [
        (&["--budget", "0%"][..], "--budget"),
        (&["--budget", "25%", "--select", "greedy"][..], "--select"),
        (&["--budget", "25%", "--seeds", "7,7"][..], "--seeds"),
        (&["--budget", "25%", "--noise=-1"][..], "--noise"),
        (&["--budget", "9999"][..], "--budget 9999"),
        (
            &["--budget", "25%", "--group-by", "colour"][..],
            "--group-by colour",
        ),
        (&["--budget", "25%", "--ensemble", "1"][..], "--ensemble"),
    ] {
        let result = replay(&[&data], &out, extra);
        assert!(!result.status.success(), "{extra:?} was accepted");
        let err = String::from_utf8_lossy(&result.stderr);
        assert!(err.contains(expected), "{extra:?}: {err}");
        assert!(!out.exists(), "{extra:?} left a report");
    }
    // The same dataset twice (it was replayed as one of twice the settings).
    let result = replay(&[&data, &data.join(".")], &out, &["--budget", "25%"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && err.contains("the same dataset as --data"),
        "{err}"
    );
    // A budgeted campaign's dataset holds what its budget chose, not the grid.
    let budgeted = root().join("datasets/h200-2026-12-04");
    let result = replay(&[&budgeted], &out, &["--budget", "25%"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success()
            && err.contains(
                "a budgeted campaign's dataset (campaign.json: 10 of its 56 pair settings"
            ),
        "{err}"
    );
    let missing = tmp.path().join("nowhere");
    let result = replay(&[&missing], &out, &["--budget", "25%"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success() && err.contains("nowhere"), "{err}");
    // A prior that holds the replayed settings would hand the replay its answers; one that
    // cannot be read is named by its flag.
    for (prior, expected) in [
        (
            s(&data).to_string(),
            format!("--prior {}: it holds setting", s(&data)),
        ),
        (s(&missing).to_string(), format!("--prior {}", s(&missing))),
    ] {
        let result = replay(&[&data], &out, &["--budget", "25%", "--prior", &prior]);
        let err = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success() && err.contains(&expected), "{err}");
        assert!(!out.exists(), "a refused prior left a report");
    }
    // A report folder is never overwritten.
    fs::create_dir(&out).expect("mkdir");
    let result = replay(&[&data], &out, &["--budget", "25%"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && err.contains("already exists"),
        "{err}"
    );
}

#[test]
fn merge_says_it_leaves_a_campaign_record_behind() {
    let tmp = tempfile::tempdir().expect("tmp");
    let shard = tmp.path().join("shard");
    let src = root().join("datasets/cpu-dev2c");
    fs::create_dir(&shard).expect("mkdir");
    for f in ["dataset.json", "workloads.parquet", "pairs.parquet"] {
        fs::copy(src.join(f), shard.join(f)).expect("copy");
    }
    fs::write(shard.join("campaign.json"), "{}").expect("write");
    // Readers of the dataset ignore the record.
    ok(&duet(&["dataset", "validate", s(&shard)]));
    ok(&duet(&["dataset", "inspect", s(&shard)]));
    let out = tmp.path().join("merged");
    let result = duet(&["dataset", "merge", s(&shard), "--out", s(&out)]);
    ok(&result);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        err.contains("campaign.json") && err.contains("not carried"),
        "{err}"
    );
    assert!(!out.join("campaign.json").exists());
}
