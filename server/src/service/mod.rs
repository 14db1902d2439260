//! What a request does, whatever carried it: the HTTP routes (`crate::routes`) and the gRPC
//! services (`crate::grpc`) parse their wire format, call these, and write the answer in
//! theirs, so both check, limit and answer alike.

pub mod kserve;
pub mod observations;
pub mod predict;
