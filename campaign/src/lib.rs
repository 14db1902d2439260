//! duet's budgeted campaigns: measure a share of the settings and predict the rest.
//!
//! - [`settings`]: the settings space, every (pair, mode, shares) setting of a dataset or grid;
//! - [`scoring`]: the model fitted on what is measured (the trainer's final-only fit) and each
//!   unmeasured setting's prediction by every ensemble member;
//! - [`choose`]: the one function that picks the next settings to measure, used by the replay
//!   and by a real campaign alike;
//! - [`audit`]: a uniform sample of what selection never chose, the estimated MAPE on the
//!   unmeasured settings and its 90% interval;
//! - [`probes`]: new workloads onto an earlier dataset, each alone and with K co-runners
//!   chosen by the same [`choose`];
//! - [`record`]: the record of choices and audit kept with a dataset (`campaign.json`);
//! - [`replay`]: a complete dataset as the oracle, the methods scored on a held-out test set,
//!   and the probe curves of new workloads; [`report`] writes it.
//!
//! The crate sees the trainer and the model; the profiler never does (ARCHITECTURE.md).

pub mod audit;
pub mod budgeted;
pub mod choose;
pub mod probes;
pub mod record;
pub mod replay;
pub mod report;
pub mod scoring;
pub mod settings;
#[cfg(test)]
mod testdata;

pub use choose::{Choice, ChooseOptions, Rule, Select, choose, choose_with};
pub use settings::{Candidate, Setting};

/// Why a campaign step or a replay could not go on; the message names the flag, file or
/// setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Dataset(#[from] duet_core::DatasetError),
    #[error("training: {0}")]
    Train(#[from] duet_trainer::training::TrainError),
    #[error("{path}: {message}")]
    Io {
        path: std::path::PathBuf,
        message: String,
    },
}
