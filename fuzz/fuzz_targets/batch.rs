//! The `records` of a produce request: split and validated as the produce path does (sizes,
//! CRC, counts), then, as compacted topics, the cleaner, group loading and timestamp lookups
//! do, decompressed (bounded) and walked record by record. The walk also runs on the bytes as
//! a stored batch whatever their CRC, since stored batches are not checked again.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_broker::log::{batch, compact, records};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(batches) = batch::split_and_validate(&bytes, 1 << 20) {
        let _ = compact::check_keys(&batches);
    }
    if let Ok(header) = batch::BatchHeader::parse(data) {
        if let Ok(section) = records::section(&bytes, &header) {
            let _ = records::for_each(&section, &header, |_| {});
        }
        let _ = records::first(&bytes, &header, |r| r.timestamp > 0);
    }
});
