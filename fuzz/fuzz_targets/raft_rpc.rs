//! One frame body from the raft port (length prefix already checked), decoded as a node
//! decodes requests from peers and responses from the nodes it calls.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = strata_metadata::decode_rpc_frame(data);
});
