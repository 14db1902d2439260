//! The dataset format end to end on real files: write, read back, and every rule's error.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use duet_core::dataset::{
    Dataset, DatasetMeta, FORMAT, FeatureColumn, FeatureKind, FeatureValue, Group, GroupJob,
    JobKind, Mode, Pair, Provenance, Sample, Status, Summary, TableDigest, Workload, merge,
    modes_present,
};

fn workload(id: &str, solo: f64) -> Workload {
    Workload {
        workload: id.to_string(),
        kind: JobKind::Train,
        solo_throughput: solo,
        solo_throughput_std: Some(0.1),
        solo_throughput_se: None,
        repetitions: Some(3),
        features: BTreeMap::from([
            ("gpu_util".to_string(), FeatureValue::Number(Some(50.0))),
            (
                "model".to_string(),
                FeatureValue::Category(Some("mlp".into())),
            ),
        ]),
    }
}

fn pair(a: &str, b: &str, ta: f64, tb: f64, status: Status) -> Pair {
    Pair {
        a: a.to_string(),
        b: b.to_string(),
        gpu: "cpu".to_string(),
        mode: Mode::Cpu,
        share_a: None,
        share_b: None,
        throughput_a: ta,
        throughput_b: tb,
        throughput_a_std: None,
        throughput_b_std: Some(0.01),
        throughput_a_se: None,
        throughput_b_se: None,
        repetitions: Some(3),
        status,
        note: None,
        counters: BTreeMap::from([("power_w".to_string(), Some(120.5))]),
    }
}

fn sample() -> Dataset {
    let mut workloads = vec![workload("x", 10.0), workload("y", 4.0), workload("z", 2.5)];
    workloads[2]
        .features
        .insert("gpu_util".into(), FeatureValue::Number(None));
    workloads[2]
        .features
        .insert("model".into(), FeatureValue::Category(None));
    workloads[1].kind = JobKind::Infer;
    let mut pairs = vec![
        pair("x", "y", 5.0, 3.0, Status::Ok),
        pair("x", "x", 6.0, 6.5, Status::Ok),
        pair("y", "z", 0.0, 0.0, Status::Oom),
    ];
    pairs[2].note = Some("CUDA out of memory".into());
    pairs[2].counters.insert("power_w".into(), None);
    let meta = DatasetMeta {
        format: FORMAT.to_string(),
        name: "sample".into(),
        description: "three workloads".into(),
        provenance: Provenance {
            source: "unit test".into(),
            gpu: "cpu".into(),
            driver: None,
            host: Some("test-host".into()),
            measured_by: "the test".into(),
            tool: "duet tests".into(),
            command: Some("cargo test".into()),
            date: "2026-11-30".into(),
            licence: "MIT".into(),
            licence_text: Some("notice\n".into()),
        },
        workload_features: vec![
            FeatureColumn {
                name: "gpu_util".into(),
                kind: FeatureKind::Numeric,
                unit: Some("%".into()),
                meaning: "utilisation".into(),
            },
            FeatureColumn {
                name: "model".into(),
                kind: FeatureKind::Categorical,
                unit: None,
                meaning: "family".into(),
            },
        ],
        pair_counters: vec![FeatureColumn {
            name: "power_w".into(),
            kind: FeatureKind::Numeric,
            unit: Some("W".into()),
            meaning: "power".into(),
        }],
        modes: modes_present(&pairs),
        tables: Default::default(),
    };
    Dataset {
        meta,
        workloads,
        pairs,
        groups: Vec::new(),
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary folder")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes `dataset` through the public writer into `root/ds`, for a test to read or damage.
fn written(dataset: &Dataset, root: &Path) -> PathBuf {
    let dir = root.join("ds");
    dataset.write(&dir).expect("write");
    dir
}

#[test]
fn write_then_read_gives_back_every_value() {
    let tmp = scratch();
    let original = sample();
    let dir = written(&original, tmp.path());
    assert_eq!(
        entries(&dir),
        [
            "LICENSE",
            "dataset.json",
            "pairs.parquet",
            "workloads.parquet"
        ]
    );
    let back = Dataset::read(&dir).expect("read");
    assert_eq!(back, original);
    assert_eq!(
        fs::read_to_string(dir.join("LICENSE")).expect("licence"),
        "notice\n"
    );
    // Nothing but the dataset itself is left beside it.
    assert_eq!(entries(tmp.path()), ["ds"]);
}

#[test]
fn standard_errors_are_optional_columns_written_only_where_measured() {
    use polars_io::prelude::*;
    let columns = |path: &Path| -> Vec<String> {
        let frame = ParquetReader::new(fs::File::open(path).expect("open"))
            .finish()
            .expect("read");
        frame
            .get_column_names()
            .iter()
            .map(|c| c.to_string())
            .collect()
    };
    let tmp = scratch();
    // Without any estimate the tables keep the layout datasets had before the columns.
    let plain = written(&sample(), tmp.path());
    assert!(!columns(&plain.join("workloads.parquet")).contains(&"solo_throughput_se".into()));
    assert!(!columns(&plain.join("pairs.parquet")).contains(&"throughput_a_se".into()));
    let mut measured = sample();
    measured.workloads[0].solo_throughput_se = Some(0.05);
    measured.pairs[0].throughput_a_se = Some(0.02);
    measured.pairs[1].throughput_b_se = Some(0.03);
    let dir = tmp.path().join("with-se");
    measured.write(&dir).expect("write");
    assert!(columns(&dir.join("workloads.parquet")).contains(&"solo_throughput_se".into()));
    assert!(columns(&dir.join("pairs.parquet")).contains(&"throughput_b_se".into()));
    let back = Dataset::read(&dir).expect("read");
    assert_eq!(back, measured);
    assert_eq!(back.workloads[1].solo_throughput_se, None);
    // A feature cannot take the name, and a negative error is refused like a negative spread.
    let mut clash = sample();
    clash.meta.workload_features[0].name = "solo_throughput_se".into();
    assert!(
        rejected(&clash).contains("is a fixed column"),
        "{}",
        rejected(&clash)
    );
    let mut negative = sample();
    negative.pairs[0].throughput_b_se = Some(-1.0);
    let msg = rejected(&negative);
    assert!(msg.contains("column `throughput_b_se`"), "{msg}");
}

#[test]
fn speeds_are_derived_from_solo_throughput() {
    let d = sample();
    let speeds = d.directed_speeds();
    assert_eq!(
        speeds.len(),
        4,
        "two ok pairs, both directions; oom has none"
    );
    assert_eq!(speeds[0].job, "x");
    assert!((speeds[0].speed - 0.5).abs() < 1e-12);
    assert!((speeds[1].speed - 0.75).abs() < 1e-12);
    assert!((duet_core::dataset::slowdown(5.0, 10.0) - 2.0).abs() < 1e-12);
}

fn rejected(dataset: &Dataset) -> String {
    let tmp = scratch();
    let out = tmp.path().join("ds");
    let err = dataset.write(&out).expect_err("must be rejected");
    assert!(!out.exists(), "no output folder after a rejected write");
    assert!(
        entries(tmp.path()).is_empty(),
        "no temporary folder left behind"
    );
    err.to_string()
}

#[test]
fn duplicate_workload_id_is_named() {
    let mut d = sample();
    d.workloads.push(workload("y", 1.0));
    let msg = rejected(&d);
    assert!(
        msg.contains("workloads.parquet: column `workload`, row 4 (workload `y`)"),
        "{msg}"
    );
    assert!(
        msg.contains("duplicate workload id, first seen in row 2"),
        "{msg}"
    );
}

#[test]
fn pair_naming_an_unknown_workload_is_named() {
    let mut d = sample();
    d.pairs[1].b = "ghost".into();
    let msg = rejected(&d);
    assert!(msg.contains("pairs.parquet: column `b`, row 2"), "{msg}");
    assert!(msg.contains("unknown workload `ghost`"), "{msg}");
}

#[test]
fn non_finite_and_negative_throughputs_are_rejected() {
    for (value, word) in [
        (f64::NAN, "NaN"),
        (f64::INFINITY, "infinite"),
        (-1.0, "negative"),
        // A subnormal rate made an infinite speed; one past 1e15 a second, ratios past the
        // model's range.
        (1e-320, "too small to be a measurement"),
        (1e300, "more than the 1e15"),
    ] {
        let mut d = sample();
        d.pairs[0].throughput_b = value;
        let msg = rejected(&d);
        assert!(msg.contains("column `throughput_b`, row 1"), "{msg}");
        assert!(msg.contains(word), "{msg}");
        let mut d = sample();
        d.workloads[0].solo_throughput = value;
        let msg = rejected(&d);
        assert!(
            msg.contains("column `solo_throughput`, row 1 (workload `x`)"),
            "{msg}"
        );
    }
}

/// A measurement repeated 0 times (merging it divided by its count: a NaN solo throughput
/// blamed on the merge's own output).
#[test]
fn repetitions_are_at_least_one_where_given() {
    let mut d = sample();
    d.workloads[0].repetitions = Some(0);
    let msg = rejected(&d);
    assert!(
        msg.contains("column `repetitions`, row 1 (workload `x`)")
            && msg.contains("repetitions is 0"),
        "{msg}"
    );
    let mut d = sample();
    d.pairs[0].repetitions = Some(0);
    let msg = rejected(&d);
    assert!(
        msg.contains("pairs.parquet: column `repetitions`, row 1"),
        "{msg}"
    );
}

#[test]
fn status_must_match_the_throughputs() {
    let mut d = sample();
    d.pairs[0].throughput_a = 0.0;
    assert!(rejected(&d).contains("status is ok but a co-located throughput is 0"));
    let mut d = sample();
    d.pairs[2].throughput_a = 1.0;
    d.pairs[2].throughput_b = 1.0;
    assert!(rejected(&d).contains("status is oom but both co-located throughputs are positive"));
}

#[test]
fn shares_must_lie_in_0_100() {
    for bad in [0.0, -5.0, 100.5] {
        let mut d = sample();
        d.pairs[0].share_a = Some(bad);
        let msg = rejected(&d);
        assert!(msg.contains("column `share_a`, row 1"), "{msg}");
        assert!(msg.contains("outside (0, 100]"), "{msg}");
    }
    let mut d = sample();
    d.pairs[0].share_a = Some(100.0);
    d.pairs[0].share_b = Some(0.5);
    let tmp = scratch();
    d.write(&tmp.path().join("ok")).expect("edges are valid");
}

#[test]
fn the_same_setting_twice_is_rejected_even_mirrored() {
    let mut d = sample();
    let mut mirror = d.pairs[0].clone();
    std::mem::swap(&mut mirror.a, &mut mirror.b);
    d.pairs.push(mirror);
    let msg = rejected(&d);
    assert!(msg.contains("row 4"), "{msg}");
    assert!(msg.contains("measured again (first in row 1)"), "{msg}");
}

#[test]
fn existing_output_folder_is_refused_and_left_untouched() {
    let tmp = scratch();
    let out = tmp.path().join("ds");
    fs::create_dir(&out).expect("mkdir");
    fs::write(out.join("keep.txt"), "mine").expect("write");
    let err = sample().write(&out).expect_err("must refuse");
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(entries(&out), ["keep.txt"]);
}

/// Deletes `file`'s entry from `dir`'s `dataset.json` `tables`, as a user does after changing
/// the table on purpose (and as a dataset written before the digests reads).
fn unlist(dir: &Path, file: &str) {
    let path = dir.join("dataset.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&path).expect("read")).expect("json");
    let tables = meta["tables"].as_object_mut().expect("tables listed");
    assert!(tables.remove(file).is_some(), "{file} was listed");
    fs::write(&path, serde_json::to_string_pretty(&meta).expect("json")).expect("write");
}

#[test]
fn every_table_written_is_listed_with_its_digest() {
    let tmp = scratch();
    let samples = [Sample {
        run: "r1".into(),
        source: "x".into(),
        t: 0.5,
        counter: "cpu_util".into(),
        value: 97.0,
    }];
    let dir = tmp.path().join("ds");
    with_groups()
        .write_with_samples(&dir, &samples)
        .expect("write");
    let meta: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("dataset.json")).expect("read"))
            .expect("json");
    let tables = meta["tables"].as_object().expect("tables");
    let names: Vec<&str> = tables.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "groups.parquet",
            "pairs.parquet",
            "samples.parquet",
            "workloads.parquet"
        ]
    );
    for (name, digest) in tables {
        let bytes = fs::read(dir.join(name)).expect("table");
        assert_eq!(digest["bytes"], bytes.len() as u64, "{name}");
        assert_eq!(
            digest["fnv1a"].as_str(),
            Some(TableDigest::of(&bytes).fnv1a.as_str()),
            "{name}"
        );
    }
    // Read back, the dataset holds no digests: it equals the one written.
    assert_eq!(Dataset::read(&dir).expect("read"), with_groups());
    assert_eq!(Dataset::read_samples(&dir).expect("samples"), samples);
}

/// Any one byte of any table changed is named before the table is decoded, so no damage can
/// decode to other numbers, nor make the decoder panic or ask for more memory than exists.
#[test]
fn a_changed_byte_of_any_listed_table_is_named_before_decoding() {
    let tmp = scratch();
    let samples = [Sample {
        run: "r1".into(),
        source: "device".into(),
        t: 0.0,
        counter: "power_w".into(),
        value: 120.0,
    }];
    let dir = tmp.path().join("ds");
    with_groups()
        .write_with_samples(&dir, &samples)
        .expect("write");
    for (file, step) in [
        ("workloads.parquet", 1),
        ("pairs.parquet", 1),
        ("groups.parquet", 3),
        ("samples.parquet", 3),
    ] {
        let path = dir.join(file);
        let whole = fs::read(&path).expect("table");
        for at in (0..whole.len()).step_by(step) {
            let mut bytes = whole.clone();
            bytes[at] ^= 0x20;
            fs::write(&path, &bytes).expect("damage");
            let error = if file == "samples.parquet" {
                Dataset::read_samples(&dir).expect_err("damaged")
            } else {
                Dataset::read(&dir).expect_err("damaged")
            };
            assert!(
                error
                    .to_string()
                    .contains(&format!("{file}: damaged or changed since it was written")),
                "byte {at}: {error}"
            );
        }
        fs::write(&path, &whole[..whole.len() - 1]).expect("truncate");
        let error = if file == "samples.parquet" {
            Dataset::read_samples(&dir).expect_err("truncated")
        } else {
            Dataset::read(&dir).expect_err("truncated")
        };
        assert!(
            error
                .to_string()
                .contains(&format!("{} bytes with FNV-1a", whole.len() - 1)),
            "{error}"
        );
        fs::write(&path, &whole).expect("restore");
    }
    assert!(Dataset::read(&dir).is_ok(), "whole again");
    // A listed table that is gone is named too, not read as absent.
    fs::remove_file(dir.join("groups.parquet")).expect("remove");
    let error = Dataset::read(&dir).expect_err("gone").to_string();
    assert!(error.contains("groups.parquet: cannot read"), "{error}");
    fs::remove_file(dir.join("samples.parquet")).expect("remove");
    let error = Dataset::read_samples(&dir).expect_err("gone").to_string();
    assert!(error.contains("samples.parquet: cannot read"), "{error}");
}

#[test]
fn a_bad_tables_entry_in_dataset_json_is_named() {
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    let path = dir.join("dataset.json");
    let text = fs::read_to_string(&path).expect("read");
    for (from, to, expected) in [
        (
            "\"pairs.parquet\"",
            "\"pears.parquet\"",
            "column `tables`: `pears.parquet` is not a table of a dataset",
        ),
        (
            "\"fnv1a\": \"",
            "\"fnv1a\": \"X",
            "fnv1a must be 16 lowercase hexadecimal digits",
        ),
        ("\"bytes\"", "\"size\"", "unknown field `size`"),
    ] {
        assert!(text.contains(from), "{from}");
        fs::write(&path, text.replacen(from, to, 1)).expect("write");
        let error = Dataset::read(&dir).expect_err("refused").to_string();
        assert!(
            error.contains("dataset.json") && error.contains(expected),
            "{error}"
        );
    }
}

#[test]
fn truncated_parquet_names_the_file() {
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    unlist(&dir, "pairs.parquet");
    let path = dir.join("pairs.parquet");
    let bytes = fs::read(&path).expect("read");
    fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("pairs.parquet: not a readable Parquet file"),
        "{msg}"
    );
}

#[test]
fn non_parquet_file_names_the_file() {
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    unlist(&dir, "workloads.parquet");
    fs::write(dir.join("workloads.parquet"), "workload,kind\nx,train\n").expect("write");
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("workloads.parquet: not a readable Parquet file"),
        "{msg}"
    );
}

/// A dictionary column, as pandas writes a `category` and polars a `Categorical` (the
/// fixture: `cpu-dev2c`'s pairs with `mode` cast to Categorical by polars 1.x), is named with
/// its column; polars' reader, built without categoricals, panicked on a reader thread and the
/// report reached stderr.
#[test]
fn a_categorical_column_is_named_not_read() {
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    unlist(&dir, "pairs.parquet");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pairs-categorical-mode.parquet");
    fs::copy(fixture, dir.join("pairs.parquet")).expect("copy");
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("pairs.parquet: column `mode`: a dictionary (categorical) column"),
        "{msg}"
    );
}

/// Rewrites one table of a written dataset through polars, to plant a fault a well-behaved
/// writer never makes, and deletes its digest from `dataset.json`, as a user changing a table
/// on purpose does.
fn rewrite_table(path: &Path, edit: impl FnOnce(&mut polars_core::prelude::DataFrame)) {
    let file = path.file_name().expect("name").to_str().expect("utf-8");
    unlist(path.parent().expect("folder"), file);
    use polars_io::prelude::*;
    let mut frame = ParquetReader::new(fs::File::open(path).expect("open"))
        .finish()
        .expect("read");
    edit(&mut frame);
    ParquetWriter::new(fs::File::create(path).expect("create"))
        .finish(&mut frame)
        .expect("write");
}

#[test]
fn missing_column_is_named() {
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    rewrite_table(&dir.join("workloads.parquet"), |f| {
        f.drop_in_place("solo_throughput").expect("drop");
    });
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.ends_with("workloads.parquet: column `solo_throughput`: missing column"),
        "{msg}"
    );
}

#[test]
fn text_in_a_numeric_column_is_named() {
    use polars_core::prelude::*;
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    rewrite_table(&dir.join("pairs.parquet"), |f| {
        let text = Column::new("throughput_a".into(), ["5", "6", "0"]);
        f.with_column(text).expect("replace");
    });
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("pairs.parquet: column `throughput_a`: has type str"),
        "{msg}"
    );
}

#[test]
fn unknown_mode_and_undeclared_column_are_named() {
    use polars_core::prelude::*;
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    rewrite_table(&dir.join("pairs.parquet"), |f| {
        f.with_column(Column::new("mode".into(), ["cpu", "warp", "cpu"]))
            .expect("replace");
    });
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("column `mode`, row 2 (pair x + x): unknown mode `warp`"),
        "{msg}"
    );

    let dir2 = tmp.path().join("ds2");
    sample().write(&dir2).expect("write");
    rewrite_table(&dir2.join("workloads.parquet"), |f| {
        f.with_column(Column::new("surprise".into(), [1.0, 2.0, 3.0]))
            .expect("add");
    });
    let msg = Dataset::read(&dir2).expect_err("must fail").to_string();
    assert!(
        msg.contains("column `surprise`: column is not declared in dataset.json"),
        "{msg}"
    );
}

#[test]
fn bad_dataset_json_names_the_field() {
    let tmp = scratch();
    let dir = written(&sample(), tmp.path());
    let path = dir.join("dataset.json");
    let text = fs::read_to_string(&path).expect("read");
    fs::write(&path, text.replace("\"measured_by\"", "\"measured_bye\"")).expect("write");
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("dataset.json: invalid: unknown field `measured_bye`"),
        "{msg}"
    );
}

#[test]
fn merged_shards_equal_the_whole() {
    let whole = sample();
    let mut first = whole.clone();
    let mut second = whole.clone();
    first.pairs.truncate(1);
    second.pairs.drain(..1);
    for part in [&mut first, &mut second] {
        part.meta.modes = modes_present(&part.pairs);
    }
    let merged = merge(
        "sample",
        &[(PathBuf::from("s0"), first), (PathBuf::from("s1"), second)],
    )
    .expect("merge");
    assert_eq!(merged.workloads, whole.workloads);
    assert_eq!(merged.pairs, whole.pairs);
}

#[test]
fn merge_pools_repeated_solo_profiles_and_refuses_overlap() {
    let whole = sample();
    let mut other = whole.clone();
    other.workloads[0].solo_throughput = 12.0;
    other.workloads[0].repetitions = Some(1);
    other.pairs.clear();
    other.meta.modes.clear();
    let merged = merge(
        "m",
        &[
            (PathBuf::from("s0"), whole.clone()),
            (PathBuf::from("s1"), other),
        ],
    )
    .expect("merge");
    // (10 * 3 + 12 * 1) / 4
    assert!((merged.workloads[0].solo_throughput - 10.5).abs() < 1e-12);
    assert_eq!(merged.workloads[0].repetitions, Some(4));

    let err = merge(
        "m",
        &[
            (PathBuf::from("s0"), whole.clone()),
            (PathBuf::from("s1"), whole.clone()),
        ],
    )
    .expect_err("overlap");
    assert!(err.to_string().contains("were measured in s0 too"), "{err}");

    let mut elsewhere = whole.clone();
    elsewhere.meta.provenance.gpu = "h200".into();
    let err = merge(
        "m",
        &[
            (PathBuf::from("s0"), whole),
            (PathBuf::from("s1"), elsewhere),
        ],
    )
    .expect_err("different gpu");
    assert!(
        err.to_string()
            .contains("s1/dataset.json: column `provenance.gpu`"),
        "{err}"
    );
}

fn group(jobs: &[(&str, f64)], status: Status) -> Group {
    Group {
        gpu: "cpu".into(),
        mode: Mode::Cpu,
        jobs: jobs
            .iter()
            .map(|(w, t)| GroupJob {
                workload: (*w).to_string(),
                share: None,
                throughput: *t,
                throughput_std: Some(0.01),
                throughput_se: None,
            })
            .collect(),
        repetitions: Some(2),
        status,
        note: None,
    }
}

/// `sample()` with two triples and a group of four (one workload twice).
fn with_groups() -> Dataset {
    let mut d = sample();
    d.groups = vec![
        group(&[("x", 3.0), ("y", 1.5), ("z", 1.0)], Status::Ok),
        group(&[("x", 4.0), ("x", 4.2), ("y", 2.0)], Status::Ok),
        group(
            &[("x", 2.0), ("y", 1.0), ("y", 1.1), ("z", 0.5)],
            Status::Ok,
        ),
    ];
    d.groups[1].jobs[0].throughput_se = Some(0.02);
    d
}

#[test]
fn groups_round_trip_and_a_dataset_of_pairs_has_no_groups_file() {
    let tmp = scratch();
    let original = with_groups();
    let dir = written(&original, tmp.path());
    assert!(entries(&dir).contains(&"groups.parquet".to_string()));
    assert_eq!(Dataset::read(&dir).expect("read"), original);
    // Inspect counts settings by size: pairs are groups of two.
    let summary = Summary::of(&original);
    let sizes: Vec<(usize, usize)> = summary
        .by_group_size
        .iter()
        .map(|g| (g.size, g.settings))
        .collect();
    assert_eq!(sizes, [(2, 3), (3, 2), (4, 1)]);
    assert_eq!(
        summary.by_group_size[1].speed.as_ref().map(|q| q.count),
        Some(6)
    );
    // x + y + z: x's pairs with y (0.5) and z (not measured: y + z is oom, x + z absent).
    let triples: Vec<_> = summary
        .compositions
        .iter()
        .filter(|c| c.size == 3)
        .collect();
    assert_eq!(triples.len(), 2);
    assert!(triples.iter().all(|c| c.jobs + c.without_pairs == 6));
    assert!(triples.iter().all(|c| c.mape_speed.is_some()));
    // x + y + y + z: no job has every pair measured, so nothing is scored: no MAPE (not 0).
    let fours: Vec<_> = summary
        .compositions
        .iter()
        .filter(|c| c.size == 4)
        .collect();
    assert_eq!(fours.len(), 2);
    assert!(
        fours
            .iter()
            .all(|c| c.jobs == 0 && c.mape_speed.is_none() && c.bias_speed.is_none()),
        "{fours:?}"
    );
    let json = serde_json::to_value(fours[0]).expect("json");
    assert!(
        json["mape_speed"].is_null() && json["bias_speed"].is_null(),
        "{json}"
    );
    let other = tmp.path().join("pairs-only");
    sample().write(&other).expect("write");
    assert!(!entries(&other).contains(&"groups.parquet".to_string()));
    assert!(Summary::of(&sample()).compositions.is_empty());
}

#[test]
fn bad_groups_are_named() {
    let mut d = with_groups();
    d.groups[0].jobs.truncate(2);
    let msg = rejected(&d);
    assert!(
        msg.contains("groups.parquet: column `group`, row 1")
            && msg.contains("a group holds 3 to 8 jobs, this one 2 (two jobs are a pair"),
        "{msg}"
    );
    let mut d = with_groups();
    d.groups[1].jobs[2].workload = "w".into();
    let msg = rejected(&d);
    assert!(
        msg.contains("column `workload`, row 6") && msg.contains("unknown workload `w`"),
        "{msg}"
    );
    let mut d = with_groups();
    d.groups[2].jobs[1].throughput = 0.0;
    assert!(rejected(&d).contains("status is ok but a co-located throughput is 0"));
    let mut d = with_groups();
    d.groups[0].jobs[0].share = Some(50.0);
    let msg = rejected(&d);
    assert!(
        msg.contains("column `share`, row 2") && msg.contains("give every job its share or none"),
        "{msg}"
    );
    // The same multiset in another order is the same setting.
    let mut d = with_groups();
    d.groups
        .push(group(&[("z", 1.0), ("x", 3.1), ("y", 1.4)], Status::Ok));
    assert!(rejected(&d).contains("measured again (first in group 0)"));
    let mut d = with_groups();
    d.groups[0].mode = Mode::Mps;
    assert!(rejected(&d).contains("mode `mps` is not listed in dataset.json `modes`"));
}

#[test]
fn a_groups_file_whose_rows_disagree_is_named() {
    use polars_core::prelude::*;
    let tmp = scratch();
    let dir = written(&with_groups(), tmp.path());
    rewrite_table(&dir.join("groups.parquet"), |f| {
        let status = ["ok", "ok", "oom", "ok", "ok", "ok", "ok", "ok", "ok", "ok"];
        f.with_column(Column::new("status".into(), status))
            .expect("replace");
    });
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("groups.parquet: column `status`, row 3 (group 0, workload `z`)")
            && msg.contains("differs from the group's first row"),
        "{msg}"
    );
    let dir = tmp.path().join("again");
    with_groups().write(&dir).expect("write");
    rewrite_table(&dir.join("groups.parquet"), |f| {
        let numbers: [u32; 10] = [0, 0, 0, 1, 1, 1, 0, 2, 2, 2];
        f.with_column(Column::new("group".into(), numbers))
            .expect("replace");
    });
    let msg = Dataset::read(&dir).expect_err("must fail").to_string();
    assert!(
        msg.contains("group 0 appears again after other groups"),
        "{msg}"
    );
}

#[test]
fn merged_shards_carry_their_groups_and_refuse_one_measured_twice() {
    let whole = with_groups();
    let tmp = scratch();
    let mut a = whole.clone();
    a.groups.truncate(1);
    let mut b = whole.clone();
    b.groups.remove(0);
    b.pairs.clear();
    let merged = merge(
        "sample",
        &[(tmp.path().join("a"), a.clone()), (tmp.path().join("b"), b)],
    )
    .expect("merge");
    assert_eq!(merged.groups, whole.groups);
    let mut c = a.clone();
    c.pairs.clear();
    let err = merge(
        "sample",
        &[(tmp.path().join("a"), a), (tmp.path().join("c"), c)],
    )
    .expect_err("overlap");
    assert!(
        err.to_string()
            .contains("shards of one campaign split the groups"),
        "{err}"
    );
}

/// A Parquet table damaged where polars' reader panics (a page header's field of the wrong
/// type): an error naming the file, not a crash.
#[test]
fn a_damaged_parquet_table_is_named_not_a_crash() {
    let dir = scratch();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/gavel-k80");
    let copy = dir.path().join("gavel-k80");
    fs::create_dir(&copy).expect("folder");
    for entry in fs::read_dir(&src).expect("the committed dataset") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
    }
    let pairs = copy.join("pairs.parquet");
    let mut bytes = fs::read(&pairs).expect("pairs.parquet");
    assert!(Dataset::read(&copy).is_ok(), "the copy reads whole");
    bytes[7859] = 0xBF;
    bytes[8568] = 0x45;
    fs::write(&pairs, &bytes).expect("damaged");
    let error = Dataset::read(&copy).expect_err("damaged").to_string();
    assert!(error.contains("pairs.parquet"), "{error}");
    assert!(error.contains("not a readable Parquet file"), "{error}");
}
