//! The dataset from the journal: workloads from their solo runs, pairs from theirs, counters
//! and samples, checked like any other dataset.

use std::collections::{BTreeMap, BTreeSet};

use duet_core::dataset::{
    Dataset, DatasetMeta, FeatureColumn, FeatureKind, FeatureValue, Group, GroupJob, Mode, Pair,
    Provenance, Sample, Status, Workload,
};

use crate::gpu::GpuCounters;
use crate::process::Usage;

use super::measure::usage_features;
use super::*;

impl Campaign {
    /// The dataset of `done`, with the driver NVML reports.
    pub(super) fn build(
        &self,
        done: &BTreeMap<String, Record>,
        gpu: Option<&GpuCounters>,
    ) -> Result<Dataset, CampaignError> {
        let mut dataset = self.assemble(done)?;
        dataset.meta.provenance.driver = gpu.and_then(GpuCounters::driver);
        Ok(dataset)
    }

    /// The dataset from the journal's records.
    pub(super) fn assemble(
        &self,
        done: &BTreeMap<String, Record>,
    ) -> Result<Dataset, CampaignError> {
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
            if let Some(known) = self.known_solos.iter().find(|w| w.workload == spec.name) {
                workloads.push(known.clone());
                continue;
            }
            let ok: Vec<&Record> = done
                .values()
                .filter(|r| {
                    r.status == Status::Ok
                        && matches!(&r.task, Task::Solo { workload, .. } if *workload == spec.name)
                })
                .collect();
            let throughputs: Vec<f64> = ok.iter().map(|r| r.throughputs[0]).collect();
            let usages: Vec<Usage> = ok.iter().filter_map(|r| r.usage[0]).collect();
            let mut features = spec.defined_features();
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
                solo_throughput_se: mean_se(&ok, 0),
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
                throughput_a_se: if ok { mean_se(records, 0) } else { None },
                throughput_b_se: if ok { mean_se(records, 1) } else { None },
                repetitions: Some(u32::try_from(records.len()).unwrap_or(u32::MAX)),
                status,
                note,
                counters,
            });
        }
        let groups = self.groups_of(done);
        let modes: BTreeSet<Mode> = pairs
            .iter()
            .map(|p| p.mode)
            .chain(groups.iter().map(|g| g.mode))
            .collect();
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
                "co-location campaign by duet profile: {} workloads alone and in every pair{}, \
                 modes {}, {} repetitions{}, {:.1} s warm-up and measured windows of {:.1} s to \
                 {:.1} s, each until the rates' relative standard errors were at most {}%",
                self.catalog.workloads.len(),
                match (self.group_size, self.group_budget) {
                    (0..=2, _) => String::new(),
                    (3, None) => " and every group of three".to_string(),
                    (k, None) => format!(" and every group of three to {k}"),
                    (3, Some(b)) => format!(" and {} of the groups of three", b.describe()),
                    (k, Some(b)) => {
                        format!(
                            " and {} of the groups of each size from three to {k}",
                            b.describe()
                        )
                    }
                },
                self.modes
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.repetitions,
                if self.solo_repetitions == self.repetitions {
                    String::new()
                } else {
                    format!(" ({} of each workload alone)", self.solo_repetitions)
                },
                self.warmup.as_secs_f64(),
                self.window.as_secs_f64(),
                self.window_max.as_secs_f64(),
                self.precision * 100.0
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
            tables: Default::default(),
        };
        Ok(Dataset {
            meta,
            workloads,
            pairs,
            groups,
        })
    }

    /// The groups of three or more jobs in `done`: one per setting, each job's throughput the
    /// mean over the repetitions; a setting with a failed repetition is that failure.
    fn groups_of(&self, done: &BTreeMap<String, Record>) -> Vec<Group> {
        let mut settings: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
        for r in done.values() {
            if let Task::Group {
                workloads,
                mode,
                shares,
                ..
            } = &r.task
            {
                settings
                    .entry(format!("{}/{mode}/{shares:?}", workloads.join("+")))
                    .or_default()
                    .push(r);
            }
        }
        let mut groups = Vec::new();
        for records in settings.values() {
            let Task::Group {
                workloads,
                mode,
                shares,
                ..
            } = &records[0].task
            else {
                continue;
            };
            let failed = records.iter().find(|r| r.status != Status::Ok);
            let jobs = workloads
                .iter()
                .enumerate()
                .map(|(i, workload)| {
                    let rates: Vec<f64> = records
                        .iter()
                        .map(|r| r.throughputs.get(i).copied().unwrap_or(0.0))
                        .collect();
                    let ok = failed.is_none();
                    GroupJob {
                        workload: workload.clone(),
                        share: shares.get(i).copied().flatten(),
                        throughput: if ok {
                            crate::process::mean(&rates)
                        } else {
                            0.0
                        },
                        throughput_std: if ok { std(&rates) } else { None },
                        throughput_se: if ok { mean_se(records, i) } else { None },
                    }
                })
                .collect();
            groups.push(Group {
                gpu: self.gpu.clone(),
                mode: *mode,
                jobs,
                repetitions: Some(u32::try_from(records.len()).unwrap_or(u32::MAX)),
                status: failed.map_or(Status::Ok, |r| r.status),
                note: failed.and_then(|r| r.note.clone()),
            });
        }
        groups
    }
}

/// The raw readings of every record, as the dataset's samples.
pub(super) fn samples_of(done: &BTreeMap<String, Record>) -> Vec<Sample> {
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

/// The standard error of the mean of process `i`'s throughputs over `records`, from each
/// window's own: `sqrt(sum se^2) / k` for `k` independent windows. `None` where a window has
/// none (too few iterations, or a journal from before windows estimated it).
pub(super) fn mean_se(records: &[&Record], i: usize) -> Option<f64> {
    let errors: Option<Vec<f64>> = records
        .iter()
        .map(|r| r.throughput_se.get(i).copied().flatten())
        .collect();
    let errors = errors.filter(|e| !e.is_empty())?;
    #[allow(clippy::cast_precision_loss)]
    let k = errors.len() as f64;
    Some(errors.iter().map(|e| e * e).sum::<f64>().sqrt() / k)
}

pub(super) fn std(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = crate::process::mean(xs);
    #[allow(clippy::cast_precision_loss)]
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    Some(var.sqrt())
}
