//! What can go wrong in a partition's log; mapped to Kafka error codes in `crate::error`.

use super::batch;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("offset {offset} is out of range [{start}, {end}]")]
    OffsetOutOfRange { offset: i64, start: i64, end: i64 },
    #[error("corrupt log: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Batch(#[from] batch::BatchError),
    #[error("out of order sequence from producer {producer_id}: expected {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("producer {producer_id} epoch {got} is fenced by epoch {current}")]
    ProducerFenced {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    #[error("producer {producer_id}: {why}")]
    InvalidTxnState { producer_id: i64, why: &'static str },
    #[error("producer {producer_id}: coordinator epoch {got} is fenced by {current}")]
    CoordinatorFenced {
        producer_id: i64,
        current: i32,
        got: i32,
    },
    #[error("{0}")]
    PolicyViolation(&'static str),
}
