//! `dataset.json`: what a dataset is, where it came from, and what its columns mean.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::types::Mode;

/// The value of `format` in every `dataset.json` this version writes and reads.
pub const FORMAT: &str = "duet-dataset/1";

/// The contents of `dataset.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetMeta {
    /// Always [`FORMAT`].
    pub format: String,
    pub name: String,
    pub description: String,
    pub provenance: Provenance,
    /// Feature columns of `workloads.parquet`, beyond the fixed ones.
    pub workload_features: Vec<FeatureColumn>,
    /// Counter columns of `pairs.parquet` measured while co-located, beyond the fixed ones.
    #[serde(default)]
    pub pair_counters: Vec<FeatureColumn>,
    /// The sharing modes present in `pairs.parquet`, sorted.
    pub modes: Vec<Mode>,
    /// Each table file as duet wrote it, by file name: checked before the file is decoded, so
    /// a damaged or changed table is named instead of read. Absent from the `dataset.json` of
    /// datasets written before it (their tables are read unchecked). Only reading and writing
    /// fill it: [`Dataset::read`](super::Dataset::read) checks the files it lists and leaves it
    /// empty, [`Dataset::write`](super::Dataset::write) lists the files it wrote whatever it
    /// holds, so two datasets of the same rows are equal whichever files they came from.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tables: BTreeMap<String, TableDigest>,
}

/// A table file's length and 64-bit FNV-1a digest (not a cryptographic hash: it detects
/// damage, and every change of a single byte, not a forger).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDigest {
    pub bytes: u64,
    /// 16 lowercase hexadecimal digits.
    pub fnv1a: String,
}

impl DatasetMeta {
    /// Whether the description carries [`PARTIAL_MARK`](super::PARTIAL_MARK): a stopped
    /// campaign's dataset, or a merge with one.
    pub fn is_partial(&self) -> bool {
        self.description.starts_with(super::PARTIAL_MARK)
    }
}

impl TableDigest {
    /// The digest of a file's contents.
    pub fn of(contents: &[u8]) -> TableDigest {
        TableDigest::from_parts(
            contents.len() as u64,
            crate::hash::fnv1a(contents, crate::hash::FNV_OFFSET),
        )
    }

    /// The digest of `bytes` bytes whose FNV-1a hash is `hash`.
    pub(super) fn from_parts(bytes: u64, hash: u64) -> TableDigest {
        TableDigest {
            bytes,
            fnv1a: format!("{hash:016x}"),
        }
    }

    /// Whether `fnv1a` is 16 lowercase hexadecimal digits, as written.
    pub fn is_well_formed(&self) -> bool {
        self.fnv1a.len() == 16
            && self
                .fnv1a
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    /// Whether `contents` are the bytes this digest was taken of; what differs where not.
    pub fn check(&self, contents: &[u8]) -> Result<(), String> {
        self.check_listed(contents, "dataset.json", "tables")
    }

    /// [`check`](Self::check) for a digest that `file`'s `field` lists (its message names
    /// them).
    pub fn check_listed(&self, contents: &[u8], file: &str, field: &str) -> Result<(), String> {
        let found = TableDigest::of(contents);
        if found == *self {
            return Ok(());
        }
        Err(format!(
            "damaged or changed since it was written: {} bytes with FNV-1a {}, where \
             {file} `{field}` lists {} bytes with FNV-1a {} (if the change was meant, \
             delete the file's entry from `{field}`)",
            found.bytes, found.fnv1a, self.bytes, self.fnv1a
        ))
    }
}

/// Where the measurements came from; enough for someone else to judge and repeat them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Where the numbers come from: a publication, a repository and commit, or a campaign.
    pub source: String,
    /// Device model, for example `v100` or `NVIDIA H200`; `cpu` for CPU campaigns.
    pub gpu: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Who measured it.
    pub measured_by: String,
    /// With what it was measured (and, for imports, with what it was converted).
    pub tool: String,
    /// The exact command that produced this dataset, when duet produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// When it was measured or imported (ISO 8601 date).
    pub date: String,
    /// Licence of the data, for example `MIT`.
    pub licence: String,
    /// The full licence notice to keep with every copy; also written as `LICENSE` in the folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licence_text: Option<String>,
}

/// Whether a feature is a number or a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureKind {
    Numeric,
    Categorical,
}

impl FeatureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FeatureKind::Numeric => "numeric",
            FeatureKind::Categorical => "categorical",
        }
    }
}

/// One declared feature (or counter) column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureColumn {
    pub name: String,
    pub kind: FeatureKind,
    /// Unit of a numeric column (`%`, `MiB`, `W`...), `None` for counts and labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    pub meaning: String,
}
