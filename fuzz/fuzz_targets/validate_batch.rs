//! Produce batch validation (framing, CRC32C, counts, record framing): never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = oxbow_log::batch::validate_produce(data, 1 << 20);
    let mut it = oxbow_log::batch::BatchIter::new(data).verify_crc();
    for _ in it.by_ref() {}
});
