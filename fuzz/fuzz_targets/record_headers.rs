//! Record headers read from unvalidated produce batches for trace context (every codec, bounded
//! decompression): never panics, never reads past its limit.
#![no_main]

use std::ops::ControlFlow;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (at, h) in oxbow_log::batch::BatchIter::new(data) {
        let Some(batch) = data.get(at..at + h.total_size()) else { return };
        for probe in [None, Some(&b"traceparent"[..])] {
            let mut seen = 0usize;
            let (_, decompressed) = oxbow_log::headers::visit_headers(batch, &h, 1 << 16, probe, |headers| {
                for (k, v) in headers {
                    seen += k.len() + v.map_or(0, <[u8]>::len);
                }
                ControlFlow::Continue(())
            });
            assert!(decompressed <= 1 << 16);
            assert!(seen <= batch.len().max(1 << 16));
        }
    }
});
