//! duet's profiler: workloads, the co-location campaign runner, and counter samplers.
//!
//! `catalog` reads the TOML file naming the workloads; `builtin` holds the workloads written
//! with Burn (CPU through `Flex`, GPUs through burn-cuda behind the `cuda` feature). The campaign
//! runner and the samplers are being built (see the issue tracker). The only crate that will
//! touch NVML.

pub mod builtin;
pub mod campaign;
pub mod catalog;
pub mod gpu;
pub mod mps;
pub mod process;
