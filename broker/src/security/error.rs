//! Why security could not be set up at start-up: a leaf the security modules share.

use crate::tls::TlsError;

/// Why security could not be set up at start-up.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Config(String),
}
