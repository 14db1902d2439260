//! What a trained duet model is, shared by the trainer (which writes it), the server (which
//! serves it) and the scheduler (which runs it in process):
//!
//! - `artifact`: the model folder (`model.json`, Burn records, `model.onnx`), written and read;
//! - `encoding`: the feature spec and the encoder that turns two jobs into the network's input;
//! - `source`: where the encoder reads a job's features (the model's own, or a request's map);
//! - `network`: the Burn MLP, its initialisation and forward passes;
//! - `onnx`: the same ensemble as an ONNX graph, written by duet;
//! - `engine`: the engines that run it (Burn `Flex`, ONNX Runtime);
//! - `loaded`: a model loaded, probed and ready to answer;
//! - `registry`: the workload registry in memory, encoded for the loaded model;
//! - `predict`: a `PredictRequest` to predictions (encode, run, decode);
//! - `accuracy`: the accuracy measures and `model.json`'s metrics table;
//! - `calibration`: the two split-conformal shifts of the p90 slowdown (known, new workloads);
//! - `compat`: whether a model can replace the serving one (features, devices, modes);
//! - `least_squares`: the linear solver the effects prior and the trainer's ridge share.
//!
//! It knows nothing of HTTP, training loops or where registrations are stored: its errors are
//! plain values (`ModelError`) that the server maps to HTTP.

pub mod accuracy;
pub mod artifact;
pub mod calibration;
pub mod compat;
pub mod encoding;
pub mod engine;
pub mod error;
pub mod group;
pub mod layered;
pub mod least_squares;
pub mod loaded;
pub mod network;
pub mod onnx;
pub mod predict;
pub mod prior;
pub mod registry;
pub mod source;

pub use engine::EngineKind;
pub use error::{ErrorKind, ModelError};
pub use loaded::LoadedModel;
pub use registry::Registry;
