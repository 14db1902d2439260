//! duet's trainer: training examples from datasets, the training loop of the degradation
//! regressor, honest evaluation against baselines, and the model's report. What a model is (its
//! artifact, encoding and network) lives in `duet-model`.

pub mod assess;
pub mod baselines;
pub mod conformal;
pub mod corpus;
pub mod eval;
pub mod export;
pub mod figures;
pub mod final_fit;
pub mod groups;
pub mod pipeline;
pub mod report;
pub mod rows;
pub mod training;
