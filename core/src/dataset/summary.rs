//! What `duet dataset inspect` reports: counts by kind, mode and status, and the distribution of
//! measured speeds.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Dataset;
use super::types::{Mode, Status};

/// Order statistics of a set of speeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quantiles {
    pub count: usize,
    pub min: f64,
    pub p10: f64,
    pub median: f64,
    pub p90: f64,
    pub max: f64,
}

impl Quantiles {
    /// `None` for an empty set. Quantiles interpolate linearly between order statistics.
    pub fn of(values: &[f64]) -> Option<Quantiles> {
        let mut sorted: Vec<f64> = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let at = |q: f64| {
            #[allow(clippy::cast_precision_loss)]
            let pos = q * (sorted.len() - 1) as f64;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let lo = pos.floor() as usize;
            let hi = (lo + 1).min(sorted.len() - 1);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - pos.floor())
        };
        Some(Quantiles {
            count: sorted.len(),
            min,
            p10: at(0.1),
            median: at(0.5),
            p90: at(0.9),
            max,
        })
    }
}

/// Pairs of one sharing mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeCounts {
    pub mode: Mode,
    pub pairs: usize,
    /// Pairs by status (`ok`, `oom`, `crash`, `timeout`); statuses with no pair are left out.
    pub by_status: BTreeMap<Status, usize>,
    /// Speeds of both jobs of every successful pair of this mode.
    pub speed: Option<Quantiles>,
}

/// Settings of one group size: 2 counts the pairs, 3 and more the groups.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSizeCounts {
    /// Jobs on the device together.
    pub size: usize,
    pub settings: usize,
    /// Settings by status; statuses with no setting are left out.
    pub by_status: BTreeMap<Status, usize>,
    /// Speeds of every job of every successful setting of this size.
    pub speed: Option<Quantiles>,
}

/// The summary `duet dataset inspect` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub name: String,
    pub gpu: String,
    pub source: String,
    pub workloads: usize,
    pub workloads_by_kind: BTreeMap<String, usize>,
    pub workload_features: Vec<String>,
    pub pairs: usize,
    /// Pairs that ran together (status `ok`).
    pub feasible: usize,
    /// Pairs that cannot run together (status `oom`).
    pub infeasible: usize,
    /// Pairs whose run crashed or timed out.
    pub failed: usize,
    /// Pairs by status, all modes together; statuses with no pair are left out.
    pub by_status: BTreeMap<Status, usize>,
    pub by_mode: Vec<ModeCounts>,
    /// Speeds of both jobs of every successful pair, all modes together.
    pub speed: Option<Quantiles>,
    /// The relative standard errors of those speeds that have one (from their windows), all
    /// modes together: how precisely the dataset measured them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_relative_se: Option<Quantiles>,
    /// Settings by how many jobs shared the device: pairs (2), then each size of groups.
    pub by_group_size: Vec<GroupSizeCounts>,
    /// How well the measured pairs, composed by each rule, give the measured groups' speeds
    /// (empty without groups).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compositions: Vec<super::compose::CompositionError>,
}

impl Summary {
    pub fn of(dataset: &Dataset) -> Summary {
        let mut workloads_by_kind = BTreeMap::new();
        for w in &dataset.workloads {
            *workloads_by_kind.entry(w.kind.to_string()).or_insert(0) += 1;
        }
        let count = |status: Status| dataset.pairs.iter().filter(|p| p.status == status).count();
        let speeds = dataset.directed_speeds();
        let by_mode = dataset
            .meta
            .modes
            .iter()
            .map(|&mode| {
                let mut by_status = BTreeMap::new();
                for p in dataset.pairs.iter().filter(|p| p.mode == mode) {
                    *by_status.entry(p.status).or_insert(0) += 1;
                }
                let mode_speeds: Vec<f64> = speeds
                    .iter()
                    .filter(|s| s.pair.mode == mode)
                    .map(|s| s.speed)
                    .collect();
                ModeCounts {
                    mode,
                    pairs: by_status.values().sum(),
                    by_status,
                    speed: Quantiles::of(&mode_speeds),
                }
            })
            .collect();
        let mut by_status = BTreeMap::new();
        for p in &dataset.pairs {
            *by_status.entry(p.status).or_insert(0) += 1;
        }
        let all: Vec<f64> = speeds.iter().map(|s| s.speed).collect();
        let mut by_group_size = Vec::new();
        if !dataset.pairs.is_empty() {
            by_group_size.push(GroupSizeCounts {
                size: 2,
                settings: dataset.pairs.len(),
                by_status: by_status.clone(),
                speed: Quantiles::of(&all),
            });
        }
        let group_speeds = dataset.group_speeds();
        let sizes: std::collections::BTreeSet<usize> =
            dataset.groups.iter().map(|g| g.jobs.len()).collect();
        for size in sizes {
            let mut by_status = BTreeMap::new();
            for g in dataset.groups.iter().filter(|g| g.jobs.len() == size) {
                *by_status.entry(g.status).or_insert(0) += 1;
            }
            let speeds: Vec<f64> = group_speeds
                .iter()
                .filter(|s| s.group.jobs.len() == size)
                .map(|s| s.speed)
                .collect();
            by_group_size.push(GroupSizeCounts {
                size,
                settings: by_status.values().sum(),
                by_status,
                speed: Quantiles::of(&speeds),
            });
        }
        let errors: Vec<f64> = speeds.iter().filter_map(|s| s.relative_se).collect();
        Summary {
            name: dataset.meta.name.clone(),
            gpu: dataset.meta.provenance.gpu.clone(),
            source: dataset.meta.provenance.source.clone(),
            workloads: dataset.workloads.len(),
            workloads_by_kind,
            workload_features: dataset
                .meta
                .workload_features
                .iter()
                .map(|f| f.name.clone())
                .collect(),
            pairs: dataset.pairs.len(),
            feasible: count(Status::Ok),
            infeasible: count(Status::Oom),
            failed: count(Status::Crash) + count(Status::Timeout),
            by_status,
            by_mode,
            speed: Quantiles::of(&all),
            speed_relative_se: Quantiles::of(&errors),
            by_group_size,
            compositions: super::compose::composition_errors(dataset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Quantiles, Summary};
    use crate::dataset::Dataset;

    #[test]
    fn the_speeds_relative_errors_come_from_pair_and_solo_windows() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c");
        let mut d = Dataset::read(&dir).expect("a committed dataset");
        for w in &mut d.workloads {
            w.solo_throughput_se = None;
        }
        for p in &mut d.pairs {
            p.throughput_a_se = None;
            p.throughput_b_se = None;
        }
        // No errors recorded: none summarised.
        assert_eq!(Summary::of(&d).speed_relative_se, None);
        // 3% on every pair rate and 4% on every solo rate: 5% on every speed.
        for w in &mut d.workloads {
            w.solo_throughput_se = Some(0.04 * w.solo_throughput);
        }
        for p in &mut d.pairs {
            p.throughput_a_se = Some(0.03 * p.throughput_a);
            p.throughput_b_se = Some(0.03 * p.throughput_b);
        }
        let s = Summary::of(&d);
        let e = s.speed_relative_se.expect("errors");
        assert!(
            (e.median - 0.05).abs() < 1e-9 && (e.max - 0.05).abs() < 1e-9,
            "{e:?}"
        );
        assert_eq!(Some(e.count), s.speed.map(|q| q.count));
    }

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let q = Quantiles::of(&[4.0, 1.0, 3.0, 2.0, 5.0]).expect("non-empty");
        assert_eq!((q.min, q.median, q.max, q.count), (1.0, 3.0, 5.0, 5));
        assert!((q.p10 - 1.4).abs() < 1e-12);
        assert!((q.p90 - 4.6).abs() < 1e-12);
        assert!(Quantiles::of(&[]).is_none());
    }
}
