//! duet's trainer: feature building, the Burn degradation regressor, honest evaluation against
//! baselines, and the model artifact the server loads.

pub mod artifact;
pub mod assess;
pub mod baselines;
pub mod eval;
pub mod features;
pub mod metrics;
pub mod model;
pub mod onnx;
pub mod pipeline;
pub mod report;
pub mod rows;
