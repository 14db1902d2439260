//! The one error type of the dataset format: it always names the file, and where it can the
//! column, the row (or CSV line) and the workload id at fault.

use std::fmt;
use std::path::{Path, PathBuf};

/// A problem with a dataset file, located as precisely as the reader could.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetError {
    /// The file (or folder) at fault.
    pub file: PathBuf,
    /// The column or JSON field at fault.
    pub column: Option<String>,
    /// The data row at fault, counted from 1 (Parquet tables, in-memory tables).
    pub row: Option<usize>,
    /// The line at fault, counted from 1 with the header as line 1 (CSV files).
    pub line: Option<u64>,
    /// The workload (or pair) the row describes, when known.
    pub id: Option<String>,
    /// What is wrong, in words.
    pub message: String,
}

impl DatasetError {
    pub fn new(file: impl AsRef<Path>, message: impl Into<String>) -> Self {
        DatasetError {
            file: file.as_ref().to_path_buf(),
            column: None,
            row: None,
            line: None,
            id: None,
            message: message.into(),
        }
    }

    #[must_use]
    pub fn column(mut self, column: impl Into<String>) -> Self {
        self.column = Some(column.into());
        self
    }

    /// Marks the 0-based row index `index` (rendered counted from 1).
    #[must_use]
    pub fn row_index(mut self, index: usize) -> Self {
        self.row = Some(index + 1);
        self
    }

    #[must_use]
    pub fn line(mut self, line: u64) -> Self {
        self.line = Some(line);
        self
    }

    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

impl fmt::Display for DatasetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(column) = &self.column {
            write!(f, ": column `{column}`")?;
        }
        if let Some(row) = self.row {
            write!(f, ", row {row}")?;
        }
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        if let Some(id) = &self.id {
            write!(f, " ({id})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for DatasetError {}

pub type Result<T, E = DatasetError> = std::result::Result<T, E>;
