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
//! timed from the later of them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

use duet_core::dataset::{
    Dataset, DatasetMeta, FeatureColumn, FeatureKind, FeatureValue, Mode, Pair, Provenance, Sample,
    Status, Workload,
};
use duet_core::hash::{FNV_OFFSET, fnv1a};
use serde::{Deserialize, Serialize};

use crate::builtin::Device;
use crate::catalog::{Catalog, Source, WorkloadSpec};
use crate::gpu::GpuCounters;
use crate::mps::MpsDaemon;
use crate::process::{Launcher, ProcSample, Running, Usage, proc_sample, usage};

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
    pub window: Duration,
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
}

/// A window's raw readings: (source, seconds since it opened, counter, value).
type RawSamples = Vec<(String, f64, String, f64)>;

/// What one measured window gave.
#[derive(Debug)]
struct Measured {
    /// Iterations per second of each process, in task order.
    throughputs: Vec<f64>,
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

    pub fn journal_dir(&self) -> PathBuf {
        let name = self
            .out
            .file_name()
            .map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned());
        self.out
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(format!(".{name}.campaign"))
    }

    pub fn journal_path(&self) -> PathBuf {
        self.journal_dir().join("journal.jsonl")
    }

    /// Where a campaign stopped early leaves the dataset of what its journal holds.
    pub fn partial_dir(&self) -> PathBuf {
        self.journal_dir().join("partial")
    }

    /// What a measurement depends on; a resumed campaign must match it.
    fn settings(&self) -> BTreeMap<&'static str, String> {
        let catalog = fs::read_to_string(&self.catalog.path).unwrap_or_default();
        BTreeMap::from([
            (
                "catalog",
                format!(
                    "{} bytes, fnv {:016x}",
                    catalog.len(),
                    fnv1a(catalog.as_bytes(), FNV_OFFSET)
                ),
            ),
            ("modes", format!("{:?}", self.modes)),
            ("shares", format!("{:?}", self.shares)),
            ("warmup", format!("{:?}", self.warmup)),
            ("warm-iterations", self.warm_iterations.to_string()),
            ("window", format!("{:?}", self.window)),
            ("repetitions", self.repetitions.to_string()),
            ("device", self.launcher.device.to_string()),
            ("cpu-set", format!("{:?}", self.launcher.cpu_set)),
            ("seed", self.seed.to_string()),
            ("shard", format!("{:?}", self.shard)),
        ])
    }

    /// Records the settings at the first start; refuses a resume whose settings differ.
    fn check_settings(&self) -> Result<(), CampaignError> {
        let path = self.journal_dir().join("settings.json");
        let now = self.settings();
        match fs::read_to_string(&path) {
            Ok(text) => {
                let then: BTreeMap<String, String> = serde_json::from_str(&text)
                    .map_err(|e| fail(format!("{}: {e}", path.display())))?;
                for (name, value) in &now {
                    if then.get(*name) != Some(value) {
                        return Err(fail(format!(
                            "--resume: the `{name}` setting differs from the interrupted campaign's                              ({} then, {value} now); rerun it with the same settings",
                            then.get(*name).map_or("unset", String::as_str)
                        )));
                    }
                }
                Ok(())
            }
            Err(_) => {
                let text = serde_json::to_string_pretty(&now).map_err(|e| fail(e.to_string()))?;
                fs::write(&path, text).map_err(|e| fail(format!("{}: {e}", path.display())))
            }
        }
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
        let mut rng = self.seed ^ 0x9E37_79B9_7F4A_7C15;
        shuffle(&mut solos, &mut rng);
        shuffle(&mut pairs, &mut rng);
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
        self.check()?;
        fs::create_dir_all(self.journal_dir())
            .map_err(|e| fail(format!("{}: {e}", self.journal_dir().display())))?;
        self.check_settings()?;
        let mut done = read_journal(&self.journal_path())?;
        // Ctrl-C or SIGTERM: stop after stopping the running workloads (a second one exits at
        // once); the journal keeps what finished.
        let interrupted = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            let _ =
                signal_hook::flag::register_conditional_shutdown(signal, 130, interrupted.clone());
            let _ = signal_hook::flag::register(signal, interrupted.clone());
        }
        let mut mps = if self.modes.contains(&Mode::Mps) {
            let started = match self.launcher.device {
                Device::Cpu => {
                    Err("MPS needs a GPU (--device cuda); the mps mode is skipped".to_string())
                }
                // A started daemon does not prove that clients reach it: one is tried first.
                Device::Cuda(_) => MpsDaemon::start(&self.journal_dir()).and_then(|daemon| {
                    self.probe_mps(&daemon, &interrupted)
                        .map(|said| (daemon, said))
                        .map_err(|why| {
                            format!("MPS: the daemon started but {why}; the mps mode is skipped")
                        })
                }),
            };
            match started {
                Ok((daemon, said)) => {
                    progress(&said);
                    Some(daemon)
                }
                Err(why) => {
                    progress(&why);
                    None
                }
            }
        } else {
            None
        };
        let mut tasks = self.tasks();
        if mps.is_none() {
            tasks.retain(|t| {
                !matches!(
                    t,
                    Task::Pair {
                        mode: Mode::Mps,
                        ..
                    }
                )
            });
            if !self.modes.iter().any(|m| *m != Mode::Mps) {
                return Err(fail("no mode left to measure (mps is unavailable here)"));
            }
        }
        let todo: Vec<&Task> = tasks
            .iter()
            .filter(|t| !done.contains_key(&t.key()))
            .collect();
        if !done.is_empty() {
            progress(&format!(
                "resuming: {} of {} measurements already in the journal",
                tasks.len() - todo.len(),
                tasks.len()
            ));
        }
        let mut journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.journal_path())
            .map_err(|e| fail(format!("{}: {e}", self.journal_path().display())))?;
        let gpu = match self.launcher.device {
            Device::Cuda(index) => match GpuCounters::open(index) {
                Ok(g) => {
                    progress(&g.describe());
                    for why in [&g.gpm, &g.per_process]
                        .into_iter()
                        .filter_map(|r| r.as_ref().err())
                    {
                        progress(why);
                    }
                    Some(g)
                }
                Err(why) => {
                    progress(&why);
                    None
                }
            },
            Device::Cpu => None,
        };
        let started = Instant::now();
        for (k, task) in todo.iter().enumerate() {
            if let Task::Pair { a, b, .. } = task {
                for w in [a, b] {
                    if let Err(e) = self.check_solo_succeeded(w, &done) {
                        drop(mps.take());
                        return Err(self.stop_early(&done, gpu.as_ref(), e.0));
                    }
                }
            }
            let record = self.measure(task, gpu.as_ref(), mps.as_ref(), &interrupted);
            if let Some(g) = &gpu {
                for line in g.notes.drain() {
                    progress(&line);
                }
            }
            if interrupted.load(Ordering::Relaxed) {
                drop(mps.take());
                return Err(self.stop_early(
                    &done,
                    gpu.as_ref(),
                    format!(
                        "interrupted; {} measurements are in the journal, rerun with --resume to \
                         go on",
                        done.len()
                    ),
                ));
            }
            let mut line = serde_json::to_string(&record).map_err(|e| fail(e.to_string()))?;
            line.push('\n');
            journal
                .write_all(line.as_bytes())
                .and_then(|()| journal.sync_data())
                .map_err(|e| fail(format!("{}: {e}", self.journal_path().display())))?;
            #[allow(clippy::cast_precision_loss)]
            let eta =
                started.elapsed().as_secs_f64() / (k + 1) as f64 * (todo.len() - k - 1) as f64;
            progress(&format!(
                "[{}/{}] {}: {}{} (ETA {})",
                tasks.len() - todo.len() + k + 1,
                tasks.len(),
                describe(task),
                record.status,
                if record.status == Status::Ok {
                    format!(
                        ", {}",
                        record
                            .throughputs
                            .iter()
                            .map(|t| format!("{t:.2}/s"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                } else {
                    format!(
                        ": {}",
                        record
                            .note
                            .clone()
                            .unwrap_or_default()
                            .lines()
                            .last()
                            .unwrap_or("")
                    )
                },
                clock(eta)
            ));
            done.insert(record.key.clone(), record);
        }
        // The daemon quits while its folders (under the journal's) still exist.
        if let Some(daemon) = mps.take()
            && let Err(why) = daemon.stop()
        {
            progress(&why);
        }
        for w in &self.catalog.workloads {
            if let Err(e) = self.check_solo_succeeded(&w.name, &done) {
                return Err(self.stop_early(&done, gpu.as_ref(), e.0));
            }
        }
        let dataset = self.build(&done, gpu.as_ref())?;
        dataset
            .write_with_samples(&self.out, &samples_of(&done))
            .map_err(|e| fail(e.to_string()))?;
        let _ = fs::remove_dir_all(self.journal_dir());
        Ok(dataset)
    }

    /// The dataset of `done`, with the driver NVML reports.
    fn build(
        &self,
        done: &BTreeMap<String, Record>,
        gpu: Option<&GpuCounters>,
    ) -> Result<Dataset, CampaignError> {
        let mut dataset = self.assemble(done)?;
        dataset.meta.provenance.driver = gpu.and_then(GpuCounters::driver);
        Ok(dataset)
    }

    /// The campaign's error for a stop before the end, after writing what the journal holds as
    /// a partial dataset (the workloads with a successful solo run and the pairs among them);
    /// the message says where, or why there is none.
    fn stop_early(
        &self,
        done: &BTreeMap<String, Record>,
        gpu: Option<&GpuCounters>,
        message: String,
    ) -> CampaignError {
        let said = match self.write_partial(done, gpu) {
            Ok(Some((workloads, pairs))) => format!(
                "\nwhat the journal holds so far is in {} ({workloads} of {} workloads, {pairs} \
                 pair settings); the finished campaign replaces it",
                self.partial_dir().display(),
                self.catalog.workloads.len()
            ),
            Ok(None) => String::new(),
            Err(why) => format!("\nno partial dataset: {why}"),
        };
        fail(format!("{message}{said}"))
    }

    /// Writes the partial dataset; `None` where no workload has run alone successfully yet.
    fn write_partial(
        &self,
        done: &BTreeMap<String, Record>,
        gpu: Option<&GpuCounters>,
    ) -> Result<Option<(usize, usize)>, String> {
        let (partial, kept) = self.partial(done);
        if partial.catalog.workloads.is_empty() {
            return Ok(None);
        }
        let mut dataset = partial.build(&kept, gpu).map_err(|e| e.0)?;
        dataset.meta.description = format!(
            "PARTIAL ({} of {} measurements): {}",
            kept.len(),
            self.tasks().len(),
            dataset.meta.description
        );
        let dir = self.partial_dir();
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        dataset
            .write_with_samples(&dir, &samples_of(&kept))
            .map_err(|e| e.to_string())?;
        Ok(Some((dataset.workloads.len(), dataset.pairs.len())))
    }

    /// This campaign narrowed to the workloads with a successful solo run in `done`, and the
    /// records among them.
    fn partial(&self, done: &BTreeMap<String, Record>) -> (Campaign, BTreeMap<String, Record>) {
        let measured: BTreeSet<&str> = done
            .values()
            .filter(|r| r.status == Status::Ok)
            .filter_map(|r| match &r.task {
                Task::Solo { workload, .. } => Some(workload.as_str()),
                Task::Pair { .. } => None,
            })
            .collect();
        let mut partial = self.clone();
        partial
            .catalog
            .workloads
            .retain(|w| measured.contains(w.name.as_str()));
        let kept = done
            .iter()
            .filter(|(_, r)| match &r.task {
                Task::Solo { workload, .. } => measured.contains(workload.as_str()),
                Task::Pair { a, b, .. } => {
                    measured.contains(a.as_str()) && measured.contains(b.as_str())
                }
            })
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        (partial, kept)
    }

    /// Runs one MPS client (the catalog's first built-in, else its first workload) until its
    /// first iteration, within `timeout`: clients that cannot reach the server may hang rather
    /// than fail. Then the daemon must list a server. `Ok` says what MPS answered.
    fn probe_mps(&self, daemon: &MpsDaemon, interrupted: &AtomicBool) -> Result<String, String> {
        daemon
            .servers()
            .map_err(|e| format!("does not answer ({e})"))?;
        let spec = self
            .catalog
            .workloads
            .iter()
            .find(|w| matches!(w.source, Source::Builtin { .. }))
            .or_else(|| self.catalog.workloads.first())
            .ok_or("the catalog has no workload to try it with")?;
        let mut client = Running::start(&self.launcher, spec, &daemon.client_env(None))?;
        let started = Instant::now();
        let outcome = loop {
            if client.iterations() > 0 {
                break Ok(());
            }
            if let Some(how) = client.exited() {
                std::thread::sleep(Duration::from_millis(50));
                let tail = client.stderr_tail();
                break Err(format!(
                    "its trial client `{}` exited ({how}): {}",
                    spec.name,
                    tail.lines().last().unwrap_or("")
                ));
            }
            if interrupted.load(Ordering::Relaxed) {
                break Err("the trial was interrupted".to_string());
            }
            if started.elapsed() > self.timeout {
                break Err(format!(
                    "its trial client `{}` finished no iteration within the {:.0} s timeout",
                    spec.name,
                    self.timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Asked while the client still runs: the server lives as long as it has clients.
        let servers = daemon.servers();
        let pid = client.pid();
        client.stop();
        outcome?;
        let servers = servers.map_err(|e| format!("does not answer with a client ({e})"))?;
        let Some(server) = servers.first() else {
            return Err(format!(
                "lists no server (get_server_list is empty) while its trial client `{}` ran: \
                 clients do not use MPS here",
                spec.name
            ));
        };
        let clients = daemon
            .clients(server)
            .unwrap_or_else(|e| vec![format!("unknown ({e})")]);
        Ok(format!(
            "MPS: the control daemon answers (pipe folder {}); with trial client `{}` (pid \
             {pid}) running it listed server {} with clients {}",
            daemon.pipe().display(),
            spec.name,
            servers.join(" "),
            if clients.is_empty() {
                "none".to_string()
            } else {
                clients.join(" ")
            }
        ))
    }

    /// Stops the campaign when a workload failed every time it ran alone: its pairs would have
    /// nothing to be compared with.
    fn check_solo_succeeded(
        &self,
        workload: &str,
        done: &BTreeMap<String, Record>,
    ) -> Result<(), CampaignError> {
        let solos: Vec<&Record> = done
            .values()
            .filter(|r| matches!(&r.task, Task::Solo { workload: w, .. } if w == workload))
            .collect();
        if solos.len() as u32 >= self.repetitions && solos.iter().all(|r| r.status != Status::Ok) {
            let note = solos
                .last()
                .and_then(|r| r.note.clone())
                .unwrap_or_default();
            return Err(fail(format!(
                "workload `{workload}` failed every time it ran alone ({}); fix it in {} and rerun \
                 with --resume\n{note}",
                solos.last().map_or("", |r| r.status.as_str()),
                self.catalog.path.display()
            )));
        }
        Ok(())
    }

    fn spec(&self, name: &str) -> Option<&WorkloadSpec> {
        self.catalog.get(name)
    }

    /// Runs one task's processes and measures them over the same window.
    fn measure(
        &self,
        task: &Task,
        gpu: Option<&GpuCounters>,
        mps: Option<&MpsDaemon>,
        interrupted: &AtomicBool,
    ) -> Record {
        let names: Vec<&str> = match task {
            Task::Solo { workload, .. } => vec![workload],
            Task::Pair { a, b, .. } => vec![a, b],
        };
        let n = names.len();
        let failed = |status: Status, note: String| Record {
            key: task.key(),
            task: task.clone(),
            status,
            throughputs: vec![0.0; n],
            usage: vec![None; n],
            gpu: BTreeMap::new(),
            process_gpu: Vec::new(),
            samples: Vec::new(),
            note: Some(note),
        };
        let shares = match task {
            Task::Pair {
                mode: Mode::Mps,
                share_a,
                share_b,
                ..
            } => vec![*share_a, *share_b],
            _ => vec![None; n],
        };
        let mut running = Vec::new();
        for (name, share) in names.iter().zip(shares) {
            let env = match (mps, task) {
                (
                    Some(d),
                    Task::Pair {
                        mode: Mode::Mps, ..
                    },
                ) => d.client_env(share),
                _ => Vec::new(),
            };
            let Some(spec) = self.spec(name) else {
                return failed(
                    Status::Crash,
                    format!("workload `{name}` is not in the catalog"),
                );
            };
            match Running::start(&self.launcher, spec, &env) {
                Ok(r) => running.push(r),
                Err(e) => {
                    running.into_iter().for_each(Running::stop);
                    return failed(Status::Crash, e);
                }
            }
        }
        let outcome = self.window_of(&mut running, gpu, interrupted);
        let record = match outcome {
            Ok(measured) => Record {
                key: task.key(),
                task: task.clone(),
                status: Status::Ok,
                throughputs: measured.throughputs,
                usage: measured.usage,
                gpu: measured.device,
                process_gpu: measured.per_process,
                samples: measured.samples,
                note: None,
            },
            Err((status, note)) => failed(status, note),
        };
        running.into_iter().for_each(Running::stop);
        record
    }

    /// Warm-up until every process has finished `warm_iterations` iterations and `warmup` has
    /// passed since the later of them, then the measured window, sampling `/proc` (and NVML)
    /// throughout it.
    fn window_of(
        &self,
        running: &mut [Running],
        gpu: Option<&GpuCounters>,
        interrupted: &AtomicBool,
    ) -> Result<Measured, (Status, String)> {
        let start = Instant::now();
        let stopped = || {
            if interrupted.load(Ordering::Relaxed) {
                Err((Status::Crash, "interrupted".to_string()))
            } else {
                Ok(())
            }
        };
        let warm_iterations = self.warm_iterations.max(1);
        loop {
            check_alive(running)?;
            stopped()?;
            let warm: Vec<Option<Instant>> = running
                .iter()
                .map(|r| r.iteration_at(warm_iterations))
                .collect();
            match window_opens(&warm, self.warmup) {
                Some(open) if Instant::now() >= open => break,
                Some(_) => {}
                None if start.elapsed() > self.timeout => {
                    let slow: Vec<String> = running
                        .iter()
                        .filter(|r| r.iterations() < warm_iterations)
                        .map(|r| format!("{} ({})", r.name, r.iterations()))
                        .collect();
                    return Err((
                        Status::Timeout,
                        format!(
                            "fewer than {warm_iterations} iterations within the {:.0} s timeout \
                             from {}",
                            self.timeout.as_secs_f64(),
                            slow.join(", ")
                        ),
                    ));
                }
                None => {}
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let t0 = Instant::now();
        let gpm_first = gpu.and_then(GpuCounters::gpm_sample);
        // Per-process samples from here on: whatever NVML holds from before is skipped.
        let mut seen = gpu.map_or(0, |g| g.process_samples(0).1);
        let mut per_process: Vec<Vec<(Instant, crate::gpu::ProcessSample)>> =
            vec![Vec::new(); running.len()];
        let mut readings = Vec::new();
        let mut samples: Vec<Vec<ProcSample>> = vec![Vec::new(); running.len()];
        // PIDs of per-process samples that are none of the workloads'.
        let mut unmatched = BTreeSet::new();
        // A zero interval turns sampling off (to measure what sampling costs).
        let sampling = !self.sample_interval.is_zero();
        let tick = if sampling {
            self.sample_interval
        } else {
            Duration::from_millis(50)
        };
        loop {
            if sampling {
                for (r, s) in running.iter().zip(samples.iter_mut()) {
                    if let Some(sample) = proc_sample(r.pid()) {
                        s.push(sample);
                    }
                }
                if let Some(g) = gpu {
                    let now = Instant::now();
                    readings.push((now, g.read()));
                    let (fresh, newest) = g.process_samples(seen);
                    seen = newest;
                    for sample in fresh {
                        if let Some(i) = running.iter().position(|r| r.pid() == sample.0) {
                            per_process[i].push((now, sample));
                        } else {
                            unmatched.insert(sample.0);
                        }
                    }
                }
            }
            if t0.elapsed() >= self.window {
                break;
            }
            check_alive(running)?;
            stopped()?;
            std::thread::sleep(tick.min(self.window.saturating_sub(t0.elapsed())));
        }
        let t1 = Instant::now();
        if let Some(g) = gpu
            && !unmatched.is_empty()
            && per_process.iter().all(Vec::is_empty)
        {
            g.notes.note("process-pids", || {
                format!(
                    "per-process utilisation: NVML's samples name PIDs {unmatched:?}, none of the \
                     workloads' ({:?}); a PID namespace (container, sandbox) may hide them; the \
                     runs where none match have no per-process counters",
                    running.iter().map(Running::pid).collect::<Vec<_>>()
                )
            });
        }
        let gpm = match (gpu, &gpm_first, gpu.and_then(GpuCounters::gpm_sample)) {
            (Some(g), Some(first), Some(last)) => g.gpm_metrics(first, &last),
            _ => Default::default(),
        };
        let plain: Vec<crate::gpu::Reading> = readings.iter().map(|(_, r)| r.clone()).collect();
        let counters = crate::gpu::summarise(&plain, &gpm);
        let mut raw = RawSamples::new();
        let since = |at: Instant| at.saturating_duration_since(t0).as_secs_f64();
        for (r, series) in running.iter().zip(&samples) {
            for p in series {
                for (counter, value) in [
                    ("cpu_seconds", p.cpu_seconds),
                    ("rss_mib", p.rss_mib),
                    ("context_switches", p.context_switches),
                ] {
                    raw.push((r.name.clone(), since(p.at), counter.to_string(), value));
                }
            }
        }
        for (at, reading) in &readings {
            for (counter, value) in reading {
                raw.push(("device".into(), since(*at), (*counter).to_string(), *value));
            }
        }
        for (r, series) in running.iter().zip(&per_process) {
            for (at, (_, sm, mem)) in series {
                for (counter, value) in crate::gpu::PER_PROCESS.iter().zip([sm, mem]) {
                    raw.push((r.name.clone(), since(*at), (*counter).to_string(), *value));
                }
            }
        }
        let per_process: Vec<BTreeMap<String, f64>> = per_process
            .iter()
            .map(|series| {
                let samples: Vec<_> = series.iter().map(|(_, s)| *s).collect();
                crate::gpu::summarise_process(&samples)
            })
            .collect();
        let mut throughputs = Vec::new();
        for r in running.iter() {
            let count = r.iterations_between(t0, t1);
            if count < 2 {
                return Err((
                    Status::Timeout,
                    format!(
                        "`{}` finished {count} iterations in the {:.1} s window; lengthen --window",
                        r.name,
                        self.window.as_secs_f64()
                    ),
                ));
            }
            #[allow(clippy::cast_precision_loss)]
            throughputs.push(count as f64 / (t1 - t0).as_secs_f64());
        }
        Ok(Measured {
            throughputs,
            usage: samples.iter().map(|s| usage(s)).collect(),
            device: counters,
            per_process: if per_process.iter().all(BTreeMap::is_empty) {
                Vec::new()
            } else {
                per_process
            },
            samples: raw,
        })
    }

    /// The dataset from the journal's records.
    fn assemble(&self, done: &BTreeMap<String, Record>) -> Result<Dataset, CampaignError> {
        // GPU counters become columns only where some run recorded them.
        let gpu_names: BTreeSet<String> =
            done.values().flat_map(|r| r.gpu.keys().cloned()).collect();
        // Per-process counters: of the one process in solo runs, of each side in pair runs.
        let process_names = |solo: bool| -> BTreeSet<String> {
            done.values()
                .filter(|r| matches!(r.task, Task::Solo { .. }) == solo)
                .flat_map(|r| r.process_gpu.iter().flat_map(|m| m.keys().cloned()))
                .collect()
        };
        let (solo_process_names, pair_process_names) = (process_names(true), process_names(false));
        let mut workloads = Vec::new();
        for spec in &self.catalog.workloads {
            let ok: Vec<&Record> = done
                .values()
                .filter(|r| {
                    r.status == Status::Ok
                        && matches!(&r.task, Task::Solo { workload, .. } if *workload == spec.name)
                })
                .collect();
            let throughputs: Vec<f64> = ok.iter().map(|r| r.throughputs[0]).collect();
            let usages: Vec<Usage> = ok.iter().filter_map(|r| r.usage[0]).collect();
            let mut features = BTreeMap::new();
            let (model, size) = spec.describe();
            features.insert("model".into(), FeatureValue::Category(Some(model)));
            #[allow(clippy::cast_precision_loss)]
            for (name, value) in [
                ("batch_size", size.map(|s| s.batch as f64)),
                ("width", size.map(|s| s.width as f64)),
                ("depth", size.map(|s| s.depth as f64)),
                (
                    "seq",
                    size.filter(|_| spec.is_transformer()).map(|s| s.seq as f64),
                ),
            ] {
                features.insert(name.into(), FeatureValue::Number(value));
            }
            features.insert(
                "precision".into(),
                FeatureValue::Category(size.map(|s| s.precision.to_string())),
            );
            for (name, value) in usage_features(&usages) {
                features.insert(name.into(), FeatureValue::Number(value));
            }
            for name in &gpu_names {
                let values: Vec<f64> = ok.iter().filter_map(|r| r.gpu.get(name).copied()).collect();
                let value = (!values.is_empty()).then(|| crate::process::mean(&values));
                features.insert(name.clone(), FeatureValue::Number(value));
            }
            for name in &solo_process_names {
                let values: Vec<f64> = ok
                    .iter()
                    .filter_map(|r| r.process_gpu.first().and_then(|m| m.get(name)).copied())
                    .collect();
                let value = (!values.is_empty()).then(|| crate::process::mean(&values));
                features.insert(name.clone(), FeatureValue::Number(value));
            }
            workloads.push(Workload {
                workload: spec.name.clone(),
                kind: spec.kind,
                solo_throughput: crate::process::mean(&throughputs),
                solo_throughput_std: std(&throughputs),
                repetitions: Some(u32::try_from(throughputs.len()).unwrap_or(u32::MAX)),
                features,
            });
        }
        let mut settings: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
        for r in done.values() {
            if let Task::Pair {
                a,
                b,
                mode,
                share_a,
                share_b,
                ..
            } = &r.task
            {
                settings
                    .entry(format!("{a}/{b}/{mode}/{share_a:?}/{share_b:?}"))
                    .or_default()
                    .push(r);
            }
        }
        let mut pairs = Vec::new();
        for records in settings.values() {
            let Task::Pair {
                a,
                b,
                mode,
                share_a,
                share_b,
                ..
            } = &records[0].task
            else {
                continue;
            };
            let failed = records.iter().find(|r| r.status != Status::Ok);
            let side =
                |i: usize| -> Vec<f64> { records.iter().map(|r| r.throughputs[i]).collect() };
            let mut counters = BTreeMap::new();
            for (i, suffix) in [(0, "a"), (1, "b")] {
                let usages: Vec<Usage> = records
                    .iter()
                    .filter_map(|r| r.usage.get(i).copied().flatten())
                    .collect();
                let values = (!usages.is_empty()).then_some(&usages);
                counters.insert(
                    format!("cpu_util_{suffix}"),
                    values.map(|u| {
                        crate::process::mean(&u.iter().map(|x| x.cpu_util).collect::<Vec<_>>())
                    }),
                );
                counters.insert(
                    format!("rss_mib_{suffix}"),
                    values.map(|u| {
                        crate::process::mean(&u.iter().map(|x| x.rss_mib).collect::<Vec<_>>())
                    }),
                );
            }
            for name in &gpu_names {
                let values: Vec<f64> = records
                    .iter()
                    .filter_map(|r| r.gpu.get(name).copied())
                    .collect();
                counters.insert(
                    name.clone(),
                    (!values.is_empty()).then(|| crate::process::mean(&values)),
                );
            }
            for name in &pair_process_names {
                for (i, suffix) in [(0, "a"), (1, "b")] {
                    let values: Vec<f64> = records
                        .iter()
                        .filter_map(|r| r.process_gpu.get(i).and_then(|m| m.get(name)).copied())
                        .collect();
                    counters.insert(
                        format!("{name}_{suffix}"),
                        (!values.is_empty()).then(|| crate::process::mean(&values)),
                    );
                }
            }
            let (status, ta, tb, note) = match failed {
                Some(r) => (r.status, 0.0, 0.0, r.note.clone()),
                None => (
                    Status::Ok,
                    crate::process::mean(&side(0)),
                    crate::process::mean(&side(1)),
                    None,
                ),
            };
            let ok = status == Status::Ok;
            pairs.push(Pair {
                a: a.clone(),
                b: b.clone(),
                gpu: self.gpu.clone(),
                mode: *mode,
                share_a: *share_a,
                share_b: *share_b,
                throughput_a: ta,
                throughput_b: tb,
                throughput_a_std: if ok { std(&side(0)) } else { None },
                throughput_b_std: if ok { std(&side(1)) } else { None },
                repetitions: Some(u32::try_from(records.len()).unwrap_or(u32::MAX)),
                status,
                note,
                counters,
            });
        }
        let modes: BTreeSet<Mode> = pairs.iter().map(|p| p.mode).collect();
        let numeric = |name: &str, unit: Option<&str>, meaning: &str| {
            duet_core::features::canonical(name).unwrap_or(FeatureColumn {
                name: name.into(),
                kind: FeatureKind::Numeric,
                unit: unit.map(str::to_string),
                meaning: meaning.into(),
            })
        };
        let mut workload_features = vec![
            FeatureColumn {
                name: "model".into(),
                kind: FeatureKind::Categorical,
                unit: None,
                meaning: "the built-in workload (mlp, conv, matmul, stream) or `command`".into(),
            },
            numeric("batch_size", None, ""),
            numeric(
                "width",
                None,
                "width of a built-in: units, channels or matrix side",
            ),
            numeric(
                "depth",
                None,
                "layers (or repeated passes) of a built-in per iteration",
            ),
            numeric("seq", None, "tokens per sequence of a transformer built-in"),
            duet_core::features::canonical("precision").unwrap_or(FeatureColumn {
                name: "precision".into(),
                kind: FeatureKind::Categorical,
                unit: None,
                meaning: "float type of a built-in (fp32, fp16, bf16)".into(),
            }),
        ];
        for (name, _) in usage_features(&[]) {
            workload_features.push(numeric(
                name,
                None,
                "context switches per second, voluntary and involuntary",
            ));
        }
        let gpu_column = |name: &String| {
            duet_core::features::canonical(name).unwrap_or(FeatureColumn {
                name: name.clone(),
                kind: FeatureKind::Numeric,
                unit: Some("MHz".into()).filter(|_| name.contains("clock")),
                meaning: "device counter over the measured window (NVML)".into(),
            })
        };
        workload_features.extend(gpu_names.iter().map(gpu_column));
        let process_column = |name: &str| FeatureColumn {
            name: name.to_string(),
            kind: FeatureKind::Numeric,
            unit: Some("%".into()),
            meaning: format!(
                "{} of the job's own process over the measured window (NVML per-process samples){}",
                if name.starts_with("process_sm") {
                    "SM utilisation"
                } else {
                    "memory utilisation"
                },
                if name.contains("_p95") { ", p95" } else { "" }
            ),
        };
        workload_features.extend(solo_process_names.iter().map(|n| process_column(n)));
        let mut pair_counters: Vec<FeatureColumn> =
            ["cpu_util_a", "cpu_util_b", "rss_mib_a", "rss_mib_b"]
                .iter()
                .map(|name| {
                    let base = &name[..name.len() - 2];
                    let c = numeric(base, None, "");
                    FeatureColumn {
                        name: (*name).to_string(),
                        meaning: format!(
                            "{} ({} side of the pair)",
                            c.meaning,
                            &name[name.len() - 1..]
                        ),
                        ..c
                    }
                })
                .collect();
        // Device counters of a pair run cover both jobs together.
        pair_counters.extend(gpu_names.iter().map(gpu_column));
        for name in &pair_process_names {
            for suffix in ["a", "b"] {
                let c = process_column(name);
                pair_counters.push(FeatureColumn {
                    name: format!("{name}_{suffix}"),
                    meaning: format!("{} ({suffix} side of the pair)", c.meaning),
                    ..c
                });
            }
        }
        let meta = DatasetMeta {
            format: duet_core::dataset::FORMAT.into(),
            name: self.name.clone(),
            description: format!(
                "co-location campaign by duet profile: {} workloads alone and in every pair, \
                 modes {}, {} repetitions, {:.1} s warm-up and {:.1} s measured window",
                self.catalog.workloads.len(),
                self.modes
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.repetitions,
                self.warmup.as_secs_f64(),
                self.window.as_secs_f64()
            ),
            provenance: Provenance {
                source: format!(
                    "measured by duet profile from {}",
                    self.catalog.path.display()
                ),
                gpu: self.gpu.clone(),
                driver: None,
                host: self.host.clone(),
                measured_by: "duet profile".into(),
                tool: format!("duet {}", env!("CARGO_PKG_VERSION")),
                command: Some(self.command_line.clone()),
                date: self.date.clone(),
                licence: "same as duet (MIT OR Apache-2.0)".into(),
                licence_text: None,
            },
            workload_features,
            pair_counters,
            modes: modes.into_iter().collect(),
        };
        Ok(Dataset {
            meta,
            workloads,
            pairs,
        })
    }
}

/// When a run's measured window opens: `warmup` after the later of the processes' warm
/// iterations (`warm[i]`: when process `i` finished its `warm_iterations`-th one); `None` while a
/// process has not.
pub fn window_opens(warm: &[Option<Instant>], warmup: Duration) -> Option<Instant> {
    let mut later: Option<Instant> = None;
    for t in warm {
        let t = (*t)?;
        later = Some(later.map_or(t, |l| l.max(t)));
    }
    later.map(|l| l + warmup)
}

/// The raw readings of every record, as the dataset's samples.
fn samples_of(done: &BTreeMap<String, Record>) -> Vec<Sample> {
    done.values()
        .flat_map(|r| {
            r.samples.iter().map(|(source, t, counter, value)| Sample {
                run: r.key.clone(),
                source: source.clone(),
                t: *t,
                counter: counter.clone(),
                value: *value,
            })
        })
        .collect()
}

fn usage_features(usages: &[Usage]) -> Vec<(&'static str, Option<f64>)> {
    let pick = |f: fn(&Usage) -> f64| {
        (!usages.is_empty())
            .then(|| crate::process::mean(&usages.iter().map(f).collect::<Vec<_>>()))
    };
    vec![
        ("cpu_util", pick(|u| u.cpu_util)),
        ("cpu_util_p95", pick(|u| u.cpu_util_p95)),
        ("rss_mib", pick(|u| u.rss_mib)),
        ("rss_mib_p95", pick(|u| u.rss_mib_p95)),
        ("context_switches_per_s", pick(|u| u.context_switches_per_s)),
    ]
}

fn check_alive(running: &mut [Running]) -> Result<(), (Status, String)> {
    for r in running.iter_mut() {
        if let Some(how) = r.exited() {
            // Let the reader threads collect the last lines of stderr.
            std::thread::sleep(Duration::from_millis(50));
            let tail = r.stderr_tail();
            let oom = tail.to_lowercase().contains("out of memory");
            let status = if oom { Status::Oom } else { Status::Crash };
            return Err((
                status,
                format!("`{}` exited ({how}) during the run\n{tail}", r.name),
            ));
        }
    }
    Ok(())
}

fn std(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = crate::process::mean(xs);
    #[allow(clippy::cast_precision_loss)]
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    Some(var.sqrt())
}

fn read_journal(path: &Path) -> Result<BTreeMap<String, Record>, CampaignError> {
    let Ok(text) = fs::read_to_string(path) else {
        return Ok(BTreeMap::new());
    };
    let mut done = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Record>(line) {
            Ok(r) => {
                done.insert(r.key.clone(), r);
            }
            // A line cut short by a kill is the last one: that measurement runs again.
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => {
                return Err(fail(format!("{} line {}: {e}", path.display(), i + 1)));
            }
        }
    }
    Ok(done)
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

fn shuffle<T>(items: &mut [T], state: &mut u64) {
    for i in (1..items.len()).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let j = usize::try_from(*state % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
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
    use super::*;

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
        // A journal line written before per-process counters existed still reads.
        let old = r#"{"key":"k","task":"solo","workload":"x","repetition":0,"status":"ok","throughputs":[1.0],"usage":[null]}"#;
        let r: Record = serde_json::from_str(old).expect("old record");
        assert!(r.process_gpu.is_empty());
    }
}
