//! The one way encoding a response can fail: a leaf the codec modules share.

/// A response the codec could not encode (a field out of range for the version asked).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the response: {0}")]
pub struct EncodeError(pub(super) String);

/// The codec reports its errors as `anyhow`; they stop here.
impl From<anyhow::Error> for EncodeError {
    fn from(e: anyhow::Error) -> EncodeError {
        EncodeError(e.to_string())
    }
}
