//! The journal: every finished measurement appended and synced before the next, the settings it
//! was started with, resuming from it, and the partial dataset a stopped campaign leaves.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self};
use std::path::{Path, PathBuf};

use duet_core::dataset::Status;
use duet_core::hash::{FNV_OFFSET, fnv1a};

use crate::gpu::GpuCounters;

use super::assemble::samples_of;
use super::*;

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

    /// Records the settings and the `plan` (the full grid, or a budgeted campaign's budget and
    /// selection) at the first start; refuses a resume whose settings or plan differ.
    pub(super) fn check_settings(&self, plan: &str) -> Result<(), CampaignError> {
        let path = self.journal_dir().join("settings.json");
        let mut now = self.settings();
        now.insert("plan", plan.to_string());
        match fs::read_to_string(&path) {
            Ok(text) => {
                let then: BTreeMap<String, String> = serde_json::from_str(&text)
                    .map_err(|e| fail(format!("{}: {e}", path.display())))?;
                for (name, value) in &now {
                    // Journals from before plans were recorded are full-grid campaigns.
                    let was = then
                        .get(*name)
                        .map(String::as_str)
                        .or((*name == "plan").then_some(FULL_GRID));
                    if was != Some(value.as_str()) {
                        return Err(fail(format!(
                            "--resume: the `{name}` setting differs from the interrupted campaign's \
                             ({} then, {value} now); rerun it with the same settings",
                            was.unwrap_or("unset")
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
            "PARTIAL ({} of {} measurements): {}",
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
