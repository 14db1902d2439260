//! The dataset format: a folder holding `dataset.json`, `workloads.parquet` and `pairs.parquet`,
//! and `groups.parquet` where three or more jobs were measured together.
//!
//! [`Dataset::read`] checks everything before it hands a dataset out; [`Dataset::write`] checks
//! again and writes into a temporary folder that is renamed into place only when complete, so a
//! reader never sees half a dataset.

pub mod compose;
mod error;
mod merge;
mod meta;
mod parquet;
mod summary;
mod types;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

pub use error::{DatasetError, Result};
pub use merge::merge;
pub use meta::{DatasetMeta, FORMAT, FeatureColumn, FeatureKind, Provenance, TableDigest};
pub use parquet::{
    GROUP_COLUMNS, GROUP_OPTIONAL_COLUMNS, PAIR_COLUMNS, PAIR_OPTIONAL_COLUMNS, WORKLOAD_COLUMNS,
    WORKLOAD_OPTIONAL_COLUMNS,
};
pub use summary::{GroupSizeCounts, ModeCounts, Quantiles, Summary};
pub use types::{
    FeatureValue, Group, GroupJob, JobKind, MAX_GROUP_SIZE, Mode, Pair, Sample, Status, Workload,
    slowdown, speed,
};

pub const META_FILE: &str = "dataset.json";
pub const WORKLOADS_FILE: &str = "workloads.parquet";
pub const PAIRS_FILE: &str = "pairs.parquet";
/// Optional: measurements of three or more jobs together ([`Group`] rows, one row per job).
/// Written only where a dataset has groups, so a dataset of pairs is the same files as ever.
pub const GROUPS_FILE: &str = "groups.parquet";
pub const LICENSE_FILE: &str = "LICENSE";
/// Optional: raw counter series (`Sample` rows), written by the profiler.
pub const SAMPLES_FILE: &str = "samples.parquet";
/// Optional: a budgeted campaign's record (which settings were chosen, by which rule, in which
/// round, and the audit), written with the dataset by `duet-campaign`. Readers of the tables
/// ignore it; `duet dataset merge` does not carry it into the merged dataset (its audit speaks
/// for one campaign's unmeasured settings only).
pub const CAMPAIGN_FILE: &str = "campaign.json";
/// How the description of a stopped campaign's partial dataset begins (`PARTIAL (n of m
/// measurements): ...`): it holds some of its grid, which a replay must not take for all
/// ([`DatasetMeta::is_partial`]).
pub const PARTIAL_MARK: &str = "PARTIAL (";

/// A whole dataset in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub meta: DatasetMeta,
    pub workloads: Vec<Workload>,
    pub pairs: Vec<Pair>,
    /// Settings of three or more jobs (`groups.parquet`); empty in a dataset of pairs.
    pub groups: Vec<Group>,
}

/// One job of a successful group: how fast it ran next to the others.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpeed<'a> {
    pub group: &'a Group,
    /// The job's position in `group.jobs`.
    pub index: usize,
    /// Co-located throughput over solo throughput.
    pub speed: f64,
}

/// One job's side of a successful co-location: how fast it ran next to the other.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectedSpeed<'a> {
    pub pair: &'a Pair,
    /// The job whose speed this is.
    pub job: &'a str,
    /// The job next to it.
    pub other: &'a str,
    /// Co-located throughput over solo throughput.
    pub speed: f64,
    /// The speed's relative standard error, from the pair's and the solo run's windows (the
    /// two relative errors in quadrature: speed is their ratio); none where either row lacks
    /// its standard error.
    pub relative_se: Option<f64>,
}

/// `dir`'s `dataset.json`, parsed and checked alone, with its `tables` as listed (each a
/// table's name and a well-formed digest).
fn read_meta(dir: &Path) -> Result<DatasetMeta> {
    let path = dir.join(META_FILE);
    let text = crate::input::read_text(&path).map_err(|e| DatasetError::new(&path, e))?;
    let meta: DatasetMeta = serde_json::from_str(&text)
        .map_err(|e| DatasetError::new(&path, format!("invalid: {e}")))?;
    validate::meta(&path, &meta)?;
    let tables = [WORKLOADS_FILE, PAIRS_FILE, GROUPS_FILE, SAMPLES_FILE];
    for (name, digest) in &meta.tables {
        let problem = if !tables.contains(&name.as_str()) {
            Some(format!(
                "`{name}` is not a table of a dataset ({})",
                tables.join(", ")
            ))
        } else if !digest.is_well_formed() {
            Some(format!(
                "`{name}`: fnv1a must be 16 lowercase hexadecimal digits"
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            return Err(DatasetError::new(&path, message).column("tables"));
        }
    }
    Ok(meta)
}

/// The counter series of `dir` (empty where it has none and `dataset.json` lists none), checked
/// against `digest`, its listing.
fn samples_listed(dir: &Path, digest: Option<&TableDigest>) -> Result<Vec<Sample>> {
    let path = dir.join(SAMPLES_FILE);
    if !path.is_file() && digest.is_none() {
        return Ok(Vec::new());
    }
    let frame = parquet::read_parquet(&path, digest)?;
    parquet::samples_from_frame(&frame, &path)
}

/// The sorted, distinct modes that `pairs` use: what `dataset.json` of a dataset of pairs lists
/// as `modes`.
pub fn modes_present(pairs: &[Pair]) -> Vec<Mode> {
    modes_of(pairs, &[])
}

/// The sorted, distinct modes that `pairs` and `groups` use: what `dataset.json` lists.
pub fn modes_of(pairs: &[Pair], groups: &[Group]) -> Vec<Mode> {
    pairs
        .iter()
        .map(|p| p.mode)
        .chain(groups.iter().map(|g| g.mode))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

impl Dataset {
    /// This dataset's workloads with `pairs` instead of its own (a subset of them, say) and no
    /// groups, and `dataset.json`'s modes those the new pairs use.
    pub fn with_pairs(&self, pairs: Vec<Pair>) -> Dataset {
        let mut meta = self.meta.clone();
        meta.modes = modes_present(&pairs);
        Dataset {
            meta,
            workloads: self.workloads.clone(),
            pairs,
            groups: Vec::new(),
        }
    }

    /// Reads and fully validates the dataset in `dir`.
    pub fn read(dir: &Path) -> Result<Dataset> {
        Ok(Dataset::read_listed(dir)?.0)
    }

    /// [`Dataset::read`] and [`Dataset::read_samples`] from one reading of `dataset.json`.
    pub fn read_with_samples(dir: &Path) -> Result<(Dataset, Vec<Sample>)> {
        let (dataset, listed) = Dataset::read_listed(dir)?;
        let samples = samples_listed(dir, listed.get(SAMPLES_FILE))?;
        Ok((dataset, samples))
    }

    /// The dataset in `dir`, read and validated, and the tables `dataset.json` lists.
    fn read_listed(dir: &Path) -> Result<(Dataset, BTreeMap<String, TableDigest>)> {
        if !dir.is_dir() {
            return Err(DatasetError::new(
                dir,
                "not a dataset folder (no such directory)",
            ));
        }
        let mut meta = read_meta(dir)?;
        let listed = std::mem::take(&mut meta.tables);
        let table = |name: &str| {
            let path = dir.join(name);
            parquet::read_parquet(&path, listed.get(name)).map(|frame| (frame, path))
        };

        let (frame, workloads_path) = table(WORKLOADS_FILE)?;
        let workloads = parquet::workloads_from_frame(&meta, &frame, &workloads_path)?;
        let (frame, pairs_path) = table(PAIRS_FILE)?;
        let pairs = parquet::pairs_from_frame(&meta, &frame, &pairs_path)?;
        let groups = if dir.join(GROUPS_FILE).is_file() || listed.contains_key(GROUPS_FILE) {
            let (frame, groups_path) = table(GROUPS_FILE)?;
            parquet::groups_from_frame(&frame, &groups_path)?
        } else {
            Vec::new()
        };

        let dataset = Dataset {
            meta,
            workloads,
            pairs,
            groups,
        };
        dataset.validate_tables(dir)?;
        Ok((dataset, listed))
    }

    /// Checks every rule of the format; errors name files as they would be inside `dir`.
    pub fn validate(&self, dir: &Path) -> Result<()> {
        validate::meta(&dir.join(META_FILE), &self.meta)?;
        self.validate_tables(dir)
    }

    fn validate_tables(&self, dir: &Path) -> Result<()> {
        validate::workloads(&dir.join(WORKLOADS_FILE), &self.meta, &self.workloads)?;
        validate::pairs(
            &dir.join(PAIRS_FILE),
            &self.meta,
            &self.workloads,
            &self.pairs,
        )?;
        validate::groups(
            &dir.join(GROUPS_FILE),
            &self.meta,
            &self.workloads,
            &self.groups,
        )?;
        let present = modes_of(&self.pairs, &self.groups);
        if present != self.meta.modes {
            let names: Vec<&str> = present.iter().map(|m| m.as_str()).collect();
            return Err(DatasetError::new(
                dir.join(META_FILE),
                format!(
                    "modes must list exactly the modes in {PAIRS_FILE} and {GROUPS_FILE}: [{}]",
                    names.join(", ")
                ),
            )
            .column("modes"));
        }
        Ok(())
    }

    /// Writes the dataset to the new folder `out`, atomically: it is built under a temporary
    /// name beside `out` and renamed into place only once complete. `out` must not exist.
    pub fn write(&self, out: &Path) -> Result<()> {
        self.write_with_samples(out, &[])
    }

    /// `write`, with the raw counter series in `samples.parquet` when `samples` is not empty;
    /// all of it appears at once or not at all.
    pub fn write_with_samples(&self, out: &Path, samples: &[Sample]) -> Result<()> {
        self.write_with_files(out, samples, &[])
    }

    /// `write_with_samples`, with more files of the dataset's own (name, text), such as
    /// [`CAMPAIGN_FILE`]; a name may not be one of the tables' or `dataset.json`.
    pub fn write_with_files(
        &self,
        out: &Path,
        samples: &[Sample],
        files: &[(&str, String)],
    ) -> Result<()> {
        crate::atomic::refuse_existing(out, |p, m| DatasetError::new(p, m))?;
        self.validate(out)?;
        let own = [
            META_FILE,
            WORKLOADS_FILE,
            PAIRS_FILE,
            GROUPS_FILE,
            LICENSE_FILE,
            SAMPLES_FILE,
        ];
        if let Some((name, _)) = files
            .iter()
            .find(|(n, _)| own.contains(n) || n.is_empty() || n.contains(['/', '\\']))
        {
            return Err(DatasetError::new(
                out.join(name),
                "not a name an extra file of a dataset may have",
            ));
        }
        let file = out.join(SAMPLES_FILE);
        if let Some(bad) = samples
            .iter()
            .find(|s| !s.t.is_finite() || !s.value.is_finite())
        {
            return Err(DatasetError::new(
                file,
                format!(
                    "a non-finite reading of `{}` in run {}",
                    bad.counter, bad.run
                ),
            ));
        }
        crate::atomic::write_folder(
            out,
            |p, m| DatasetError::new(p, m),
            |dir| {
                self.write_files(dir, samples)?;
                for (name, text) in files {
                    write_text(&dir.join(name), text)?;
                }
                Ok(())
            },
        )
    }

    /// Writes the tables (and `samples.parquet` where `samples` is not empty), then
    /// `dataset.json` listing each table's digest, then `LICENSE` where the source has one.
    fn write_files(&self, dir: &Path, samples: &[Sample]) -> Result<()> {
        let mut meta = self.meta.clone();
        meta.tables.clear();
        let mut write = |name: &str, frame: polars_core::prelude::PolarsResult<_>| {
            let path = dir.join(name);
            let frame = frame.map_err(|e| DatasetError::new(&path, e.to_string()))?;
            let digest = parquet::write_parquet(&path, frame)?;
            meta.tables.insert(name.to_string(), digest);
            Ok::<_, DatasetError>(())
        };
        write(
            WORKLOADS_FILE,
            parquet::workloads_frame(&self.meta, &self.workloads),
        )?;
        write(PAIRS_FILE, parquet::pairs_frame(&self.meta, &self.pairs))?;
        if !self.groups.is_empty() {
            write(GROUPS_FILE, parquet::groups_frame(&self.groups))?;
        }
        if !samples.is_empty() {
            write(SAMPLES_FILE, parquet::samples_frame(samples))?;
        }
        let mut json = serde_json::to_string_pretty(&meta)
            .map_err(|e| DatasetError::new(dir.join(META_FILE), e.to_string()))?;
        json.push('\n');
        write_text(&dir.join(META_FILE), &json)?;
        if let Some(text) = &self.meta.provenance.licence_text {
            write_text(&dir.join(LICENSE_FILE), text)?;
        }
        Ok(())
    }

    /// The raw counter series of the dataset folder `dir` (empty when it has none), checked
    /// against the digest `dataset.json` lists for it.
    pub fn read_samples(dir: &Path) -> Result<Vec<Sample>> {
        samples_listed(dir, read_meta(dir)?.tables.get(SAMPLES_FILE))
    }

    pub fn workload(&self, id: &str) -> Option<&Workload> {
        self.workloads.iter().find(|w| w.workload == id)
    }

    /// The solo throughput of each job of `group`, in its order; `None` where a job's workload
    /// has no solo row (validation refuses one).
    pub fn group_solos(&self, group: &Group) -> Option<Vec<f64>> {
        group
            .jobs
            .iter()
            .map(|j| self.workload(&j.workload).map(|w| w.solo_throughput))
            .collect()
    }

    /// Every job of every successful group with its speed; a group whose workload has no solo
    /// row is left out (validation refuses one).
    pub fn group_speeds(&self) -> Vec<GroupSpeed<'_>> {
        let solo: std::collections::HashMap<&str, f64> = self
            .workloads
            .iter()
            .map(|w| (w.workload.as_str(), w.solo_throughput))
            .collect();
        let mut out = Vec::new();
        for group in self.groups.iter().filter(|g| g.status == Status::Ok) {
            for (index, job) in group.jobs.iter().enumerate() {
                if let Some(&alone) = solo.get(job.workload.as_str()) {
                    out.push(GroupSpeed {
                        group,
                        index,
                        speed: speed(job.throughput, alone),
                    });
                }
            }
        }
        out
    }

    /// Both directions of every successful pair: the speed of `a` next to `b` and of `b` next
    /// to `a`. Infeasible and failed runs have no speed and are left out.
    pub fn directed_speeds(&self) -> Vec<DirectedSpeed<'_>> {
        let solo: std::collections::HashMap<&str, &Workload> = self
            .workloads
            .iter()
            .map(|w| (w.workload.as_str(), w))
            .collect();
        let relative = |se: Option<f64>, rate: f64| se.filter(|_| rate > 0.0).map(|e| e / rate);
        let mut out = Vec::with_capacity(self.pairs.len() * 2);
        for pair in self.pairs.iter().filter(|p| p.status == Status::Ok) {
            let (Some(solo_a), Some(solo_b)) =
                (solo.get(pair.a.as_str()), solo.get(pair.b.as_str()))
            else {
                continue;
            };
            for (job, other, rate, se, alone) in [
                (
                    &pair.a,
                    &pair.b,
                    pair.throughput_a,
                    pair.throughput_a_se,
                    solo_a,
                ),
                (
                    &pair.b,
                    &pair.a,
                    pair.throughput_b,
                    pair.throughput_b_se,
                    solo_b,
                ),
            ] {
                let relative_se = match (
                    relative(se, rate),
                    relative(alone.solo_throughput_se, alone.solo_throughput),
                ) {
                    (Some(x), Some(y)) => Some(x.hypot(y)),
                    _ => None,
                };
                out.push(DirectedSpeed {
                    pair,
                    job,
                    other,
                    speed: speed(rate, alone.solo_throughput),
                    relative_se,
                });
            }
        }
        out
    }
}

fn write_text(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|e| DatasetError::new(path, format!("cannot write: {e}")))
}
