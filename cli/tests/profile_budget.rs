//! Real budgeted campaigns on the CPU (`duet profile --budget`): every workload alone, a first
//! round before any pair is known, the model fitted and a second and third round chosen by it,
//! the audit, `campaign.json`; a campaign killed mid-round resumed with the same choices and
//! nothing measured twice; a budgeted campaign's groups after its pairs; and the flags'
//! errors. And new workloads onto an earlier dataset
//! (`--onto DIR --probes K`): measured alone and with K co-runners chosen by the model fitted on
//! it, the co-runners' solo rows copied, the dataset merging with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use duet_core::Dataset;
use serde_json::Value;

fn duet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_duet"))
}

#[path = "support/catalog.rs"]
mod catalog;

/// Four quick workloads (the shared three and a slower one): ten pair settings in the cpu mode.
fn write_catalog(dir: &Path) -> PathBuf {
    catalog::write_catalog(
        dir,
        r#"
[[workload]]
name = "slow-ticker"
kind = "train"
command = ["sh", "-c", "while true; do echo tick; sleep 0.02; done"]
progress = "^tick$"
"#,
    )
}

const QUICK: &[&str] = &[
    "--warmup",
    "0.2",
    "--window",
    "0.4",
    "--window-max",
    "1.5",
    "--repetitions",
    "1",
    "--sample-ms",
    "50",
    "--date",
    "2026-12-02",
];

/// Budget 8 of 10: 2 audited, 6 chosen (4 in the first round, then rounds of 1), a small
/// ensemble fitted between rounds.
const BUDGET: &[&str] = &[
    "--budget",
    "8",
    "--audit",
    "2",
    "--round-size",
    "1",
    "--ensemble",
    "2",
    "--max-epochs",
    "30",
];

fn command(catalog: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = duet();
    c.arg("profile")
        .arg("--catalog")
        .arg(catalog)
        .arg("--out")
        .arg(out)
        .args(QUICK)
        .args(extra);
    c
}

fn profile(catalog: &Path, out: &Path, extra: &[&str]) -> Output {
    command(catalog, out, extra).output().expect("duet profile")
}

fn record(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("campaign.json")).expect("campaign.json");
    serde_json::from_str(&text).expect("JSON")
}

fn key(v: &Value) -> (String, String, String) {
    (
        v["a"].as_str().expect("a").to_string(),
        v["b"].as_str().expect("b").to_string(),
        v["mode"].as_str().expect("mode").to_string(),
    )
}

#[test]
fn a_budgeted_campaign_chooses_measures_retrains_and_audits() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path());
    let out = dir.path().join("budgeted");
    let run = profile(
        &catalog,
        &out,
        &[BUDGET, &["--solo-repetitions", "2"]].concat(),
    );
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    // 4 workloads alone twice each and 8 pair settings once, numbered against that plan.
    assert!(log.contains("[16/16]"), "{log}");
    assert_eq!(
        log.lines().filter(|l| l.starts_with('[')).count(),
        16,
        "{log}"
    );
    assert!(log.contains("budget: 8 of 10 pair settings"), "{log}");
    let v = duet()
        .args(["dataset", "validate"])
        .arg(&out)
        .output()
        .expect("validate");
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!((d.workloads.len(), d.pairs.len()), (4, 8));
    assert!(d.workloads.iter().all(|w| w.repetitions == Some(2)));
    assert!(d.pairs.iter().all(|p| p.repetitions == Some(1)));

    let r = record(&out);
    assert_eq!(r["format"], "duet-campaign/1");
    assert_eq!(r["select"], "uncertainty");
    assert_eq!(
        (r["settings"].as_u64(), r["budget"].as_u64()),
        (Some(10), Some(8))
    );
    let choices = r["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 6);
    // The first round before any pair is known, by the design rule, one per workload...
    let round = |c: &Value| c["round"].as_u64().expect("round");
    assert!(
        choices[..4]
            .iter()
            .all(|c| round(c) == 0 && c["rule"] == "design")
    );
    assert!(choices[..4].iter().all(|c| c.get("score").is_none()));
    // ...then rounds of one chosen by the model fitted on what was measured: scored.
    for (i, c) in choices[4..].iter().enumerate() {
        assert_eq!(round(c), i as u64 + 1);
        assert!(c["rule"] == "coverage" || c["rule"] == "uncertainty", "{c}");
        assert!(c["score"].as_f64().is_some_and(|s| s >= 0.0), "{c}");
    }
    let chosen: Vec<_> = choices.iter().map(key).collect();
    // The audit: the two settings never chosen, errors of the model fitted without them, the
    // estimate and its interval.
    let audit = &r["audit"];
    let audited: Vec<_> = audit["settings"]
        .as_array()
        .expect("audited")
        .iter()
        .map(key)
        .collect();
    assert_eq!(audited.len(), 2);
    assert!(audited.iter().all(|k| !chosen.contains(k)));
    let mut measured: Vec<_> = d
        .pairs
        .iter()
        .map(|p| (p.a.clone(), p.b.clone(), p.mode.to_string()))
        .collect();
    let mut expected: Vec<_> = chosen.iter().chain(&audited).cloned().collect();
    measured.sort();
    expected.sort();
    assert_eq!(
        measured, expected,
        "exactly the chosen and audited settings"
    );
    let estimate = &audit["estimate"];
    assert_eq!(
        estimate["population"].as_u64(),
        Some(4),
        "10 settings, 6 chosen"
    );
    let (mape, low, high) = (
        estimate["mape"].as_f64().expect("mape"),
        estimate["low"].as_f64().expect("low"),
        estimate["high"].as_f64().expect("high"),
    );
    assert!(low <= mape && mape <= high && mape > 0.0, "{estimate}");
    // The audited speeds' own noise, from their windows' standard errors.
    let noise = audit["measurement_noise"]
        .as_f64()
        .expect("measurement noise");
    assert!(noise > 0.0 && noise < 0.5, "{audit}");
    assert!(
        log.contains("audited speeds themselves are measured to"),
        "{log}"
    );
    // Printed at the end.
    assert!(
        log.contains("chosen: 6 of 10 pair settings in 3 rounds by uncertainty (4 design"),
        "{log}"
    );
    assert!(
        log.contains("audit: estimated MAPE of speed on the 4 unmeasured settings"),
        "{log}"
    );
    assert!(log.contains("90% interval"), "{log}");
    assert!(
        !dir.path().join(".budgeted.campaign").exists(),
        "the journal goes"
    );
}

#[test]
fn an_earlier_dataset_scores_the_first_round_and_a_met_target_stops_selection() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path());
    let out = dir.path().join("with-prior");
    let prior = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c");
    let prior = prior.to_string_lossy().into_owned();
    // A target any estimate meets: selection stops at the first check, after the first round
    // whose settings a model predicted before they were measured (here the first: the
    // earlier dataset's model scored it), and the audit follows.
    let flags = [
        "--budget",
        "10",
        "--audit",
        "2",
        "--round-size",
        "2",
        "--ensemble",
        "2",
        "--max-epochs",
        "30",
        "--prior",
        &prior,
        "--target-mape",
        "1000000%",
    ];
    let run = profile(&catalog, &out, &flags);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    assert!(
        log.contains("round 0: fitted on 0 pair settings and 1 earlier datasets"),
        "{log}"
    );
    assert!(
        log.contains("selection stopped early: the estimated MAPE")
            && log.contains("is below --target-mape 1000000.00%"),
        "{log}"
    );
    let r = record(&out);
    let choices = r["choices"].as_array().expect("choices");
    // The first round was scored by the model of the earlier dataset; the budget's rest is
    // unspent.
    assert!(choices.len() < 8, "{r}");
    assert!(
        choices
            .iter()
            .filter(|c| c["round"] == 0)
            .all(|c| c["score"].as_f64().is_some()),
        "{r}"
    );
    assert_eq!(r["audit"]["settings"].as_array().map(Vec::len), Some(2));
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.pairs.len(), choices.len() + 2);
    assert!(!log.contains("[14/14]"), "{log}");
}

#[test]
fn a_killed_budgeted_campaign_resumes_with_the_same_choices() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path());
    let out = dir.path().join("resumed");
    let mut child = command(&catalog, &out, BUDGET)
        .stderr(Stdio::null())
        .spawn()
        .expect("duet profile");
    let folder = dir.path().join(".resumed.campaign");
    let count =
        |name: &str| std::fs::read_to_string(folder.join(name)).map_or(0, |t| t.lines().count());
    // Killed once the model has chosen round 1: round 0 measured, round 1 recorded.
    let deadline = Instant::now() + Duration::from_secs(120);
    while count("choices.jsonl") < 2 {
        assert!(Instant::now() < deadline, "the campaign made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert!(!out.exists(), "no dataset from a killed campaign");
    let finished = count("journal.jsonl");
    assert!(finished >= 8, "4 alone and round 0's 4 pairs: {finished}");
    let recorded: Vec<Value> = std::fs::read_to_string(folder.join("choices.jsonl"))
        .expect("choices")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let before: Vec<Value> = recorded
        .iter()
        .filter(|e| e["entry"] == "round")
        .flat_map(|e| e["choices"].as_array().expect("choices").clone())
        .collect();
    assert!(before.len() >= 5, "{recorded:?}");

    // Another plan on the same journal would mix campaigns: refused, naming it.
    let other = profile(
        &catalog,
        &out,
        &[&["--resume", "--budget", "9"][..], &BUDGET[2..]].concat(),
    );
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && err.contains("the `plan` setting differs"),
        "{err}"
    );

    let resumed = profile(&catalog, &out, &[BUDGET, &["--resume"]].concat());
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{log}");
    assert!(
        log.contains(&format!(
            "resuming: {finished} measurements already in the journal"
        )),
        "{log}"
    );
    // Nothing measured twice, nothing lost: the rest of the 12 measurements, numbered on.
    assert_eq!(
        log.lines().filter(|l| l.starts_with('[')).count(),
        12 - finished,
        "{log}"
    );
    assert!(log.contains("[12/12]"), "{log}");
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!((d.workloads.len(), d.pairs.len()), (4, 8));
    let r = record(&out);
    let choices = r["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 6);
    assert_eq!(
        &choices[..before.len()],
        &before[..],
        "the recorded choices are kept"
    );
    assert_eq!(r["audit"]["settings"].as_array().map(Vec::len), Some(2));
    assert!(!folder.exists());
}

/// `--budget` with `--group-size 3 --group-budget 3`: the budgeted pairs and their audit, then
/// three of the twenty triples (the balanced design: each of the four workloads in two or three
/// of the nine jobs), measured outside the pairs' budget.
#[test]
fn a_budgeted_campaign_measures_its_chosen_groups_after_the_pairs() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path());
    let out = dir.path().join("budgeted-groups");
    let flags = [
        "--budget",
        "4",
        "--audit",
        "1",
        "--ensemble",
        "2",
        "--max-epochs",
        "10",
        "--group-size",
        "3",
        "--group-budget",
        "3",
    ];
    let run = profile(&catalog, &out, &flags);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    // 4 solos, 4 pair settings, 3 triples.
    assert!(log.contains("[11/11]"), "{log}");
    assert!(
        log.contains("then 3 group measurements (3 (a balanced design))"),
        "{log}"
    );
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!((d.pairs.len(), d.groups.len()), (4, 3));
    assert_eq!(record(&out)["budget"].as_u64(), Some(4));
    let mut jobs: std::collections::BTreeMap<&str, usize> = Default::default();
    for g in &d.groups {
        assert_eq!(g.jobs.len(), 3);
        for j in &g.jobs {
            *jobs.entry(j.workload.as_str()).or_default() += 1;
        }
    }
    assert_eq!(jobs.len(), 4, "{jobs:?}");
    assert!(jobs.values().all(|&n| (2..=3).contains(&n)), "{jobs:?}");
}

#[test]
fn budgeted_flags_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path());
    let out = dir.path().join("never");
    let gavel = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datasets/gavel-v100");
    let gavel = gavel.to_string_lossy().into_owned();
    for (flags, says) in [
        (
            vec!["--budget", "11"],
            "--budget 11: the catalog's grid has only 10 pair settings",
        ),
        (
            vec!["--budget", "a quarter"],
            "--budget: budget `a quarter`",
        ),
        (vec!["--budget", "0%"], "--budget"),
        (vec!["--budget", "4", "--audit", "4"], "--audit 4"),
        (vec!["--budget", "4", "--select", "greedy"], "--select"),
        (vec!["--budget", "4", "--round-size", "0"], "--round-size"),
        (vec!["--budget", "4", "--target-mape", "x"], "--target-mape"),
        (vec!["--budget", "4", "--prior", &gavel], "--prior"),
        (
            vec!["--budget", "4", "--shard", "0/2"],
            "--shard 0/2 with --budget",
        ),
        (vec!["--select", "random"], "--budget"),
        // One member has no disagreement to score by: every candidate scored 0.
        (
            vec!["--budget", "4", "--ensemble", "1"],
            "--ensemble 1: --select uncertainty scores a candidate by the members' disagreement",
        ),
    ] {
        let run = profile(&catalog, &out, &flags);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{flags:?}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(err_mentions_modes(&catalog, &out, &gavel));
    assert!(!out.exists() && !dir.path().join(".never.campaign").exists());
}

/// The prior's refusal names its modes and the campaign's.
fn err_mentions_modes(catalog: &Path, out: &Path, prior: &str) -> bool {
    let run = profile(catalog, out, &["--budget", "4", "--prior", prior]);
    let err = String::from_utf8_lossy(&run.stderr);
    err.contains("space") && err.contains("cpu")
}

#[test]
fn new_workloads_are_probed_onto_an_earlier_dataset_and_merge_with_it() {
    let dir = tempfile::tempdir().expect("tmp");
    // The earlier dataset: the shared three workloads, every pair.
    let first = dir.path().join("first");
    std::fs::create_dir(&first).expect("dir");
    let old_catalog = catalog::write_catalog(&first, "");
    let old = dir.path().join("old");
    let run = profile(&old_catalog, &old, &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let earlier = Dataset::read(&old).expect("earlier dataset");
    assert_eq!(earlier.pairs.len(), 6);

    // The catalog of the new campaign: the three again (the co-runners, with their commands)
    // and one new workload.
    let catalog = write_catalog(dir.path());
    let out = dir.path().join("probed");
    let old_arg = old.to_string_lossy().into_owned();
    let flags = [
        "--onto",
        &old_arg,
        "--probes",
        "2",
        "--ensemble",
        "2",
        "--max-epochs",
        "30",
    ];
    let run = profile(&catalog, &out, &flags);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    assert!(log.contains("1 new workloads (slow-ticker)"), "{log}");
    assert!(log.contains("round 1: fitted on 7 pair settings"), "{log}");
    assert!(log.contains("slow-ticker: probed with"), "{log}");
    assert!(log.contains("duet dataset merge"), "{log}");

    let d = Dataset::read(&out).expect("probed dataset");
    // The co-runners' solo rows are the earlier dataset's, untouched; the new one ran alone.
    assert_eq!(d.workloads.len(), 4);
    for w in &earlier.workloads {
        assert_eq!(d.workload(&w.workload), Some(w), "{}", w.workload);
    }
    assert!(
        d.workload("slow-ticker")
            .is_some_and(|w| w.solo_throughput > 0.0)
    );
    // Two probes, each of the new workload with a different co-runner.
    assert_eq!(d.pairs.len(), 2);
    let partners: std::collections::BTreeSet<&str> = d
        .pairs
        .iter()
        .map(|p| {
            assert!(p.a == "slow-ticker" || p.b == "slow-ticker", "{p:?}");
            if p.a == "slow-ticker" {
                p.b.as_str()
            } else {
                p.a.as_str()
            }
        })
        .collect();
    assert_eq!(partners.len(), 2, "{partners:?}");
    assert!(!partners.contains("slow-ticker"));
    // The record: the probes by round, chosen by the model's score, and where they went.
    let r = record(&out);
    assert_eq!(
        r["onto"]["new_workloads"],
        serde_json::json!(["slow-ticker"])
    );
    assert_eq!(r["onto"]["probes"], 2);
    let choices = r["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2, "{r}");
    for (round, c) in choices.iter().enumerate() {
        assert_eq!(c["round"], round, "{r}");
        assert_eq!(c["rule"], "coverage", "{r}");
        assert!(c["score"].as_f64().is_some(), "{r}");
    }
    assert!(r.get("audit").is_none(), "{r}");

    // It merges with the earlier dataset under the shard rules.
    let merged = dir.path().join("merged");
    let run = duet()
        .args(["dataset", "merge", "--out"])
        .arg(&merged)
        .arg(&old)
        .arg(&out)
        .output()
        .expect("merge");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let m = Dataset::read(&merged).expect("merged");
    assert_eq!((m.workloads.len(), m.pairs.len()), (4, 8));

    // Nothing new, or no co-runner: refused before anything runs, naming the flag.
    let again = dir.path().join("again");
    let run = profile(&old_catalog, &again, &["--onto", &old_arg]);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(log.contains("already in --onto"), "{log}");
    assert!(!again.exists());
    let run = profile(&catalog, &again, &["--onto", &old_arg, "--budget", "3"]);
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("--budget"));
    // A co-runner defined otherwise than `--onto` measured it (`stream` 128 wide, measured 64
    // wide): refused naming it. It ran, and the copied solo row described what did not run.
    let changed_dir = dir.path().join("changed");
    std::fs::create_dir(&changed_dir).expect("dir");
    let changed = catalog::write_catalog(
        &changed_dir,
        "\n[[workload]]\nname = \"fresh\"\nkind = \"infer\"\nbuiltin = \"matmul\"\nwidth = 32\n",
    );
    let text = std::fs::read_to_string(&changed).expect("catalog");
    let text = text.replacen(
        "builtin = \"stream\"\nwidth = 64",
        "builtin = \"stream\"\nwidth = 128",
        1,
    );
    std::fs::write(&changed, text).expect("catalog");
    let run = profile(&changed, &again, &flags);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        log.contains("workload `stream` is defined with `width` 128")
            && log.contains("measured it with 64"),
        "{log}"
    );
    assert!(!again.exists());
}
