//! The campaign runner: every workload alone, then every unordered pair (itself included) per
//! mode and share, each a set of real processes measured over the same window.
//!
//! Every finished measurement is appended to a journal (`.<out>.campaign/journal.jsonl` beside
//! the output folder) and flushed to disk at once; a rerun with `resume` skips what the journal
//! holds. The dataset is written atomically at the end, and the journal removed. A campaign
//! stopped early (Ctrl-C, SIGTERM, `timeout -s INT`, a workload that failed alone) keeps its
//! journal for `--resume` and writes what it holds so far as a partial dataset
//! (`.<out>.campaign/partial`: the workloads measured alone and the pairs among them).
//!
//! A run's measured window opens `warmup` after every process has finished
//! [`WARM_ITERATIONS`] iterations (past first-iteration costs such as kernel compilation),
//! timed from the later of them. It lasts at least `window`, then goes on until every
//! process's rate (from its lines' own arrival times, [`crate::process::rate`]) has a relative
//! standard error of at most `precision`, or `window_max` has passed.

mod assemble;
mod journal;
mod measure;
mod session;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

use duet_core::dataset::{Dataset, Mode, Status};
use duet_core::progress::{Event, Lines, Progress};
use serde::{Deserialize, Serialize};

use crate::builtin::Device;
use crate::catalog::Catalog;
use crate::gpu::GpuCounters;
use crate::mps::MpsDaemon;
use crate::process::{Launcher, Usage};

use assemble::samples_of;
use journal::read_journal;
pub use measure::window_opens;
pub use session::{FULL_GRID, Session};

/// Iterations each process of a run finishes before the warm-up is timed: the first ones carry
/// one-off costs (kernel compilation, allocator growth, autotuning).
pub const WARM_ITERATIONS: usize = 3;

/// Everything a campaign needs.
#[derive(Debug, Clone)]
pub struct Campaign {
    pub catalog: Catalog,
    pub launcher: Launcher,
    pub modes: Vec<Mode>,
    /// MPS active-thread percentages; modes without shares ignore them.
    pub shares: Vec<f64>,
    /// Warm-up after every process has finished `warm_iterations` iterations.
    pub warmup: Duration,
    /// Iterations each process finishes before its warm-up is timed (at least 1).
    pub warm_iterations: usize,
    /// The shortest measured window.
    pub window: Duration,
    /// The longest: a window ends here even if a rate is not yet known to `precision`.
    pub window_max: Duration,
    /// The relative standard error every process's rate must reach for a window to end
    /// between `window` and `window_max` (0.02: 2%).
    pub precision: f64,
    pub repetitions: u32,
    /// Longest a run may take to reach its measured window.
    pub timeout: Duration,
    pub sample_interval: Duration,
    pub seed: u64,
    /// `(index, count)`, `index` from 0.
    pub shard: Option<(usize, usize)>,
    pub out: PathBuf,
    pub resume: bool,
    pub name: String,
    /// The device label of the dataset (`cpu`, or the GPU model).
    pub gpu: String,
    pub command_line: String,
    pub date: String,
    pub host: Option<String>,
    /// Workloads of the catalog measured alone in an earlier dataset (`--onto`): their rows
    /// are taken as they are, never measured again, and their pairs need no solo run here.
    pub known_solos: Vec<duet_core::dataset::Workload>,
}

/// One measurement to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "lowercase")]
pub enum Task {
    Solo {
        workload: String,
        repetition: u32,
    },
    Pair {
        a: String,
        b: String,
        mode: Mode,
        share_a: Option<f64>,
        share_b: Option<f64>,
        repetition: u32,
    },
}

impl Task {
    /// Identifies the task in the journal.
    pub fn key(&self) -> String {
        match self {
            Task::Solo {
                workload,
                repetition,
            } => format!("solo/{workload}/{repetition}"),
            Task::Pair {
                a,
                b,
                mode,
                share_a,
                share_b,
                repetition,
            } => format!("pair/{a}/{b}/{mode}/{share_a:?}/{share_b:?}/{repetition}"),
        }
    }
}

/// A finished measurement, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    #[serde(flatten)]
    pub task: Task,
    pub status: Status,
    /// Iterations per second of each process, in task order (0 when the run failed).
    pub throughputs: Vec<f64>,
    pub usage: Vec<Option<Usage>>,
    /// Device counters over the window (NVML, GPM), mean and `_p95`; empty without a GPU.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu: BTreeMap<String, f64>,
    /// Each process's own GPU counters (NVML per-process samples), in task order, mean and
    /// `_p95`; empty without a GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_gpu: Vec<BTreeMap<String, f64>>,
    /// The raw readings of the window: (source, seconds since it opened, counter, value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<(String, f64, String, f64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The standard error of each throughput, in task order (`None` where too few iterations
    /// gave none); empty in failed runs and in journals written before it was estimated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throughput_se: Vec<Option<f64>>,
    /// How long the measured window lasted, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<f64>,
}

/// A window's raw readings: (source, seconds since it opened, counter, value).
type RawSamples = Vec<(String, f64, String, f64)>;

/// What one measured window gave.
#[derive(Debug)]
struct Measured {
    /// Iterations per second of each process, in task order.
    throughputs: Vec<f64>,
    /// Their standard errors.
    throughput_se: Vec<Option<f64>>,
    /// The window's length, seconds.
    window_seconds: f64,
    usage: Vec<Option<Usage>>,
    /// Device counters (NVML, GPM), mean and `_p95`.
    device: BTreeMap<String, f64>,
    /// Each process's own GPU counters; empty where NVML gave none.
    per_process: Vec<BTreeMap<String, f64>>,
    samples: RawSamples,
}

/// Why a campaign stopped.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CampaignError(pub String);

fn fail(message: impl Into<String>) -> CampaignError {
    CampaignError(message.into())
}

impl Campaign {
    /// Checks what can be checked before anything runs.
    pub fn check(&self) -> Result<(), CampaignError> {
        if let Some((i, n)) = self.shard
            && (n == 0 || i >= n)
        {
            return Err(fail(format!(
                "--shard {i}/{n}: the index counts from 0 and must be below the shard count"
            )));
        }
        if self.warmup.is_zero()
            || self.window.is_zero()
            || self.timeout.is_zero()
            || self.warm_iterations == 0
        {
            return Err(fail("--warmup, --window and --timeout must be positive"));
        }
        if self.window_max < self.window {
            return Err(fail(format!(
                "--window-max ({:.1} s) must be at least --window ({:.1} s)",
                self.window_max.as_secs_f64(),
                self.window.as_secs_f64()
            )));
        }
        if !(self.precision > 0.0 && self.precision < 1.0) {
            return Err(fail(format!(
                "--precision {}: give the relative standard error to reach, for example 0.02 \
                 (2%), above 0 and below 1",
                self.precision
            )));
        }
        if self.repetitions == 0 {
            return Err(fail("--repetitions must be at least 1"));
        }
        if self.modes.is_empty() {
            return Err(fail("--modes: give at least one mode"));
        }
        for mode in &self.modes {
            if *mode == Mode::Mig {
                return Err(fail(format!(
                    "--modes: `{mode}` is not measured by this duet yet; use cpu, timeslice or mps"
                )));
            }
        }
        if self.out.exists() {
            return Err(fail(format!(
                "{}: the output folder already exists; choose a new one",
                self.out.display()
            )));
        }
        if !self.resume && self.journal_path().exists() {
            return Err(fail(format!(
                "{}: an unfinished campaign for this output is there; rerun with --resume to \
                 continue it, or delete it to start again",
                self.journal_dir().display()
            )));
        }
        Ok(())
    }

    /// The tasks of this shard: solos first (every shard measures every workload alone), then
    /// the pairs mode by mode in the order of `modes` (a campaign stopped early has whole modes:
    /// time-slicing before MPS), each group in a seeded random order.
    pub fn tasks(&self) -> Vec<Task> {
        let names: Vec<&str> = self
            .catalog
            .workloads
            .iter()
            .map(|w| w.name.as_str())
            .collect();
        let mut solos = Vec::new();
        for repetition in 0..self.repetitions {
            for w in &names {
                solos.push(Task::Solo {
                    workload: (*w).to_string(),
                    repetition,
                });
            }
        }
        let mut settings = Vec::new();
        for (i, a) in names.iter().enumerate() {
            for b in &names[i..] {
                for &mode in &self.modes {
                    let shares: Vec<(Option<f64>, Option<f64>)> = if mode == Mode::Mps {
                        self.shares.iter().map(|&s| (Some(s), Some(s))).collect()
                    } else {
                        vec![(None, None)]
                    };
                    for (share_a, share_b) in shares {
                        settings.push(((*a).to_string(), (*b).to_string(), mode, share_a, share_b));
                    }
                }
            }
        }
        if let Some((index, count)) = self.shard {
            settings = settings
                .into_iter()
                .enumerate()
                .filter(|(k, _)| k % count == index)
                .map(|(_, s)| s)
                .collect();
        }
        let mut pairs = Vec::new();
        for repetition in 0..self.repetitions {
            for (a, b, mode, share_a, share_b) in &settings {
                pairs.push(Task::Pair {
                    a: a.clone(),
                    b: b.clone(),
                    mode: *mode,
                    share_a: *share_a,
                    share_b: *share_b,
                    repetition,
                });
            }
        }
        let mut rng = duet_core::rng::Rng::new(self.seed);
        rng.shuffle(&mut solos);
        rng.shuffle(&mut pairs);
        // Stable: the seeded order stays within each mode.
        pairs.sort_by_key(|t| match t {
            Task::Pair { mode, .. } => self.modes.iter().position(|m| m == mode),
            Task::Solo { .. } => None,
        });
        solos.extend(pairs);
        solos
    }

    /// Runs (or resumes) the campaign and writes the dataset; `progress` gets one line per
    /// finished measurement.
    pub fn run(&self, progress: &mut dyn FnMut(&str)) -> Result<Dataset, CampaignError> {
        self.run_with(&mut Lines(progress))
    }

    /// [`Campaign::run`], telling `progress` also how many of the planned settings are
    /// measured (those a resumed journal holds count as done) and which one runs now, for a bar
    /// with the time left.
    pub fn run_with(&self, progress: &mut dyn Progress) -> Result<Dataset, CampaignError> {
        let mut session = self.open(FULL_GRID, progress)?;
        let mut tasks = self.tasks();
        tasks.retain(|t| match t {
            Task::Pair { mode, .. } => session.modes().contains(mode),
            Task::Solo { .. } => true,
        });
        let already = tasks.iter().filter(|t| session.is_done(t)).count();
        if session.measurements() > 0 {
            progress.line(&format!(
                "resuming: {already} of {} measurements already in the journal",
                tasks.len()
            ));
        }
        progress.event(Event::Start {
            stage: "profile",
            total: tasks.len() as u64,
            unit: "settings",
        });
        session.measure(&tasks, already, tasks.len(), progress)?;
        progress.event(Event::Step {
            done: tasks.len() as u64,
            now: "dataset",
        });
        progress.event(Event::Finish);
        session.finish(&[], progress)
    }
}

fn describe(task: &Task) -> String {
    match task {
        Task::Solo {
            workload,
            repetition,
        } => format!("{workload} alone (repetition {})", repetition + 1),
        Task::Pair {
            a,
            b,
            mode,
            share_a,
            repetition,
            ..
        } => format!(
            "{a} + {b} {mode}{} (repetition {})",
            share_a.map_or(String::new(), |s| format!(" {s}%")),
            repetition + 1
        ),
    }
}

fn clock(seconds: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let s = seconds.max(0.0).round() as u64;
    format!("{}m{:02}s", s / 60, s % 60)
}

/// `i/n` (from the flag, or `JOB_COMPLETION_INDEX` with the count from the flag).
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let (i, n) = text
        .split_once('/')
        .ok_or_else(|| format!("--shard `{text}`: expected i/n, for example 0/4"))?;
    let i: usize = i
        .trim()
        .parse()
        .map_err(|_| format!("--shard `{text}`: `{i}` is not an index"))?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| format!("--shard `{text}`: `{n}` is not a count"))?;
    if n == 0 || i >= n {
        return Err(format!(
            "--shard `{text}`: impossible shard; the index counts from 0 and is below the count"
        ));
    }
    Ok((i, n))
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn pairs_are_measured_mode_by_mode_in_the_order_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Campaign {
            modes: vec![Mode::Timeslice, Mode::Mps],
            shares: vec![50.0, 100.0],
            repetitions: 2,
            ..campaign(dir.path())
        };
        let modes: Vec<Option<Mode>> = c
            .tasks()
            .iter()
            .map(|t| match t {
                Task::Pair { mode, .. } => Some(*mode),
                Task::Solo { .. } => None,
            })
            .collect();
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
    fn a_stopped_campaign_assembles_what_its_journal_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = campaign(dir.path());
        let solo = |w: &str, status: Status| {
            let mut r = record(
                Task::Solo {
                    workload: w.into(),
                    repetition: 0,
                },
                vec![util(50.0)],
            );
            r.status = status;
            r
        };
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
        let done: BTreeMap<String, Record> =
            records.into_iter().map(|r| (r.key.clone(), r)).collect();
        fs::create_dir_all(c.journal_dir()).expect("journal folder");
        let error = c.stop_early(&done, None, "interrupted".into());
        assert!(
            error.0.starts_with("interrupted") && error.0.contains("1 of 2 workloads"),
            "{error}"
        );
        let d = Dataset::read(&c.partial_dir()).expect("the partial dataset");
        assert_eq!(d.workloads.len(), 1);
        assert_eq!(d.pairs.len(), 1);
        assert_eq!((d.pairs[0].a.as_str(), d.pairs[0].b.as_str()), ("x", "x"));
        assert!(d.meta.description.starts_with("PARTIAL (2 of "));
        // A later stop replaces it; with nothing measured alone there is none to write.
        let again = c.stop_early(&done, None, "interrupted".into());
        assert!(again.0.contains("partial"), "{again}");
        let none = c.stop_early(&BTreeMap::new(), None, "stopped".into());
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
        let done: BTreeMap<String, Record> =
            records.into_iter().map(|r| (r.key.clone(), r)).collect();
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
}
