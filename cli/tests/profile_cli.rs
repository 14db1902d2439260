//! Real co-location campaigns on the CPU: tiny workloads as real processes contending for the
//! cores, the dataset validated by `duet dataset validate`; a campaign killed with SIGKILL and
//! resumed; failing workloads; two shards merged equal the unsharded campaign.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use duet_core::Dataset;

fn duet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_duet"))
}

#[path = "support/catalog.rs"]
mod catalog;
use catalog::write_catalog;

fn profile(catalog: &Path, out: &Path, extra: &[&str]) -> Output {
    duet()
        .env_remove("JOB_COMPLETION_INDEX")
        .arg("profile")
        .arg("--catalog")
        .arg(catalog)
        .arg("--out")
        .arg(out)
        .args([
            "--warmup",
            "0.2",
            "--window",
            "0.4",
            "--window-max",
            "1.5",
            "--sample-ms",
            "50",
            "--date",
            "2026-11-30",
        ])
        .args(extra)
        .output()
        .expect("duet profile")
}

fn validate(out: &Path) {
    let v = duet()
        .args(["dataset", "validate"])
        .arg(out)
        .output()
        .expect("validate");
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

fn settings(d: &Dataset) -> Vec<(String, String, String)> {
    let mut s: Vec<_> = d
        .pairs
        .iter()
        .map(|p| (p.a.clone(), p.b.clone(), p.mode.to_string()))
        .collect();
    s.sort();
    s
}

#[test]
fn a_mini_campaign_measures_every_workload_and_pair() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path(), "");
    let out = dir.path().join("cpu-mini");
    let run = profile(&catalog, &out, &["--repetitions", "2"]);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    assert!(log.contains("[18/18]") && log.contains("ETA"), "{log}");
    // Stderr is a pipe: progress as plain lines, the first at the first setting (in the
    // campaign's random order), the last complete.
    assert!(
        log.contains("profile: 0/18 settings (0%), ")
            && log.contains("profile: 18/18 settings (100%), dataset;"),
        "{log}"
    );
    validate(&out);
    // Inspect says how precisely the speeds were measured (from the windows' errors).
    let inspect = duet()
        .args(["dataset", "inspect"])
        .arg(&out)
        .output()
        .expect("inspect");
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        inspect.status.success() && text.contains("measured to a relative standard error of"),
        "{text}"
    );
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.workloads.len(), 3);
    assert_eq!(d.pairs.len(), 6, "3 workloads: 3 self-pairs and 3 others");
    assert!(
        d.pairs
            .iter()
            .all(|p| p.status == duet_core::Status::Ok && p.repetitions == Some(2))
    );
    for w in &d.workloads {
        assert!(w.solo_throughput > 0.0);
        assert_eq!(w.repetitions, Some(2));
        let cpu = w.features["cpu_util"]
            .as_number()
            .expect("cpu_util sampled");
        // The shell loop sleeps; the built-ins compute.
        assert!(
            w.workload == "ticker" || cpu > 10.0,
            "{}: cpu_util {cpu}",
            w.workload
        );
        assert!(w.features["rss_mib"].as_number().expect("rss") > 0.0);
    }
    assert_eq!(d.meta.provenance.gpu, "cpu");
    // The raw series behind the means: every run, every process, several readings each.
    let samples = Dataset::read_samples(&out).expect("samples.parquet");
    let runs: std::collections::BTreeSet<&str> = samples.iter().map(|s| s.run.as_str()).collect();
    assert_eq!(runs.len(), 18, "3 workloads x 2 alone + 6 pairs x 2");
    let rss: Vec<_> = samples
        .iter()
        .filter(|s| s.run == "pair/mlp/stream/cpu/None/None/0" && s.counter == "rss_mib")
        .collect();
    assert!(rss.iter().any(|s| s.source == "mlp") && rss.iter().any(|s| s.source == "stream"));
    assert!(
        rss.len() >= 6
            && rss
                .iter()
                .all(|s| s.value > 0.0 && s.t >= 0.0 && s.t <= 1.6)
    );
    // Rates come from the lines' own times, not a count of lines over the 0.4 s window: were
    // they counted, every one (a mean of two windows) would be a multiple of 1 / 0.8 it/s.
    let rates: Vec<f64> = d
        .workloads
        .iter()
        .map(|w| w.solo_throughput)
        .chain(
            d.pairs
                .iter()
                .flat_map(|p| [p.throughput_a, p.throughput_b]),
        )
        .collect();
    assert!(
        rates
            .iter()
            .all(|r| ((r * 0.8) - (r * 0.8).round()).abs() > 1e-6),
        "{rates:?}"
    );
    // Each setting's standard error is recorded, and the windows went on until it was at most
    // 2% (--precision's default) or 1.5 s had passed.
    for w in &d.workloads {
        let se = w.solo_throughput_se.expect("solo standard error");
        assert!(se > 0.0 && se < w.solo_throughput, "{}: {se}", w.workload);
    }
    for p in &d.pairs {
        let (a, b) = (
            p.throughput_a_se.expect("a's error"),
            p.throughput_b_se.expect("b's"),
        );
        assert!(a > 0.0 && b > 0.0, "{} + {}: {a} {b}", p.a, p.b);
    }
    assert!(
        d.meta
            .description
            .contains("until the rates' relative standard errors")
    );
    assert!(
        d.meta
            .provenance
            .command
            .as_deref()
            .is_some_and(|c| c.contains("profile"))
    );
    // The trainer learns from it.
    let model = dir.path().join("model");
    let train = duet()
        .args([
            "train",
            "--seed",
            "7",
            "--max-epochs",
            "20",
            "--ensemble",
            "1",
            "--hidden",
            "8",
            "--data",
        ])
        .arg(&out)
        .arg("--out")
        .arg(&model)
        .output()
        .expect("duet train");
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    assert!(model.join("model.onnx").is_file());
}

/// `--group-size 3`: after the pairs, every group of three of the catalog's three workloads
/// (ten multisets), each run together over one window, into groups.parquet.
#[test]
fn a_group_campaign_measures_every_triple_together() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path(), "");
    let out = dir.path().join("cpu-triples");
    let run = profile(&catalog, &out, &["--repetitions", "1", "--group-size", "3"]);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    // 3 solos, 6 pairs, 10 triples.
    assert!(
        log.contains("[19/19]") && log.contains("10 group settings"),
        "{log}"
    );
    validate(&out);
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.groups.len(), 10);
    assert!(
        d.groups
            .iter()
            .all(|g| g.jobs.len() == 3 && g.repetitions == Some(1))
    );
    let ok: Vec<_> = d
        .groups
        .iter()
        .filter(|g| g.status == duet_core::Status::Ok)
        .collect();
    assert!(!ok.is_empty(), "{log}");
    for g in ok {
        assert!(g.jobs.iter().all(|j| j.throughput > 0.0), "{}", g.label());
    }
    let bad = profile(&catalog, &dir.path().join("nine"), &["--group-size", "9"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--group-size 9"));
}

/// `--group-budget 4`: every pair, and 4 of the 10 triples, chosen so that the three workloads
/// are in about as many measured jobs; a budget without groups, or of none, is refused before
/// anything runs.
#[test]
fn a_group_budget_measures_a_balanced_share_of_the_triples() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path(), "");
    let out = dir.path().join("cpu-some-triples");
    let args = [
        "--repetitions",
        "1",
        "--group-size",
        "3",
        "--group-budget",
        "4",
    ];
    let run = profile(&catalog, &out, &args);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    // 3 solos, 6 pairs, 4 triples.
    assert!(log.contains("[13/13]"), "{log}");
    validate(&out);
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.groups.len(), 4);
    let mut jobs: std::collections::BTreeMap<&str, usize> = Default::default();
    for g in &d.groups {
        for j in &g.jobs {
            *jobs.entry(j.workload.as_str()).or_default() += 1;
        }
    }
    // 12 jobs over the three workloads; no four triples of them give each exactly four without
    // `abc`, which the design takes first, so the counts are within two of each other (a
    // random four could leave a workload out entirely).
    let counts: Vec<usize> = jobs.values().copied().collect();
    assert_eq!(
        (counts.len(), counts.iter().sum::<usize>()),
        (3, 12),
        "{jobs:?}"
    );
    assert!(
        counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 2,
        "{jobs:?}"
    );
    assert!(d.groups.iter().any(|g| {
        let mut w: Vec<&str> = g.jobs.iter().map(|j| j.workload.as_str()).collect();
        w.sort_unstable();
        w.dedup();
        w.len() == 3
    }));
    assert!(
        d.meta
            .description
            .contains("4 (a balanced design) of the groups of three")
    );
    for (flags, says) in [
        (&["--group-budget", "25%"][..], "only with --group-size 3"),
        (
            &["--group-size", "3", "--group-budget", "0"][..],
            "--group-budget: budget `0`: at least one",
        ),
        (
            &["--group-size", "3", "--group-budget", "half"][..],
            "--group-budget: budget `half`",
        ),
    ] {
        let bad = profile(&catalog, &dir.path().join("refused"), flags);
        let log = String::from_utf8_lossy(&bad.stderr);
        assert!(
            !bad.status.success() && log.contains(says),
            "{flags:?}: {log}"
        );
        assert!(!dir.path().join("refused").exists());
    }
    // Each workload's process reads the catalog again: a pipe or a device is refused.
    let bad = profile(Path::new("/dev/null"), &dir.path().join("refused"), &[]);
    let log = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && log.contains("--catalog /dev/null: not a regular file"),
        "{log}"
    );
}

#[test]
fn a_killed_campaign_resumes_without_repeating_or_losing_anything() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path(), "");
    let out = dir.path().join("cpu-resumed");
    let mut child = duet()
        .arg("profile")
        .arg("--catalog")
        .arg(&catalog)
        .arg("--out")
        .arg(&out)
        .args([
            "--warmup",
            "0.2",
            "--window",
            "0.4",
            "--window-max",
            "1.5",
            "--repetitions",
            "1",
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("duet profile");
    let journal = dir.path().join(".cpu-resumed.campaign/journal.jsonl");
    let lines = || std::fs::read_to_string(&journal).map_or(0, |t| t.lines().count());
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines() < 4 {
        assert!(Instant::now() < deadline, "the campaign made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A resume while the campaign runs would append beside it: refused.
    let twice = profile(&catalog, &out, &["--repetitions", "1", "--resume"]);
    let err = String::from_utf8_lossy(&twice.stderr);
    assert!(
        !twice.status.success() && err.contains("another campaign is measuring"),
        "{err}"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let finished = lines();
    assert!(!out.exists(), "no dataset from a killed campaign");
    // Without --resume the journal is not overwritten.
    let refused = profile(&catalog, &out, &["--repetitions", "1"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--resume"));
    // Resuming with other settings would mix measurements: refused, naming the setting.
    let mixed = profile(&catalog, &out, &["--repetitions", "2", "--resume"]);
    let err = String::from_utf8_lossy(&mixed.stderr);
    assert!(
        !mixed.status.success() && err.contains("the `repetitions` setting differs"),
        "{err}"
    );
    let resumed = profile(&catalog, &out, &["--repetitions", "1", "--resume"]);
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{log}");
    assert!(
        log.contains(&format!("resuming: {finished} of 9 measurements")),
        "{log}"
    );
    assert!(
        log.contains(&format!("profile: {finished}/9 settings")),
        "{log}"
    );
    assert_eq!(
        log.lines().filter(|l| l.starts_with('[')).count(),
        9 - finished,
        "{log}"
    );
    validate(&out);
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!((d.workloads.len(), d.pairs.len()), (3, 6));
    // The journal kept each window's error across the kill: every setting has one.
    assert!(
        d.workloads.iter().all(|w| w.solo_throughput_se.is_some())
            && d.pairs
                .iter()
                .all(|p| p.throughput_a_se.is_some() && p.throughput_b_se.is_some())
    );
    assert!(
        !journal.exists(),
        "the journal goes once the dataset is written"
    );
}

#[test]
fn failing_workloads_are_recorded_or_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let marker = dir.path().join("holder.pid");
    let m = marker.display();
    // `hog` holds a marker while it runs; `fragile` runs out of memory next to a live `hog`.
    let extra = format!(
        r#"
[[workload]]
name = "hog"
kind = "train"
command = ["sh", "-c", "echo $$ > {m}; while true; do echo tick; sleep 0.005; done"]
progress = "^tick$"

[[workload]]
name = "fragile"
kind = "infer"
command = ["sh", "-c", "sleep 0.1; if [ -f {m} ] && kill -0 $(cat {m}) 2>/dev/null; then echo 'RuntimeError: CUDA out of memory' >&2; exit 1; fi; while true; do echo tick; sleep 0.005; done"]
progress = "^tick$"
"#
    );
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(&catalog, extra.trim_start()).expect("catalog");
    let out = dir.path().join("cpu-fragile");
    let run = profile(&catalog, &out, &["--repetitions", "1"]);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    let d = Dataset::read(&out).expect("dataset");
    let p = d.pairs.iter().find(|p| p.a != p.b).expect("the mixed pair");
    assert_eq!(p.status, duet_core::Status::Oom, "{p:?}");
    assert!(
        p.note
            .as_deref()
            .is_some_and(|n| n.contains("CUDA out of memory"))
    );
    assert_eq!(
        d.pairs
            .iter()
            .filter(|p| p.status == duet_core::Status::Ok)
            .count(),
        2
    );

    // A workload that exits at once: named, and no dataset.
    let broken = write_catalog(
        dir.path(),
        "\n[[workload]]\nname = \"quits\"\nkind = \"train\"\ncommand = [\"sh\", \"-c\", \"echo bad flag >&2; exit 3\"]\nprogress = \"tick\"\n",
    );
    let out = dir.path().join("cpu-broken");
    let run = profile(&broken, &out, &["--repetitions", "1"]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("workload `quits` failed every time it ran alone") && err.contains("bad flag"),
        "{err}"
    );
    assert!(!out.exists());
    // Its advice taken: fixed in the catalog and resumed (refused before: the catalog's digest
    // had changed), its failed run goes and the rest of the journal is kept.
    let fixed = write_catalog(
        dir.path(),
        "\n[[workload]]\nname = \"quits\"\nkind = \"train\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.005; done\"]\nprogress = \"tick\"\n",
    );
    let run = profile(&fixed, &out, &["--repetitions", "1", "--resume"]);
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    assert!(
        log.contains(
            "--resume: `quits` redefined in the catalog; its 1 failed measurements run again"
        ),
        "{log}"
    );
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.workloads.len(), 4);

    // Bad flags and catalogs, each named.
    let cases: [(&[&str], &str); 11] = [
        (&["--shard", "3/2"], "impossible shard"),
        (
            &["--timeout", "0"],
            "--timeout 0: must be a number of seconds above 0 and at most 86400",
        ),
        (
            &["--timeout", "inf"],
            "--timeout inf: must be a number of seconds above 0 and at most 86400 (a day: a \
             measurement may be long, but not endless)",
        ),
        (&["--name", ""], "--name: empty"),
        (&["--gpu", " "], "--gpu: empty"),
        (&["--modes", "cpu,warp"], "unknown mode `warp`"),
        (&["--shares", "0"], "--shares: 0 is outside (0, 100]"),
        // Named twice, every pair of it was measured twice.
        (
            &["--modes", "cpu,cpu"],
            "--modes: `cpu` is given twice (as mode 2)",
        ),
        (&["--shares", "50,30,50"], "--shares: 50 is given twice"),
        // A shard count without its index ran the whole grid.
        (
            &["--shards", "4"],
            "--shards 4: the shard's index comes from JOB_COMPLETION_INDEX, which is not set",
        ),
        (
            &["--shard", "0/2", "--shards", "2"],
            "--shard 0/2 with --shards",
        ),
    ];
    for (flags, says) in cases {
        let run = profile(&catalog, &dir.path().join("never"), flags);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(
            !run.status.success() && err.contains(says),
            "{flags:?}: {err}"
        );
    }
    // The measuring flags the quick campaign sets, past what a Duration holds, and --date.
    for (flag, value, says) in [
        (
            "--warmup",
            "1e30",
            "--warmup 1000000000000000000000000000000: must be",
        ),
        ("--window", "inf", "--window inf: must be"),
        ("--window-max", "NaN", "--window-max NaN: must be"),
        ("--date", "2026-02-29", "--date: `2026-02-29`: no such date"),
    ] {
        let run = duet()
            .args(["profile", "--catalog"])
            .arg(&catalog)
            .arg("--out")
            .arg(dir.path().join("never"))
            .args([flag, value])
            .output()
            .expect("duet profile");
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{flag} {value}: {err}");
        assert!(err.contains(says), "{flag} {value}: {err}");
    }
    assert!(!dir.path().join("never").exists());
    std::fs::write(dir.path().join("dup.toml"), "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\n[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\n").expect("dup");
    let run = profile(&dir.path().join("dup.toml"), &dir.path().join("never"), &[]);
    assert!(String::from_utf8_lossy(&run.stderr).contains("workload `a`: the name is used twice"));
    let existing = profile(&catalog, dir.path(), &[]);
    assert!(String::from_utf8_lossy(&existing.stderr).contains("already exists"));
}

#[test]
fn two_merged_shards_cover_the_unsharded_pairs() {
    let dir = tempfile::tempdir().expect("tmp");
    let decoder = "\n[[workload]]\nname = \"decoder\"\nkind = \"infer\"\nbuiltin = \"decoder\"\nbatch = 2\nwidth = 16\ndepth = 1\nseq = 4\n";
    let catalog = write_catalog(dir.path(), decoder);
    let whole = dir.path().join("whole");
    assert!(
        profile(&catalog, &whole, &["--repetitions", "1"])
            .status
            .success()
    );
    for i in 0..2 {
        let run = profile(
            &catalog,
            &dir.path().join(format!("shard-{i}")),
            &["--repetitions", "1", "--shard", &format!("{i}/2")],
        );
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let merged = dir.path().join("merged");
    let merge = duet()
        .args(["dataset", "merge"])
        .arg(dir.path().join("shard-0"))
        .arg(dir.path().join("shard-1"))
        .arg("--out")
        .arg(&merged)
        .output()
        .expect("merge");
    assert!(
        merge.status.success(),
        "{}",
        String::from_utf8_lossy(&merge.stderr)
    );
    let (w, m) = (
        Dataset::read(&whole).expect("whole"),
        Dataset::read(&merged).expect("merged"),
    );
    assert_eq!(settings(&w), settings(&m));
    let transformer = w
        .workloads
        .iter()
        .find(|x| x.workload == "decoder")
        .expect("decoder");
    assert_eq!(transformer.features["seq"].as_number(), Some(4.0));
    let mlp = w
        .workloads
        .iter()
        .find(|x| x.workload == "mlp")
        .expect("mlp");
    assert_eq!(mlp.features["seq"].as_number(), None);
    let s0 = Dataset::read(&dir.path().join("shard-0")).expect("shard 0");
    assert!(!s0.pairs.is_empty() && s0.pairs.len() < w.pairs.len());
}

#[test]
fn without_nvml_a_gpu_campaign_says_so_once_and_goes_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        "[[workload]]\nname = \"ticker\"\nkind = \"infer\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.005; done\"]\nprogress = \"^tick$\"\n",
    )
    .expect("catalog");
    let out = dir.path().join("gpu-less");
    let run = profile(
        &catalog,
        &out,
        &[
            "--repetitions",
            "1",
            "--device",
            "cuda:0",
            "--gpu",
            "h200",
            "--modes",
            "timeslice",
        ],
    );
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    // This machine has no NVIDIA driver; where one is, the counters are recorded instead.
    if log.contains("NVML unavailable") {
        assert_eq!(
            log.matches("GPU counters are not recorded").count(),
            1,
            "{log}"
        );
    }
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.pairs.len(), 1);
    assert_eq!(d.meta.provenance.gpu, "h200");
    assert_eq!(d.meta.modes, [duet_core::Mode::Timeslice]);
}

#[test]
fn mps_without_a_gpu_is_skipped_with_one_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(dir.path(), "");
    let out = dir.path().join("cpu-and-mps");
    let run = profile(
        &catalog,
        &out,
        &["--repetitions", "1", "--modes", "cpu,mps", "--shares", "50"],
    );
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{log}");
    assert_eq!(log.matches("the mps mode is skipped").count(), 1, "{log}");
    let d = Dataset::read(&out).expect("dataset");
    assert!(d.pairs.iter().all(|p| p.mode == duet_core::Mode::Cpu));
    assert_eq!(d.pairs.len(), 6);
    // MPS alone, on a machine without it: said, and nothing to measure (a catalog of commands,
    // which run on a GPU whatever this duet was built with).
    let commands = dir.path().join("commands.toml");
    std::fs::write(
        &commands,
        "[[workload]]\nname = \"tick\"\nkind = \"infer\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.005; done\"]\nprogress = \"^tick$\"\n\n\
         [[workload]]\nname = \"tock\"\nkind = \"train\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tock; sleep 0.01; done\"]\nprogress = \"^tock$\"\n",
    )
    .expect("catalog");
    let mps_only = dir.path().join("mps-only");
    let only = profile(
        &commands,
        &mps_only,
        &["--modes", "mps", "--device", "cuda:0"],
    );
    let err = String::from_utf8_lossy(&only.stderr);
    assert!(!only.status.success(), "{err}");
    assert!(
        err.contains("the mps mode is skipped") && err.contains("no mode left"),
        "{err}"
    );
    // What it left measured nothing and binds nothing: the same output in another mode runs
    // (it was refused, "--resume: the `modes` setting differs", without --resume).
    let run = profile(&commands, &mps_only, &["--repetitions", "1"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(Dataset::read(&mps_only).expect("dataset").pairs.len(), 3);
    // A device or CPU set the workloads cannot run on: refused before any run (every run
    // crashed, and the campaign stopped on the first workload's solos).
    let mut refusals = vec![(
        vec!["--cpu-set", "99999"],
        "--cpu-set 99999: taskset refused it",
    )];
    if !cfg!(feature = "cuda") {
        refusals.push((
            vec!["--device", "cuda"],
            "the built-in workload `mlp` runs on the GPU through burn-cuda, and this duet was \
             built without CUDA",
        ));
    }
    for (flags, says) in refusals {
        let never = dir.path().join("never");
        let run = profile(&catalog, &never, &flags);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(
            !run.status.success() && err.contains(says),
            "{flags:?}: {err}"
        );
        assert!(!err.contains("ran alone"), "{err}");
        assert!(!never.exists());
    }
}

#[test]
fn ctrl_c_stops_the_workloads_and_keeps_the_journal() {
    let dir = tempfile::tempdir().expect("tmp");
    let marker = format!("duet-test-marker-{}", std::process::id());
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[[workload]]\nname = \"t1\"\nkind = \"infer\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.005; done\", \"{marker}\"]\nprogress = \"^tick$\"\n\n\
             [[workload]]\nname = \"t2\"\nkind = \"train\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.01; done\", \"{marker}\"]\nprogress = \"^tick$\"\n"
        ),
    )
    .expect("catalog");
    let out = dir.path().join("interrupted");
    let child = duet()
        .arg("profile")
        .arg("--catalog")
        .arg(&catalog)
        .arg("--out")
        .arg(&out)
        .args([
            "--warmup",
            "0.2",
            "--window",
            "0.4",
            "--window-max",
            "1.5",
            "--repetitions",
            "2",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("duet profile");
    let journal = dir.path().join(".interrupted.campaign/journal.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&journal).map_or(0, |t| t.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let output = child.wait_with_output().expect("exit");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        err.contains("interrupted") && err.contains("--resume"),
        "{err}"
    );
    // No workload process is left behind.
    std::thread::sleep(Duration::from_millis(100));
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let resumed = profile(&catalog, &out, &["--repetitions", "2", "--resume"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    validate(&out);
}

/// A stand-in `nvidia-cuda-mps-control` in `dir/bin`: `-d` records the start; every command
/// read is recorded with whether the pipe folder still exists, `get_server_list` answered with
/// `servers`.
fn fake_mps_control(dir: &Path, servers: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let record = dir.join("mps-record.txt");
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$1\" = -d ]; then echo \"start $CUDA_MPS_PIPE_DIRECTORY\" >> {r}; exit 0; fi\n\
         while read cmd; do\n\
           if [ -d \"$CUDA_MPS_PIPE_DIRECTORY\" ]; then echo \"$cmd with-pipe\" >> {r}; \
           else echo \"$cmd no-pipe\" >> {r}; fi\n\
           case \"$cmd\" in get_server_list) echo '{servers}';; get_client_list*) echo 77;; esac\n\
         done\n",
        r = record.display()
    );
    let control = bin.join("nvidia-cuda-mps-control");
    std::fs::write(&control, script).expect("script");
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (PathBuf::from(path), record)
}

#[test]
fn mps_is_tried_with_one_client_and_quit_before_its_folder_goes() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        "[[workload]]\nname = \"ticker\"\nkind = \"infer\"\ncommand = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.005; done\"]\nprogress = \"^tick$\"\n",
    )
    .expect("catalog");
    let flags = [
        "--repetitions",
        "1",
        "--device",
        "cuda:0",
        "--modes",
        "timeslice,mps",
        "--shares",
        "50",
        "--warmup",
        "0.2",
        "--window",
        "0.4",
        "--window-max",
        "1.5",
        "--date",
        "2026-11-30",
    ];
    let run = |servers: &str, name: &str| {
        let (path, record) = fake_mps_control(&dir.path().join(name), servers);
        let out = dir.path().join(name).join("ds");
        let output = duet()
            .arg("profile")
            .arg("--catalog")
            .arg(&catalog)
            .arg("--out")
            .arg(&out)
            .args(flags)
            .env("PATH", path)
            .output()
            .expect("duet profile");
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{log}");
        let record = std::fs::read_to_string(record).expect("the control binary ran");
        (out, log, record)
    };

    // The daemon answers and lists a server while the trial client runs: MPS is measured.
    let (out, log, record) = run("4242", "answers");
    assert!(
        log.contains("MPS: the control daemon answers") && log.contains("server 4242"),
        "{log}"
    );
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(
        d.meta.modes,
        [duet_core::Mode::Timeslice, duet_core::Mode::Mps]
    );
    let lines: Vec<&str> = record.lines().collect();
    assert!(lines[0].starts_with("start "), "{record}");
    assert!(record.contains("get_server_list with-pipe"), "{record}");
    // Told to quit while its pipe folder still existed; the journal's folder is gone after.
    assert_eq!(lines.last(), Some(&"quit with-pipe"), "{record}");
    assert!(!dir.path().join("answers/.ds.campaign").exists());

    // A daemon that lists no server while a client runs: clients do not use it; MPS is
    // dropped with the reason, time-slicing measured.
    let (out, log, record) = run("", "no-server");
    assert!(
        log.contains("lists no server") && log.contains("the mps mode is skipped"),
        "{log}"
    );
    let d = Dataset::read(&out).expect("dataset");
    assert_eq!(d.meta.modes, [duet_core::Mode::Timeslice]);
    assert_eq!(record.lines().last(), Some("quit with-pipe"), "{record}");
}
