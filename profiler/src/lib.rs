//! duet's profiler: workloads, the co-location campaign runner, and counter samplers.
//!
//! The only crate that touches NVML. The campaign runner lands with the profiler work
//! (see the issue tracker); until then this crate holds no code.
