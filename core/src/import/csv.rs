//! Importer for co-location measurements a user made elsewhere, as two CSV files.
//!
//! `workloads.csv`: one row per workload. Required columns `workload`, `kind` (train|infer),
//! `solo_throughput`; optional `solo_throughput_std`, `repetitions`, `solo_throughput_se`.
//!
//! `pairs.csv`: one row per co-location setting. Required columns `a`, `b`, `mode`,
//! `throughput_a`, `throughput_b`; optional `gpu` (else the `--gpu` default), `share_a`,
//! `share_b`, `throughput_a_std`, `throughput_b_std`, `repetitions`, `status` (when absent or
//! empty: `ok` if both throughputs are positive, else `oom`), `note`, `throughput_a_se`,
//! `throughput_b_se`.
//!
//! `groups.csv` (optional, `--groups`): one row per job of a setting of three or more jobs on
//! one device. Required columns `group` (any label; the rows with one label are one group, in
//! the order they appear), `workload`, `mode`, `throughput`; optional `gpu`, `share`,
//! `throughput_std`, `throughput_se`, `repetitions`, `status` (when absent or empty on every
//! row of a group: `ok` if every throughput is positive, else `oom`), `note`. A group's rows
//! agree on its `gpu`, `mode`, `repetitions`, `status` and `note`. No other column.
//!
//! Any other column is a feature (workloads) or counter (pairs). A canonical name such as
//! `gpu_util` or `mem_used_mib` needs nothing more; any other name declares its kind in the
//! header: `framework:categorical`, `l2_hit_rate:numeric` or, with a unit,
//! `queue_depth:numeric:requests`. Pair counters are numeric. An empty cell is a missing value.
//! A column named twice in a header is refused. Errors give the line a row starts on (blank
//! lines and line breaks inside quoted cells counted).

use std::collections::BTreeMap;
use std::path::Path;

use crate::dataset::{
    Dataset, DatasetError, DatasetMeta, FORMAT, FeatureColumn, FeatureKind, FeatureValue,
    GROUP_COLUMNS, GROUP_OPTIONAL_COLUMNS, Group, GroupJob, Mode, PAIR_COLUMNS,
    PAIR_OPTIONAL_COLUMNS, Pair, Provenance, Result, Status, WORKLOAD_COLUMNS,
    WORKLOAD_OPTIONAL_COLUMNS, Workload, modes_of, validate,
};
use crate::features::canonical;

/// What the importer needs beside the two files.
#[derive(Debug, Clone)]
pub struct CsvImport {
    pub name: String,
    pub description: String,
    /// Where the data came from; `provenance.gpu` is also the default of a missing `gpu` column.
    pub provenance: Provenance,
}

/// A parsed CSV file: its header and rows, with their line numbers for errors.
struct Sheet<'a> {
    file: &'a Path,
    header: Vec<String>,
    rows: Vec<(u64, Vec<String>)>,
}

impl<'a> Sheet<'a> {
    fn read(file: &'a Path) -> Result<Sheet<'a>> {
        let text = crate::input::read(file).map_err(|e| DatasetError::new(file, e))?;
        let mut reader = ::csv::ReaderBuilder::new()
            .trim(::csv::Trim::All)
            .from_reader(text.as_slice());
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| DatasetError::new(file, format!("cannot read the header: {e}")).line(1))?
            .iter()
            .map(str::to_string)
            .collect();
        // A repeated column would be read from its first place only, the other ignored.
        for (k, name) in header.iter().enumerate() {
            if !name.is_empty() && header[..k].contains(name) {
                return Err(DatasetError::new(file, "appears twice in the header")
                    .column(name)
                    .line(1));
            }
        }
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| record_line(&text, p));
                DatasetError::new(file, format!("not valid CSV: {e}")).line(line)
            })?;
            let line = record.position().map_or(0, |p| record_line(&text, p));
            rows.push((line, record.iter().map(str::to_string).collect()));
        }
        Ok(Sheet { file, header, rows })
    }

    /// The line each row starts on, in row order.
    fn lines(&self) -> Vec<u64> {
        self.rows.iter().map(|(line, _)| *line).collect()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    fn require(&self, name: &str) -> Result<usize> {
        self.index(name).ok_or_else(|| {
            DatasetError::new(self.file, "missing column")
                .column(name)
                .line(1)
        })
    }

    fn error(&self, column: &str, line: u64, message: impl Into<String>) -> DatasetError {
        DatasetError::new(self.file, message)
            .column(column)
            .line(line)
    }

    /// The cell, or `None` when the column is absent or the cell empty.
    fn cell<'r>(&self, row: &'r [String], column: Option<usize>) -> Option<&'r str> {
        column
            .and_then(|i| row.get(i))
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    fn text(&self, row: &(u64, Vec<String>), column: &str, index: usize) -> Result<String> {
        self.cell(&row.1, Some(index))
            .map(str::to_string)
            .ok_or_else(|| self.error(column, row.0, "empty cell in a required column"))
    }

    fn number(
        &self,
        row: &(u64, Vec<String>),
        column: &str,
        index: Option<usize>,
    ) -> Result<Option<f64>> {
        let Some(text) = self.cell(&row.1, index) else {
            return Ok(None);
        };
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Some(v)),
            Ok(_) => Err(self.error(column, row.0, format!("`{text}` is not a finite number"))),
            Err(_) => Err(self.error(column, row.0, format!("`{text}` is not a number"))),
        }
    }

    fn required_number(&self, row: &(u64, Vec<String>), column: &str, index: usize) -> Result<f64> {
        self.number(row, column, Some(index))?
            .ok_or_else(|| self.error(column, row.0, "empty cell in a required column"))
    }

    fn count(
        &self,
        row: &(u64, Vec<String>),
        column: &str,
        index: Option<usize>,
    ) -> Result<Option<u32>> {
        let Some(text) = self.cell(&row.1, index) else {
            return Ok(None);
        };
        text.parse::<u32>().map(Some).map_err(|_| {
            self.error(
                column,
                row.0,
                format!("`{text}` is not a count (a whole number >= 0)"),
            )
        })
    }

    fn parsed<T: std::str::FromStr<Err = String>>(
        &self,
        row: &(u64, Vec<String>),
        column: &str,
        index: usize,
    ) -> Result<T> {
        self.text(row, column, index)?
            .parse()
            .map_err(|m: String| self.error(column, row.0, m))
    }

    /// The extra columns (not in `fixed`) with their declared or canonical definitions.
    fn extra_columns(&self, fixed: &[&str]) -> Result<Vec<(usize, FeatureColumn)>> {
        let mut out: Vec<(usize, FeatureColumn)> = Vec::new();
        for (index, header) in self.header.iter().enumerate() {
            if fixed.contains(&header.as_str()) {
                continue;
            }
            let mut parts = header.splitn(3, ':');
            let name = parts.next().unwrap_or_default().trim().to_string();
            let column = match (parts.next(), parts.next()) {
                (None, _) => canonical(&name).ok_or_else(|| {
                    self.error(
                        header,
                        1,
                        format!(
                            "not a known column; declare its kind in the header as \
                             `{name}:numeric` or `{name}:categorical`"
                        ),
                    )
                })?,
                (Some(kind), unit) => {
                    let kind = match kind {
                        "numeric" => FeatureKind::Numeric,
                        "categorical" => FeatureKind::Categorical,
                        other => {
                            return Err(self.error(
                                header,
                                1,
                                format!("kind `{other}` is neither numeric nor categorical"),
                            ));
                        }
                    };
                    let known = canonical(&name);
                    FeatureColumn {
                        meaning: known
                            .map_or_else(|| format!("{name} (imported from CSV)"), |c| c.meaning),
                        name: name.clone(),
                        kind,
                        unit: unit.map(str::to_string),
                    }
                }
            };
            if column.name.is_empty() {
                return Err(self.error(header, 1, "column has no name"));
            }
            if fixed.contains(&column.name.as_str())
                || out.iter().any(|(_, c)| c.name == column.name)
            {
                return Err(self.error(
                    header,
                    1,
                    format!("column `{}` appears twice", column.name),
                ));
            }
            out.push((index, column));
        }
        Ok(out)
    }
}

/// The line a record of the CSV bytes `text` starts on, from its `csv` position. That position is
/// where the reader stood before the record, which is on the first of the blank lines it skipped
/// to reach it, if any: they are counted here.
pub fn record_line(text: &[u8], position: &::csv::Position) -> u64 {
    let from = usize::try_from(position.byte()).unwrap_or(usize::MAX);
    let blank = text
        .get(from..)
        .unwrap_or_default()
        .iter()
        .take_while(|b| matches!(b, b'\n' | b'\r'))
        .filter(|b| **b == b'\n')
        .count();
    position.line() + blank as u64
}

/// Moves a validation error from the in-memory table onto the CSV file it came from: row N of
/// the table (counted from 1) was read from `lines[N - 1]`, the line its record starts on
/// (blank lines and line breaks inside quoted cells counted).
fn onto_csv(mut error: DatasetError, file: &Path, lines: &[u64]) -> DatasetError {
    error.file = file.to_path_buf();
    if let Some(row) = error.row.take() {
        error.line = row.checked_sub(1).and_then(|r| lines.get(r)).copied();
    }
    error
}

fn read_workloads(sheet: &Sheet<'_>) -> Result<(Vec<FeatureColumn>, Vec<Workload>)> {
    let id = sheet.require("workload")?;
    let kind = sheet.require("kind")?;
    let solo = sheet.require("solo_throughput")?;
    let solo_std = sheet.index("solo_throughput_std");
    let repetitions = sheet.index("repetitions");
    let solo_se = sheet.index("solo_throughput_se");
    let fixed: Vec<&str> = WORKLOAD_COLUMNS
        .iter()
        .chain(&WORKLOAD_OPTIONAL_COLUMNS)
        .copied()
        .collect();
    let extra = sheet.extra_columns(&fixed)?;
    let mut workloads = Vec::with_capacity(sheet.rows.len());
    for row in &sheet.rows {
        let mut features = BTreeMap::new();
        for (index, column) in &extra {
            let value = match column.kind {
                FeatureKind::Numeric => {
                    FeatureValue::Number(sheet.number(row, &sheet.header[*index], Some(*index))?)
                }
                FeatureKind::Categorical => {
                    FeatureValue::Category(sheet.cell(&row.1, Some(*index)).map(str::to_string))
                }
            };
            features.insert(column.name.clone(), value);
        }
        workloads.push(Workload {
            workload: sheet.text(row, "workload", id)?,
            kind: sheet.parsed(row, "kind", kind)?,
            solo_throughput: sheet.required_number(row, "solo_throughput", solo)?,
            solo_throughput_std: sheet.number(row, "solo_throughput_std", solo_std)?,
            solo_throughput_se: sheet.number(row, "solo_throughput_se", solo_se)?,
            repetitions: sheet.count(row, "repetitions", repetitions)?,
            features,
        });
    }
    Ok((extra.into_iter().map(|(_, c)| c).collect(), workloads))
}

fn read_pairs(sheet: &Sheet<'_>, default_gpu: &str) -> Result<(Vec<FeatureColumn>, Vec<Pair>)> {
    let a = sheet.require("a")?;
    let b = sheet.require("b")?;
    let mode = sheet.require("mode")?;
    let throughput_a = sheet.require("throughput_a")?;
    let throughput_b = sheet.require("throughput_b")?;
    let gpu = sheet.index("gpu");
    let [share_a, share_b, std_a, std_b, repetitions, status, note] = [
        "share_a",
        "share_b",
        "throughput_a_std",
        "throughput_b_std",
        "repetitions",
        "status",
        "note",
    ]
    .map(|c| sheet.index(c));
    let [se_a, se_b] = PAIR_OPTIONAL_COLUMNS.map(|c| sheet.index(c));
    let fixed: Vec<&str> = PAIR_COLUMNS
        .iter()
        .chain(&PAIR_OPTIONAL_COLUMNS)
        .copied()
        .collect();
    let counters = sheet.extra_columns(&fixed)?;
    if let Some((index, c)) = counters
        .iter()
        .find(|(_, c)| c.kind != FeatureKind::Numeric)
    {
        return Err(sheet.error(
            &sheet.header[*index],
            1,
            format!("pair counter `{}` must be numeric", c.name),
        ));
    }
    let mut pairs = Vec::with_capacity(sheet.rows.len());
    for row in &sheet.rows {
        let ta = sheet.required_number(row, "throughput_a", throughput_a)?;
        let tb = sheet.required_number(row, "throughput_b", throughput_b)?;
        let status = match sheet.cell(&row.1, status) {
            Some(text) => text
                .parse::<Status>()
                .map_err(|m| sheet.error("status", row.0, m))?,
            None if ta > 0.0 && tb > 0.0 => Status::Ok,
            None => Status::Oom,
        };
        let mut values = BTreeMap::new();
        for (index, column) in &counters {
            values.insert(
                column.name.clone(),
                sheet.number(row, &sheet.header[*index], Some(*index))?,
            );
        }
        pairs.push(Pair {
            a: sheet.text(row, "a", a)?,
            b: sheet.text(row, "b", b)?,
            gpu: sheet.cell(&row.1, gpu).unwrap_or(default_gpu).to_string(),
            mode: sheet.parsed::<Mode>(row, "mode", mode)?,
            share_a: sheet.number(row, "share_a", share_a)?,
            share_b: sheet.number(row, "share_b", share_b)?,
            throughput_a: ta,
            throughput_b: tb,
            throughput_a_std: sheet.number(row, "throughput_a_std", std_a)?,
            throughput_b_std: sheet.number(row, "throughput_b_std", std_b)?,
            throughput_a_se: sheet.number(row, "throughput_a_se", se_a)?,
            throughput_b_se: sheet.number(row, "throughput_b_se", se_b)?,
            repetitions: sheet.count(row, "repetitions", repetitions)?,
            status,
            note: sheet.cell(&row.1, note).map(str::to_string),
            counters: values,
        });
    }
    Ok((counters.into_iter().map(|(_, c)| c).collect(), pairs))
}

/// The groups of a `groups.csv` sheet, and the CSV line of each job in the order the dataset
/// holds them (groups in order of first appearance, jobs in row order).
fn read_groups(sheet: &Sheet<'_>, default_gpu: &str) -> Result<(Vec<Group>, Vec<u64>)> {
    let label = sheet.require("group")?;
    let workload = sheet.require("workload")?;
    let mode = sheet.require("mode")?;
    let throughput = sheet.require("throughput")?;
    let [gpu, share, std, se, repetitions, status, note] = [
        "gpu",
        "share",
        "throughput_std",
        "throughput_se",
        "repetitions",
        "status",
        "note",
    ]
    .map(|c| sheet.index(c));
    let known: Vec<&str> = GROUP_COLUMNS
        .iter()
        .chain(&GROUP_OPTIONAL_COLUMNS)
        .copied()
        .collect();
    if let Some(extra) = sheet.header.iter().find(|h| !known.contains(&h.as_str())) {
        return Err(sheet.error(
            extra,
            1,
            format!("not a column of groups.csv (expected {})", known.join(", ")),
        ));
    }
    // (label, group, its status as given, the lines of its jobs)
    let mut groups: Vec<(String, Group, Option<Status>, Vec<u64>)> = Vec::new();
    for row in &sheet.rows {
        let name = sheet.text(row, "group", label)?;
        let job = GroupJob {
            workload: sheet.text(row, "workload", workload)?,
            share: sheet.number(row, "share", share)?,
            throughput: sheet.required_number(row, "throughput", throughput)?,
            throughput_std: sheet.number(row, "throughput_std", std)?,
            throughput_se: sheet.number(row, "throughput_se", se)?,
        };
        let given_status = match sheet.cell(&row.1, status) {
            Some(text) => Some(
                text.parse::<Status>()
                    .map_err(|m| sheet.error("status", row.0, m))?,
            ),
            None => None,
        };
        let this = Group {
            gpu: sheet.cell(&row.1, gpu).unwrap_or(default_gpu).to_string(),
            mode: sheet.parsed::<Mode>(row, "mode", mode)?,
            jobs: Vec::new(),
            repetitions: sheet.count(row, "repetitions", repetitions)?,
            status: Status::Ok,
            note: sheet.cell(&row.1, note).map(str::to_string),
        };
        match groups.iter_mut().find(|(l, ..)| *l == name) {
            Some((_, group, first_status, lines)) => {
                for (column, same) in [
                    ("gpu", group.gpu == this.gpu),
                    ("mode", group.mode == this.mode),
                    ("repetitions", group.repetitions == this.repetitions),
                    ("status", *first_status == given_status),
                    ("note", group.note == this.note),
                ] {
                    if !same {
                        return Err(sheet.error(
                            column,
                            row.0,
                            format!(
                                "differs from group `{name}`'s first row (line {}); a group's \
                                 rows agree on it",
                                lines[0]
                            ),
                        ));
                    }
                }
                group.jobs.push(job);
                lines.push(row.0);
            }
            None => {
                let mut group = this;
                group.jobs.push(job);
                groups.push((name, group, given_status, vec![row.0]));
            }
        }
    }
    let mut lines = Vec::new();
    let mut out = Vec::with_capacity(groups.len());
    for (_, mut group, given, job_lines) in groups {
        group.status = given.unwrap_or(if group.jobs.iter().all(|j| j.throughput > 0.0) {
            Status::Ok
        } else {
            Status::Oom
        });
        lines.extend(job_lines);
        out.push(group);
    }
    Ok((out, lines))
}

/// Reads `workloads` and `pairs` CSV files (and `groups`, where given) into a validated
/// dataset. Errors name the CSV file, the column and the line.
pub fn import(
    workloads: &Path,
    pairs: &Path,
    groups: Option<&Path>,
    options: &CsvImport,
) -> Result<Dataset> {
    let workload_sheet = Sheet::read(workloads)?;
    let (workload_features, workload_rows) = read_workloads(&workload_sheet)?;
    let pair_sheet = Sheet::read(pairs)?;
    let (pair_counters, pair_rows) = read_pairs(&pair_sheet, &options.provenance.gpu)?;
    let (group_rows, group_lines) = match groups {
        Some(file) => read_groups(&Sheet::read(file)?, &options.provenance.gpu)?,
        None => (Vec::new(), Vec::new()),
    };
    let meta = DatasetMeta {
        format: FORMAT.to_string(),
        name: options.name.clone(),
        description: options.description.clone(),
        provenance: options.provenance.clone(),
        workload_features,
        pair_counters,
        modes: modes_of(&pair_rows, &group_rows),
        tables: Default::default(),
    };
    validate::workloads(workloads, &meta, &workload_rows)
        .map_err(|e| onto_csv(e, workloads, &workload_sheet.lines()))?;
    validate::pairs(pairs, &meta, &workload_rows, &pair_rows)
        .map_err(|e| onto_csv(e, pairs, &pair_sheet.lines()))?;
    if let Some(file) = groups {
        validate::groups(file, &meta, &workload_rows, &group_rows)
            .map_err(|e| onto_csv(e, file, &group_lines))?;
    }
    let dataset = Dataset {
        meta,
        workloads: workload_rows,
        pairs: pair_rows,
        groups: group_rows,
    };
    dataset.validate(Path::new(&options.name))?;
    Ok(dataset)
}
