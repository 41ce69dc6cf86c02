//! The one error of Iceberg translation and its operations.

#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    #[error("reading the log: {0}")]
    Read(String),
    #[error("{0}")]
    Io(String),
    #[error("iceberg.mode={0} is not supported yet")]
    Unsupported(String),
    #[error("the topic or its table is gone")]
    Gone,
    #[error("{0}")]
    Refused(String),
}
