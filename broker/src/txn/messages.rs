//! What the transaction coordinator and the partition leaders (and group coordinators) say to
//! each other, as plain values: the markers a transaction's end writes ([`MarkerSpec`]) and how
//! a leader asks about a producer's partitions ([`Join`]). A leaf of `txn`: the coordinator and
//! its marker and verification halves all use it.

use crate::log::control::Marker;

/// One transaction's markers.
#[derive(Debug, Clone, Copy)]
pub struct MarkerSpec {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
}

impl MarkerSpec {
    pub(super) fn marker(&self) -> Marker {
        if self.commit {
            Marker::Commit
        } else {
            Marker::Abort
        }
    }
}

/// What a partition leader or group coordinator asks of the transaction's coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// The partitions must already be in the ongoing transaction (KIP-890 part 1).
    Verify,
    /// The partitions join the transaction (KIP-890 part 2).
    Add,
}
