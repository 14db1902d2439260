//! The handlers, one module per area. Each module's `routes()` is merged by `crate::router`.

pub mod health;
pub mod kserve;
pub mod limits;
pub mod models;
pub mod observations;
pub mod predict;
pub mod workloads;
