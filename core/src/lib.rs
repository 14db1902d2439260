//! duet's data contracts, shared by every other crate.
//!
//! `core` defines the dataset format (a folder of `dataset.json` plus Parquet tables), its
//! validation, the canonical feature names, and importers that turn measurements made elsewhere
//! into that format, and the prediction API's bodies. It knows nothing of HTTP, NVML or training.

pub mod api;
pub mod atomic;
pub mod dataset;
pub mod features;
pub mod hash;
pub mod import;
pub mod input;
pub mod panic;
pub mod parallel;
pub mod progress;
pub mod rng;
pub mod stats;
pub mod svg;
pub mod timestamp;

pub use dataset::{
    Dataset, DatasetError, DatasetMeta, FeatureColumn, FeatureKind, FeatureValue, JobKind, Mode,
    Pair, Provenance, Status, Workload,
};
