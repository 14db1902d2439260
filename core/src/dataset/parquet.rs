//! Converting the typed tables to and from Parquet with polars. Reading checks each column's
//! presence and type and each required cell; the rules between rows live in `validate`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Cursor, Write};
use std::path::Path;

use polars_core::prelude::*;
use polars_io::prelude::*;

use super::error::{DatasetError, Result};
use super::meta::{DatasetMeta, FeatureKind, TableDigest};
use super::types::{FeatureValue, Group, GroupJob, Pair, Sample, Workload};

/// Fixed columns of `workloads.parquet`, before the declared feature columns.
pub const WORKLOAD_COLUMNS: [&str; 5] = [
    "workload",
    "kind",
    "solo_throughput",
    "solo_throughput_std",
    "repetitions",
];

/// Optional fixed columns of `workloads.parquet`: written after `repetitions` only where some
/// row has a value, read as `None` where absent (datasets written before them stay readable).
pub const WORKLOAD_OPTIONAL_COLUMNS: [&str; 1] = ["solo_throughput_se"];

/// Optional fixed columns of `pairs.parquet`, after `note`, like [`WORKLOAD_OPTIONAL_COLUMNS`].
pub const PAIR_OPTIONAL_COLUMNS: [&str; 2] = ["throughput_a_se", "throughput_b_se"];

/// Fixed columns of `pairs.parquet`, before the declared counter columns.
pub const PAIR_COLUMNS: [&str; 13] = [
    "a",
    "b",
    "gpu",
    "mode",
    "share_a",
    "share_b",
    "throughput_a",
    "throughput_b",
    "throughput_a_std",
    "throughput_b_std",
    "repetitions",
    "status",
    "note",
];

/// Columns of `groups.parquet`: one row per job; the rows of one group are consecutive, share
/// their `group` number and repeat the group's device, mode, repetitions, status and note.
pub const GROUP_COLUMNS: [&str; 10] = [
    "group",
    "workload",
    "gpu",
    "mode",
    "share",
    "throughput",
    "throughput_std",
    "repetitions",
    "status",
    "note",
];

/// Optional columns of `groups.parquet`, like [`PAIR_OPTIONAL_COLUMNS`].
pub const GROUP_OPTIONAL_COLUMNS: [&str; 1] = ["throughput_se"];

fn polars_error(file: &Path, context: &str, e: &PolarsError) -> DatasetError {
    DatasetError::new(file, format!("{context}: {e}"))
}

fn strings(name: &str, values: impl Iterator<Item = Option<String>>) -> Column {
    Column::new(name.into(), values.collect::<Vec<_>>())
}

fn numbers(name: &str, values: impl Iterator<Item = Option<f64>>) -> Column {
    Column::new(name.into(), values.collect::<Vec<_>>())
}

fn counts(name: &str, values: impl Iterator<Item = Option<u32>>) -> Column {
    Column::new(name.into(), values.collect::<Vec<_>>())
}

pub fn workloads_frame(meta: &DatasetMeta, rows: &[Workload]) -> PolarsResult<DataFrame> {
    let mut columns = vec![
        strings("workload", rows.iter().map(|w| Some(w.workload.clone()))),
        strings("kind", rows.iter().map(|w| Some(w.kind.to_string()))),
        numbers(
            "solo_throughput",
            rows.iter().map(|w| Some(w.solo_throughput)),
        ),
        numbers(
            "solo_throughput_std",
            rows.iter().map(|w| w.solo_throughput_std),
        ),
        counts("repetitions", rows.iter().map(|w| w.repetitions)),
    ];
    if rows.iter().any(|w| w.solo_throughput_se.is_some()) {
        columns.push(numbers(
            "solo_throughput_se",
            rows.iter().map(|w| w.solo_throughput_se),
        ));
    }
    for feature in &meta.workload_features {
        let cell = |w: &Workload| w.features.get(&feature.name).cloned();
        columns.push(match feature.kind {
            FeatureKind::Numeric => numbers(
                &feature.name,
                rows.iter().map(|w| cell(w).and_then(|v| v.as_number())),
            ),
            FeatureKind::Categorical => strings(
                &feature.name,
                rows.iter()
                    .map(|w| cell(w).and_then(|v| v.as_category().map(str::to_string))),
            ),
        });
    }
    DataFrame::new(rows.len(), columns)
}

pub fn pairs_frame(meta: &DatasetMeta, rows: &[Pair]) -> PolarsResult<DataFrame> {
    let mut columns = vec![
        strings("a", rows.iter().map(|p| Some(p.a.clone()))),
        strings("b", rows.iter().map(|p| Some(p.b.clone()))),
        strings("gpu", rows.iter().map(|p| Some(p.gpu.clone()))),
        strings("mode", rows.iter().map(|p| Some(p.mode.to_string()))),
        numbers("share_a", rows.iter().map(|p| p.share_a)),
        numbers("share_b", rows.iter().map(|p| p.share_b)),
        numbers("throughput_a", rows.iter().map(|p| Some(p.throughput_a))),
        numbers("throughput_b", rows.iter().map(|p| Some(p.throughput_b))),
        numbers("throughput_a_std", rows.iter().map(|p| p.throughput_a_std)),
        numbers("throughput_b_std", rows.iter().map(|p| p.throughput_b_std)),
        counts("repetitions", rows.iter().map(|p| p.repetitions)),
        strings("status", rows.iter().map(|p| Some(p.status.to_string()))),
        strings("note", rows.iter().map(|p| p.note.clone())),
    ];
    if rows
        .iter()
        .any(|p| p.throughput_a_se.is_some() || p.throughput_b_se.is_some())
    {
        columns.push(numbers(
            "throughput_a_se",
            rows.iter().map(|p| p.throughput_a_se),
        ));
        columns.push(numbers(
            "throughput_b_se",
            rows.iter().map(|p| p.throughput_b_se),
        ));
    }
    for counter in &meta.pair_counters {
        columns.push(numbers(
            &counter.name,
            rows.iter()
                .map(|p| p.counters.get(&counter.name).copied().flatten()),
        ));
    }
    DataFrame::new(rows.len(), columns)
}

/// The `groups.parquet` table: one row per job, groups numbered from 0 in order.
pub fn groups_frame(rows: &[Group]) -> PolarsResult<DataFrame> {
    let jobs: Vec<(u32, &Group, &GroupJob)> = rows
        .iter()
        .zip(0u32..)
        .flat_map(|(g, n)| g.jobs.iter().map(move |j| (n, g, j)))
        .collect();
    let mut columns = vec![
        counts("group", jobs.iter().map(|(n, _, _)| Some(*n))),
        strings(
            "workload",
            jobs.iter().map(|(_, _, j)| Some(j.workload.clone())),
        ),
        strings("gpu", jobs.iter().map(|(_, g, _)| Some(g.gpu.clone()))),
        strings(
            "mode",
            jobs.iter().map(|(_, g, _)| Some(g.mode.to_string())),
        ),
        numbers("share", jobs.iter().map(|(_, _, j)| j.share)),
        numbers(
            "throughput",
            jobs.iter().map(|(_, _, j)| Some(j.throughput)),
        ),
        numbers(
            "throughput_std",
            jobs.iter().map(|(_, _, j)| j.throughput_std),
        ),
        counts("repetitions", jobs.iter().map(|(_, g, _)| g.repetitions)),
        strings(
            "status",
            jobs.iter().map(|(_, g, _)| Some(g.status.to_string())),
        ),
        strings("note", jobs.iter().map(|(_, g, _)| g.note.clone())),
    ];
    if jobs.iter().any(|(_, _, j)| j.throughput_se.is_some()) {
        columns.push(numbers(
            "throughput_se",
            jobs.iter().map(|(_, _, j)| j.throughput_se),
        ));
    }
    DataFrame::new(jobs.len(), columns)
}

/// The `samples.parquet` table: run, source, t, counter, value.
pub fn samples_frame(rows: &[Sample]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            strings("run", rows.iter().map(|r| Some(r.run.clone()))),
            strings("source", rows.iter().map(|r| Some(r.source.clone()))),
            numbers("t", rows.iter().map(|r| Some(r.t))),
            strings("counter", rows.iter().map(|r| Some(r.counter.clone()))),
            numbers("value", rows.iter().map(|r| Some(r.value))),
        ],
    )
}

/// Writes `frame` to `path` as Parquet; the written file's digest.
pub fn write_parquet(path: &Path, mut frame: DataFrame) -> Result<TableDigest> {
    let file =
        File::create(path).map_err(|e| DatasetError::new(path, format!("cannot create: {e}")))?;
    let mut out = Digesting::new(BufWriter::new(file));
    ParquetWriter::new(&mut out)
        .finish(&mut frame)
        .map_err(|e| polars_error(path, "cannot write Parquet", &e))?;
    out.inner
        .flush()
        .map_err(|e| DatasetError::new(path, format!("cannot write: {e}")))?;
    Ok(out.digest())
}

/// A writer that digests what passes through it.
struct Digesting<W> {
    inner: W,
    hash: u64,
    bytes: u64,
}

impl<W: Write> Digesting<W> {
    fn new(inner: W) -> Self {
        Digesting {
            inner,
            hash: crate::hash::FNV_OFFSET,
            bytes: 0,
        }
    }

    fn digest(&self) -> TableDigest {
        TableDigest::from_parts(self.bytes, self.hash)
    }
}

impl<W: Write> Write for Digesting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash = crate::hash::fnv1a(&buf[..n], self.hash);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Reads a whole Parquet file, checked first against `digest` where `dataset.json` lists one:
/// a file that differs from what was written is named, and never decoded (damage that would
/// decode to other numbers is caught, and so is damage that makes the decoder ask for more
/// memory than exists, which aborts the process rather than panicking). A damaged file read
/// unchecked is still an error naming it where polars' reader panics on it (a field of the
/// wrong type in the footer or a page header, a page that decodes past its end): the panic is
/// caught, unreported, and answered with what it said.
pub fn read_parquet(path: &Path, digest: Option<&TableDigest>) -> Result<DataFrame> {
    let read = match digest {
        Some(digest) => {
            let bytes =
                fs::read(path).map_err(|e| DatasetError::new(path, format!("cannot read: {e}")))?;
            digest
                .check(&bytes)
                .map_err(|m| DatasetError::new(path, m))?;
            crate::panic::caught_quietly(|| decode(ParquetReader::new(Cursor::new(bytes))))
        }
        None => {
            let file = File::open(path)
                .map_err(|e| DatasetError::new(path, format!("cannot open: {e}")))?;
            crate::panic::caught_quietly(|| decode(ParquetReader::new(file)))
        }
    };
    match read {
        Ok(Ok(Err((column, kind)))) => Err(DatasetError::new(
            path,
            format!(
                "a {kind} column, which duet does not read; write it as plain text or numbers \
                 (pandas: `.astype(str)` or `.astype(float)`)"
            ),
        )
        .column(&column)),
        Ok(Ok(Ok(frame))) => Ok(frame),
        Ok(Err(e)) => Err(polars_error(path, "not a readable Parquet file", &e)),
        Err(payload) => Err(DatasetError::new(
            path,
            format!(
                "not a readable Parquet file: damaged (the reader failed: {})",
                crate::panic::message(payload.as_ref())
            ),
        )),
    }
}

/// A Parquet file's table, or the first column of a type polars' reader is built without
/// (a dictionary, as pandas' `category` writes; a decimal), named with its type: reading one
/// panicked on a reader thread, whose report no catching can keep off stderr.
fn decode<R: polars_io::mmap::MmapBytesReader>(
    mut reader: ParquetReader<R>,
) -> PolarsResult<std::result::Result<DataFrame, (String, &'static str)>> {
    let schema = reader.schema()?;
    for field in schema.iter_values() {
        let kind = match field.dtype() {
            ArrowDataType::Dictionary(..) => "dictionary (categorical)",
            ArrowDataType::Decimal(..)
            | ArrowDataType::Decimal32(..)
            | ArrowDataType::Decimal64(..)
            | ArrowDataType::Decimal256(..) => "decimal",
            _ => continue,
        };
        return Ok(Err((field.name.to_string(), kind)));
    }
    reader.finish().map(Ok)
}

/// A read Parquet table with its file name, for errors that say where.
struct Table<'a> {
    frame: &'a DataFrame,
    file: &'a Path,
}

impl Table<'_> {
    fn column(&self, name: &str) -> Result<&Column> {
        self.frame
            .column(name)
            .map_err(|_| DatasetError::new(self.file, "missing column").column(name))
    }

    fn wrong_type(&self, name: &str, dtype: &DataType, expected: &str) -> DatasetError {
        DatasetError::new(self.file, format!("has type {dtype}, expected {expected}")).column(name)
    }

    fn optional_strings(&self, name: &str) -> Result<Vec<Option<String>>> {
        let column = self.column(name)?;
        match column.dtype() {
            DataType::String => {}
            DataType::Null => return Ok(vec![None; column.len()]),
            other => return Err(self.wrong_type(name, other, "text")),
        }
        let values = column
            .str()
            .map_err(|e| polars_error(self.file, name, &e))?;
        Ok(values.iter().map(|v| v.map(str::to_string)).collect())
    }

    fn optional_numbers(&self, name: &str) -> Result<Vec<Option<f64>>> {
        let column = self.column(name)?;
        let dtype = column.dtype();
        if !(dtype.is_primitive_numeric() || matches!(dtype, DataType::Null)) {
            return Err(self.wrong_type(name, dtype, "numbers"));
        }
        let cast = column
            .cast(&DataType::Float64)
            .map_err(|e| polars_error(self.file, name, &e))?;
        let values = cast.f64().map_err(|e| polars_error(self.file, name, &e))?;
        Ok(values.iter().collect())
    }

    /// An optional column: its numbers, or `None` in every row where the file has no such column.
    fn absent_or_numbers(&self, name: &str) -> Result<Vec<Option<f64>>> {
        if self.frame.column(name).is_err() {
            return Ok(vec![None; self.frame.height()]);
        }
        self.optional_numbers(name)
    }

    fn optional_counts(&self, name: &str) -> Result<Vec<Option<u32>>> {
        let numbers = self.optional_numbers(name)?;
        numbers
            .into_iter()
            .enumerate()
            .map(|(row, v)| match v {
                None => Ok(None),
                Some(x) if x.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&x) =>
                {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    Ok(Some(x as u32))
                }
                Some(x) => Err(DatasetError::new(
                    self.file,
                    format!("{x} is not a count (a whole number >= 0)"),
                )
                .column(name)
                .row_index(row)),
            })
            .collect()
    }

    fn required<T>(&self, name: &str, values: Vec<Option<T>>) -> Result<Vec<T>> {
        values
            .into_iter()
            .enumerate()
            .map(|(row, v)| {
                v.ok_or_else(|| {
                    DatasetError::new(self.file, "missing value (null) in a required column")
                        .column(name)
                        .row_index(row)
                })
            })
            .collect()
    }

    fn required_strings(&self, name: &str) -> Result<Vec<String>> {
        self.required(name, self.optional_strings(name)?)
    }

    fn required_numbers(&self, name: &str) -> Result<Vec<f64>> {
        self.required(name, self.optional_numbers(name)?)
    }

    fn parsed<T>(
        &self,
        name: &str,
        ids: &[String],
        parse: impl Fn(&str) -> std::result::Result<T, String>,
    ) -> Result<Vec<T>> {
        self.required_strings(name)?
            .iter()
            .enumerate()
            .map(|(row, v)| {
                parse(v).map_err(|message| {
                    DatasetError::new(self.file, message)
                        .column(name)
                        .row_index(row)
                        .id(ids[row].clone())
                })
            })
            .collect()
    }
}

/// The rows of a `samples.parquet` file.
pub fn samples_from_frame(frame: &DataFrame, file: &Path) -> Result<Vec<Sample>> {
    let table = Table { frame, file };
    check_no_undeclared(file, frame, &["run", "source", "t", "counter", "value"])?;
    let run = table.required_strings("run")?;
    let source = table.required_strings("source")?;
    let t = table.required_numbers("t")?;
    let counter = table.required_strings("counter")?;
    let value = table.required_numbers("value")?;
    Ok((0..run.len())
        .map(|i| Sample {
            run: run[i].clone(),
            source: source[i].clone(),
            t: t[i],
            counter: counter[i].clone(),
            value: value[i],
        })
        .collect())
}

/// Rejects columns that neither the fixed layout nor `dataset.json` declares.
fn check_no_undeclared(file: &Path, frame: &DataFrame, known: &[&str]) -> Result<()> {
    for name in frame.get_column_names() {
        if !known.contains(&name.as_str()) {
            return Err(
                DatasetError::new(file, "column is not declared in dataset.json")
                    .column(name.as_str()),
            );
        }
    }
    Ok(())
}

pub fn workloads_from_frame(
    meta: &DatasetMeta,
    frame: &DataFrame,
    file: &Path,
) -> Result<Vec<Workload>> {
    let table = Table { frame, file };
    let mut known: Vec<&str> = WORKLOAD_COLUMNS.to_vec();
    known.extend(WORKLOAD_OPTIONAL_COLUMNS);
    known.extend(meta.workload_features.iter().map(|f| f.name.as_str()));
    check_no_undeclared(file, frame, &known)?;

    let ids = table.required_strings("workload")?;
    let kinds = table.parsed("kind", &ids, str::parse)?;
    let solo = table.required_numbers("solo_throughput")?;
    let solo_std = table.optional_numbers("solo_throughput_std")?;
    let repetitions = table.optional_counts("repetitions")?;
    let solo_se = table.absent_or_numbers("solo_throughput_se")?;
    let mut features: Vec<BTreeMap<String, FeatureValue>> = vec![BTreeMap::new(); ids.len()];
    for feature in &meta.workload_features {
        let values: Vec<FeatureValue> = match feature.kind {
            FeatureKind::Numeric => table
                .optional_numbers(&feature.name)?
                .into_iter()
                .map(FeatureValue::Number)
                .collect(),
            FeatureKind::Categorical => table
                .optional_strings(&feature.name)?
                .into_iter()
                .map(FeatureValue::Category)
                .collect(),
        };
        for (row, value) in values.into_iter().enumerate() {
            features[row].insert(feature.name.clone(), value);
        }
    }
    Ok(ids
        .into_iter()
        .zip(kinds)
        .zip(solo)
        .zip(solo_std)
        .zip(repetitions)
        .zip(solo_se)
        .zip(features)
        .map(
            |(
                (
                    ((((workload, kind), solo_throughput), solo_throughput_std), repetitions),
                    solo_throughput_se,
                ),
                features,
            )| {
                Workload {
                    workload,
                    kind,
                    solo_throughput,
                    solo_throughput_std,
                    solo_throughput_se,
                    repetitions,
                    features,
                }
            },
        )
        .collect())
}

pub fn pairs_from_frame(meta: &DatasetMeta, frame: &DataFrame, file: &Path) -> Result<Vec<Pair>> {
    let table = Table { frame, file };
    let mut known: Vec<&str> = PAIR_COLUMNS.to_vec();
    known.extend(PAIR_OPTIONAL_COLUMNS);
    known.extend(meta.pair_counters.iter().map(|f| f.name.as_str()));
    check_no_undeclared(file, frame, &known)?;

    let a = table.required_strings("a")?;
    let b = table.required_strings("b")?;
    let ids: Vec<String> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| format!("pair {a} + {b}"))
        .collect();
    let gpu = table.required_strings("gpu")?;
    let mode = table.parsed("mode", &ids, str::parse)?;
    let share_a = table.optional_numbers("share_a")?;
    let share_b = table.optional_numbers("share_b")?;
    let throughput_a = table.required_numbers("throughput_a")?;
    let throughput_b = table.required_numbers("throughput_b")?;
    let throughput_a_std = table.optional_numbers("throughput_a_std")?;
    let throughput_b_std = table.optional_numbers("throughput_b_std")?;
    let throughput_a_se = table.absent_or_numbers("throughput_a_se")?;
    let throughput_b_se = table.absent_or_numbers("throughput_b_se")?;
    let repetitions = table.optional_counts("repetitions")?;
    let status = table.parsed("status", &ids, str::parse)?;
    let note = table.optional_strings("note")?;
    let mut counters: Vec<BTreeMap<String, Option<f64>>> = vec![BTreeMap::new(); a.len()];
    for counter in &meta.pair_counters {
        if counter.kind != FeatureKind::Numeric {
            return Err(DatasetError::new(file, "pair counters must be numeric")
                .column(counter.name.clone()));
        }
        for (row, value) in table
            .optional_numbers(&counter.name)?
            .into_iter()
            .enumerate()
        {
            counters[row].insert(counter.name.clone(), value);
        }
    }
    let mut pairs = Vec::with_capacity(a.len());
    for (row, (a, b)) in a.into_iter().zip(b).enumerate() {
        pairs.push(Pair {
            a,
            b,
            gpu: gpu[row].clone(),
            mode: mode[row],
            share_a: share_a[row],
            share_b: share_b[row],
            throughput_a: throughput_a[row],
            throughput_b: throughput_b[row],
            throughput_a_std: throughput_a_std[row],
            throughput_b_std: throughput_b_std[row],
            throughput_a_se: throughput_a_se[row],
            throughput_b_se: throughput_b_se[row],
            repetitions: repetitions[row],
            status: status[row],
            note: note[row].clone(),
            counters: std::mem::take(&mut counters[row]),
        });
    }
    Ok(pairs)
}

/// The groups of a `groups.parquet` file: consecutive rows with one `group` number are one
/// group, and must agree on its device, mode, repetitions, status and note.
pub fn groups_from_frame(frame: &DataFrame, file: &Path) -> Result<Vec<Group>> {
    let table = Table { frame, file };
    let mut known: Vec<&str> = GROUP_COLUMNS.to_vec();
    known.extend(GROUP_OPTIONAL_COLUMNS);
    check_no_undeclared(file, frame, &known)?;
    let number = table.required("group", table.optional_counts("group")?)?;
    let workload = table.required_strings("workload")?;
    let ids: Vec<String> = number
        .iter()
        .zip(&workload)
        .map(|(n, w)| format!("group {n}, workload `{w}`"))
        .collect();
    let gpu = table.required_strings("gpu")?;
    let mode = table.parsed("mode", &ids, str::parse)?;
    let share = table.optional_numbers("share")?;
    let throughput = table.required_numbers("throughput")?;
    let throughput_std = table.optional_numbers("throughput_std")?;
    let throughput_se = table.absent_or_numbers("throughput_se")?;
    let repetitions = table.optional_counts("repetitions")?;
    let status = table.parsed("status", &ids, str::parse)?;
    let note = table.optional_strings("note")?;
    let mut groups: Vec<Group> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in 0..number.len() {
        let job = GroupJob {
            workload: workload[row].clone(),
            share: share[row],
            throughput: throughput[row],
            throughput_std: throughput_std[row],
            throughput_se: throughput_se[row],
        };
        if row > 0 && number[row] == number[row - 1] {
            let group = groups.last_mut().expect("a group was started");
            for (column, same) in [
                ("gpu", group.gpu == gpu[row]),
                ("mode", group.mode == mode[row]),
                ("repetitions", group.repetitions == repetitions[row]),
                ("status", group.status == status[row]),
                ("note", group.note == note[row]),
            ] {
                if !same {
                    return Err(DatasetError::new(
                        file,
                        "differs from the group's first row; a group's rows share it",
                    )
                    .column(column)
                    .row_index(row)
                    .id(ids[row].clone()));
                }
            }
            group.jobs.push(job);
            continue;
        }
        if !seen.insert(number[row]) {
            return Err(DatasetError::new(
                file,
                format!(
                    "group {} appears again after other groups; a group's rows are consecutive",
                    number[row]
                ),
            )
            .column("group")
            .row_index(row)
            .id(ids[row].clone()));
        }
        groups.push(Group {
            gpu: gpu[row].clone(),
            mode: mode[row],
            jobs: vec![job],
            repetitions: repetitions[row],
            status: status[row],
            note: note[row].clone(),
        });
    }
    Ok(groups)
}
