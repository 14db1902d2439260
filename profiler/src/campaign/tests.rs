//! The campaign's tasks, its windows and the dataset it assembles, on records made by hand.

use std::collections::BTreeSet;
use std::path::Path;

use duet_core::dataset::FeatureValue;

use super::*;
use crate::process::Running;

fn campaign(dir: &Path) -> Campaign {
    let catalog = Catalog::parse(
        "[[workload]]\nname = \"x\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 8\nwidth = 16\ndepth = 1\n\n\
         [[workload]]\nname = \"y\"\nkind = \"infer\"\nbuiltin = \"matmul\"\nbatch = 1\nwidth = 32\ndepth = 1\n",
        &dir.join("catalog.toml"),
    )
    .expect("catalog");
    Campaign {
        catalog,
        launcher: Launcher {
            duet: PathBuf::from("duet"),
            catalog: dir.join("catalog.toml"),
            device: Device::Cuda(0),
            cpu_set: None,
        },
        modes: vec![Mode::Timeslice],
        shares: Vec::new(),
        warmup: Duration::from_secs(1),
        warm_iterations: WARM_ITERATIONS,
        window: Duration::from_secs(1),
        window_max: Duration::from_secs(2),
        precision: 0.02,
        repetitions: 1,
        solo_repetitions: 1,
        timeout: Duration::from_secs(10),
        sample_interval: Duration::from_millis(100),
        seed: 1,
        shard: None,
        out: dir.join("out"),
        resume: false,
        name: "t".into(),
        gpu: "h200".into(),
        command_line: "duet profile".into(),
        date: "2026-11-30".into(),
        host: None,
        group_size: 2,
        group_budget: None,
        known_solos: Vec::new(),
    }
}

fn record(task: Task, per_process: Vec<BTreeMap<String, f64>>) -> Record {
    let n = per_process.len();
    Record {
        key: task.key(),
        task,
        status: Status::Ok,
        throughputs: vec![10.0; n],
        usage: vec![None; n],
        gpu: BTreeMap::from([("gpu_util".to_string(), 80.0)]),
        process_gpu: per_process,
        samples: Vec::new(),
        note: None,
        throughput_se: vec![Some(0.5); n],
        window_seconds: Some(1.0),
    }
}

fn util(sm: f64) -> BTreeMap<String, f64> {
    crate::gpu::summarise_process(&[(1, sm, sm / 2.0), (1, sm, sm / 2.0)])
}

/// Workload `w`'s first solo run, ended with `status`.
fn solo_record(w: &str, status: Status) -> Record {
    let mut r = record(
        Task::Solo {
            workload: w.into(),
            repetition: 0,
        },
        vec![util(50.0)],
    );
    r.status = status;
    r
}

#[test]
fn pairs_are_measured_mode_by_mode_in_the_order_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Campaign {
        modes: vec![Mode::Timeslice, Mode::Mps],
        shares: vec![50.0, 100.0],
        repetitions: 2,
        solo_repetitions: 2,
        ..campaign(dir.path())
    };
    let modes: Vec<Option<Mode>> = c.tasks().iter().map(Task::mode).collect();
    // 2 solos, 3 pairs timesliced and 3 x 2 shares under MPS, twice each.
    assert_eq!(modes.len(), 4 + 6 + 12);
    assert!(modes[..4].iter().all(Option::is_none));
    assert!(modes[4..10].iter().all(|m| *m == Some(Mode::Timeslice)));
    assert!(modes[10..].iter().all(|m| *m == Some(Mode::Mps)));
    let reversed = Campaign {
        modes: vec![Mode::Mps, Mode::Timeslice],
        ..c.clone()
    };
    assert_eq!(
        reversed.tasks()[4..16]
            .iter()
            .filter(|t| matches!(
                t,
                Task::Pair {
                    mode: Mode::Mps,
                    ..
                }
            ))
            .count(),
        12
    );
}

#[test]
fn the_solos_are_repeated_as_often_as_asked_apart_from_the_pairs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Campaign {
        repetitions: 1,
        solo_repetitions: 3,
        ..campaign(dir.path())
    };
    let tasks = c.tasks();
    // 2 workloads alone 3 times each, then their 3 pairs once.
    let solos: Vec<&Task> = tasks.iter().filter(|t| t.mode().is_none()).collect();
    assert_eq!(solos.len(), 6);
    assert_eq!(tasks.len(), 6 + 3);
    assert!(tasks[..6].iter().all(|t| t.mode().is_none()));
    for w in ["x", "y"] {
        let mut reps: Vec<u32> = solos
            .iter()
            .filter_map(|t| match t {
                Task::Solo {
                    workload,
                    repetition,
                } if workload == w => Some(*repetition),
                _ => None,
            })
            .collect();
        reps.sort_unstable();
        assert_eq!(reps, [0, 1, 2], "{w}");
    }
    // The journal records it (a resume with other solo repetitions is refused), and none is
    // accepted.
    assert_eq!(
        c.settings().get("solo-repetitions").map(String::as_str),
        Some("3")
    );
    assert!(
        !campaign(dir.path())
            .settings()
            .contains_key("solo-repetitions")
    );
    assert!(
        Campaign {
            solo_repetitions: 0,
            ..campaign(dir.path())
        }
        .check()
        .is_err_and(|e| e.0.contains("--solo-repetitions"))
    );
}

#[test]
fn the_window_opens_after_the_later_process_is_warm() {
    let t = Instant::now();
    let at = |ms: u64| Some(t + Duration::from_millis(ms));
    let warmup = Duration::from_millis(500);
    // The slow process (kernel compilation on its first iterations) sets the start.
    assert_eq!(
        window_opens(&[at(100), at(4_000)], warmup),
        at(4_500),
        "timed from the later one"
    );
    assert_eq!(window_opens(&[at(4_000), at(100)], warmup), at(4_500));
    assert_eq!(window_opens(&[at(20)], warmup), at(520));
    // One process still short of its warm iterations: no window yet.
    assert_eq!(window_opens(&[at(100), None], warmup), None);
    assert_eq!(window_opens(&[None], warmup), None);
}

#[test]
fn the_warm_iterations_are_counted_from_a_process_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = campaign(dir.path());
    let catalog = Catalog::parse(
        "[[workload]]\nname = \"slow-start\"\nkind = \"infer\"\n\
         command = [\"sh\", \"-c\", \"echo tick; sleep 0.3; echo tick; sleep 0.3; echo tick; while true; do echo tick; sleep 0.01; done\"]\n\
         progress = \"^tick$\"\n",
        &dir.path().join("c.toml"),
    )
    .expect("catalog");
    let spec = catalog.get("slow-start").expect("spec");
    let started = Instant::now();
    let mut running = vec![Running::start(&c.launcher, spec, &[]).expect("started")];
    let c = Campaign {
        warmup: Duration::from_millis(100),
        window: Duration::from_millis(300),
        window_max: Duration::from_millis(300),
        sample_interval: Duration::ZERO,
        ..c
    };
    let measured = c
        .window_of(&mut running, None, &AtomicBool::new(false))
        .expect("measured");
    let third = running[0].iteration_at(3).expect("three iterations");
    running.into_iter().for_each(Running::stop);
    // The first iterations took 0.6 s: the window waited for the third and the warm-up.
    assert!(third - started >= Duration::from_millis(550));
    assert!(started.elapsed() >= Duration::from_millis(550 + 100 + 300));
    // Only the steady iterations (one per ~10 ms) are in the window.
    assert!(measured.throughputs[0] > 20.0, "{:?}", measured.throughputs);
}

#[test]
fn a_window_goes_on_until_the_rates_are_precise_and_no_longer_than_its_ceiling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::parse(
        "[[workload]]\nname = \"ticker\"\nkind = \"infer\"\n\
         command = [\"sh\", \"-c\", \"while true; do echo tick; sleep 0.02; done\"]\n\
         progress = \"^tick$\"\n",
        &dir.path().join("c.toml"),
    )
    .expect("catalog");
    let spec = catalog.get("ticker").expect("spec");
    let base = Campaign {
        warmup: Duration::from_millis(50),
        window: Duration::from_millis(300),
        window_max: Duration::from_secs(6),
        precision: 0.05,
        sample_interval: Duration::from_millis(50),
        ..campaign(dir.path())
    };
    let measure = |c: &Campaign| {
        let mut running = vec![Running::start(&c.launcher, spec, &[]).expect("started")];
        let measured = c.window_of(&mut running, None, &AtomicBool::new(false));
        running.into_iter().for_each(Running::stop);
        measured.expect("measured")
    };
    // About 40 lines a second: 5% is reached within a few seconds, before the ceiling.
    let loose = measure(&base);
    assert!(
        loose.window_seconds >= 0.3 && loose.window_seconds < 6.0,
        "{}",
        loose.window_seconds
    );
    let se = loose.throughput_se[0].expect("an error");
    assert!(se > 0.0 && se / loose.throughputs[0] <= 0.05, "{se}");
    // A precision no sleep loop reaches: the window ends at its ceiling, error recorded.
    let strict = measure(&Campaign {
        precision: 1e-6,
        window_max: Duration::from_millis(800),
        ..base.clone()
    });
    assert!(
        strict.window_seconds >= 0.8 && strict.window_seconds < 1.5,
        "{}",
        strict.window_seconds
    );
    assert!(strict.throughput_se[0].is_some_and(|e| e > 0.0));
    let r = strict.throughputs[0];
    assert!(r > 5.0 && r < 60.0, "{r}");
    // Settings the flags must respect.
    for (bad, says) in [
        (
            Campaign {
                window_max: Duration::from_millis(100),
                ..base.clone()
            },
            "--window-max",
        ),
        (
            Campaign {
                precision: 0.0,
                ..base.clone()
            },
            "--precision",
        ),
    ] {
        let e = bad.check().expect_err("refused");
        assert!(e.0.contains(says), "{e}");
    }
}

#[test]
fn groups_follow_the_pairs_of_their_mode_smaller_first_every_multiset_once() {
    assert_eq!(
        multisets(2, 3),
        [vec![0, 0, 0], vec![0, 0, 1], vec![0, 1, 1], vec![1, 1, 1]]
    );
    // 6 workloads: 21 pairs, 56 triples, 126 groups of four.
    assert_eq!(multisets(6, 2).len(), 21);
    assert_eq!(multisets(6, 3).len(), 56);
    assert_eq!(multisets(6, 4).len(), 126);
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Campaign {
        modes: vec![Mode::Timeslice, Mode::Mps],
        shares: vec![50.0],
        group_size: 4,
        ..campaign(dir.path())
    };
    let tasks = c.tasks();
    let shape: Vec<(Option<Mode>, usize)> = tasks
        .iter()
        .map(|t| (t.mode(), t.workloads().len()))
        .collect();
    // 2 solos; per mode 3 pairs, 4 triples and 5 groups of four.
    assert_eq!(tasks.len(), 2 + 2 * (3 + 4 + 5));
    let mut expected = vec![(None, 1); 2];
    for mode in [Mode::Timeslice, Mode::Mps] {
        for (size, n) in [(2, 3), (3, 4), (4, 5)] {
            expected.extend(std::iter::repeat_n((Some(mode), size), n));
        }
    }
    assert_eq!(shape, expected);
    let mps_group = tasks
        .iter()
        .find(|t| t.mode() == Some(Mode::Mps) && t.workloads().len() == 4)
        .expect("an MPS group");
    assert_eq!(mps_group.shares(), vec![Some(50.0); 4]);
    assert!(mps_group.key().starts_with("group/"));
    let too_many = Campaign {
        group_size: 9,
        ..campaign(dir.path())
    };
    assert!(
        too_many
            .check()
            .is_err_and(|e| e.0.contains("--group-size 9"))
    );
}

#[test]
fn groups_are_assembled_one_per_setting_and_a_failed_repetition_fails_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Campaign {
        group_size: 3,
        repetitions: 2,
        solo_repetitions: 2,
        ..campaign(dir.path())
    };
    let solo = |w: &str, repetition| {
        record(
            Task::Solo {
                workload: w.into(),
                repetition,
            },
            vec![util(50.0)],
        )
    };
    let group = |workloads: &[&str], repetition, status| {
        let mut r = record(
            Task::Group {
                workloads: workloads.iter().map(|w| (*w).to_string()).collect(),
                mode: Mode::Timeslice,
                shares: vec![None; workloads.len()],
                repetition,
            },
            vec![util(30.0); workloads.len()],
        );
        r.throughputs = vec![3.0 + f64::from(repetition); workloads.len()];
        r.status = status;
        if status != Status::Ok {
            r.throughputs = vec![0.0; workloads.len()];
            r.note = Some("killed".into());
        }
        r
    };
    let records = [
        solo("x", 0),
        solo("x", 1),
        solo("y", 0),
        solo("y", 1),
        group(&["x", "x", "y"], 0, Status::Ok),
        group(&["x", "x", "y"], 1, Status::Ok),
        group(&["x", "y", "y"], 0, Status::Ok),
        group(&["x", "y", "y"], 1, Status::Crash),
    ];
    let done: BTreeMap<String, Record> = records.into_iter().map(|r| (r.key.clone(), r)).collect();
    let d = c.assemble(&done).expect("dataset");
    d.validate(&c.out).expect("valid");
    assert_eq!(d.groups.len(), 2);
    let xxy = &d.groups[0];
    assert_eq!(xxy.label(), "x + x + y");
    assert_eq!((xxy.status, xxy.repetitions), (Status::Ok, Some(2)));
    assert!((xxy.jobs[2].throughput - 3.5).abs() < 1e-12);
    assert!(xxy.jobs[0].throughput_std.is_some());
    let xyy = &d.groups[1];
    assert_eq!(xyy.status, Status::Crash);
    assert!(xyy.jobs.iter().all(|j| j.throughput == 0.0));
    assert_eq!(xyy.note.as_deref(), Some("killed"));
    assert!(d.meta.description.contains("every group of three"));
}

#[test]
fn a_stopped_campaign_assembles_what_its_journal_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = campaign(dir.path());
    let solo = solo_record;
    let pair = |a: &str, b: &str| {
        record(
            Task::Pair {
                a: a.into(),
                b: b.into(),
                mode: Mode::Timeslice,
                share_a: None,
                share_b: None,
                repetition: 0,
            },
            vec![util(30.0), util(30.0)],
        )
    };
    // `y` has not run alone successfully: it and its pairs stay out.
    let records = [
        solo("x", Status::Ok),
        solo("y", Status::Crash),
        pair("x", "x"),
        pair("x", "y"),
    ];
    let done: BTreeMap<String, Record> = records.into_iter().map(|r| (r.key.clone(), r)).collect();
    fs::create_dir_all(c.journal_dir()).expect("journal folder");
    let error = c.stop_early(&done, None, "interrupted".into(), None);
    assert!(
        error.0.starts_with("interrupted") && error.0.contains("1 of 2 workloads"),
        "{error}"
    );
    let d = Dataset::read(&c.partial_dir()).expect("the partial dataset");
    assert_eq!(d.workloads.len(), 1);
    assert_eq!(d.pairs.len(), 1);
    assert_eq!((d.pairs[0].a.as_str(), d.pairs[0].b.as_str()), ("x", "x"));
    // Of the whole grid (2 solos and 3 pairs) where nothing else was planned...
    assert!(
        d.meta
            .description
            .starts_with("PARTIAL (2 of 5 measurements)"),
        "{}",
        d.meta.description
    );
    // ...of the plan where one was (a budget); a later stop replaces it; with nothing measured
    // alone there is none to write.
    let again = c.stop_early(&done, None, "interrupted".into(), Some(4));
    assert!(again.0.contains("partial"), "{again}");
    let d = Dataset::read(&c.partial_dir()).expect("the partial dataset");
    assert!(
        d.meta
            .description
            .starts_with("PARTIAL (2 of 4 measurements)")
    );
    let none = c.stop_early(&BTreeMap::new(), None, "stopped".into(), None);
    assert_eq!(none.0, "stopped");
    assert!(
        !c.out.exists(),
        "the campaign's own output is never written early"
    );
}

#[test]
fn per_process_gpu_counters_become_workload_features_and_pair_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = campaign(dir.path());
    let solo = |w: &str| Task::Solo {
        workload: w.into(),
        repetition: 0,
    };
    let pair = Task::Pair {
        a: "x".into(),
        b: "y".into(),
        mode: Mode::Timeslice,
        share_a: None,
        share_b: None,
        repetition: 0,
    };
    let records = [
        record(solo("x"), vec![util(90.0)]),
        record(solo("y"), vec![util(40.0)]),
        record(pair, vec![util(60.0), util(30.0)]),
    ];
    let done: BTreeMap<String, Record> = records.into_iter().map(|r| (r.key.clone(), r)).collect();
    let dataset = c.assemble(&done).expect("assembled");
    dataset.validate(dir.path()).expect("a valid dataset");
    let x = dataset.workload("x").expect("x");
    assert_eq!(
        x.features["process_sm_util"],
        FeatureValue::Number(Some(90.0))
    );
    assert_eq!(
        x.features["process_mem_util_p95"],
        FeatureValue::Number(Some(45.0))
    );
    assert_eq!(
        x.features["precision"],
        FeatureValue::Category(Some("fp32".into()))
    );
    let p = &dataset.pairs[0];
    assert_eq!(p.counters["process_sm_util_a"], Some(60.0));
    assert_eq!(p.counters["process_sm_util_b"], Some(30.0));
    assert_eq!(p.counters["gpu_util"], Some(80.0));
    assert!(!p.counters.contains_key("process_sm_util"));
    // Each window's standard error becomes the setting's (one window: the same).
    assert_eq!(x.solo_throughput_se, Some(0.5));
    assert_eq!(
        (p.throughput_a_se, p.throughput_b_se),
        (Some(0.5), Some(0.5))
    );
    // A journal line written before per-process counters and errors existed still reads,
    // and its setting has no error rather than a made-up one.
    let old = r#"{"key":"k","task":"solo","workload":"x","repetition":0,"status":"ok","throughputs":[1.0],"usage":[null]}"#;
    let r: Record = serde_json::from_str(old).expect("old record");
    assert!(r.process_gpu.is_empty());
    assert!(r.throughput_se.is_empty() && r.window_seconds.is_none());
    assert_eq!(assemble::mean_se(&[&r], 0), None);
    let twice = record(
        Task::Solo {
            workload: "x".into(),
            repetition: 1,
        },
        vec![util(90.0)],
    );
    // Two windows of error 0.5 each: their mean is known to 0.5 / sqrt(2).
    let both = assemble::mean_se(&[&done["solo/x/0"], &twice], 0);
    assert!(
        both.is_some_and(|e| (e - 0.5 / 2f64.sqrt()).abs() < 1e-12),
        "{both:?}"
    );
}

#[test]
fn a_journal_line_that_cannot_be_read_is_named_unless_it_is_the_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.jsonl");
    let solo = |w: &str| serde_json::to_string(&solo_record(w, Status::Ok)).expect("a record");
    let read = |lines: &[&[u8]]| {
        fs::write(&path, lines.join(&b'\n')).expect("journal");
        read_journal(&path).map_err(|e| e.to_string())
    };
    let (x, y) = (solo("x"), solo("y"));
    // A torn last line runs again; the others are kept.
    let done = read(&[x.as_bytes(), y.as_bytes(), b"{\"key\":\"z", b""]).expect("read");
    assert_eq!(done.len(), 2);
    // A byte that is not UTF-8 before the last line: named (it was read as no journal at all,
    // and every measurement ran again).
    let err = read(&[x.as_bytes(), b"{\"key\":\"\xff\"}", y.as_bytes(), b""]).expect_err("refused");
    assert!(err.contains("journal.jsonl line 2: not UTF-8"), "{err}");
    // A record without its throughputs: named (it panicked when the dataset was assembled).
    let empty = x.replace("\"throughputs\":[10.0]", "\"throughputs\":[]");
    assert_ne!(empty, x);
    let err = read(&[empty.as_bytes(), y.as_bytes(), b""]).expect_err("refused");
    assert!(
        err.contains("line 1: 0 throughputs for a run of 1 processes"),
        "{err}"
    );
    let negative = x.replace("\"throughputs\":[10.0]", "\"throughputs\":[-1.0]");
    let err = read(&[negative.as_bytes(), y.as_bytes(), b""]).expect_err("refused");
    assert!(err.contains("line 1: throughput -1 is not a rate"), "{err}");
}

#[test]
fn a_resume_takes_a_redefined_workload_that_never_succeeded_and_refuses_one_that_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The settings digest the catalog's file: each catalog is written where it is read from.
    let file = dir.path().join("catalog.toml");
    fs::write(&file, "the first catalog").expect("catalog");
    let first = campaign(dir.path());
    fs::create_dir_all(first.journal_dir()).expect("journal folder");
    assert!(
        first
            .check_settings(FULL_GRID)
            .expect("first start")
            .is_empty()
    );
    // The same catalog with `x` wider, as a user fixes a workload the campaign stopped on.
    let redefined = |text: &str| {
        fs::write(&file, text).expect("catalog");
        Campaign {
            catalog: Catalog::parse(text, &file).expect("catalog"),
            ..campaign(dir.path())
        }
    };
    let y = "[[workload]]\nname = \"y\"\nkind = \"infer\"\nbuiltin = \"matmul\"\nbatch = 1\nwidth = 32\ndepth = 1\n";
    let wider = redefined(&format!(
        "[[workload]]\nname = \"x\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 8\nwidth = 32\ndepth = 1\n\n{y}"
    ));
    let solo = |w: &str, status: Status| {
        let r = solo_record(w, status);
        (r.key.clone(), r)
    };
    // The journal holds a measurement (settings of a campaign that measured nothing bind
    // nothing).
    let line = serde_json::to_string(&solo("y", Status::Ok).1).expect("record");
    fs::write(wider.journal_path(), format!("{line}\n")).expect("journal");
    let changed = wider.check_settings(FULL_GRID).expect("a redefinition");
    assert_eq!(changed, BTreeSet::from(["x".to_string()]));

    // `x` succeeded once: its measurements would mix two programs.
    let done = BTreeMap::from([solo("x", Status::Ok), solo("y", Status::Ok)]);
    let err = wider
        .resume_changed(&changed, FULL_GRID, done, &mut Lines(|_: &str| {}))
        .expect_err("refused");
    assert!(
        err.0.contains("workload `x` is defined differently")
            && err
                .0
                .contains("1 of the journal's measurements of it succeeded"),
        "{}",
        err.0
    );
    // In a shard, whatever this journal holds: the other shards measure the old `x`.
    let done = BTreeMap::from([solo("x", Status::Crash), solo("y", Status::Ok)]);
    let shard = Campaign {
        shard: Some((0, 2)),
        catalog: wider.catalog.clone(),
        ..campaign(dir.path())
    };
    let err = shard
        .resume_changed(&changed, FULL_GRID, done, &mut Lines(|_: &str| {}))
        .expect_err("refused");
    assert!(
        err.0.contains("`x` defined differently") && err.0.contains("shard 0/2 began"),
        "{}",
        err.0
    );
    // `x` only failed: its runs go, the journal and the settings follow the new catalog.
    let done = BTreeMap::from([solo("x", Status::Crash), solo("y", Status::Ok)]);
    let kept = wider
        .resume_changed(&changed, FULL_GRID, done, &mut Lines(|_: &str| {}))
        .expect("resumed");
    assert_eq!(kept.keys().collect::<Vec<_>>(), [&solo("y", Status::Ok).0]);
    assert_eq!(read_journal(&wider.journal_path()).expect("journal"), kept);
    assert!(wider.check_settings(FULL_GRID).expect("same").is_empty());

    // A workload added (or gone) changes the grid: refused, naming it.
    let more = redefined(&format!(
        "{y}\n[[workload]]\nname = \"x\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 8\nwidth = 32\ndepth = 1\n\n[[workload]]\nname = \"z\"\nkind = \"train\"\nbuiltin = \"mlp\"\n"
    ));
    let err = more.check_settings(FULL_GRID).expect_err("refused");
    assert!(err.0.contains("(added: `z`; gone: none)"), "{}", err.0);
    // The same workloads in another order measure other ways round: refused.
    let swapped = redefined(&format!(
        "{y}\n[[workload]]\nname = \"x\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 8\nwidth = 32\ndepth = 1\n"
    ));
    let err = swapped.check_settings(FULL_GRID).expect_err("refused");
    assert!(err.0.contains("their order differs"), "{}", err.0);
    // Another setting still counts beside a changed catalog.
    let err = Campaign {
        seed: 2,
        ..redefined(&format!(
            "[[workload]]\nname = \"x\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 8\nwidth = 64\ndepth = 1\n\n{y}"
        ))
    }
    .check_settings(FULL_GRID)
    .expect_err("refused");
    assert!(err.0.contains("the `seed` setting differs"), "{}", err.0);

    // A journal without its settings cannot be judged.
    fs::remove_file(wider.journal_dir().join("settings.json")).expect("remove");
    let err = wider.check_settings(FULL_GRID).expect_err("refused");
    assert!(err.0.contains("settings.json is missing"), "{}", err.0);
}

#[test]
fn a_second_campaign_on_the_same_output_is_refused_while_the_first_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("catalog.toml"), "a catalog").expect("catalog");
    let on_cpu = |resume| Campaign {
        launcher: Launcher {
            device: Device::Cpu,
            ..campaign(dir.path()).launcher
        },
        modes: vec![Mode::Cpu],
        resume,
        ..campaign(dir.path())
    };
    let first = on_cpu(false);
    let session = first
        .open(FULL_GRID, &mut Lines(|_: &str| {}))
        .expect("the first opens");
    let second = on_cpu(true);
    let err = second
        .open(FULL_GRID, &mut Lines(|_: &str| {}))
        .expect_err("refused while the first runs");
    assert!(
        err.0.contains("another campaign is measuring into") && err.0.contains("lock"),
        "{}",
        err.0
    );
    // The first one's end lets go of the lock: the resume opens.
    drop(session);
    let session = second
        .open(FULL_GRID, &mut Lines(|_: &str| {}))
        .expect("resumed once the first ended");
    // A resume that passed its checks just before the campaign finished (the output written,
    // the journal's folder and its lock removed) takes a new lock, and finds the output there.
    fs::create_dir(&second.out).expect("the output");
    fs::remove_dir_all(second.journal_dir()).expect("the folder removed");
    drop(session);
    fs::create_dir_all(second.journal_dir()).expect("made again");
    let err = second.lock_journal().expect_err("ended");
    assert!(err.0.contains("has just ended"), "{}", err.0);
}

#[test]
fn a_definition_is_compared_by_what_runs_and_older_settings_by_their_own_digest() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("catalog.toml");
    let with = |text: &str| {
        fs::write(&file, text).expect("catalog");
        Campaign {
            catalog: Catalog::parse(text, &file).expect("catalog"),
            ..campaign(dir.path())
        }
    };
    let x = "[[workload]]\nname = \"x\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 8\n";
    let first = with(x);
    fs::create_dir_all(first.journal_dir()).expect("journal folder");
    first.check_settings(FULL_GRID).expect("first start");
    let line = serde_json::to_string(&solo_record("x", Status::Ok)).expect("record");
    fs::write(first.journal_path(), format!("{line}\n")).expect("journal");
    // A default written out, a comment, the keys in another order: the same program.
    let same = with(
        "# fixed\n[[workload]]\nbatch = 8\nwidth = 128\nname = \"x\"\nbuiltin = \"mlp\"\nkind = \"train\"\n",
    );
    assert!(same.check_settings(FULL_GRID).expect("same").is_empty());
    // A sequence length, which an mlp does not use, changes nothing it runs.
    let seq = with(&format!("{x}seq = 64\n"));
    assert!(seq.check_settings(FULL_GRID).expect("same").is_empty());
    let wider = with(&format!("{x}width = 256\n"));
    assert_eq!(
        wider.check_settings(FULL_GRID).expect("redefined"),
        BTreeSet::from(["x".to_string()])
    );
    // The same catalog's bytes under a duet whose defaults differ run another program: the
    // definitions are compared whatever the catalog's bytes.
    let settings = first.journal_dir().join("settings.json");
    let text = fs::read_to_string(&settings).expect("settings");
    let mut then: BTreeMap<String, String> = serde_json::from_str(&text).expect("json");
    then.insert(
        "workloads".into(),
        serde_json::to_string(&[("x", "definition:0000000000000000")]).expect("json"),
    );
    fs::write(&settings, serde_json::to_string(&then).expect("json")).expect("settings");
    assert_eq!(
        with(x).check_settings(FULL_GRID).expect("redefined"),
        BTreeSet::from(["x".to_string()])
    );
    fs::write(&settings, text).expect("settings");

    // Settings written before definitions were spelled out digest the `Debug` text: compared
    // as they were, so a resume begun then still tells the same program from another.
    let mut then: BTreeMap<String, String> =
        serde_json::from_str(&fs::read_to_string(&settings).expect("settings")).expect("json");
    let w = first.catalog.get("x").expect("x");
    let debug = format!(
        "{:016x}",
        duet_core::hash::fnv1a(format!("{w:?}").as_bytes(), duet_core::hash::FNV_OFFSET)
    );
    then.insert(
        "workloads".into(),
        serde_json::to_string(&[("x", debug)]).expect("json"),
    );
    fs::write(&settings, serde_json::to_string(&then).expect("json")).expect("settings");
    assert!(same.check_settings(FULL_GRID).expect("same").is_empty());
    assert_eq!(
        wider.check_settings(FULL_GRID).expect("redefined"),
        BTreeSet::from(["x".to_string()])
    );
}
