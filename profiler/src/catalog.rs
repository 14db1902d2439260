//! The workload catalog: a TOML file naming the jobs a campaign measures.
//!
//! ```toml
//! [[workload]]
//! name = "mlp-train"
//! kind = "train"          # train | infer
//! builtin = "mlp"         # mlp | conv | matmul | stream | encoder | decoder
//! batch = 64
//! width = 256
//! precision = "fp32"     # fp32 | fp16 | bf16 (half precisions on CUDA only)
//!
//! [[workload]]
//! name = "my-job"
//! kind = "train"
//! command = ["python3", "train.py", "--epochs", "1000"]
//! progress = "^step \\d+"  # a line of its output that matches = one finished iteration
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use duet_core::dataset::{FeatureValue, JobKind};
use serde::Deserialize;

/// A built-in workload, written with Burn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Builtin {
    /// A multi-layer perceptron (`depth` layers of `width`).
    Mlp,
    /// A small convolutional net on `batch` images of 32x32 with `width` channels.
    Conv,
    /// Compute-bound: `width x width` matrix products.
    Matmul,
    /// Memory-bound: element-wise passes over `width` thousand floats.
    Stream,
    /// A transformer encoder (`depth` layers, model width `width`, 4 heads) on `batch`
    /// sequences of `seq` tokens; training is a causal language-model step.
    Encoder,
    /// Autoregressive decoding with a key-value cache: each iteration generates `seq` tokens for
    /// `batch` sequences, one position at a time (inference; as training, a causal step).
    Decoder,
}

impl Builtin {
    pub const ALL: [Builtin; 6] = [
        Builtin::Mlp,
        Builtin::Conv,
        Builtin::Matmul,
        Builtin::Stream,
        Builtin::Encoder,
        Builtin::Decoder,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Builtin::Mlp => "mlp",
            Builtin::Conv => "conv",
            Builtin::Matmul => "matmul",
            Builtin::Stream => "stream",
            Builtin::Encoder => "encoder",
            Builtin::Decoder => "decoder",
        }
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Builtin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Builtin::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown builtin `{s}`, expected mlp, conv, matmul, stream, encoder or decoder"
                )
            })
    }
}

/// One `[[workload]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: String,
    kind: JobKind,
    builtin: Option<Builtin>,
    command: Option<Vec<String>>,
    progress: Option<String>,
    batch: Option<i64>,
    width: Option<i64>,
    depth: Option<i64>,
    seq: Option<i64>,
    precision: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalog {
    #[serde(default)]
    workload: Vec<RawWorkload>,
}

/// The float type a built-in computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Fp32,
    Fp16,
    Bf16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fp32" => Ok(Precision::Fp32),
            "fp16" => Ok(Precision::Fp16),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!(
                "unknown precision `{s}`, expected fp32, fp16 or bf16"
            )),
        }
    }
}

/// Sizes of a built-in workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub batch: usize,
    pub width: usize,
    pub depth: usize,
    /// Tokens per sequence (encoder, decoder).
    pub seq: usize,
    pub precision: Precision,
}

/// The most tensor elements a built-in's sizes may make (16 GiB in fp32): sizes past it fail
/// to allocate, or overflow counting, where the workload runs, long after the catalog was read.
pub const MAX_ELEMENTS: u128 = 1 << 32;

impl Size {
    /// About how many tensor elements `builtin` holds at these sizes: its parameters and the
    /// activations a training step keeps (an estimate within a small factor, to refuse sizes
    /// no device holds, not to budget memory).
    pub fn elements(&self, builtin: Builtin) -> u128 {
        let [batch, width, depth, seq] =
            [self.batch, self.width, self.depth, self.seq].map(|v| v as u128);
        let depth = depth.max(1);
        let terms: &[u128] = match builtin {
            Builtin::Mlp => &[
                batch.saturating_mul(width).saturating_mul(depth),
                depth.saturating_mul(width).saturating_mul(width),
            ],
            Builtin::Conv => &[
                batch
                    .saturating_mul(width)
                    .saturating_mul(1024)
                    .saturating_mul(depth),
                depth
                    .saturating_mul(width)
                    .saturating_mul(width)
                    .saturating_mul(9),
            ],
            Builtin::Matmul => &[width.saturating_mul(width).saturating_mul(3)],
            Builtin::Stream => &[width.saturating_mul(1024).saturating_mul(3)],
            Builtin::Encoder | Builtin::Decoder => &[
                depth
                    .saturating_mul(batch)
                    .saturating_mul(seq)
                    .saturating_mul(width)
                    .saturating_mul(8),
                depth
                    .saturating_mul(batch)
                    .saturating_mul(4)
                    .saturating_mul(seq)
                    .saturating_mul(seq),
                depth
                    .saturating_mul(width)
                    .saturating_mul(width)
                    .saturating_mul(12),
            ],
        };
        terms.iter().fold(0u128, |a, t| a.saturating_add(*t))
    }
}

/// How a workload runs.
#[derive(Debug, Clone)]
pub enum Source {
    Builtin {
        builtin: Builtin,
        size: Size,
    },
    /// Any command; each output line matching `progress` is one finished iteration.
    Command {
        argv: Vec<String>,
        progress: regex::Regex,
    },
}

impl PartialEq for Source {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                Source::Builtin { builtin, size },
                Source::Builtin {
                    builtin: b,
                    size: s,
                },
            ) => builtin == b && size == s,
            (
                Source::Command { argv, progress },
                Source::Command {
                    argv: a,
                    progress: p,
                },
            ) => argv == a && progress.as_str() == p.as_str(),
            _ => false,
        }
    }
}

/// One workload of the catalog, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    pub name: String,
    pub kind: JobKind,
    pub source: Source,
}

impl WorkloadSpec {
    /// What this workload runs, spelled out field by field with every default applied (JSON
    /// with sorted keys; `seq` for the transformers alone, which use it): the same text for the
    /// same program under any duet that reads the same catalog, and another text where a
    /// default or a field changed what runs. A resumed campaign compares its digest to tell a
    /// redefined workload.
    pub fn definition(&self) -> String {
        let mut fields = BTreeMap::from([
            ("name", serde_json::json!(self.name)),
            ("kind", serde_json::json!(self.kind.as_str())),
        ]);
        match &self.source {
            Source::Builtin { builtin, size } => {
                fields.extend([
                    ("builtin", builtin.as_str().into()),
                    ("batch", size.batch.into()),
                    ("width", size.width.into()),
                    ("depth", size.depth.into()),
                    ("precision", size.precision.as_str().into()),
                ]);
                // Only a transformer's program depends on its sequence length.
                if self.is_transformer() {
                    fields.insert("seq", size.seq.into());
                }
            }
            Source::Command { argv, progress } => fields.extend([
                ("command", argv.clone().into()),
                ("progress", progress.as_str().into()),
            ]),
        }
        serde_json::to_string(&fields).unwrap_or_default()
    }

    /// Whether it is a transformer built-in (sized by `seq` too).
    pub fn is_transformer(&self) -> bool {
        matches!(
            self.source,
            Source::Builtin {
                builtin: Builtin::Encoder | Builtin::Decoder,
                ..
            }
        )
    }

    /// The features the dataset records for it (the built-in's sizes).
    pub fn describe(&self) -> (String, Option<Size>) {
        match &self.source {
            Source::Builtin { builtin, size } => (builtin.to_string(), Some(*size)),
            Source::Command { .. } => ("command".to_string(), None),
        }
    }

    /// The features its definition gives a dataset's row: `model` (the built-in, or
    /// `command`), `batch_size`, `width`, `depth`, `seq` (transformers) and `precision`; the
    /// measured ones (counters, usage) are the campaign's.
    pub fn defined_features(&self) -> BTreeMap<String, FeatureValue> {
        let (model, size) = self.describe();
        let mut features = BTreeMap::new();
        features.insert("model".into(), FeatureValue::Category(Some(model)));
        #[allow(clippy::cast_precision_loss)]
        for (name, value) in [
            ("batch_size", size.map(|s| s.batch as f64)),
            ("width", size.map(|s| s.width as f64)),
            ("depth", size.map(|s| s.depth as f64)),
            (
                "seq",
                size.filter(|_| self.is_transformer()).map(|s| s.seq as f64),
            ),
        ] {
            features.insert(name.into(), FeatureValue::Number(value));
        }
        features.insert(
            "precision".into(),
            FeatureValue::Category(size.map(|s| s.precision.to_string())),
        );
        features
    }
}

/// A checked catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    pub path: PathBuf,
    pub workloads: Vec<WorkloadSpec>,
}

/// Why a catalog was refused: the file and the workload or field to blame.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct CatalogError {
    pub path: PathBuf,
    pub message: String,
}

impl Catalog {
    pub fn read(path: &Path) -> Result<Catalog, CatalogError> {
        let err = |message: String| CatalogError {
            path: path.to_path_buf(),
            message,
        };
        let text = duet_core::input::read_text(path).map_err(err)?;
        Catalog::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Catalog, CatalogError> {
        let err = |message: String| CatalogError {
            path: path.to_path_buf(),
            message,
        };
        let raw: RawCatalog = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if raw.workload.is_empty() {
            return Err(err("no [[workload]] table".into()));
        }
        let mut names = BTreeSet::new();
        let mut workloads = Vec::new();
        for w in raw.workload {
            let at = |m: String| err(format!("workload `{}`: {m}", w.name));
            // A name starting with `-` would be read as a flag where it is passed to `duet
            // workload run`, and `.` or `..` name folders.
            if !w.name.starts_with(|c: char| c.is_ascii_alphanumeric())
                || !w
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(at(
                    "a name is letters, digits and - _ . starting with a letter or digit (it \
                     becomes the workload id)"
                        .into(),
                ));
            }
            if !names.insert(w.name.clone()) {
                return Err(at("the name is used twice".into()));
            }
            let source = match (w.builtin, &w.command) {
                (Some(_), Some(_)) => {
                    return Err(at("give `builtin` or `command`, not both".into()));
                }
                (None, None) => {
                    return Err(at(
                        "missing `command` (or `builtin`: mlp, conv, matmul, stream)".into(),
                    ));
                }
                (Some(builtin), None) => {
                    if w.progress.is_some() {
                        return Err(at(
                            "`progress` is for commands; built-ins report iterations themselves"
                                .into(),
                        ));
                    }
                    let size = |field: &str, value: Option<i64>, default: usize| match value {
                        None => Ok(default),
                        Some(v) if v > 0 => {
                            usize::try_from(v).map_err(|e| at(format!("`{field}`: {e}")))
                        }
                        Some(v) => Err(at(format!("`{field}` must be positive, got {v}"))),
                    };
                    let size = Size {
                        batch: size("batch", w.batch, 32)?,
                        width: size("width", w.width, 128)?,
                        depth: size("depth", w.depth, 2)?,
                        seq: size("seq", w.seq, 32)?,
                        precision: w
                            .precision
                            .as_deref()
                            .map_or(Ok(Precision::Fp32), str::parse)
                            .map_err(|e| at(format!("`precision`: {e}")))?,
                    };
                    let elements = size.elements(builtin);
                    if elements > MAX_ELEMENTS {
                        return Err(at(format!(
                            "`batch`, `width`, `depth` and `seq` make about {elements} tensor \
                             elements, more than the {MAX_ELEMENTS} (16 GiB in fp32) a built-in \
                             may hold"
                        )));
                    }
                    Source::Builtin { builtin, size }
                }
                (None, Some(argv)) => {
                    if argv.is_empty() || argv[0].trim().is_empty() {
                        return Err(at("`command` is empty".into()));
                    }
                    if w.batch.is_some()
                        || w.width.is_some()
                        || w.depth.is_some()
                        || w.seq.is_some()
                        || w.precision.is_some()
                    {
                        return Err(at(
                            "`batch`, `width`, `depth`, `seq` and `precision` size built-ins only"
                                .into(),
                        ));
                    }
                    let pattern = w.progress.clone().ok_or_else(|| {
                        at(
                            "missing `progress`: a pattern matching the line each iteration prints"
                                .into(),
                        )
                    })?;
                    let progress = regex::Regex::new(&pattern)
                        .map_err(|e| at(format!("`progress` is not a valid pattern: {e}")))?;
                    Source::Command {
                        argv: argv.clone(),
                        progress,
                    }
                }
            };
            workloads.push(WorkloadSpec {
                name: w.name,
                kind: w.kind,
                source,
            });
        }
        Ok(Catalog {
            path: path.to_path_buf(),
            workloads,
        })
    }

    pub fn get(&self, name: &str) -> Option<&WorkloadSpec> {
        self.workloads.iter().find(|w| w.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Catalog, String> {
        Catalog::parse(text, Path::new("c.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_builtins_and_commands() {
        let c = parse(
            r#"
            [[workload]]
            name = "mlp-train"
            kind = "train"
            builtin = "mlp"
            batch = 8

            [[workload]]
            name = "job"
            kind = "infer"
            command = ["sh", "-c", "echo step"]
            progress = "^step"
            "#,
        )
        .expect("valid");
        assert_eq!(c.workloads.len(), 2);
        assert_eq!(
            c.workloads[0].source,
            Source::Builtin {
                builtin: Builtin::Mlp,
                size: Size {
                    batch: 8,
                    width: 128,
                    depth: 2,
                    seq: 32,
                    precision: Precision::Fp32,
                }
            }
        );
        assert!(matches!(c.workloads[1].source, Source::Command { .. }));
    }

    #[test]
    fn refuses_what_cannot_run_naming_it() {
        let cases = [
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\ncolour = 1\n",
                "unknown field `colour`",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\n",
                "workload `a`: missing `command`",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\n[[workload]]\nname = \"a\"\nkind = \"infer\"\nbuiltin = \"conv\"\n",
                "workload `a`: the name is used twice",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\nbatch = 0\n",
                "`batch` must be positive, got 0",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\nprecision = \"fp8\"\n",
                "workload `a`: `precision`: unknown precision `fp8`, expected fp32, fp16 or bf16",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\ncommand = [\"x\"]\nprogress = \"s\"\nprecision = \"fp16\"\n",
                "`precision` size built-ins only",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\nwidth = -4\n",
                "`width` must be positive, got -4",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\ncommand = [\"x\"]\n",
                "missing `progress`",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\ncommand = []\nprogress = \"x\"\n",
                "`command` is empty",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\ncommand = [\"x\"]\nprogress = \"(\"\n",
                "not a valid pattern",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"fly\"\nbuiltin = \"mlp\"\n",
                "unknown variant `fly`",
            ),
            ("", "no [[workload]] table"),
            // Read as a flag by the process that runs it (`duet workload run --help`).
            (
                "[[workload]]\nname = \"--help\"\nkind = \"train\"\nbuiltin = \"mlp\"\n",
                "starting with a letter or digit",
            ),
            (
                "[[workload]]\nname = \"..\"\nkind = \"train\"\nbuiltin = \"mlp\"\n",
                "starting with a letter or digit",
            ),
            // Sizes no device holds: refused here, not by an overflow or a failed allocation
            // in the run (`width = 4294967296` panicked counting the matrix's elements).
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"matmul\"\nwidth = 4294967296\n",
                "more than the 4294967296 (16 GiB in fp32)",
            ),
            (
                "[[workload]]\nname = \"a\"\nkind = \"train\"\nbuiltin = \"mlp\"\ndepth = 100000000\n",
                "workload `a`: `batch`, `width`, `depth` and `seq` make about",
            ),
        ];
        for (text, says) in cases {
            let e = parse(text).expect_err(text);
            assert!(
                e.contains(says) && e.starts_with("c.toml: "),
                "`{e}` does not say `{says}`"
            );
        }
    }
}
