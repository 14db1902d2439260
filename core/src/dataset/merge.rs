//! Joining the shards of one campaign into one dataset.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::error::{DatasetError, Result};
use super::types::{FeatureValue, Workload};
use super::validate::setting_key;
use super::{Dataset, GROUPS_FILE, META_FILE, PAIRS_FILE, PARTIAL_MARK, WORKLOADS_FILE, modes_of};

/// Weighted mean of two measurements of one quantity, weighted by their repetitions.
fn pooled(x: f64, wx: f64, y: f64, wy: f64) -> f64 {
    (x * wx + y * wy) / (wx + wy)
}

/// Numeric features that say what a workload is (the sizes `duet profile`'s built-ins are run
/// at), not what was measured of it: shards must agree on them, as on kinds and labels (a mean
/// of two batch sizes describes neither program).
const DEFINING: [&str; 4] = ["batch_size", "width", "depth", "seq"];

/// Folds `next` (a second solo profile of the same workload, from another shard) into `kept`.
/// Numbers are pooled weighted by repetitions (1 where unknown); kinds and labels must agree.
fn fold_workload(kept: &mut Workload, next: &Workload, file: &Path) -> Result<()> {
    if kept == next {
        return Ok(());
    }
    let at = |column: &str, message: &str| {
        DatasetError::new(file, message)
            .column(column)
            .id(format!("workload `{}`", next.workload))
    };
    if kept.kind != next.kind {
        return Err(at("kind", "kind differs from an earlier shard"));
    }
    let wk = f64::from(kept.repetitions.unwrap_or(1));
    let wn = f64::from(next.repetitions.unwrap_or(1));
    kept.solo_throughput = pooled(kept.solo_throughput, wk, next.solo_throughput, wn);
    kept.solo_throughput_std = match (kept.solo_throughput_std, next.solo_throughput_std) {
        (Some(a), Some(b)) => Some(pooled(a * a, wk, b * b, wn).sqrt()),
        (a, b) => a.or(b),
    };
    // The standard error of the pooled mean; unknown where either shard did not estimate it.
    kept.solo_throughput_se = match (kept.solo_throughput_se, next.solo_throughput_se) {
        (Some(a), Some(b)) => Some((wk * wk * a * a + wn * wn * b * b).sqrt() / (wk + wn)),
        _ => None,
    };
    // Unknown counts as 1, as in the weights above.
    kept.repetitions = match (kept.repetitions, next.repetitions) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(1).saturating_add(b.unwrap_or(1))),
    };
    for (name, value) in &next.features {
        let Some(current) = kept.features.get_mut(name) else {
            continue;
        };
        match (current, value) {
            (FeatureValue::Number(Some(a)), FeatureValue::Number(Some(b)))
                if DEFINING.contains(&name.as_str()) && a != b =>
            {
                return Err(at(
                    name,
                    &format!(
                        "{b} here, {a} in an earlier shard: a setting of the workload, not a \
                         measurement (the shards ran two definitions under one name)"
                    ),
                ));
            }
            (FeatureValue::Number(Some(a)), FeatureValue::Number(Some(b))) => {
                *a = pooled(*a, wk, *b, wn);
            }
            (current @ FeatureValue::Number(None), FeatureValue::Number(b)) => {
                *current = FeatureValue::Number(*b);
            }
            (FeatureValue::Number(_), FeatureValue::Number(None)) => {}
            (FeatureValue::Category(a), FeatureValue::Category(b)) if a == b => {}
            _ => return Err(at(name, "value differs from an earlier shard")),
        }
    }
    Ok(())
}

/// Joins shards of one campaign. They must share the device and the declared columns. A
/// workload profiled in several shards keeps one row (its measurements pooled by repetitions);
/// a pair or group setting measured in two shards is an error, since shards split them.
pub fn merge(name: &str, shards: &[(PathBuf, Dataset)]) -> Result<Dataset> {
    let Some((first_dir, first)) = shards.first() else {
        return Err(DatasetError::new(
            ".",
            "nothing to merge: name at least one dataset",
        ));
    };
    let mut meta = first.meta.clone();
    meta.name = name.to_string();
    let mut workloads: Vec<Workload> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut pairs = Vec::new();
    let mut settings: HashMap<_, &PathBuf> = HashMap::new();
    let mut groups = Vec::new();
    let mut group_settings: HashMap<_, &PathBuf> = HashMap::new();
    for (dir, shard) in shards {
        let meta_file = dir.join(META_FILE);
        let differs = |field: &str, what: &str| {
            DatasetError::new(
                &meta_file,
                format!(
                    "{what} differs from {}; only shards of one campaign can be merged",
                    first_dir.display()
                ),
            )
            .column(field)
        };
        if shard.meta.provenance.gpu != first.meta.provenance.gpu {
            return Err(differs(
                "provenance.gpu",
                &format!("gpu `{}`", shard.meta.provenance.gpu),
            ));
        }
        if shard.meta.workload_features != first.meta.workload_features {
            return Err(differs("workload_features", "the feature columns"));
        }
        if shard.meta.pair_counters != first.meta.pair_counters {
            return Err(differs("pair_counters", "the pair counter columns"));
        }
        for w in &shard.workloads {
            match index.get(&w.workload) {
                Some(&i) => fold_workload(&mut workloads[i], w, &dir.join(WORKLOADS_FILE))?,
                None => {
                    index.insert(w.workload.clone(), workloads.len());
                    workloads.push(w.clone());
                }
            }
        }
        for (row, p) in shard.pairs.iter().enumerate() {
            if let Some(earlier) = settings.insert(setting_key(p), dir) {
                return Err(DatasetError::new(
                    dir.join(PAIRS_FILE),
                    format!(
                        "this pair, mode and shares were measured in {} too; shards of one campaign split the pairs",
                        earlier.display()
                    ),
                )
                .column("a")
                .row_index(row)
                .id(format!("pair `{}` + `{}`", p.a, p.b)));
            }
            pairs.push(p.clone());
        }
        for (number, g) in shard.groups.iter().enumerate() {
            if let Some(earlier) = group_settings.insert(g.setting_key(), dir) {
                return Err(DatasetError::new(
                    dir.join(GROUPS_FILE),
                    format!(
                        "these jobs, mode and shares were measured in {} too; shards of one campaign split the groups",
                        earlier.display()
                    ),
                )
                .column("group")
                .id(format!("group {number} ({})", g.label())));
            }
            groups.push(g.clone());
        }
    }
    if shards.len() > 1 {
        let sources: Vec<String> = shards
            .iter()
            .map(|(d, _)| d.display().to_string())
            .collect();
        meta.description = format!(
            "{} (merged from {} shards: {})",
            first.meta.description,
            shards.len(),
            sources.join(", ")
        );
        // A stopped shard makes the merge partial, whichever shard came first.
        if !meta.is_partial()
            && let Some((dir, _)) = shards.iter().find(|(_, d)| d.meta.is_partial())
        {
            meta.description = format!(
                "{PARTIAL_MARK}{} is a stopped campaign's): {}",
                dir.display(),
                meta.description
            );
        }
    }
    meta.modes = modes_of(&pairs, &groups);
    Ok(Dataset {
        meta,
        workloads,
        pairs,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::dataset::JobKind;

    fn solo(throughput: f64, batch: f64, util: f64) -> Workload {
        Workload {
            workload: "mlp".into(),
            kind: JobKind::Train,
            solo_throughput: throughput,
            solo_throughput_std: None,
            solo_throughput_se: None,
            repetitions: Some(1),
            features: BTreeMap::from([
                ("batch_size".into(), FeatureValue::Number(Some(batch))),
                ("gpu_util".into(), FeatureValue::Number(Some(util))),
            ]),
        }
    }

    #[test]
    fn measurements_are_pooled_and_a_size_that_differs_is_refused() {
        let file = Path::new("s1/workloads.parquet");
        let mut kept = solo(10.0, 32.0, 40.0);
        fold_workload(&mut kept, &solo(12.0, 32.0, 60.0), file).expect("pooled");
        assert_eq!(kept.solo_throughput, 11.0);
        assert_eq!(kept.features["gpu_util"], FeatureValue::Number(Some(50.0)));
        // Two batch sizes under one name were averaged: two programs, not two measurements.
        let err = fold_workload(&mut kept, &solo(12.0, 64.0, 60.0), file)
            .expect_err("two definitions")
            .to_string();
        assert!(
            err.contains("column `batch_size`") && err.contains("64 here, 32 in an earlier shard"),
            "{err}"
        );
    }
}
