//! A campaign session: the journal opened (or resumed), the signals watched, the MPS daemon and
//! the device counters started once, then any list of tasks measured through it, each appended
//! to the same journal before the next, and the dataset written at the end.
//!
//! The full grid ([`Campaign::run_with`]) measures its task list in one call; a budgeted
//! campaign (outside this crate, which never sees a model) measures every solo run, then each
//! round's chosen pairs, reading back the dataset of what the journal holds between rounds.

use std::fs::File;

use super::*;

/// The plan of a campaign that measures every setting of its shard: what `--resume` compares
/// for a campaign without a budget (and for journals written before plans were recorded).
pub const FULL_GRID: &str = "full grid";

/// An open campaign: what the journal holds, and the means to measure more.
#[derive(Debug)]
pub struct Session<'c> {
    campaign: &'c Campaign,
    done: BTreeMap<String, Record>,
    journal: File,
    gpu: Option<GpuCounters>,
    mps: Option<MpsDaemon>,
    interrupted: Arc<AtomicBool>,
    modes: Vec<Mode>,
    started: Instant,
    measured: usize,
    /// The planned measurements as the last [`Session::measure`] counted them (a budgeted
    /// campaign plans fewer than the grid): a partial dataset says how many of them it holds.
    planned: Option<usize>,
    /// The journal folder's lock, held while this session lives: a second campaign on the
    /// same output (a resume started twice) is refused instead of appending beside it. Last,
    /// so that it is let go after the MPS daemon (whose folders are the journal's) stops.
    _lock: File,
}

impl Campaign {
    /// Opens the campaign for measuring: checks it, locks its journal folder (refusing a
    /// campaign on the same output that is running now), creates or resumes its journal
    /// (refusing a resume whose measurement settings or `plan` differ), watches SIGINT and
    /// SIGTERM, starts the MPS daemon where the mps mode is asked for (dropping the mode, with a
    /// line, where it cannot run) and the device counters.
    pub fn open(
        &self,
        plan: &str,
        progress: &mut dyn Progress,
    ) -> Result<Session<'_>, CampaignError> {
        self.check()?;
        fs::create_dir_all(self.journal_dir())
            .map_err(|e| fail(format!("{}: {e}", self.journal_dir().display())))?;
        let lock = self.lock_journal()?;
        let changed = self.check_settings(plan)?;
        let done = read_journal(&self.journal_path())?;
        let done = self.resume_changed(&changed, plan, done, progress)?;
        // Ctrl-C or SIGTERM: stop after stopping the running workloads (a second one exits at
        // once); the journal keeps what finished.
        let interrupted = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            let _ =
                signal_hook::flag::register_conditional_shutdown(signal, 130, interrupted.clone());
            let _ = signal_hook::flag::register(signal, interrupted.clone());
        }
        let mps = if self.modes.contains(&Mode::Mps) {
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
                    progress.line(&said);
                    Some(daemon)
                }
                Err(why) => {
                    progress.line(&why);
                    None
                }
            }
        } else {
            None
        };
        let modes: Vec<Mode> = self
            .modes
            .iter()
            .copied()
            .filter(|m| *m != Mode::Mps || mps.is_some())
            .collect();
        if modes.is_empty() {
            return Err(fail("no mode left to measure (mps is unavailable here)"));
        }
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.journal_path())
            .map_err(|e| fail(format!("{}: {e}", self.journal_path().display())))?;
        let gpu = match self.launcher.device {
            Device::Cuda(index) => match GpuCounters::open(index) {
                Ok(g) => {
                    progress.line(&g.describe());
                    for why in [&g.gpm, &g.per_process]
                        .into_iter()
                        .filter_map(|r| r.as_ref().err())
                    {
                        progress.line(why);
                    }
                    Some(g)
                }
                Err(why) => {
                    progress.line(&why);
                    None
                }
            },
            Device::Cpu => None,
        };
        Ok(Session {
            campaign: self,
            done,
            journal,
            _lock: lock,
            gpu,
            mps,
            interrupted,
            modes,
            started: Instant::now(),
            measured: 0,
            planned: None,
        })
    }
}

impl Campaign {
    /// Locks the journal folder (an advisory `flock` on its `lock` file, let go when the
    /// process ends however it ends), or refuses: two campaigns appending to one journal
    /// would interleave their records, and a resume's rewrite of the journal would drop the
    /// other's.
    pub(super) fn lock_journal(&self) -> Result<File, CampaignError> {
        let path = self.journal_dir().join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => {
                // A campaign that ended between this one's checks and its lock wrote the output
                // and removed the folder (the lock file with it): nothing is left to resume.
                use std::os::unix::fs::MetadataExt;
                let still_there = match (file.metadata(), fs::metadata(&path)) {
                    (Ok(held), Ok(now)) => held.ino() == now.ino() && held.dev() == now.dev(),
                    _ => false,
                };
                if !still_there || self.out.exists() {
                    return Err(fail(format!(
                        "{}: the campaign that was measuring into it has just ended",
                        self.out.display()
                    )));
                }
                Ok(file)
            }
            Err(fs::TryLockError::WouldBlock) => Err(fail(format!(
                "{}: another campaign is measuring into {} now (it holds {}); wait for it to \
                 end, or stop it, before resuming",
                self.journal_dir().display(),
                self.out.display(),
                path.display()
            ))),
            Err(fs::TryLockError::Error(e)) => {
                Err(fail(format!("{}: cannot be locked: {e}", path.display())))
            }
        }
    }
}

impl Session<'_> {
    /// The modes this session measures (the campaign's, less mps where it cannot run).
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }

    /// Whether the journal holds `task`'s measurement.
    pub fn is_done(&self, task: &Task) -> bool {
        self.done.contains_key(&task.key())
    }

    /// Measurements the journal holds.
    pub fn measurements(&self) -> usize {
        self.done.len()
    }

    /// Whether SIGINT or SIGTERM arrived.
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// Measures the tasks of `tasks` the journal does not hold, in order, each appended to the
    /// journal and synced before the next. Progress lines count `[n/total]`, `n` from `already`
    /// (what the journal held of the plan before). A pair of a workload that failed every time
    /// it ran alone, or a signal, stops the campaign: the error says so and where the partial
    /// dataset of what the journal holds is.
    pub fn measure(
        &mut self,
        tasks: &[Task],
        already: usize,
        total: usize,
        progress: &mut dyn Progress,
    ) -> Result<(), CampaignError> {
        self.planned = Some(total);
        let todo: Vec<&Task> = tasks.iter().filter(|t| !self.is_done(t)).collect();
        for (k, task) in todo.into_iter().enumerate() {
            let position = already + k;
            progress.event(Event::Step {
                done: position as u64,
                now: &describe(task),
            });
            if self.interrupted() {
                return Err(self.stop_interrupted());
            }
            if task.mode().is_some() {
                for w in task.workloads() {
                    if let Err(e) = self.campaign.check_solo_succeeded(w, &self.done) {
                        return Err(self.stop(e.0));
                    }
                }
            }
            let record = self.campaign.measure(
                task,
                self.gpu.as_ref(),
                self.mps.as_ref(),
                &self.interrupted,
            );
            if let Some(g) = &self.gpu {
                for line in g.notes.drain() {
                    progress.line(&line);
                }
            }
            if self.interrupted() {
                return Err(self.stop_interrupted());
            }
            let mut line = serde_json::to_string(&record).map_err(|e| fail(e.to_string()))?;
            line.push('\n');
            self.journal
                .write_all(line.as_bytes())
                .and_then(|()| self.journal.sync_data())
                .map_err(|e| fail(format!("{}: {e}", self.campaign.journal_path().display())))?;
            self.measured += 1;
            #[allow(clippy::cast_precision_loss)]
            let eta = self.started.elapsed().as_secs_f64() / self.measured as f64
                * total.saturating_sub(position + 1) as f64;
            progress.line(&format!(
                "[{}/{total}] {}: {}{} (ETA {})",
                position + 1,
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
            self.done.insert(record.key.clone(), record);
        }
        Ok(())
    }

    /// Stops the campaign where every workload has not run alone successfully (the error says
    /// which and where the partial dataset is).
    pub fn require_solos(&mut self) -> Result<(), CampaignError> {
        for w in &self.campaign.catalog.workloads {
            if let Err(e) = self.campaign.check_solo_succeeded(&w.name, &self.done) {
                return Err(self.stop(e.0));
            }
        }
        Ok(())
    }

    /// The dataset of what the journal holds: the workloads with a successful solo run and
    /// every measured setting among them (what a budgeted campaign fits on between rounds).
    pub fn dataset(&self) -> Result<Dataset, CampaignError> {
        let (partial, kept) = self.campaign.partial(&self.done);
        partial.build(&kept, self.gpu.as_ref())
    }

    /// Stops the campaign early with `message`, after writing the partial dataset.
    pub fn stop(&mut self, message: String) -> CampaignError {
        drop(self.mps.take());
        self.campaign
            .stop_early(&self.done, self.gpu.as_ref(), message, self.planned)
    }

    /// The error of a campaign stopped by a signal.
    pub fn stop_interrupted(&mut self) -> CampaignError {
        let message = format!(
            "interrupted; {} measurements are in the journal, rerun with --resume to go on",
            self.done.len()
        );
        self.stop(message)
    }

    /// Ends the campaign: the MPS daemon quits, every workload must have run alone
    /// successfully, and the dataset of the whole journal is written to the campaign's output
    /// with `files` (name, text) beside its tables, all at once; the journal goes.
    pub fn finish(
        mut self,
        files: &[(&str, String)],
        progress: &mut dyn Progress,
    ) -> Result<Dataset, CampaignError> {
        // The daemon quits while its folders (under the journal's) still exist.
        if let Some(daemon) = self.mps.take()
            && let Err(why) = daemon.stop()
        {
            progress.line(&why);
        }
        self.require_solos()?;
        let dataset = self.campaign.build(&self.done, self.gpu.as_ref())?;
        dataset
            .write_with_files(&self.campaign.out, &samples_of(&self.done), files)
            .map_err(|e| fail(e.to_string()))?;
        let _ = fs::remove_dir_all(self.campaign.journal_dir());
        Ok(dataset)
    }
}
