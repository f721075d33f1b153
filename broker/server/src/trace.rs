//! Traces: a span per request, and the spans inside one that are worth seeing on their own.
//!
//! [`crate::handlers::dispatch`] starts a [`Span`] for every request (kind server, named
//! after the API: `Produce`, `Fetch`, ...) with the API version, correlation id, client id, peer,
//! listener and principal. A produce request continues the trace its records carry: the W3C
//! `traceparent` (and `tracestate`) record headers, as OpenTelemetry's Kafka instrumentation
//! writes them, give the span's parent (the first sampled record context) and its links (the
//! other sampled ones, up to [`MAX_LINKS`]). An acks=all produce whose writes the in-sync
//! replicas did not all have yet has a child span, `replication wait`, for the time they took
//! to get there (its time in the produce purgatory).
//!
//! Whether a request is recorded is the sampler's choice ([`crate::telemetry`]): by default a
//! continued trace is recorded when its parent was, and 1% of the other requests are. Every
//! produce request's records are walked for trace context before that choice (the sampler needs
//! the parent): in place for uncompressed batches, without allocating for records that carry
//! none; a compressed batch (at most [`COMPRESSED_BATCHES_PER_REQUEST`] of them) is
//! decompressed as far as its first record, and further (up to [`DECOMPRESS_PER_BATCH`] each
//! and [`DECOMPRESS_PER_REQUEST`] in all) only if that record carries a `traceparent`. Any
//! other request that is not recorded costs a span id and a sampling decision, and its
//! attributes are never built. With traces off (the default: [`crate::telemetry`] says how to
//! ask for them) nothing here runs but one check of [`enabled`] per request.

use std::ops::ControlFlow;
use std::str::FromStr as _;
use std::sync::OnceLock;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use oxbow_log::batch::{BatchIter, Codec};
use oxbow_log::headers::visit_headers;
use oxbow_protocol::messages::ProduceRequest;

/// The process's tracer, set once when trace export starts.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Most trace contexts a produce span links to (its records may come from as many traces).
pub const MAX_LINKS: usize = 32;

/// Makes `tracer` the one every request span comes from ([`crate::telemetry`] calls this once).
pub fn install(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// True when traces are exported.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// A span, ended when dropped: a request's ([`Span::request`]) or one inside it
/// ([`Span::child`]). Empty when traces are off or the sampler left the request out: then
/// every method does nothing.
#[derive(Default)]
pub struct Span {
    cx: Option<Context>,
}

impl Span {
    /// Starts the span of a request to `api`, under the first of `parents` and linked to the
    /// rest; `attributes` are built only if the request is recorded.
    pub fn request(api: &'static str, parents: &[SpanContext], attributes: impl FnOnce() -> Vec<KeyValue>) -> Self {
        let Some(tracer) = TRACER.get() else { return Self::default() };
        let parent = parents.first().map_or_else(Context::new, |p| Context::new().with_remote_span_context(p.clone()));
        let links = parents.iter().skip(1).map(|p| Link::with_context(p.clone())).collect();
        let span =
            tracer.span_builder(api).with_kind(SpanKind::Server).with_links(links).start_with_context(tracer, &parent);
        if !span.span_context().is_sampled() {
            return Self::default();
        }
        let cx = parent.with_span(span);
        cx.span().set_attributes(attributes());
        Span { cx: Some(cx) }
    }

    /// A span inside this one.
    pub fn child(&self, name: &'static str) -> Span {
        let (Some(cx), Some(tracer)) = (&self.cx, TRACER.get()) else { return Span::default() };
        let span = tracer.span_builder(name).with_kind(SpanKind::Internal).start_with_context(tracer, cx);
        Span { cx: Some(cx.with_span(span)) }
    }

    /// Adds an attribute (built only if the span is recorded).
    pub fn set(&self, attribute: impl FnOnce() -> KeyValue) {
        if let Some(cx) = &self.cx {
            cx.span().set_attribute(attribute());
        }
    }

    /// Marks what the span covers as failed.
    pub fn fail(&self, why: impl FnOnce() -> String) {
        if let Some(cx) = &self.cx {
            cx.span().set_status(Status::error(why()));
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

/// Most decompressed bytes read from a compressed batch for its records' trace context, and
/// from all of a request's compressed batches together: the records at the start of each batch.
pub const DECOMPRESS_PER_BATCH: usize = 64 << 10;
pub const DECOMPRESS_PER_REQUEST: usize = 256 << 10;
/// Most compressed batches of one request read for trace context: the decoders work a block at
/// a time whatever they hand back, so the count bounds the work a request of many tiny
/// compressed batches can ask for.
pub const COMPRESSED_BATCHES_PER_REQUEST: usize = 16;

/// The trace contexts that the records of `req` carry in their W3C `traceparent` (and
/// `tracestate`) headers: first the parent of the request's span, the first sampled context (or,
/// if none is sampled, the first context, which parent-based sampling then leaves out), then up
/// to [`MAX_LINKS`] other distinct sampled ones. Read before the request is validated: malformed
/// batches, records and headers are skipped, compressed batches are read past their first
/// record only if it carries a `traceparent`, and then only up to [`DECOMPRESS_PER_BATCH`] and
/// [`DECOMPRESS_PER_REQUEST`]; nothing is allocated for a record that carries no context.
pub fn record_contexts(req: &ProduceRequest) -> Vec<SpanContext> {
    let mut sampled: Vec<SpanContext> = Vec::new();
    let mut first: Option<SpanContext> = None;
    let mut budget = DECOMPRESS_PER_REQUEST;
    let mut compressed = 0;
    let batches = req.topic_data.iter().flat_map(|t| &t.partition_data).filter_map(|p| p.records.as_ref());
    'requests: for records in batches {
        for (at, h) in BatchIter::new(records) {
            let Some(batch) = records.get(at..at.saturating_add(h.total_size())) else { break };
            let limit = DECOMPRESS_PER_BATCH.min(budget);
            if h.codec() != Some(Codec::None) {
                if limit == 0 || compressed == COMPRESSED_BATCHES_PER_REQUEST {
                    continue;
                }
                compressed += 1;
            }
            let (done, decompressed) = visit_headers(batch, &h, limit, Some(b"traceparent"), |headers| {
                let (mut parent, mut state) = (None, None);
                for (key, value) in headers {
                    match key {
                        b"traceparent" => parent = value,
                        b"tracestate" => state = value,
                        _ => {}
                    }
                }
                let Some((trace_id, span_id, flags)) = parent.and_then(parse_traceparent) else {
                    return ControlFlow::Continue(());
                };
                let known = |c: &SpanContext| c.trace_id() == trace_id && c.span_id() == span_id;
                if flags.is_sampled() && !sampled.iter().any(known) {
                    sampled.push(context(trace_id, span_id, flags, state));
                } else if first.is_none() {
                    first = Some(context(trace_id, span_id, flags, state));
                }
                if sampled.len() > MAX_LINKS { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            });
            budget = budget.saturating_sub(decompressed);
            if done.is_break() {
                break 'requests;
            }
        }
    }
    if sampled.is_empty() { first.into_iter().collect() } else { sampled }
}

fn context(trace_id: TraceId, span_id: SpanId, flags: TraceFlags, state: Option<&[u8]>) -> SpanContext {
    let state =
        state.and_then(|s| std::str::from_utf8(s).ok()).and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
    SpanContext::new(trace_id, span_id, flags, true, state)
}

/// A W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`, lowercase hex; a later version may
/// append fields after a `-`), or `None` if it is not a valid one.
fn parse_traceparent(v: &[u8]) -> Option<(TraceId, SpanId, TraceFlags)> {
    let v = std::str::from_utf8(v).ok()?.trim();
    let lower_hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let (version, trace, span, flags) = (v.get(..2)?, v.get(3..35)?, v.get(36..52)?, v.get(53..55)?);
    let dashes = [2, 35, 52].iter().all(|&i| v.as_bytes().get(i) == Some(&b'-'));
    let fits = match version {
        "00" => v.len() == 55,
        "ff" => false,
        _ => v.len() == 55 || v.as_bytes().get(55) == Some(&b'-'),
    };
    if !dashes || !fits || ![version, trace, span, flags].iter().all(|p| lower_hex(p)) {
        return None;
    }
    let (trace, span) = (TraceId::from_hex(trace).ok()?, SpanId::from_hex(span).ok()?);
    if trace == TraceId::INVALID || span == SpanId::INVALID {
        return None;
    }
    Some((trace, span, TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::records::Compression;
    use oxbow_log::testing::headers_batch;
    use oxbow_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};

    fn batch(traceparents: &[Option<&str>], compression: Compression) -> Bytes {
        headers_batch(traceparents.len() as i64, 1, compression, |i| {
            let tp = traceparents[i as usize].map(|t| ("traceparent".to_string(), Some(Bytes::from(t.to_owned()))));
            [("other".to_string(), Some(Bytes::from_static(b"x")))].into_iter().chain(tp).collect()
        })
    }

    const A: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const B: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const UNSAMPLED: &str = "00-11111111111111111111111111111111-2222222222222222-00";

    fn request(partitions: Vec<(Vec<Option<&str>>, Compression)>) -> ProduceRequest {
        let mut req = ProduceRequest::default();
        let mut t = TopicProduceData::default();
        for (records, c) in partitions {
            let mut p = PartitionProduceData::default();
            p.records = Some(batch(&records, c));
            t.partition_data.push(p);
        }
        req.topic_data.push(t);
        req
    }

    fn ids(req: &ProduceRequest) -> Vec<String> {
        record_contexts(req).iter().map(|c| format!("{}-{}-{}", c.trace_id(), c.span_id(), c.is_sampled())).collect()
    }

    #[test]
    fn the_first_sampled_record_context_is_the_parent_and_the_other_sampled_ones_links() {
        let req = request(vec![
            (vec![Some(UNSAMPLED), Some(A), None, Some("00-garbage"), Some(A)], Compression::None),
            (vec![Some(B), Some(A)], Compression::Zstd),
        ]);
        assert_eq!(
            ids(&req),
            [
                "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-true",
                "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-true"
            ]
        );
        // No sampled context: the first one, which a parent-based sampler leaves out.
        let req = request(vec![(vec![None, Some(UNSAMPLED)], Compression::None)]);
        assert_eq!(ids(&req), ["11111111111111111111111111111111-2222222222222222-false"]);
        let req = request(vec![(vec![Some(UNSAMPLED), Some(A)], Compression::Lz4)]);
        assert_eq!(ids(&req), ["0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-true"]);
        // A compressed batch whose first record has no context is read no further.
        let req = request(vec![(vec![None, Some(A)], Compression::Lz4)]);
        assert!(record_contexts(&req).is_empty());
        assert!(record_contexts(&ProduceRequest::default()).is_empty());
        assert!(record_contexts(&request(vec![(vec![None, None], Compression::Gzip)])).is_empty());
    }

    #[test]
    fn only_the_first_compressed_batches_of_a_request_are_read() {
        let contexts: Vec<String> = (1..=20).map(|i| format!("00-{i:032x}-{i:016x}-01")).collect();
        let req = request(contexts.iter().map(|c| (vec![Some(c.as_str())], Compression::Lz4)).collect());
        assert_eq!(record_contexts(&req).len(), COMPRESSED_BATCHES_PER_REQUEST);
        let req = request(contexts.iter().map(|c| (vec![Some(c.as_str())], Compression::None)).collect());
        assert_eq!(record_contexts(&req).len(), 20);
    }

    #[test]
    fn links_stop_at_the_cap() {
        let many: Vec<String> = (1..=100).map(|i| format!("00-{i:032x}-{i:016x}-01")).collect();
        let req = request(vec![(many.iter().map(|s| Some(s.as_str())).collect(), Compression::None)]);
        assert_eq!(record_contexts(&req).len(), MAX_LINKS + 1);
    }

    #[test]
    fn traceparents_follow_the_w3c_rules() {
        let ok =
            |v: &str| parse_traceparent(v.as_bytes()).map(|(t, s, f)| (t.to_string(), s.to_string(), f.is_sampled()));
        assert_eq!(ok(A), Some(("0af7651916cd43dd8448eb211c80319c".into(), "b7ad6b7169203331".into(), true)));
        // A later version may carry more fields; version 00 may not.
        assert!(ok("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra").is_some());
        for bad in [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "",
            "00-\u{e9}f7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
        ] {
            assert_eq!(ok(bad), None, "{bad}");
        }
        assert_eq!(parse_traceparent(&[0xff, 0xfe]), None);
    }

    #[test]
    fn spans_do_nothing_without_a_tracer() {
        let span = Span::request("Produce", &[], || panic!("attributes built with traces off"));
        span.set(|| panic!("attribute built with traces off"));
        let child = span.child("replication wait");
        child.fail(|| panic!("status built with traces off"));
    }
}
