//! The client side of duet: an elastic co-location pricing loop that asks a `Predictor` for the
//! slowdowns of candidate pairs, and a trace-driven cluster simulator that measures what those
//! predictions are worth against exclusive allocation, interference-blind packing and an oracle.

pub mod client;
pub mod predictor;
pub mod pricing;
pub mod report;
pub mod sim;
pub mod trace;
