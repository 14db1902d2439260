//! Observations a duet server stored (`POST /v1/observations`) turned into a dataset: what the
//! cluster measured on its own jobs becomes training data like any campaign's.
//!
//! Repeated observations of one setting (the same two jobs, in either order, on the same device
//! under the same mode and shares) are pooled: mean throughput, its standard deviation and the
//! number of observations; a group of three or more likewise (the same multiset of jobs and
//! shares, in any order), into `groups.parquet`. A job's solo throughput is pooled from its
//! observed solo runs and the solo throughputs reported beside co-locations; a setting without
//! an observed solo throughput for every one of its jobs has no speed to learn from, so it is
//! left out and counted. Each job's features are those the server resolved when it received the
//! latest observation of it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::api::{FeatureInput, Features, ObservationRecord};
use crate::dataset::{
    Dataset, DatasetMeta, FORMAT, FeatureColumn, FeatureKind, FeatureValue, Group, GroupJob,
    JobKind, Mode, Pair, Provenance, Status, Workload, modes_of,
};
use crate::features::canonical;

/// What the export needs beside the observations.
#[derive(Debug, Clone)]
pub struct ObservedExport {
    pub name: String,
    /// The device to export; `None`: the only one observed.
    pub gpu: Option<String>,
    /// Only observations made at or after this time (seconds since 1970).
    pub since_s: Option<f64>,
    /// Only observations made before this time.
    pub until_s: Option<f64>,
    /// Where the observations were read from (never with a password).
    pub store: String,
    /// The command that exported them.
    pub command: Option<String>,
    pub date: String,
}

/// What the export kept and left out.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExportSummary {
    /// Observations read from the store.
    pub read: usize,
    /// Observations outside the time range, or of another device.
    pub outside: usize,
    pub solo_runs: usize,
    /// Co-locations of two jobs.
    pub co_locations: usize,
    /// Co-locations of three to eight jobs.
    pub group_runs: usize,
    /// Distinct settings the pairs pooled into.
    pub settings: usize,
    /// Distinct settings the groups pooled into.
    pub group_settings: usize,
    /// Settings (of pairs and of groups) left out: no observed solo throughput for a job.
    pub settings_without_solo: usize,
    pub pairs_written: usize,
    pub groups_written: usize,
    pub workloads_written: usize,
    /// Workloads whose kind nobody gave (written as `train`).
    pub kind_unknown: usize,
}

/// One setting: `a` <= `b` by id, shares and throughputs in that order.
type SettingKey = (String, String, Mode, Option<u64>, Option<u64>);

#[derive(Default)]
struct Pooled {
    share_a: Option<f64>,
    share_b: Option<f64>,
    throughput_a: Vec<f64>,
    throughput_b: Vec<f64>,
}

/// One setting of a group: the mode and its jobs, sorted by (id, share), in that order.
type GroupKey = (Mode, Vec<(String, Option<u64>)>);

/// A group setting's throughputs, one list per job in the key's order.
struct PooledGroup {
    shares: Vec<Option<f64>>,
    throughputs: Vec<Vec<f64>>,
}

/// The latest-known description of one job.
struct Job {
    features: Features,
    kind: Option<JobKind>,
    at: f64,
}

fn mean_std(values: &[f64]) -> (f64, Option<f64>) {
    #[allow(clippy::cast_precision_loss)]
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.len() > 1)
        .then(|| (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt());
    (mean, std)
}

fn count(n: usize) -> Option<u32> {
    u32::try_from(n).ok()
}

/// The dataset of `records` (every stored observation, in any order), or why there is none.
pub fn dataset(
    records: &[ObservationRecord],
    options: &ObservedExport,
) -> Result<(Dataset, ExportSummary), String> {
    let mut summary = ExportSummary {
        read: records.len(),
        ..ExportSummary::default()
    };
    let in_range: Vec<&ObservationRecord> = records
        .iter()
        .filter(|r| options.since_s.is_none_or(|s| r.observed_at_s >= s))
        .filter(|r| options.until_s.is_none_or(|u| r.observed_at_s < u))
        .collect();
    let mut devices: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &in_range {
        *devices.entry(r.observation.gpu.as_str()).or_insert(0) += 1;
    }
    let gpu = match (&options.gpu, devices.len()) {
        (Some(g), _) => g.clone(),
        (None, 1) => devices
            .keys()
            .next()
            .map(|g| (*g).to_string())
            .unwrap_or_default(),
        (None, 0) => String::new(),
        (None, _) => {
            let list: Vec<String> = devices.iter().map(|(g, n)| format!("{g} ({n})")).collect();
            return Err(format!(
                "observations of several devices: {}; a dataset holds one, so give --gpu",
                list.join(", ")
            ));
        }
    };
    let chosen: Vec<&ObservationRecord> = in_range
        .into_iter()
        .filter(|r| r.observation.gpu == gpu)
        .collect();
    summary.outside = records.len() - chosen.len();
    if chosen.is_empty() {
        return Err(format!(
            "no observations{}{} to export (read {})",
            if gpu.is_empty() {
                String::new()
            } else {
                format!(" of {gpu}")
            },
            if options.since_s.is_some() || options.until_s.is_some() {
                " in the time range"
            } else {
                ""
            },
            records.len()
        ));
    }
    let mut solo: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut jobs: BTreeMap<String, Job> = BTreeMap::new();
    let mut settings: BTreeMap<SettingKey, Pooled> = BTreeMap::new();
    let mut group_settings: BTreeMap<GroupKey, PooledGroup> = BTreeMap::new();
    let mut servers = BTreeSet::new();
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for r in &chosen {
        let o = &r.observation;
        servers.insert(r.server.as_str());
        first = first.min(r.observed_at_s);
        last = last.max(r.observed_at_s);
        let mut note = |id: &str, features: &Features, kind: Option<JobKind>| {
            let newer = jobs.get(id).is_none_or(|j| j.at <= r.observed_at_s);
            if newer {
                jobs.insert(
                    id.to_string(),
                    Job {
                        features: features.clone(),
                        kind,
                        at: r.observed_at_s,
                    },
                );
            }
        };
        note(&r.workload_a, &r.features_a, r.kind_a);
        let (Some(b), Some(features_b), Some(mode), Some(throughput_b)) = (
            r.workload_b.as_ref(),
            r.features_b.as_ref(),
            o.mode,
            o.throughput_b,
        ) else {
            summary.solo_runs += 1;
            solo.entry(r.workload_a.clone())
                .or_default()
                .push(o.throughput_a);
            continue;
        };
        note(b, features_b, r.kind_b);
        for (id, reported) in [
            (&r.workload_a, o.solo_throughput_a),
            (b, o.solo_throughput_b),
        ] {
            if let Some(v) = reported {
                solo.entry(id.clone()).or_default().push(v);
            }
        }
        if !o.others.is_empty() {
            summary.group_runs += 1;
            let mut members = vec![
                (r.workload_a.clone(), o.share_a, o.throughput_a),
                (b.clone(), o.share_b, throughput_b),
            ];
            for (job, record) in o.others.iter().zip(&r.others) {
                note(&record.workload, &record.features, record.kind);
                if let Some(v) = job.solo_throughput {
                    solo.entry(record.workload.clone()).or_default().push(v);
                }
                members.push((record.workload.clone(), job.share, job.throughput));
            }
            members
                .sort_by(|x, y| (&x.0, x.1.map(f64::to_bits)).cmp(&(&y.0, y.1.map(f64::to_bits))));
            let key = (
                mode,
                members
                    .iter()
                    .map(|(id, share, _)| (id.clone(), share.map(f64::to_bits)))
                    .collect(),
            );
            let pooled = group_settings.entry(key).or_insert_with(|| PooledGroup {
                shares: members.iter().map(|m| m.1).collect(),
                throughputs: vec![Vec::new(); members.len()],
            });
            for (list, member) in pooled.throughputs.iter_mut().zip(&members) {
                list.push(member.2);
            }
            continue;
        }
        summary.co_locations += 1;
        let mut side = [
            (r.workload_a.clone(), o.share_a, o.throughput_a),
            (b.clone(), o.share_b, throughput_b),
        ];
        if side[0].0 > side[1].0 {
            side.swap(0, 1);
        }
        let [(a, share_a, ta), (b, share_b, tb)] = side;
        let key = (
            a,
            b,
            mode,
            share_a.map(f64::to_bits),
            share_b.map(f64::to_bits),
        );
        let pooled = settings.entry(key).or_default();
        pooled.share_a = share_a;
        pooled.share_b = share_b;
        pooled.throughput_a.push(ta);
        pooled.throughput_b.push(tb);
    }
    summary.settings = settings.len();
    let mut pairs = Vec::new();
    let mut used = BTreeSet::new();
    for ((a, b, mode, _, _), pooled) in settings {
        if !(solo.contains_key(&a) && solo.contains_key(&b)) {
            summary.settings_without_solo += 1;
            continue;
        }
        let (throughput_a, throughput_a_std) = mean_std(&pooled.throughput_a);
        let (throughput_b, throughput_b_std) = mean_std(&pooled.throughput_b);
        used.insert(a.clone());
        used.insert(b.clone());
        pairs.push(Pair {
            a,
            b,
            gpu: gpu.clone(),
            mode,
            share_a: pooled.share_a,
            share_b: pooled.share_b,
            throughput_a,
            throughput_b,
            throughput_a_std,
            throughput_b_std,
            throughput_a_se: None,
            throughput_b_se: None,
            repetitions: count(pooled.throughput_a.len()),
            status: Status::Ok,
            note: None,
            counters: BTreeMap::new(),
        });
    }
    summary.group_settings = group_settings.len();
    let mut groups = Vec::new();
    for ((mode, members), pooled) in group_settings {
        if !members.iter().all(|(id, _)| solo.contains_key(id)) {
            summary.settings_without_solo += 1;
            continue;
        }
        let jobs = members
            .into_iter()
            .zip(pooled.shares)
            .zip(&pooled.throughputs)
            .map(|(((workload, _), share), runs)| {
                let (throughput, throughput_std) = mean_std(runs);
                GroupJob {
                    workload,
                    share,
                    throughput,
                    throughput_std,
                    throughput_se: None,
                }
            })
            .collect();
        groups.push(Group {
            gpu: gpu.clone(),
            mode,
            jobs,
            repetitions: pooled.throughputs.first().and_then(|r| count(r.len())),
            status: Status::Ok,
            note: None,
        });
    }
    // Workloads with an observed solo throughput: every one in a pair or a group, and those
    // seen alone.
    let columns = feature_columns(jobs.values().map(|j| &j.features));
    let mut workloads = Vec::new();
    for (id, runs) in &solo {
        let Some(job) = jobs.get(id) else {
            continue;
        };
        let (solo_throughput, solo_throughput_std) = mean_std(runs);
        if job.kind.is_none() {
            summary.kind_unknown += 1;
        }
        let features = columns
            .iter()
            .map(|c| {
                let value = job
                    .features
                    .get(c.name.as_str())
                    .unwrap_or(&FeatureInput::Null);
                let v = match (c.kind, value) {
                    (FeatureKind::Numeric, FeatureInput::Number(v)) => {
                        FeatureValue::Number(Some(*v))
                    }
                    (FeatureKind::Numeric, _) => FeatureValue::Number(None),
                    (FeatureKind::Categorical, FeatureInput::Text(t)) => {
                        FeatureValue::Category(Some(t.clone()))
                    }
                    (FeatureKind::Categorical, FeatureInput::Number(v)) => {
                        FeatureValue::Category(Some(v.to_string()))
                    }
                    (FeatureKind::Categorical, FeatureInput::Null) => FeatureValue::Category(None),
                };
                (c.name.clone(), v)
            })
            .collect();
        workloads.push(Workload {
            workload: id.clone(),
            kind: job.kind.unwrap_or(JobKind::Train),
            solo_throughput,
            solo_throughput_std,
            solo_throughput_se: None,
            repetitions: count(runs.len()),
            features,
        });
    }
    summary.pairs_written = pairs.len();
    summary.groups_written = groups.len();
    summary.workloads_written = workloads.len();
    let range = format!(
        "{} to {}",
        crate::timestamp::rfc3339(first),
        crate::timestamp::rfc3339(last)
    );
    let servers: Vec<&str> = servers.into_iter().collect();
    let meta = DatasetMeta {
        format: FORMAT.to_string(),
        name: options.name.clone(),
        description: format!(
            "Co-locations observed on {gpu} by the cluster and reported to duet, {range}: {} \
             co-locations of two jobs pooled into {} settings and {} of three or more into {} \
             ({} settings left out without an observed solo throughput for every job), {} solo \
             runs.",
            summary.co_locations,
            summary.settings,
            summary.group_runs,
            summary.group_settings,
            summary.settings_without_solo,
            summary.solo_runs
        ),
        provenance: Provenance {
            source: format!("observed: {}, observations made {range}", options.store),
            gpu: gpu.clone(),
            driver: None,
            host: Some(servers.join(", ")),
            measured_by: "the cluster's scheduler, reporting what its jobs did (POST \
                          /v1/observations)"
                .to_string(),
            tool: format!("duet {} (`duet dataset export`)", env!("CARGO_PKG_VERSION")),
            command: options.command.clone(),
            date: options.date.clone(),
            licence: "unspecified".to_string(),
            licence_text: None,
        },
        workload_features: columns,
        pair_counters: Vec::new(),
        modes: modes_of(&pairs, &groups),
        tables: Default::default(),
    };
    let dataset = Dataset {
        meta,
        workloads,
        pairs,
        groups,
    };
    dataset
        .validate(Path::new(&options.name))
        .map_err(|e| e.to_string())?;
    Ok((dataset, summary))
}

/// The declared feature columns of the jobs' features (`solo_throughput` is a column of its
/// own): numeric where every value given is a number, else categorical.
fn feature_columns<'a>(features: impl Iterator<Item = &'a Features>) -> Vec<FeatureColumn> {
    let mut kinds: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for f in features {
        for (name, value) in f {
            if name == "solo_throughput" {
                continue;
            }
            let seen = kinds.entry(name.to_string()).or_insert((false, false));
            match value {
                FeatureInput::Number(_) => seen.0 = true,
                FeatureInput::Text(_) => seen.1 = true,
                FeatureInput::Null => {}
            }
        }
    }
    kinds
        .into_iter()
        .map(|(name, (number, text))| {
            let kind = if number && !text {
                FeatureKind::Numeric
            } else {
                FeatureKind::Categorical
            };
            match canonical(&name).filter(|c| c.kind == kind) {
                Some(c) => c,
                None => FeatureColumn {
                    meaning: format!("`{name}` as registered with the duet server"),
                    name,
                    kind,
                    unit: None,
                },
            }
        })
        .collect()
}
