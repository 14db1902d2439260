//! duet's trainer: feature building, the Burn degradation regressor, honest evaluation against
//! baselines, and the model artifact the server loads.
//!
//! The training loop lands with the trainer work (see the issue tracker); until then this crate
//! holds no code.
