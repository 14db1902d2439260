//! Importers: measurements made elsewhere, turned into the duet dataset format so that the
//! trainer never special-cases a source.

pub mod csv;
pub mod gavel;
pub mod observed;
