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
mod design;
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
pub use design::GroupBudget;
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
    /// Measurements of each workload alone (`--solo-repetitions`, at least 1): the solo rates
    /// every slowdown is divided by, and the repeatability figure, cost n runs where the pairs
    /// cost n², so a short campaign can repeat them more often than its pairs.
    pub solo_repetitions: u32,
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
    /// The most jobs measured together: 2 measures pairs; 3 or more also every group of 3 up to
    /// this many (`--group-size`).
    pub group_size: usize,
    /// Groups of three or more measured where not all (`--group-budget`): of each size, this
    /// many workload multisets, chosen as a balanced design (`design`), each measured in every
    /// mode and share. `None`: every group.
    pub group_budget: Option<GroupBudget>,
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
    /// Three or more jobs together (`--group-size`), in this order.
    Group {
        workloads: Vec<String>,
        mode: Mode,
        /// Each job's share, in `workloads` order (`None` where the mode has none).
        shares: Vec<Option<f64>>,
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
            Task::Group {
                workloads,
                mode,
                shares,
                repetition,
            } => format!(
                "group/{}/{mode}/{shares:?}/{repetition}",
                workloads.join("+")
            ),
        }
    }

    /// The workloads it runs, in order.
    pub fn workloads(&self) -> Vec<&str> {
        match self {
            Task::Solo { workload, .. } => vec![workload],
            Task::Pair { a, b, .. } => vec![a, b],
            Task::Group { workloads, .. } => workloads.iter().map(String::as_str).collect(),
        }
    }

    /// How its jobs share the device; `None` for a solo run.
    pub fn mode(&self) -> Option<Mode> {
        match self {
            Task::Solo { .. } => None,
            Task::Pair { mode, .. } | Task::Group { mode, .. } => Some(*mode),
        }
    }

    /// Each job's share, in `workloads` order.
    pub fn shares(&self) -> Vec<Option<f64>> {
        match self {
            Task::Solo { .. } => vec![None],
            Task::Pair {
                share_a, share_b, ..
            } => vec![*share_a, *share_b],
            Task::Group { shares, .. } => shares.clone(),
        }
    }
}

/// Every multiset of `size` indices below `n`, as non-decreasing sequences in lexicographic
/// order (the groups of `size` jobs from `n` workloads, a workload possibly more than once).
pub fn multisets(n: usize, size: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut current = Vec::with_capacity(size);
    fn extend(
        n: usize,
        size: usize,
        from: usize,
        current: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if current.len() == size {
            out.push(current.clone());
            return;
        }
        for i in from..n {
            current.push(i);
            extend(n, size, i, current, out);
            current.pop();
        }
    }
    if size > 0 {
        extend(n, size, 0, &mut current, &mut out);
    }
    out
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
        if self.solo_repetitions == 0 {
            return Err(fail("--solo-repetitions must be at least 1"));
        }
        if !(2..=duet_core::dataset::MAX_GROUP_SIZE).contains(&self.group_size) {
            return Err(fail(format!(
                "--group-size {}: give 2 (pairs) to {} jobs on one device",
                self.group_size,
                duet_core::dataset::MAX_GROUP_SIZE
            )));
        }
        match self.group_budget {
            Some(_) if self.group_size < 3 => {
                return Err(fail(
                    "--group-budget: only with --group-size 3 or more (pairs are chosen by \
                     --budget)",
                ));
            }
            Some(GroupBudget::Share(share)) if !(share > 0.0 && share <= 1.0) => {
                return Err(fail(format!(
                    "--group-budget {share}: a share above 0 and at most 100%"
                )));
            }
            Some(GroupBudget::Groups(0)) => {
                return Err(fail("--group-budget 0: at least one group of each size"));
            }
            _ => {}
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
        self.launcher.check(&self.catalog.workloads).map_err(fail)?;
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
        for repetition in 0..self.solo_repetitions {
            for w in &names {
                solos.push(Task::Solo {
                    workload: (*w).to_string(),
                    repetition,
                });
            }
        }
        // (workloads, mode, shares) of every setting: pairs, then groups by size.
        let mut settings: Vec<(Vec<String>, Mode, Vec<Option<f64>>)> = Vec::new();
        for size in 2..=self.group_size.max(2) {
            let mut all = multisets(names.len(), size);
            if size > 2
                && let Some(budget) = self.group_budget
            {
                // Seeded by the campaign and the size alone: every shard chooses the same.
                let mut rng = duet_core::rng::Rng::new(self.seed ^ (0x6_0A_u64 << 8) ^ size as u64);
                let mut chosen =
                    design::balanced(&all, names.len(), budget.count(all.len()), &mut rng);
                chosen.sort_unstable();
                all = chosen.into_iter().map(|g| all[g].clone()).collect();
            }
            for members in all {
                let workloads: Vec<String> =
                    members.iter().map(|&i| names[i].to_string()).collect();
                for &mode in &self.modes {
                    let shares: Vec<Option<f64>> = if mode == Mode::Mps {
                        self.shares.iter().map(|&s| Some(s)).collect()
                    } else {
                        vec![None]
                    };
                    for share in shares {
                        settings.push((workloads.clone(), mode, vec![share; size]));
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
            for (workloads, mode, shares) in &settings {
                pairs.push(match workloads.as_slice() {
                    [a, b] => Task::Pair {
                        a: a.clone(),
                        b: b.clone(),
                        mode: *mode,
                        share_a: shares[0],
                        share_b: shares[1],
                        repetition,
                    },
                    _ => Task::Group {
                        workloads: workloads.clone(),
                        mode: *mode,
                        shares: shares.clone(),
                        repetition,
                    },
                });
            }
        }
        let mut rng = duet_core::rng::Rng::new(self.seed);
        rng.shuffle(&mut solos);
        rng.shuffle(&mut pairs);
        // Stable: the seeded order stays within each mode, and pairs come before the groups
        // of that mode, smaller groups first.
        pairs.sort_by_key(|t| {
            (
                t.mode()
                    .and_then(|m| self.modes.iter().position(|x| *x == m)),
                t.workloads().len(),
            )
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
        tasks.retain(|t| t.mode().is_none_or(|m| session.modes().contains(&m)));
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
        Task::Group {
            workloads,
            mode,
            shares,
            repetition,
        } => format!(
            "{} {mode}{} (repetition {})",
            workloads.join(" + "),
            shares[0].map_or(String::new(), |s| format!(" {s}%")),
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
mod tests;
