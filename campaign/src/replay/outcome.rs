//! What a replay found, as its `report.json` holds it: the curves, the full data, the probe
//! curves and every choice.

use std::collections::BTreeSet;
use std::path::PathBuf;

use duet_core::dataset::Dataset;
use duet_model::accuracy::{mean_of, sd_of};
use duet_model::network::TrainConfig;
use serde::{Deserialize, Serialize};

use crate::audit::Estimate;
use crate::choose::Select;
use crate::record::RecordedChoice;
use crate::settings::Setting;

/// The value of `format` in a replay's `report.json`.
pub const FORMAT: &str = "duet-campaign-replay/1";

/// A statistic over seeds (or over held-out units and seeds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub mean: f64,
    /// Sample standard deviation (0 for one value).
    pub sd: f64,
    pub n: usize,
}

impl Stat {
    pub fn of(values: &[f64]) -> Stat {
        let xs: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        Stat {
            mean: mean_of(&xs),
            sd: sd_of(&xs),
            n: xs.len(),
        }
    }
}

/// One dataset the oracle reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataInfo {
    pub name: String,
    pub path: String,
    pub gpus: Vec<String>,
    pub workloads: usize,
    pub settings: usize,
}

impl DataInfo {
    pub(super) fn of((path, d): &(PathBuf, Dataset)) -> DataInfo {
        DataInfo {
            name: d.meta.name.clone(),
            path: path.display().to_string(),
            gpus: d
                .pairs
                .iter()
                .map(|p| p.gpu.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            workloads: d.workloads.len(),
            settings: d.pairs.len(),
        }
    }
}

/// One method at one budget in one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedPoint {
    pub seed: u64,
    /// Test-set MAPE of speed of the model fitted on everything measured (null: nothing
    /// feasible to fit).
    pub mape: Option<f64>,
    pub p90_coverage: Option<f64>,
    /// The audit's estimate for the model fitted on the chosen settings.
    pub audit: Option<Estimate>,
    /// That model's true MAPE on every setting selection never chose.
    pub truth: Option<f64>,
    /// The settings the audit measured (none for the full data).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audited: Vec<Setting>,
}

/// One method at one budget, over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// As given (`25%`, `60`).
    pub budget: String,
    /// Settings measured: chosen plus audited.
    pub settings: usize,
    /// Of the selectable settings.
    pub fraction: f64,
    /// Of them, the audit's.
    pub audited: usize,
    pub mape: Stat,
    pub p90_coverage: Stat,
    pub seeds: Vec<SeedPoint>,
}

/// One selection method's curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub select: Select,
    pub points: Vec<Point>,
    /// Audits whose interval held the truth, of those with an interval.
    pub audit_held: usize,
    pub audits: usize,
}

/// The full data: the same fit on every selectable setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Full {
    pub settings: usize,
    pub mape: Stat,
    pub p90_coverage: Stat,
    pub seeds: Vec<SeedPoint>,
}

/// One held-out unit of a probe curve in one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeUnit {
    pub seed: u64,
    /// The workload, or the feature value of the family.
    pub unit: String,
    pub held: Vec<String>,
    /// Settings scored: every setting of the held workloads but the probes of either method.
    pub scored: usize,
    /// MAPE of speed for K = 0, 1, ... probes per held workload.
    pub chosen: Vec<Option<f64>>,
    pub random: Vec<Option<f64>>,
    /// p90 coverage on the same settings for K = 0, 1, ... (`--probe-coverage`: the fits
    /// calibrated as a shipped final-only fit is; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen_coverage: Vec<Option<f64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub random_coverage: Vec<Option<f64>>,
    pub chosen_probes: Vec<Setting>,
    pub random_probes: Vec<Setting>,
}

/// A probe curve: `workload` (one workload held out) or `<feature>` (a family).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probes {
    pub held_out: String,
    /// Mean and sd over units and seeds, for K = 0, 1, ...
    pub chosen: Vec<Stat>,
    pub random: Vec<Stat>,
    /// Mean and sd of the p90 coverage, for K = 0, 1, ... (`--probe-coverage`; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen_coverage: Vec<Stat>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub random_coverage: Vec<Stat>,
    pub units: Vec<ProbeUnit>,
}

/// The choices of one method in one seed, up to the largest budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedChoices {
    pub seed: u64,
    pub select: Select,
    /// The seed's test set.
    pub test: Vec<Setting>,
    pub choices: Vec<RecordedChoice>,
}

/// What a replay found: report.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub format: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub date: String,
    pub data: Vec<DataInfo>,
    /// The earlier datasets every fit also learned from (`--prior`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priors: Vec<DataInfo>,
    pub settings: usize,
    /// Settings in each seed's test set.
    pub test: usize,
    pub selectable: usize,
    pub seeds: Vec<u64>,
    pub noise: f64,
    pub rounds: usize,
    pub audit: usize,
    pub min_pairs: usize,
    pub config: TrainConfig,
    pub interval: String,
    pub curves: Vec<Curve>,
    pub full: Full,
    pub probes: Vec<Probes>,
    pub choices: Vec<SeedChoices>,
    pub wall_seconds: f64,
}
