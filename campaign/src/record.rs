//! The record of a budgeted campaign, kept with its dataset as `campaign.json`: which settings
//! were measured in which round, by which rule and with which score, and the audit. The dataset
//! itself stays in its own format (`dataset.json` is unchanged); readers of the tables ignore the
//! file, and `duet dataset merge` does not carry it into a merged dataset (each shard's audit
//! speaks for that shard's unmeasured settings only).

use std::path::Path;

use duet_core::dataset::{CAMPAIGN_FILE, Dataset, Sample};
use serde::{Deserialize, Serialize};

use crate::CampaignError;
use crate::audit::Estimate;
use crate::choose::{Rule, Select};
use crate::settings::Setting;

/// The value of `format` in `campaign.json`.
pub const FORMAT: &str = "duet-campaign/1";

/// `campaign.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignRecord {
    /// Always [`FORMAT`].
    pub format: String,
    pub select: Select,
    pub seed: u64,
    /// Pair settings the campaign could measure.
    pub settings: usize,
    /// Pair settings it was allowed to measure, the audit included (solo runs are not counted).
    pub budget: usize,
    /// Each workload was brought to this many measured settings before the score ranked.
    pub min_pairs: usize,
    /// Every chosen setting, in the order measured.
    pub choices: Vec<RecordedChoice>,
    /// The audit at the end, where one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditRecord>,
    /// New workloads probed onto an earlier dataset (`duet profile --onto`), where they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onto: Option<OntoRecord>,
}

/// What `duet profile --onto DIR --probes K` measured: its new workloads, each alone and with
/// `probes` co-runners of `dataset`; `choices` hold the probes, round `k` the `k`-th of each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OntoRecord {
    /// The earlier dataset's folder, as given.
    pub dataset: String,
    pub probes: usize,
    pub new_workloads: Vec<String>,
    /// The co-runners' solo rows were measured again here (`--remeasure-solo`), not copied.
    pub remeasured_solo: bool,
}

/// One chosen setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedChoice {
    /// The round it was chosen in, from 0 (the first round: before any pair was known).
    pub round: usize,
    #[serde(flatten)]
    pub setting: Setting,
    pub rule: Rule,
    /// The ensemble members' disagreement on it when chosen (none for `design` and `random`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

impl RecordedChoice {
    /// `choice`, made in `round`.
    pub fn of(round: usize, choice: crate::choose::Choice) -> RecordedChoice {
        RecordedChoice {
            round,
            setting: choice.candidate.setting,
            rule: choice.rule,
            score: choice.score,
        }
    }

    /// The progress line of a choice: the setting, its rule and score.
    pub fn line(&self) -> String {
        format!(
            "  {} by {}{}",
            self.setting,
            self.rule.as_str(),
            self.score
                .map_or(String::new(), |s| format!(" (score {s:.4})"))
        )
    }
}

/// The audit: settings drawn uniformly from those selection never chose, measured at the end,
/// never used to choose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    /// How the interval is computed ([`crate::audit::INTERVAL`]).
    pub interval: String,
    pub settings: Vec<AuditedSetting>,
    /// None when no audited setting was feasible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
    /// The audited settings' own measurement noise, the mean relative standard error of their
    /// speeds ([`crate::audit::measurement_noise`]); none where the rows carry no errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_noise: Option<f64>,
}

/// One audited setting and the model's error on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditedSetting {
    #[serde(flatten)]
    pub setting: Setting,
    /// Absolute percentage errors of speed of the model fitted on the chosen settings, in its
    /// feasible directions (`a` next to `b`, then `b` next to `a`).
    pub errors: Vec<f64>,
}

impl CampaignRecord {
    /// The record kept in the dataset folder `dir`, if it has one.
    pub fn read(dir: &Path) -> Result<Option<CampaignRecord>, CampaignError> {
        let path = dir.join(CAMPAIGN_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let io = |message: String| CampaignError::Io {
            path: path.clone(),
            message,
        };
        let text = duet_core::input::read_text(&path).map_err(io)?;
        let record: CampaignRecord =
            serde_json::from_str(&text).map_err(|e| io(format!("invalid: {e}")))?;
        if record.format != FORMAT {
            return Err(io(format!(
                "format `{}` is not `{FORMAT}`, the only one this duet reads",
                record.format
            )));
        }
        Ok(Some(record))
    }

    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self).unwrap_or_default();
        json.push('\n');
        json
    }
}

/// Writes `dataset` (with its raw counter series) and `record` as its `campaign.json` into the
/// new folder `out`, all at once or not at all.
pub fn write_dataset(
    out: &Path,
    dataset: &Dataset,
    samples: &[Sample],
    record: &CampaignRecord,
) -> Result<(), CampaignError> {
    Ok(dataset.write_with_files(out, samples, &[(CAMPAIGN_FILE, record.to_json())])?)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use duet_core::dataset::merge;

    use super::*;

    fn committed(name: &str) -> Dataset {
        let dir = PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../datasets")
        .join(name);
        Dataset::read(&dir).expect("a committed dataset")
    }

    fn record(d: &Dataset) -> CampaignRecord {
        let first = Setting::of(&d.pairs[0]);
        CampaignRecord {
            format: FORMAT.to_string(),
            select: Select::Uncertainty,
            seed: 7,
            settings: d.pairs.len(),
            budget: 2,
            min_pairs: 3,
            choices: vec![RecordedChoice {
                round: 0,
                setting: first.clone(),
                rule: Rule::Design,
                score: None,
            }],
            audit: Some(AuditRecord {
                interval: crate::audit::INTERVAL.to_string(),
                settings: vec![AuditedSetting {
                    setting: Setting::of(&d.pairs[1]),
                    errors: vec![0.05, 0.02],
                }],
                estimate: crate::audit::estimate(&[vec![0.05, 0.02]], 10),
                measurement_noise: Some(0.01),
            }),
            onto: Some(OntoRecord {
                dataset: "datasets/cpu-dev2c".into(),
                probes: 3,
                new_workloads: vec!["fresh".into()],
                remeasured_solo: false,
            }),
        }
    }

    #[test]
    fn the_record_lives_beside_the_tables_and_readers_ignore_it() {
        let d = committed("cpu-dev2c");
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("budgeted");
        let r = record(&d);
        write_dataset(&out, &d, &[], &r).expect("written");
        assert!(out.join(CAMPAIGN_FILE).is_file());
        // The dataset reads as before; the record reads back as written.
        assert_eq!(Dataset::read(&out).expect("readable"), d);
        assert_eq!(CampaignRecord::read(&out).expect("readable"), Some(r));
        // A dataset without one has none.
        assert_eq!(
            CampaignRecord::read(
                &PathBuf::from(
                    std::env::var_os("CARGO_MANIFEST_DIR")
                        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
                )
                .join("../datasets/cpu-dev2c")
            )
            .expect("no record"),
            None
        );
        // Merging carries the tables, not the record.
        let merged = merge(
            "merged",
            &[(out.clone(), Dataset::read(&out).expect("read"))],
        )
        .expect("merged");
        let again = tmp.path().join("merged");
        merged.write(&again).expect("written");
        assert!(!again.join(CAMPAIGN_FILE).exists());
    }

    #[test]
    fn a_bad_record_is_named() {
        let d = committed("cpu-dev2c");
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("d");
        d.write(&out).expect("written");
        fs::write(out.join(CAMPAIGN_FILE), "{\"format\": \"duet-campaign/9\"}").expect("write");
        let e = CampaignRecord::read(&out).expect_err("refused").to_string();
        assert!(e.contains(CAMPAIGN_FILE), "{e}");
        let mut r = record(&d);
        r.format = "duet-campaign/9".into();
        fs::write(out.join(CAMPAIGN_FILE), r.to_json()).expect("write");
        let e = CampaignRecord::read(&out).expect_err("refused").to_string();
        assert!(e.contains("duet-campaign/9"), "{e}");
        // Names of the dataset's own files are refused as extra files.
        let e = d
            .write_with_files(
                &tmp.path().join("x"),
                &[],
                &[("pairs.parquet", String::new())],
            )
            .expect_err("refused");
        assert!(e.to_string().contains("pairs.parquet"), "{e}");
        assert!(!tmp.path().join("x").exists());
    }
}
