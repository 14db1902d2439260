//! Importer for Gavel's published co-location throughputs (`simulation_throughputs.json` and
//! `physical_cluster_throughputs.json` of the Gavel scheduler, OSDI 2020).
//!
//! Layout: `{ gpu: { "('<job type>', <scale factor>)": { "null": solo, "('<other>', <sf>)":
//! [this, other], ... } } }`. Only single-GPU job types (scale factor 1) are imported. Each
//! unordered pair becomes one row in mode `space`; `[0, 0]` becomes status `oom`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::dataset::{
    Dataset, DatasetError, DatasetMeta, FORMAT, FeatureColumn, FeatureValue, JobKind, Mode, Pair,
    Provenance, Result, Status, Workload, modes_present,
};
use crate::features::canonical;

/// What the importer cannot read from the JSON itself.
#[derive(Debug, Clone)]
pub struct GavelImport {
    /// Which device's table to import (`k80`, `p100`, `v100`).
    pub gpu: String,
    /// Dataset name; by convention `gavel-<gpu>`.
    pub name: String,
    /// Where the JSON comes from (repository, file, commit), for the provenance.
    pub source: String,
    /// The licence notice to keep with the data.
    pub licence_text: Option<String>,
    /// Import date, ISO 8601.
    pub date: String,
}

/// Parses a key such as `('ResNet-50 (batch size 64)', 1)` into the job type and scale factor.
pub fn parse_job_key(key: &str) -> Option<(String, u32)> {
    let inner = key.strip_prefix("('")?.strip_suffix(')')?;
    let (job, scale) = inner.rsplit_once("',")?;
    Some((job.to_string(), scale.trim().parse().ok()?))
}

/// Splits a job type such as `ResNet-50 (batch size 64)` into its model family and batch size.
pub fn split_job_type(job: &str) -> (String, Option<f64>) {
    if let Some((family, rest)) = job.split_once(" (batch size ")
        && let Some(Ok(batch)) = rest.strip_suffix(')').map(str::parse::<f64>)
    {
        return (family.to_string(), Some(batch));
    }
    (job.to_string(), None)
}

/// The workload id for a Gavel job type: lower case, `-` between words, `-bs<N>` for the batch
/// size, so that ids are short and safe in URLs (`ResNet-50 (batch size 64)` -> `resnet-50-bs64`).
pub fn workload_id(job: &str) -> String {
    let (family, batch) = split_job_type(job);
    let mut id = String::new();
    for c in family.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c.to_ascii_lowercase());
        } else if !id.ends_with('-') && !id.is_empty() {
            id.push('-');
        }
    }
    let mut id = id.trim_end_matches('-').to_string();
    if let Some(batch) = batch {
        id.push_str(&format!("-bs{batch}"));
    }
    id
}

/// A throughput of the file: a number, at least 0 (0 marks an infeasible pair's job).
fn number(value: &Value, file: &Path, field: &str) -> Result<f64> {
    let n = value.as_f64().ok_or_else(|| {
        DatasetError::new(file, format!("expected a number, found {value}")).column(field)
    })?;
    if n < 0.0 {
        return Err(
            DatasetError::new(file, format!("a throughput is at least 0, found {value}"))
                .column(field),
        );
    }
    Ok(n)
}

/// What a JSON value is, for an error.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Imports the `options.gpu` table of the Gavel JSON in `text` (read from `file`).
pub fn import(text: &str, file: &Path, options: &GavelImport) -> Result<Dataset> {
    let root: Value = serde_json::from_str(text)
        .map_err(|e| DatasetError::new(file, format!("not valid JSON: {e}")))?;
    if let Some(other) = root.get(&options.gpu).filter(|t| !t.is_object()) {
        return Err(DatasetError::new(
            file,
            format!("expected an object of job types, found {}", kind_of(other)),
        )
        .column(options.gpu.clone()));
    }
    let Some(table) = root.get(&options.gpu).and_then(Value::as_object) else {
        let gpus: Vec<&str> = root
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        return Err(DatasetError::new(
            file,
            format!(
                "no table for gpu `{}`; the file has: {}",
                options.gpu,
                gpus.join(", ")
            ),
        )
        .column(options.gpu.clone()));
    };

    // Single-GPU job types, in key order.
    let mut jobs: Vec<(&str, String)> = Vec::new();
    for key in table.keys() {
        let (job, scale) = parse_job_key(key).ok_or_else(|| {
            DatasetError::new(
                file,
                "job key is not of the form ('<job type>', <scale factor>)",
            )
            .column(format!("{}.{key}", options.gpu))
        })?;
        if scale == 1 {
            jobs.push((key.as_str(), job));
        }
    }
    if jobs.is_empty() {
        return Err(
            DatasetError::new(file, "no single-GPU (scale factor 1) job types")
                .column(options.gpu.clone()),
        );
    }

    let mut workloads = Vec::with_capacity(jobs.len());
    for (key, job) in &jobs {
        let field = format!("{}.{key}.null", options.gpu);
        let solo = number(&table[*key]["null"], file, &field)?;
        if solo == 0.0 {
            return Err(
                DatasetError::new(file, "a solo throughput is above 0, found 0").column(field),
            );
        }
        let (family, batch) = split_job_type(job);
        let features = BTreeMap::from([
            ("model".to_string(), FeatureValue::Category(Some(family))),
            ("batch_size".to_string(), FeatureValue::Number(batch)),
        ]);
        workloads.push(Workload {
            workload: workload_id(job),
            kind: JobKind::Train,
            solo_throughput: solo,
            solo_throughput_std: None,
            solo_throughput_se: None,
            repetitions: None,
            features,
        });
    }

    let mut pairs = Vec::new();
    for (i, (key_a, _)) in jobs.iter().enumerate() {
        for (j, (key_b, _)) in jobs.iter().enumerate().skip(i) {
            // Prefer a's own entry; fall back on the mirrored entry of b.
            let (entry, mirrored) = match (table[*key_a].get(*key_b), table[*key_b].get(*key_a)) {
                (Some(v), _) => (v, false),
                (None, Some(v)) => (v, true),
                (None, None) => continue,
            };
            let field = format!("{}.{key_a}.{key_b}", options.gpu);
            let values = entry.as_array().filter(|v| v.len() == 2).ok_or_else(|| {
                DatasetError::new(
                    file,
                    format!("expected [throughput, throughput], found {entry}"),
                )
                .column(field.clone())
            })?;
            let (mut ta, mut tb) = (
                number(&values[0], file, &field)?,
                number(&values[1], file, &field)?,
            );
            if mirrored {
                std::mem::swap(&mut ta, &mut tb);
            }
            let status = match (ta > 0.0, tb > 0.0) {
                (true, true) => Status::Ok,
                (false, false) => Status::Oom,
                _ => {
                    return Err(DatasetError::new(
                        file,
                        format!("only one job of the pair has throughput 0: [{ta}, {tb}]"),
                    )
                    .column(field));
                }
            };
            pairs.push(Pair {
                a: workloads[i].workload.clone(),
                b: workloads[j].workload.clone(),
                gpu: options.gpu.clone(),
                mode: Mode::Space,
                share_a: None,
                share_b: None,
                throughput_a: ta,
                throughput_b: tb,
                throughput_a_std: None,
                throughput_b_std: None,
                throughput_a_se: None,
                throughput_b_se: None,
                repetitions: None,
                status,
                note: None,
                counters: BTreeMap::new(),
            });
        }
    }

    let feature = |name: &str| {
        canonical(name).ok_or_else(|| DatasetError::new(file, format!("`{name}` is not canonical")))
    };
    let meta = DatasetMeta {
        format: FORMAT.to_string(),
        name: options.name.clone(),
        description: format!(
            "Gavel's measured training throughputs on {gpu}: {n} single-GPU job types alone and \
             in every pair sharing one {gpu} (space sharing: both processes on the device at once).",
            gpu = options.gpu,
            n = workloads.len()
        ),
        provenance: Provenance {
            source: options.source.clone(),
            gpu: options.gpu.clone(),
            driver: None,
            host: None,
            measured_by: "the Gavel authors (Narayanan et al., OSDI 2020) on their own hardware"
                .to_string(),
            tool: format!(
                "Gavel's throughput measurements; converted by duet {} (`duet dataset import gavel`)",
                env!("CARGO_PKG_VERSION")
            ),
            command: None,
            date: options.date.clone(),
            licence: "MIT".to_string(),
            licence_text: options.licence_text.clone(),
        },
        workload_features: vec![
            FeatureColumn {
                meaning: "model family of the job type (ResNet-50, LM, Transformer...)".to_string(),
                ..feature("model")?
            },
            FeatureColumn {
                meaning: "batch size of the job type; null where the job type names none"
                    .to_string(),
                ..feature("batch_size")?
            },
        ],
        pair_counters: Vec::new(),
        modes: modes_present(&pairs),
        tables: Default::default(),
    };
    let dataset = Dataset {
        meta,
        workloads,
        pairs,
        groups: Vec::new(),
    };
    dataset.validate(Path::new(&options.name))?;
    Ok(dataset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_and_types_parse() {
        assert_eq!(
            parse_job_key("('ResNet-50 (batch size 64)', 1)"),
            Some(("ResNet-50 (batch size 64)".to_string(), 1))
        );
        assert_eq!(parse_job_key("('A3C', 4)"), Some(("A3C".to_string(), 4)));
        assert_eq!(parse_job_key("null"), None);
        assert_eq!(
            split_job_type("LM (batch size 20)"),
            ("LM".to_string(), Some(20.0))
        );
        assert_eq!(split_job_type("CycleGAN"), ("CycleGAN".to_string(), None));
        assert_eq!(workload_id("ResNet-50 (batch size 64)"), "resnet-50-bs64");
        assert_eq!(
            workload_id("Recommendation (batch size 4096)"),
            "recommendation-bs4096"
        );
        assert_eq!(workload_id("A3C"), "a3c");
    }

    fn options() -> GavelImport {
        GavelImport {
            gpu: "v100".into(),
            name: "gavel-test".into(),
            source: "test".into(),
            licence_text: None,
            date: "2026-11-30".into(),
        }
    }

    #[test]
    fn one_sided_zero_is_rejected_with_the_key() {
        let json = r#"{"v100": {"('A', 1)": {"null": 2.0, "('A', 1)": [1.0, 0.0]}}}"#;
        let err = import(json, Path::new("g.json"), &options()).expect_err("must fail");
        assert!(err.to_string().contains("v100.('A', 1).('A', 1)"), "{err}");
    }

    #[test]
    fn bad_numbers_and_tables_are_named_by_their_key() {
        let cases = [
            (
                r#"{"v100": {"('A', 1)": {"null": -2.0}}}"#,
                "v100.('A', 1).null",
                "at least 0, found -2.0",
            ),
            (
                r#"{"v100": {"('A', 1)": {"null": 0}}}"#,
                "v100.('A', 1).null",
                "above 0, found 0",
            ),
            (
                r#"{"v100": {"('A', 1)": {"null": 2.0, "('A', 1)": [-1.0, 2.0]}}}"#,
                "v100.('A', 1).('A', 1)",
                "at least 0, found -1.0",
            ),
            (
                r#"{"v100": []}"#,
                "v100",
                "expected an object of job types, found an array",
            ),
        ];
        for (json, field, says) in cases {
            let err = import(json, Path::new("g.json"), &options())
                .expect_err(json)
                .to_string();
            assert!(err.starts_with("g.json"), "{err}");
            assert!(err.contains(field) && err.contains(says), "{err}");
        }
    }

    #[test]
    fn unknown_gpu_lists_the_available_ones() {
        let json = r#"{"k80": {}}"#;
        let err = import(json, Path::new("g.json"), &options()).expect_err("must fail");
        assert!(err.to_string().contains("the file has: k80"), "{err}");
    }
}
