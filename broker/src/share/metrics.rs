//! The label sets of the share groups' metrics (`/metrics`), shared by the share partitions
//! (`mod.rs`) and the dead-letter writer (`dead_letters.rs`).

use prometheus_client::encoding::EncodeLabelSet;

/// Per share group.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub group: String,
}

/// Per share group and record state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub group: String,
    pub state: &'static str,
}
