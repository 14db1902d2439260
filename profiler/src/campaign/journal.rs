//! The journal: every finished measurement appended and synced before the next, the settings it
//! was started with, resuming from it, and the partial dataset a stopped campaign leaves.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self};
use std::path::{Path, PathBuf};

use duet_core::dataset::{PARTIAL_MARK, Status};
use duet_core::hash::{FNV_OFFSET, fnv1a};

use crate::gpu::GpuCounters;

use super::assemble::samples_of;
use super::*;

/// How a `workloads` setting's digest of a workload's
/// [`definition`](crate::catalog::WorkloadSpec::definition) begins (settings written before
/// it digested this duet's `Debug` text of the workload, a bare hex digest).
const DEFINITION: &str = "definition:";

impl Campaign {
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
    pub(super) fn settings(&self) -> BTreeMap<&'static str, String> {
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
            ("window-max", format!("{:?}", self.window_max)),
            ("precision", self.precision.to_string()),
            ("repetitions", self.repetitions.to_string()),
            ("device", self.launcher.device.to_string()),
            ("cpu-set", format!("{:?}", self.launcher.cpu_set)),
            ("seed", self.seed.to_string()),
            ("shard", format!("{:?}", self.shard)),
            ("workloads", self.workload_digests()),
        ])
        .into_iter()
        // Recorded only where groups are measured: journals of pairs stay resumable.
        .chain((self.group_size > 2).then(|| ("group-size", self.group_size.to_string())))
        .chain(
            self.group_budget
                .map(|b| ("group-budget", format!("{b:?}"))),
        )
        // Likewise only where the solos are repeated differently from the pairs.
        .chain(
            (self.solo_repetitions != self.repetitions)
                .then(|| ("solo-repetitions", self.solo_repetitions.to_string())),
        )
        .collect()
    }

    /// Each workload's [`definition`](crate::catalog::WorkloadSpec::definition), in the
    /// catalog's order: a JSON list of [name, `definition:` digest] (the `workloads` setting),
    /// so that a resume can tell which definitions changed. The order counts: it decides each
    /// pair's way round, the shards and the shuffle.
    fn workload_digests(&self) -> String {
        let digests: Vec<(&str, String)> = self
            .catalog
            .workloads
            .iter()
            .map(|w| {
                let hash = fnv1a(w.definition().as_bytes(), FNV_OFFSET);
                (w.name.as_str(), format!("{DEFINITION}{hash:016x}"))
            })
            .collect();
        serde_json::to_string(&digests).unwrap_or_default()
    }

    /// The digest settings written before 2026-12-08 recorded for `w`: of this duet's own
    /// `Debug` text of it, which a later duet may change; compared only with those settings.
    fn debug_digest(&self, name: &str) -> Option<String> {
        let w = self.catalog.get(name)?;
        Some(format!(
            "{:016x}",
            fnv1a(format!("{w:?}").as_bytes(), FNV_OFFSET)
        ))
    }

    fn settings_path(&self) -> PathBuf {
        self.journal_dir().join("settings.json")
    }

    /// Writes the settings and `plan` for later resumes to compare with, atomically.
    fn write_settings(&self, plan: &str) -> Result<(), CampaignError> {
        let path = self.settings_path();
        let mut now = self.settings();
        now.insert("plan", plan.to_string());
        let text = serde_json::to_string_pretty(&now).map_err(|e| fail(e.to_string()))?;
        replace_synced(&self.journal_dir(), &path, text.as_bytes())
    }

    /// Records the settings and the `plan` (the full grid, or a budgeted campaign's budget and
    /// selection) at the first start; refuses a resume whose settings or plan differ. A catalog
    /// that changed is no difference where its workloads are the same; where only some
    /// definitions changed, their names come back for [`resume_changed`](Self::resume_changed)
    /// to judge against the journal.
    pub(super) fn check_settings(&self, plan: &str) -> Result<BTreeSet<String>, CampaignError> {
        let path = self.settings_path();
        let mut now = self.settings();
        now.insert("plan", plan.to_string());
        let journal = self.journal_path();
        let measured = fs::metadata(&journal).is_ok_and(|m| m.len() > 0);
        let text = match fs::read_to_string(&path) {
            // Settings of a campaign that measured nothing (it stopped before its first run:
            // no mode left, say) bind nothing: this campaign's are written over them.
            Ok(_) if !measured => {
                self.write_settings(plan)?;
                return Ok(BTreeSet::new());
            }
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if measured {
                    return Err(fail(format!(
                        "--resume: {} holds measurements, and {} is missing: which settings made \
                         them cannot be told; delete {} to start again",
                        journal.display(),
                        path.display(),
                        self.journal_dir().display()
                    )));
                }
                self.write_settings(plan)?;
                return Ok(BTreeSet::new());
            }
            Err(e) => return Err(fail(format!("{}: {e}", path.display()))),
        };
        let then: BTreeMap<String, String> =
            serde_json::from_str(&text).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        // Each workload's definition is compared whether or not the catalog's bytes changed: a
        // duet whose defaults differ runs other programs from the same catalog.
        let changed = match then.get("workloads") {
            Some(was) => changed_workloads(was, &now["workloads"], &path, &|name| {
                self.debug_digest(name)
            })?,
            None => BTreeSet::new(),
        };
        for (name, value) in &now {
            if *name == "workloads" {
                continue;
            }
            // Journals from before plans were recorded are full-grid campaigns.
            let was = then
                .get(*name)
                .map(String::as_str)
                .or((*name == "plan").then_some(FULL_GRID));
            if was == Some(value.as_str()) {
                continue;
            }
            if *name == "catalog" && then.contains_key("workloads") {
                continue;
            }
            return Err(fail(format!(
                "--resume: the `{name}` setting differs from the interrupted campaign's \
                 ({} then, {value} now); rerun it with the same settings",
                was.unwrap_or("unset")
            )));
        }
        Ok(changed)
    }

    /// Where the catalog changed the definitions of `changed` since the journal began: their
    /// measurements go (they measured other programs under the same names) where none of them
    /// succeeded, so that a workload that failed every run can be fixed in the catalog and the
    /// campaign resumed; else the resume is refused, naming them. The journal and the settings
    /// are rewritten for the new catalog.
    pub(super) fn resume_changed(
        &self,
        changed: &BTreeSet<String>,
        plan: &str,
        done: BTreeMap<String, Record>,
        progress: &mut dyn Progress,
    ) -> Result<BTreeMap<String, Record>, CampaignError> {
        if changed.is_empty() {
            return Ok(done);
        }
        let touches = |r: &Record| r.task.workloads().iter().any(|w| changed.contains(*w));
        // Every shard measures every workload alone, the others with the old definition: a
        // merge would pool two programs' solo runs under one name, whatever this journal holds.
        if let Some((i, n)) = self.shard {
            return Err(fail(format!(
                "--resume: {} defined differently in {} than when shard {i}/{n} began; the other \
                 shards measure the definition it began with, and merging them would pool two \
                 programs under one name: put it back to resume",
                list_names(changed),
                self.catalog.path.display()
            )));
        }
        for name in changed {
            let ok = done
                .values()
                .filter(|r| r.status == Status::Ok && r.task.workloads().contains(&name.as_str()))
                .count();
            if ok > 0 {
                return Err(fail(format!(
                    "--resume: workload `{name}` is defined differently in {} than when the \
                     campaign began, and {ok} of the journal's measurements of it succeeded: \
                     they would mix two programs under one name; put its definition back to \
                     resume (and measure the new one under a new name with `duet profile \
                     --onto` the finished dataset)",
                    self.catalog.path.display()
                )));
            }
        }
        let (gone, kept): (Vec<Record>, Vec<Record>) = done.into_values().partition(touches);
        let path = self.journal_path();
        let mut text = String::new();
        for r in &kept {
            text.push_str(&serde_json::to_string(r).map_err(|e| fail(e.to_string()))?);
            text.push('\n');
        }
        replace_synced(&self.journal_dir(), &path, text.as_bytes())?;
        self.write_settings(plan)?;
        let names = list_names(changed);
        progress.line(&if gone.is_empty() {
            format!("--resume: {names} redefined in the catalog, before any measurement of it")
        } else {
            format!(
                "--resume: {names} redefined in the catalog; its {} failed measurements run again",
                gone.len()
            )
        });
        Ok(kept.into_iter().map(|r| (r.key.clone(), r)).collect())
    }

    /// The campaign's error for a stop before the end, after writing what the journal holds as
    /// a partial dataset (the workloads with a successful solo run and the pairs among them);
    /// the message says where, or why there is none.
    pub(super) fn stop_early(
        &self,
        done: &BTreeMap<String, Record>,
        gpu: Option<&GpuCounters>,
        message: String,
        planned: Option<usize>,
    ) -> CampaignError {
        let said = match self.write_partial(done, gpu, planned) {
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

    /// Writes the partial dataset, its description counting the journal's measurements against
    /// `planned` (the whole grid's where `None`); `None` where no workload has run alone
    /// successfully yet.
    pub(super) fn write_partial(
        &self,
        done: &BTreeMap<String, Record>,
        gpu: Option<&GpuCounters>,
        planned: Option<usize>,
    ) -> Result<Option<(usize, usize)>, String> {
        let (partial, kept) = self.partial(done);
        if partial.catalog.workloads.is_empty() {
            return Ok(None);
        }
        let mut dataset = partial.build(&kept, gpu).map_err(|e| e.0)?;
        dataset.meta.description = format!(
            "{PARTIAL_MARK}{} of {} measurements): {}",
            kept.len(),
            planned.unwrap_or_else(|| self.tasks().len()),
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
    pub(super) fn partial(
        &self,
        done: &BTreeMap<String, Record>,
    ) -> (Campaign, BTreeMap<String, Record>) {
        let measured: BTreeSet<&str> = done
            .values()
            .filter(|r| r.status == Status::Ok)
            .filter_map(|r| match &r.task {
                Task::Solo { workload, .. } => Some(workload.as_str()),
                Task::Pair { .. } | Task::Group { .. } => None,
            })
            .chain(self.known_solos.iter().map(|w| w.workload.as_str()))
            .collect();
        let mut partial = self.clone();
        partial
            .catalog
            .workloads
            .retain(|w| measured.contains(w.name.as_str()));
        let kept = done
            .iter()
            .filter(|(_, r)| r.task.workloads().iter().all(|w| measured.contains(w)))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        (partial, kept)
    }
}

/// `a`, `b`: names as messages list them.
fn list_names(names: &BTreeSet<String>) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Replaces `path` (in `dir`) with `bytes` whole: written beside it, synced, renamed over it,
/// and the folder synced, as the journal's appends are synced before the next measurement.
fn replace_synced(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), CampaignError> {
    use std::io::Write;
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let staged = dir.join(format!(".{name}.new"));
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::create(&staged)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&staged, path)?;
        fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| fail(format!("{}: {e}", path.display())))
}

/// The workloads whose definitions differ between two `workloads` settings; refused where the
/// catalog's names or their order changed (the grid, its ways round and its shards would not be
/// the journal's).
fn changed_workloads(
    then: &str,
    now: &str,
    path: &Path,
    debug_digest: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeSet<String>, CampaignError> {
    let read = |text: &str| {
        serde_json::from_str::<Vec<(String, String)>>(text)
            .map_err(|e| fail(format!("{}: `workloads`: {e}", path.display())))
    };
    let (then, now) = (read(then)?, read(now)?);
    let names = |m: &[(String, String)]| m.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    if names(&then) != names(&now) {
        let set = |m: &[(String, String)]| names(m).into_iter().collect::<BTreeSet<_>>();
        let list = |s: BTreeSet<String>| {
            if s.is_empty() {
                "none".to_string()
            } else {
                list_names(&s)
            }
        };
        let (added, gone) = (&set(&now) - &set(&then), &set(&then) - &set(&now));
        let what = if added.is_empty() && gone.is_empty() {
            "their order differs (it decides each pair's way round and each shard's pairs)"
                .to_string()
        } else {
            format!("added: {}; gone: {}", list(added), list(gone))
        };
        return Err(fail(format!(
            "--resume: the catalog's workloads differ from the interrupted campaign's ({what}); \
             a resumed campaign measures the grid it began: rerun it with that catalog's \
             workloads, in its order (and measure new ones with `duet profile --onto` the \
             finished dataset)"
        )));
    }
    Ok(now
        .into_iter()
        .zip(then)
        .filter(|((name, is), (_, was))| {
            if was.starts_with(DEFINITION) {
                is != was
            } else {
                debug_digest(name).as_ref() != Some(was)
            }
        })
        .map(|((name, _), _)| name)
        .collect())
}

pub(super) fn read_journal(path: &Path) -> Result<BTreeMap<String, Record>, CampaignError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(fail(format!("{}: {e}", path.display()))),
    };
    let mut done = BTreeMap::new();
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    for (i, line) in lines.iter().enumerate() {
        let record = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8 ({e})"))
            .and_then(|l| serde_json::from_str::<Record>(l).map_err(|e| e.to_string()))
            .and_then(checked);
        match record {
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

/// A journal record whose numbers fit its task: one throughput per process, each finite and not
/// negative (a line edited by hand, or written by something else, is named where it is read).
fn checked(r: Record) -> Result<Record, String> {
    let processes = r.task.workloads().len();
    if r.throughputs.len() != processes {
        return Err(format!(
            "{} throughputs for a run of {processes} processes",
            r.throughputs.len()
        ));
    }
    if let Some(t) = r.throughputs.iter().find(|t| !t.is_finite() || **t < 0.0) {
        return Err(format!("throughput {t} is not a rate (finite, at least 0)"));
    }
    Ok(r)
}
