//! Why the settings cannot be read: a leaf the other config modules share.

use std::path::PathBuf;

/// A config file that cannot be read, or settings that do not make a broker.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}
