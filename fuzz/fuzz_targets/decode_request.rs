//! Request decoding as the broker does it: peek the header, check the version table, decode
//! the header and the typed body. Must never panic, whatever the bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use oxbow_protocol::codec::decode_any;

fuzz_target!(|data: &[u8]| {
    let _ = decode_any(Bytes::copy_from_slice(data));
});
