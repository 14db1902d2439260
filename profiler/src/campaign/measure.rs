//! One measurement: the processes of a task started together, warmed up, sampled over the
//! shared window (process, NVML, GPM and per-process counters) that lasts until every rate is
//! known to the campaign's precision, and the MPS probe.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use duet_core::dataset::{Mode, Status};

use crate::catalog::{Source, WorkloadSpec};
use crate::gpu::GpuCounters;
use crate::mps::MpsDaemon;
use crate::process::{ProcSample, Running, Usage, proc_sample, usage};

use super::*;

impl Campaign {
    /// Runs one MPS client (the catalog's first built-in, else its first workload) until its
    /// first iteration, within `timeout`: clients that cannot reach the server may hang rather
    /// than fail. Then the daemon must list a server. `Ok` says what MPS answered.
    pub(super) fn probe_mps(
        &self,
        daemon: &MpsDaemon,
        interrupted: &AtomicBool,
    ) -> Result<String, String> {
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
    pub(super) fn check_solo_succeeded(
        &self,
        workload: &str,
        done: &BTreeMap<String, Record>,
    ) -> Result<(), CampaignError> {
        let solos: Vec<&Record> = done
            .values()
            .filter(|r| matches!(&r.task, Task::Solo { workload: w, .. } if w == workload))
            .collect();
        if solos.len() as u32 >= self.solo_repetitions
            && solos.iter().all(|r| r.status != Status::Ok)
        {
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

    pub(super) fn spec(&self, name: &str) -> Option<&WorkloadSpec> {
        self.catalog.get(name)
    }

    /// Runs one task's processes and measures them over the same window.
    pub(super) fn measure(
        &self,
        task: &Task,
        gpu: Option<&GpuCounters>,
        mps: Option<&MpsDaemon>,
        interrupted: &AtomicBool,
    ) -> Record {
        let names = task.workloads();
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
            throughput_se: Vec::new(),
            window_seconds: None,
        };
        let under_mps = task.mode() == Some(Mode::Mps);
        let shares = if under_mps {
            task.shares()
        } else {
            vec![None; n]
        };
        let mut running = Vec::new();
        for (name, share) in names.iter().zip(shares) {
            let env = match mps {
                Some(d) if under_mps => d.client_env(share),
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
                throughput_se: measured.throughput_se,
                window_seconds: Some(measured.window_seconds),
            },
            Err((status, note)) => failed(status, note),
        };
        running.into_iter().for_each(Running::stop);
        record
    }

    /// Warm-up until every process has finished `warm_iterations` iterations and `warmup` has
    /// passed since the later of them, then the measured window, sampling `/proc` (and NVML)
    /// throughout it: at least `window`, then until every process's rate has a relative
    /// standard error of at most `precision` ([`precise_enough`]), at most `window_max`.
    pub(super) fn window_of(
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
            let elapsed = t0.elapsed();
            if elapsed >= self.window_max
                || (elapsed >= self.window && precise_enough(running, t0, self.precision))
            {
                break;
            }
            check_alive(running)?;
            stopped()?;
            // Never past the floor or the ceiling; a tick at most between precision checks.
            let next = if elapsed < self.window {
                self.window.saturating_sub(elapsed)
            } else {
                self.window_max.saturating_sub(elapsed)
            };
            std::thread::sleep(tick.min(next));
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
        let mut throughput_se = Vec::new();
        for r in running.iter() {
            let Some(rate) = r.rate_between(t0, t1) else {
                return Err((
                    Status::Timeout,
                    format!(
                        "`{}` finished {} iterations in the {:.1} s window, too few for a rate; \
                         lengthen --window-max",
                        r.name,
                        r.iterations_between(t0, t1),
                        (t1 - t0).as_secs_f64()
                    ),
                ));
            };
            throughputs.push(rate.per_second);
            throughput_se.push(rate.se());
        }
        Ok(Measured {
            throughputs,
            throughput_se,
            window_seconds: (t1 - t0).as_secs_f64(),
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
}

/// Whether every process's rate since `t0` has a relative standard error of at most
/// `precision` (a process with too few iterations for an error has not).
pub fn precise_enough(running: &[Running], t0: Instant, precision: f64) -> bool {
    let now = Instant::now();
    running.iter().all(|r| {
        r.rate_between(t0, now)
            .and_then(|rate| rate.relative_se)
            .is_some_and(|e| e <= precision)
    })
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

pub(super) fn usage_features(usages: &[Usage]) -> Vec<(&'static str, Option<f64>)> {
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

pub(super) fn check_alive(running: &mut [Running]) -> Result<(), (Status, String)> {
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
