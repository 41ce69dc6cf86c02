//! A Kafka request frame (without its length prefix), decoded as the broker decodes every
//! frame it reads: header, API key and version checks, then the body of any supported API.
//! Seeded with frames real clients sent (scripts/fuzz.sh).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = strata_broker::protocol::decode_request(bytes::Bytes::copy_from_slice(data));
});
