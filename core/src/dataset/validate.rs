//! The rules a dataset obeys across rows and tables. Every error names the file, the column and
//! the row or workload id at fault.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::error::{DatasetError, Result};
use super::meta::{DatasetMeta, FORMAT, FeatureKind};
use super::parquet::{
    PAIR_COLUMNS, PAIR_OPTIONAL_COLUMNS, WORKLOAD_COLUMNS, WORKLOAD_OPTIONAL_COLUMNS,
};
use super::types::{FeatureValue, Group, MAX_GROUP_SIZE, Pair, Status, Workload};

fn check_finite(value: f64, what: &str) -> std::result::Result<(), String> {
    if value.is_nan() {
        Err(format!(
            "{what} is NaN; write null where a value is missing"
        ))
    } else if value.is_infinite() {
        Err(format!("{what} is infinite"))
    } else {
        Ok(())
    }
}

fn check_non_negative(value: f64, what: &str) -> std::result::Result<(), String> {
    check_finite(value, what)?;
    if value < 0.0 {
        return Err(format!("{what} is negative ({value})"));
    }
    // A subnormal rate divides into an infinite speed; one past 1e15 per second is no device's
    // (its ratios to ordinary rates leave the range the model answers in).
    if value > 0.0 && !value.is_normal() {
        return Err(format!(
            "{what} {value:e} is too small to be a measurement (below {:e})",
            f64::MIN_POSITIVE
        ));
    }
    if value > MAX_RATE {
        return Err(format!(
            "{what} {value:e} is more than the {MAX_RATE:e} a second any measurement gives"
        ));
    }
    Ok(())
}

/// The largest rate (and its spread) a dataset may hold, per second (and a job sent to the
/// server may have).
pub const MAX_RATE: f64 = 1e15;

/// A count of repetitions: at least 1 where given (null where unknown).
fn check_repetitions(repetitions: Option<u32>) -> std::result::Result<(), String> {
    if repetitions == Some(0) {
        return Err(
            "repetitions is 0; a measurement is made at least once (write null where unknown)"
                .into(),
        );
    }
    Ok(())
}

/// An MPS active-thread percentage: finite and in (0, 100].
fn check_share(share: f64) -> std::result::Result<(), String> {
    check_finite(share, "share")?;
    if !(share > 0.0 && share <= 100.0) {
        return Err(format!("share {share} is outside (0, 100]"));
    }
    Ok(())
}

pub fn meta(file: &Path, meta: &DatasetMeta) -> Result<()> {
    if meta.format != FORMAT {
        return Err(DatasetError::new(
            file,
            format!("format is `{}`, this duet reads `{FORMAT}`", meta.format),
        )
        .column("format"));
    }
    if meta.name.trim().is_empty() {
        return Err(DatasetError::new(file, "name is empty").column("name"));
    }
    let mut seen = BTreeSet::new();
    for (field, columns, fixed, optional) in [
        (
            "workload_features",
            &meta.workload_features,
            &WORKLOAD_COLUMNS[..],
            &WORKLOAD_OPTIONAL_COLUMNS[..],
        ),
        (
            "pair_counters",
            &meta.pair_counters,
            &PAIR_COLUMNS[..],
            &PAIR_OPTIONAL_COLUMNS[..],
        ),
    ] {
        seen.clear();
        for column in columns {
            let name = column.name.as_str();
            let problem = if name.trim().is_empty() {
                Some("a column has an empty name".to_string())
            } else if fixed.contains(&name) || optional.contains(&name) {
                Some(format!(
                    "`{name}` is a fixed column and cannot be declared again"
                ))
            } else if !seen.insert(name) {
                Some(format!("`{name}` is declared twice"))
            } else if field == "pair_counters" && column.kind != FeatureKind::Numeric {
                Some(format!("`{name}`: pair counters must be numeric"))
            } else {
                None
            };
            if let Some(message) = problem {
                return Err(DatasetError::new(file, message).column(field));
            }
        }
    }
    let mut sorted = meta.modes.clone();
    sorted.sort();
    sorted.dedup();
    if sorted != meta.modes {
        return Err(DatasetError::new(file, "modes must be sorted and unique").column("modes"));
    }
    Ok(())
}

pub fn workloads(file: &Path, meta: &DatasetMeta, rows: &[Workload]) -> Result<()> {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for (row, w) in rows.iter().enumerate() {
        let at = |column: &str, message: String| {
            DatasetError::new(file, message)
                .column(column)
                .row_index(row)
                .id(format!("workload `{}`", w.workload))
        };
        if w.workload.trim().is_empty() {
            return Err(at("workload", "workload id is empty".into()));
        }
        if let Some(first) = ids.insert(&w.workload, row) {
            return Err(at(
                "workload",
                format!("duplicate workload id, first seen in row {}", first + 1),
            ));
        }
        check_non_negative(w.solo_throughput, "solo throughput")
            .map_err(|m| at("solo_throughput", m))?;
        check_repetitions(w.repetitions).map_err(|m| at("repetitions", m))?;
        if w.solo_throughput == 0.0 {
            return Err(at(
                "solo_throughput",
                "solo throughput is 0; a workload that makes no progress alone cannot be profiled"
                    .into(),
            ));
        }
        if let Some(std) = w.solo_throughput_std {
            check_non_negative(std, "spread").map_err(|m| at("solo_throughput_std", m))?;
        }
        if let Some(se) = w.solo_throughput_se {
            check_non_negative(se, "standard error").map_err(|m| at("solo_throughput_se", m))?;
        }
        for feature in &meta.workload_features {
            let value = w.features.get(&feature.name);
            match (feature.kind, value) {
                (_, None) => {
                    return Err(at(&feature.name, "feature value is absent".into()));
                }
                (FeatureKind::Numeric, Some(FeatureValue::Number(v))) => {
                    if let Some(v) = v {
                        check_finite(*v, "value").map_err(|m| at(&feature.name, m))?;
                    }
                }
                (FeatureKind::Categorical, Some(FeatureValue::Category(_))) => {}
                (kind, Some(_)) => {
                    return Err(at(
                        &feature.name,
                        format!("value does not match the declared kind {}", kind.as_str()),
                    ));
                }
            }
        }
        if let Some(extra) = w
            .features
            .keys()
            .find(|k| !meta.workload_features.iter().any(|f| &f.name == *k))
        {
            return Err(at(extra, "feature is not declared in dataset.json".into()));
        }
    }
    Ok(())
}

/// Key that is the same for a pair and its mirror under the same device, mode and shares.
pub(crate) fn setting_key(p: &Pair) -> (String, String, String, String, Option<u64>, Option<u64>) {
    let share = |s: Option<f64>| s.map(f64::to_bits);
    if p.a <= p.b {
        (
            p.gpu.clone(),
            p.mode.to_string(),
            p.a.clone(),
            p.b.clone(),
            share(p.share_a),
            share(p.share_b),
        )
    } else {
        (
            p.gpu.clone(),
            p.mode.to_string(),
            p.b.clone(),
            p.a.clone(),
            share(p.share_b),
            share(p.share_a),
        )
    }
}

pub fn pairs(file: &Path, meta: &DatasetMeta, workloads: &[Workload], rows: &[Pair]) -> Result<()> {
    let known: HashMap<&str, &Workload> =
        workloads.iter().map(|w| (w.workload.as_str(), w)).collect();
    let mut settings = HashMap::new();
    for (row, p) in rows.iter().enumerate() {
        let at = |column: &str, message: String| {
            DatasetError::new(file, message)
                .column(column)
                .row_index(row)
                .id(format!("pair `{}` + `{}`", p.a, p.b))
        };
        for (column, id) in [("a", &p.a), ("b", &p.b)] {
            if !known.contains_key(id.as_str()) {
                return Err(at(
                    column,
                    format!("unknown workload `{id}`, not in the workloads table"),
                ));
            }
        }
        if p.gpu.trim().is_empty() {
            return Err(at("gpu", "gpu is empty".into()));
        }
        if !meta.modes.contains(&p.mode) {
            return Err(at(
                "mode",
                format!("mode `{}` is not listed in dataset.json `modes`", p.mode),
            ));
        }
        for (column, share) in [("share_a", p.share_a), ("share_b", p.share_b)] {
            if let Some(s) = share {
                check_share(s).map_err(|m| at(column, m))?;
            }
        }
        check_repetitions(p.repetitions).map_err(|m| at("repetitions", m))?;
        for (column, value) in [
            ("throughput_a", Some(p.throughput_a)),
            ("throughput_b", Some(p.throughput_b)),
            ("throughput_a_std", p.throughput_a_std),
            ("throughput_b_std", p.throughput_b_std),
            ("throughput_a_se", p.throughput_a_se),
            ("throughput_b_se", p.throughput_b_se),
        ] {
            if let Some(v) = value {
                check_non_negative(v, "throughput").map_err(|m| at(column, m))?;
            }
        }
        let both_positive = p.throughput_a > 0.0 && p.throughput_b > 0.0;
        if (p.status == Status::Ok) != both_positive {
            let message = if p.status == Status::Ok {
                "status is ok but a co-located throughput is 0".to_string()
            } else {
                format!(
                    "status is {} but both co-located throughputs are positive",
                    p.status
                )
            };
            return Err(at("status", message));
        }
        for (name, value) in &p.counters {
            if !meta.pair_counters.iter().any(|c| &c.name == name) {
                return Err(at(name, "counter is not declared in dataset.json".into()));
            }
            if let Some(v) = value {
                check_finite(*v, "counter").map_err(|m| at(name, m))?;
            }
        }
        if let Some(first) = settings.insert(setting_key(p), row) {
            return Err(at(
                "a",
                format!(
                    "the same pair, mode and shares are measured again (first in row {}); \
                     one row holds all repetitions of a setting",
                    first + 1
                ),
            ));
        }
    }
    Ok(())
}

/// The rules of `groups.parquet`: three to [`MAX_GROUP_SIZE`] known workloads on a named device
/// in a listed mode, shares in (0, 100] given for every job or none, throughputs finite and not
/// negative, status `ok` exactly when every job made progress, and each setting (device, mode,
/// the multiset of workloads and shares) once. Errors name the row of the job at fault.
pub fn groups(
    file: &Path,
    meta: &DatasetMeta,
    workloads: &[Workload],
    rows: &[Group],
) -> Result<()> {
    let known: HashMap<&str, &Workload> =
        workloads.iter().map(|w| (w.workload.as_str(), w)).collect();
    let mut settings = HashMap::new();
    let mut first_row = 0;
    for (number, g) in rows.iter().enumerate() {
        let at = |job: usize, column: &str, message: String| {
            DatasetError::new(file, message)
                .column(column)
                .row_index(first_row + job)
                .id(format!("group {number} ({})", g.label()))
        };
        check_repetitions(g.repetitions).map_err(|m| at(0, "repetitions", m))?;
        if g.jobs.len() < 3 || g.jobs.len() > MAX_GROUP_SIZE {
            return Err(at(
                0,
                "group",
                format!(
                    "a group holds 3 to {MAX_GROUP_SIZE} jobs, this one {}{}",
                    g.jobs.len(),
                    if g.jobs.len() == 2 {
                        " (two jobs are a pair: the pairs table holds them)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if g.gpu.trim().is_empty() {
            return Err(at(0, "gpu", "gpu is empty".into()));
        }
        if !meta.modes.contains(&g.mode) {
            return Err(at(
                0,
                "mode",
                format!("mode `{}` is not listed in dataset.json `modes`", g.mode),
            ));
        }
        let shared = g.jobs.iter().filter(|j| j.share.is_some()).count();
        for (i, job) in g.jobs.iter().enumerate() {
            if !known.contains_key(job.workload.as_str()) {
                return Err(at(
                    i,
                    "workload",
                    format!(
                        "unknown workload `{}`, not in the workloads table",
                        job.workload
                    ),
                ));
            }
            if let Some(s) = job.share {
                check_share(s).map_err(|m| at(i, "share", m))?;
            } else if shared > 0 {
                return Err(at(
                    i,
                    "share",
                    "no share where other jobs of the group have one; give every job its share \
                     or none"
                        .into(),
                ));
            }
            for (column, value) in [
                ("throughput", Some(job.throughput)),
                ("throughput_std", job.throughput_std),
                ("throughput_se", job.throughput_se),
            ] {
                if let Some(v) = value {
                    check_non_negative(v, "throughput").map_err(|m| at(i, column, m))?;
                }
            }
        }
        let all_positive = g.jobs.iter().all(|j| j.throughput > 0.0);
        if (g.status == Status::Ok) != all_positive {
            let message = if g.status == Status::Ok {
                "status is ok but a co-located throughput is 0".to_string()
            } else {
                format!(
                    "status is {} but every co-located throughput is positive",
                    g.status
                )
            };
            return Err(at(0, "status", message));
        }
        if let Some(first) = settings.insert(g.setting_key(), number) {
            return Err(at(
                0,
                "group",
                format!(
                    "the same jobs, mode and shares are measured again (first in group {first}); \
                     one group holds all repetitions of a setting"
                ),
            ));
        }
        first_row += g.jobs.len();
    }
    Ok(())
}
