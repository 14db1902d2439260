//! One workload as a running process: its iterations as timestamps read from its output, the
//! tail of its stderr, and (on Linux) its CPU time, resident memory and context switches from
//! `/proc`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::builtin::Device;
use crate::catalog::{Source, WorkloadSpec};

/// The line a built-in workload prints after every iteration in progress mode.
pub const ITERATION_LINE: &str = "duet-iteration";

/// Lines of stderr kept for the note of a failed run.
const STDERR_TAIL: usize = 20;

/// How to start a built-in: the duet binary that runs it, and the catalog it is read from.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub duet: PathBuf,
    pub catalog: PathBuf,
    pub device: Device,
    /// Pin every workload process to these CPUs (`taskset -c`), for example `0`: two jobs then
    /// time-slice one core, the CPU's analogue of sharing one GPU.
    pub cpu_set: Option<String>,
}

impl Launcher {
    fn command(&self, spec: &WorkloadSpec) -> Command {
        let mut c = self.unpinned(spec);
        if let Some(cpus) = &self.cpu_set {
            let mut pinned = Command::new("taskset");
            pinned
                .args(["-c", cpus])
                .arg(c.get_program())
                .args(c.get_args());
            c = pinned;
        }
        c
    }

    fn unpinned(&self, spec: &WorkloadSpec) -> Command {
        match &spec.source {
            Source::Builtin { .. } => {
                let mut c = Command::new(&self.duet);
                c.args(["workload", "run", &spec.name, "--progress", "--catalog"])
                    .arg(&self.catalog)
                    .args(["--device", &self.device.to_string()]);
                c
            }
            Source::Command { argv, .. } => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        }
    }
}

/// A started workload.
#[derive(Debug)]
pub struct Running {
    pub name: String,
    child: Child,
    ticks: Arc<Mutex<Vec<Instant>>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl Running {
    /// Starts `spec` with `env` added to its environment.
    pub fn start(
        launcher: &Launcher,
        spec: &WorkloadSpec,
        env: &[(String, String)],
    ) -> Result<Running, String> {
        let mut child = launcher
            .command(spec)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("workload `{}`: cannot start: {e}", spec.name))?;
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let pattern = match &spec.source {
            Source::Builtin { .. } => None,
            Source::Command { progress, .. } => Some(progress.clone()),
        };
        if let Some(out) = child.stdout.take() {
            let (ticks, pattern) = (ticks.clone(), pattern.clone());
            std::thread::spawn(move || count_lines(out, &ticks, pattern.as_ref(), None));
        }
        if let Some(err) = child.stderr.take() {
            let (ticks, stderr) = (ticks.clone(), stderr.clone());
            // Commands may report progress on stderr too; built-ins never do.
            std::thread::spawn(move || count_lines(err, &ticks, pattern.as_ref(), Some(&stderr)));
        }
        Ok(Running {
            name: spec.name.clone(),
            child,
            ticks,
            stderr,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Iterations finished so far.
    pub fn iterations(&self) -> usize {
        self.ticks.lock().map_or(0, |t| t.len())
    }

    /// When the `n`-th iteration (from 1) finished; `None` before it has.
    pub fn iteration_at(&self, n: usize) -> Option<Instant> {
        let i = n.checked_sub(1)?;
        self.ticks.lock().ok()?.get(i).copied()
    }

    /// Iterations finished within `[from, to]`.
    pub fn iterations_between(&self, from: Instant, to: Instant) -> usize {
        self.ticks
            .lock()
            .map_or(0, |t| t.iter().filter(|&&x| x >= from && x <= to).count())
    }

    /// `Some(description)` once the process has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot be waited for: {e}")),
        }
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    /// Stops the process (SIGKILL) and reaps it.
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn count_lines(
    stream: impl Read,
    ticks: &Mutex<Vec<Instant>>,
    pattern: Option<&regex::Regex>,
    tail: Option<&Mutex<VecDeque<String>>>,
) {
    let reader = BufReader::new(stream);
    for line in reader.split(b'\n') {
        let Ok(bytes) = line else { return };
        let now = Instant::now();
        let text = String::from_utf8_lossy(&bytes);
        let hit = match pattern {
            Some(p) => p.is_match(&text),
            None => tail.is_none() && text.trim_end() == ITERATION_LINE,
        };
        if hit && let Ok(mut t) = ticks.lock() {
            t.push(now);
        }
        if let Some(tail) = tail
            && let Ok(mut t) = tail.lock()
        {
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(text.into_owned());
        }
    }
}

/// One reading of a process's counters from `/proc`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    pub at: Instant,
    /// User plus system CPU time of the process and its reaped children, seconds.
    pub cpu_seconds: f64,
    pub rss_mib: f64,
    /// Voluntary plus involuntary context switches so far.
    pub context_switches: f64,
}

/// Reads `/proc/<pid>` (through `procfs`); `None` where there is no such process or no `/proc`
/// (not Linux).
pub fn proc_sample(pid: u32) -> Option<ProcSample> {
    let process = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?;
    let stat = process.stat().ok()?;
    let status = process.status().ok()?;
    // The process's own CPU time and that of the children it has reaped (a shell's commands).
    #[allow(clippy::cast_precision_loss)]
    let ticks = (stat.utime + stat.stime) as f64 + (stat.cutime + stat.cstime).max(0) as f64;
    #[allow(clippy::cast_precision_loss)]
    let per_second = procfs::ticks_per_second().max(1) as f64;
    #[allow(clippy::cast_precision_loss)]
    let switches = (status.voluntary_ctxt_switches.unwrap_or(0)
        + status.nonvoluntary_ctxt_switches.unwrap_or(0)) as f64;
    #[allow(clippy::cast_precision_loss)]
    let rss_kib = status.vmrss.unwrap_or(0) as f64;
    Some(ProcSample {
        at: Instant::now(),
        cpu_seconds: ticks / per_second,
        rss_mib: rss_kib / 1024.0,
        context_switches: switches,
    })
}

/// Counters of one process over a measured window.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// CPU time over wall time, percent of one core.
    pub cpu_util: f64,
    pub cpu_util_p95: f64,
    pub rss_mib: f64,
    pub rss_mib_p95: f64,
    pub context_switches_per_s: f64,
}

/// Aggregates periodic samples of one process: mean and p95 of the per-interval CPU use, of the
/// resident memory, and the context-switch rate over the whole window.
pub fn usage(samples: &[ProcSample]) -> Option<Usage> {
    let (first, last) = (samples.first()?, samples.last()?);
    let span = (last.at - first.at).as_secs_f64();
    if samples.len() < 2 || span <= 0.0 {
        return None;
    }
    let utils: Vec<f64> = samples
        .windows(2)
        .filter_map(|w| {
            let dt = (w[1].at - w[0].at).as_secs_f64();
            (dt > 0.0).then(|| 100.0 * (w[1].cpu_seconds - w[0].cpu_seconds) / dt)
        })
        .collect();
    let rss: Vec<f64> = samples.iter().map(|s| s.rss_mib).collect();
    Some(Usage {
        cpu_util: 100.0 * (last.cpu_seconds - first.cpu_seconds) / span,
        cpu_util_p95: p95(&utils),
        rss_mib: mean(&rss),
        rss_mib_p95: p95(&rss),
        context_switches_per_s: (last.context_switches - first.context_switches) / span,
    })
}

pub fn mean(xs: &[f64]) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let n = xs.len().max(1) as f64;
    xs.iter().sum::<f64>() / n
}

/// The 95th percentile by nearest rank (`duet_core::stats`).
pub fn p95(xs: &[f64]) -> f64 {
    duet_core::stats::quantile(xs, 0.95)
}
