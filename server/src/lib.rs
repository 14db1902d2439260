//! duet's server: the axum app answering `/v1/predict`, the inference engines and the workload
//! registry. The only crate that speaks HTTP.
//!
//! The routes land with the server work (see the issue tracker); until then this crate holds no
//! code.
