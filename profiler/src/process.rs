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
    /// Whether the launcher can start what `workloads` need, asked once before anything runs
    /// (each run would fail the same way, found only as every one of them crashed): the CPU set
    /// `taskset` must take, and CUDA in this build where a built-in runs on a GPU.
    pub fn check(&self, workloads: &[WorkloadSpec]) -> Result<(), String> {
        if let Some(cpus) = &self.cpu_set {
            let tried = Command::new("taskset")
                .args(["-c", cpus, "true"])
                .stdout(Stdio::null())
                .output()
                .map_err(|e| format!("--cpu-set {cpus}: cannot run taskset: {e}"))?;
            if !tried.status.success() {
                return Err(format!(
                    "--cpu-set {cpus}: taskset refused it: {}",
                    String::from_utf8_lossy(&tried.stderr).trim()
                ));
            }
        }
        if let (Device::Cuda(_), false) = (self.device, cfg!(feature = "cuda"))
            && let Some(builtin) = workloads
                .iter()
                .find(|w| matches!(w.source, Source::Builtin { .. }))
        {
            return Err(format!(
                "--device {}: the built-in workload `{}` runs on the GPU through burn-cuda, and \
                 this duet was built without CUDA (build it with --features cuda; a catalog of \
                 commands alone runs on the GPU without it)",
                self.device, builtin.name
            ));
        }
        Ok(())
    }

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

    /// The rate of the iterations that finished within `[from, to]`, from their own arrival
    /// times ([`rate`]); `None` with fewer than two.
    pub fn rate_between(&self, from: Instant, to: Instant) -> Option<Rate> {
        let mut arrivals: Vec<f64> = self.ticks.lock().ok().map_or_else(Vec::new, |t| {
            t.iter()
                .filter(|&&x| x >= from && x <= to)
                .map(|x| (*x - from).as_secs_f64())
                .collect()
        });
        // Lines of stdout and stderr are timed by two threads: their order may interleave.
        arrivals.sort_by(f64::total_cmp);
        rate(&arrivals)
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

/// Fewest batches [`rate`] estimates a standard error from (4 degrees of freedom).
pub const MIN_BATCHES: usize = 5;

/// A throughput measured from the arrival times of a process's iteration lines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Iterations per second: the intervals between the first and the last line over the time
    /// between those two lines.
    pub per_second: f64,
    /// The estimated standard error of `per_second` relative to it (0.02: 2%); `None` with
    /// fewer than [`MIN_BATCHES`] intervals.
    pub relative_se: Option<f64>,
    /// Intervals between lines (lines minus one).
    pub intervals: usize,
}

impl Rate {
    /// The standard error in iterations per second.
    pub fn se(&self) -> Option<f64> {
        self.relative_se.map(|r| r * self.per_second)
    }
}

/// The rate of iterations whose lines arrived at `arrivals` (seconds, ascending), with its
/// relative standard error; `None` with fewer than two lines or no time between them.
///
/// The rate counts the `n` intervals between the first and last line over the time between
/// them, so it is not quantised by the window: counting lines over a window's length is off by
/// up to one iteration (a 2 it/s job in a 5 s window reads 1.8, 2.0 or 2.2 by phase alone).
///
/// The standard error comes from batch means: the `n` intervals are cut into
/// `a = max(MIN_BATCHES, floor(sqrt n))` consecutive batches of about `n / a` intervals, and the
/// spread of the batches' mean intervals, `sigma^2 = sum b_j (m_j - mu)^2 / (a - 1)`, gives
/// `se(mu) = sqrt(sigma^2 / n)` for the mean interval `mu`; the rate `1 / mu` has the same
/// relative error (delta method). Why batch means rather than the coefficient of variation of
/// single intervals over `sqrt n`: that formula holds for independent intervals, and iteration
/// times of co-located jobs are not independent. Time-slicing gives runs of slow iterations
/// (positively correlated: the independent formula is too small, and a window would stop too
/// early), and a job that writes its lines in bursts gives a long gap then near-zero gaps
/// (negatively correlated: too large). A batch of many consecutive intervals averages over such
/// structure, so batch means stay valid under it (Flegal and Jones 2010: batches growing as
/// `sqrt n` give a consistent estimate); with few intervals it falls back to batches of one
/// interval, the independent formula, because there is nothing to batch.
pub fn rate(arrivals: &[f64]) -> Option<Rate> {
    let (first, last) = (*arrivals.first()?, *arrivals.last()?);
    let n = arrivals.len() - 1;
    let span = last - first;
    if n == 0 || !(span > 0.0 && span.is_finite()) {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let (nf, mean) = (n as f64, span / n as f64);
    let relative_se = (n >= MIN_BATCHES).then(|| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let batches = ((nf.sqrt().floor() as usize).max(MIN_BATCHES)).min(n);
        let bound = |j: usize| j * n / batches;
        let mut sum = 0.0;
        for j in 0..batches {
            let (from, to) = (bound(j), bound(j + 1));
            #[allow(clippy::cast_precision_loss)]
            let size = (to - from) as f64;
            let batch_mean = (arrivals[to] - arrivals[from]) / size;
            sum += size * (batch_mean - mean).powi(2);
        }
        #[allow(clippy::cast_precision_loss)]
        let sigma2 = sum / (batches - 1) as f64;
        (sigma2 / nf).sqrt() / mean
    });
    Some(Rate {
        per_second: 1.0 / mean,
        relative_se,
        intervals: n,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Arrival times of a job at `rate` it/s with its first line at `phase`, the lines inside
    /// `[open, open + window]`.
    fn steady(rate: f64, phase: f64, open: f64, window: f64) -> Vec<f64> {
        (0..100_000)
            .map(|i| phase + f64::from(i) / rate)
            .filter(|t| *t >= open && *t <= open + window)
            .map(|t| t - open)
            .collect()
    }

    #[test]
    fn a_steady_job_reads_its_rate_whatever_the_window_phase() {
        for open in [0.0, 0.1, 0.25, 0.4, 0.49] {
            let lines = steady(2.0, 0.0, open, 5.0);
            // Counting lines over the window: 10 or 11 lines in 5 s, 2.0 or 2.2 it/s.
            #[allow(clippy::cast_precision_loss)]
            let counted = lines.len() as f64 / 5.0;
            assert!(counted == 2.0 || (counted - 2.2).abs() < 1e-9, "{counted}");
            let r = rate(&lines).expect("a rate");
            assert!((r.per_second - 2.0).abs() < 0.02, "{open}: {r:?}");
            // Steady: no spread at all between batches.
            assert!(r.relative_se.expect("enough intervals") < 1e-9, "{r:?}");
        }
        // Just over one interval short of a line: 1.8 it/s counted, still 2.0 measured.
        let lines = steady(2.0, 0.49, 0.0, 4.9);
        assert_eq!(lines.len(), 9);
        let r = rate(&lines).expect("a rate");
        assert!((r.per_second - 2.0).abs() < 0.02, "{r:?}");
    }

    #[test]
    fn jittered_intervals_give_the_rate_and_an_error_that_shrinks_with_time() {
        // Intervals uniform in [0.4, 0.6] s (mean 0.5, sd 0.0577): 2 it/s with 11.5% CV.
        let mut rng = duet_core::rng::Rng::new(3);
        let mut t = 0.0;
        let arrivals: Vec<f64> = (0..2_001)
            .map(|_| {
                let now = t;
                t += 0.4 + 0.2 * rng.unit();
                now
            })
            .collect();
        let short = rate(&arrivals[..11]).expect("10 intervals");
        let long = rate(&arrivals).expect("2,000 intervals");
        assert!((long.per_second - 2.0).abs() < 0.02, "{long:?}");
        // Independent intervals: the relative error is near CV / sqrt(n).
        let expected = 0.0577 / 0.5 / 2_000f64.sqrt();
        let got = long.relative_se.expect("an error");
        assert!(
            got > expected / 2.0 && got < expected * 2.0,
            "{got} vs {expected}"
        );
        assert!(short.relative_se.expect("an error") > got);
    }

    #[test]
    fn correlated_intervals_move_the_error_the_way_the_correlation_does() {
        // Time-slicing: runs of 20 iterations, each run fast (0.01 s) or slow (0.03 s) by a
        // coin: 100 runs, so the mean interval (0.02 s) is known to about 0.01 / sqrt(100).
        let mut rng = duet_core::rng::Rng::new(11);
        let mut t = 0.0;
        let mut arrivals = vec![0.0];
        for _ in 0..100 {
            let step = if rng.unit() < 0.5 { 0.01 } else { 0.03 };
            for _ in 0..20 {
                t += step;
                arrivals.push(t);
            }
        }
        let r = rate(&arrivals).expect("a rate");
        assert!((r.per_second - 50.0).abs() < 7.5, "{r:?}");
        // Intervals' CV is 50%: independent intervals would give 0.5 / sqrt(2000) = 1.1%, where
        // the runs make it about 5%; the batches (44 intervals) see the runs.
        let independent = 0.5 / 2_000f64.sqrt();
        let got = r.relative_se.expect("an error");
        assert!(got > 2.0 * independent && got < 0.1, "{got}");
        // Bursts of 10 lines at once every 0.1 s: one long gap and nine empty ones (CV 3), so
        // independent intervals would say 3 / sqrt(999) = 9.5%; the batches say less.
        let bursts: Vec<f64> = (0..1_000).map(|i| f64::from(i / 10) * 0.1).collect();
        let b = rate(&bursts).expect("a rate");
        assert!((b.per_second - 100.0).abs() < 1.5, "{b:?}");
        assert!(
            b.relative_se.expect("an error") < 3.0 / 999f64.sqrt() / 2.0,
            "{b:?}"
        );
    }

    #[test]
    fn too_few_lines_give_no_rate_or_no_error() {
        assert_eq!(rate(&[]), None);
        assert_eq!(rate(&[1.0]), None);
        assert_eq!(rate(&[1.0, 1.0]), None, "no time between the lines");
        let two = rate(&[0.0, 0.5]).expect("one interval");
        assert!((two.per_second - 2.0).abs() < 1e-12);
        assert_eq!(two.relative_se, None);
        assert_eq!(two.se(), None);
        let five = rate(&[0.0, 0.5, 1.0, 1.5, 2.1, 2.5]).expect("five intervals");
        assert!(five.relative_se.is_some_and(|r| r > 0.0), "{five:?}");
    }
}
