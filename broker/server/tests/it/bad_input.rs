#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Bad input over real sockets: the right error code or a closed connection, and a healthy
//! broker afterwards serving other clients.

use crate::common;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::{Client, TestBroker, batch, produce_req};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;

fn init_req() -> InitProducerIdRequest {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = None;
    r.transaction_timeout_ms = 60000;
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    r
}

async fn create_topic(c: &mut Client, name: &str, partitions: i32) -> anyhow::Result<i16> {
    common::create_topic(c, name, partitions, &[]).await
}

async fn latest_offset(c: &mut Client, topic: &str, partition: i32) -> anyhow::Result<i64> {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = -1;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.into()));
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let resp = c.send(7, &req).await?;
    anyhow::ensure!(
        resp.topics[0].partitions[0].error_code == 0,
        "list offsets error {}",
        resp.topics[0].partitions[0].error_code
    );
    Ok(resp.topics[0].partitions[0].offset)
}

/// A healthy broker answers ApiVersions and a produce/fetch round trip on a new connection.
async fn assert_healthy(b: &TestBroker) -> anyhow::Result<()> {
    let mut c = b.client().await?;
    let v = c.send(3, &ApiVersionsRequest::default()).await?;
    assert_eq!(v.error_code, 0);
    assert!(v.api_keys.iter().any(|k| k.api_key == 0));
    let _ = create_topic(&mut c, "health", 1).await?;
    let before = latest_offset(&mut c, "health", 0).await?;
    let resp = c.send(9, &produce_req("health", 0, batch(3, 1000, Compression::None, None), -1)).await?;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(resp.responses[0].partition_responses[0].base_offset, before);
    assert_eq!(latest_offset(&mut c, "health", 0).await?, before + 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_close_only_their_connection() -> anyhow::Result<()> {
    let b = TestBroker::start(&[("socket.request.max.bytes", "1048576")]).await?;
    // A bystander connection opened before the garbage keeps working afterwards.
    let mut bystander = b.client().await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0c5b0);
    for i in 0..300 {
        let mut c = b.client().await?;
        let len = rng.random_range(0..200usize);
        let mut body: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if i % 3 == 0 && body.len() >= 4 {
            // A known API key with random version and payload exercises the decoders.
            let key = [0i16, 1, 2, 3, 18, 19, 20, 32, 37, 44, 60][i % 11];
            body[0..2].copy_from_slice(&key.to_be_bytes());
        }
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        c.stream().write_all(&frame).await?;
        // Either an answer or a close, never a hang; the broker must survive.
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_frame()).await;
    }
    let v = bystander.send(0, &ApiVersionsRequest::default()).await?;
    assert_eq!(v.error_code, 0);
    assert_healthy(&b).await?;
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_errors_close_the_connection() -> anyhow::Result<()> {
    let b = TestBroker::start(&[("socket.request.max.bytes", "1048576")]).await?;
    // Oversized: refused from the size prefix alone.
    let mut c = b.client().await?;
    c.stream().write_all(&(512 * 1024 * 1024i32).to_be_bytes()).await?;
    assert!(c.is_closed().await, "oversized frame must close the connection");
    // Negative size.
    let mut c = b.client().await?;
    c.stream().write_all(&(-5i32).to_be_bytes()).await?;
    assert!(c.is_closed().await);
    // Shorter than a request header.
    let mut c = b.client().await?;
    c.stream().write_all(&[0, 0, 0, 3, 0, 18, 0]).await?;
    assert!(c.is_closed().await);
    // Truncated: the size promises more than is sent, then the client goes away.
    let mut c = b.client().await?;
    c.stream().write_all(&[0, 0, 0, 100, 0, 18, 0, 3]).await?;
    drop(c);
    // Unknown API key.
    let mut c = b.client().await?;
    c.stream().write_all(&[0, 0, 0, 10, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff]).await?;
    assert!(c.is_closed().await, "unknown API key must close the connection");
    // Unsupported version of a served API (Produce v2, removed in Kafka 4).
    let mut c = b.client().await?;
    let frame = c.frame(9, &produce_req("t", 0, batch(1, 0, Compression::None, None), 1))?;
    let mut raw = frame.to_vec();
    raw[6..8].copy_from_slice(&2i16.to_be_bytes());
    c.stream().write_all(&raw).await?;
    assert!(c.is_closed().await, "unsupported version must close the connection");
    // A body that does not decode.
    let mut c = b.client().await?;
    c.stream().write_all(&[0, 0, 0, 14, 0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0, 0x7f, 0xff, 0xff]).await?;
    assert!(c.is_closed().await);
    assert_healthy(&b).await?;
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_api_versions_gets_v0_answer() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    // ApiVersions v99 with a v2 header: the answer is v0 with UNSUPPORTED_VERSION and our ranges.
    let frame = c.frame(3, &ApiVersionsRequest::default())?;
    let mut raw = frame.to_vec();
    raw[6..8].copy_from_slice(&99i16.to_be_bytes());
    c.stream().write_all(&raw).await?;
    let mut body = c.read_frame().await?;
    use bytes::Buf;
    let _corr = body.get_i32();
    let resp = <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 0)?;
    assert_eq!(resp.error_code, 35);
    let av = resp.api_keys.iter().find(|k| k.api_key == 18).map(|k| (k.min_version, k.max_version));
    assert_eq!(av, Some((0, 4)));
    // The same connection then works at a supported version.
    let ok = c.send(3, &ApiVersionsRequest::default()).await?;
    assert_eq!(ok.error_code, 0);
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_get_errors_and_write_nothing() -> anyhow::Result<()> {
    let b = TestBroker::start(&[("message.max.bytes", "2000")]).await?;
    let mut c = b.client().await?;
    assert_eq!(create_topic(&mut c, "t", 1).await?, 0);
    // Corrupt CRC.
    let mut bad = batch(5, 1000, Compression::Lz4, None).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let r = c.send(9, &produce_req("t", 0, Bytes::from(bad), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 2, "CORRUPT_MESSAGE");
    // Truncated batch.
    let good = batch(5, 1000, Compression::None, None);
    let r = c.send(9, &produce_req("t", 0, good.slice(..good.len() - 3), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 2);
    // Too large.
    let big = batch(200, 1000, Compression::None, None);
    assert!(big.len() > 2000);
    let r = c.send(9, &produce_req("t", 0, big, -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 10, "MESSAGE_TOO_LARGE");
    // Old magic.
    let mut old = batch(2, 0, Compression::None, None).to_vec();
    old[16] = 1;
    let r = c.send(9, &produce_req("t", 0, Bytes::from(old), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 87, "INVALID_RECORD");
    // Unknown partition and topic.
    let r = c.send(9, &produce_req("t", 7, batch(1, 0, Compression::None, None), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 3);
    let r = c.send(9, &produce_req("nope", 0, batch(1, 0, Compression::None, None), 1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 3);
    // Invalid acks.
    let r = c.send(9, &produce_req("t", 0, batch(1, 0, Compression::None, None), 2)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 21);
    assert_eq!(latest_offset(&mut c, "t", 0).await?, 0, "nothing may be written by rejected batches");
    // A good batch still lands at offset 0.
    let r = c.send(9, &produce_req("t", 0, batch(4, 1000, Compression::Zstd, None), -1)).await?;
    assert_eq!(
        (r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset),
        (0, 0)
    );
    assert_eq!(latest_offset(&mut c, "t", 0).await?, 4);
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_topic_names_are_refused() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    for bad in ["", "..", "a b", "a/b", &"x".repeat(250)] {
        assert_eq!(create_topic(&mut c, bad, 1).await?, 17, "INVALID_TOPIC_EXCEPTION for {bad:?}");
    }
    assert_eq!(create_topic(&mut c, "ok", 0).await?, 37, "INVALID_PARTITIONS");
    assert_eq!(create_topic(&mut c, "ok", 1).await?, 0);
    assert_eq!(create_topic(&mut c, "ok", 1).await?, 36, "TOPIC_ALREADY_EXISTS");
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_static_str("bad name")));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = true;
    let resp = c.send(12, &req).await?;
    assert_eq!(resp.topics[0].error_code, 17);
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_duplicates_and_gaps() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    assert_eq!(create_topic(&mut c, "idem", 1).await?, 0);
    let init = c.send(4, &init_req()).await?;
    assert_eq!(init.error_code, 0);
    let pid = init.producer_id.0;
    let first = batch(3, 1000, Compression::None, Some((pid, 0, 0)));
    let r = c.send(9, &produce_req("idem", 0, first.clone(), -1)).await?;
    assert_eq!(
        (r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset),
        (0, 0)
    );
    let r = c.send(9, &produce_req("idem", 0, batch(2, 1000, Compression::None, Some((pid, 0, 3))), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 3);
    // A retry of the first batch is answered with its original offset and not written again.
    let r = c.send(9, &produce_req("idem", 0, first, -1)).await?;
    assert_eq!(
        (r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset),
        (0, 0)
    );
    assert_eq!(latest_offset(&mut c, "idem", 0).await?, 5);
    // A gap in sequence numbers.
    let r = c.send(9, &produce_req("idem", 0, batch(1, 1000, Compression::None, Some((pid, 0, 9))), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    // Producer state survives a clean restart: the retry is still recognised.
    let dir = b.stop().await?;
    let b = TestBroker::start_in(dir, &[]).await?;
    let mut c = b.client().await?;
    let r = c.send(9, &produce_req("idem", 0, batch(2, 1000, Compression::None, Some((pid, 0, 3))), -1)).await?;
    assert_eq!(
        (r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset),
        (0, 3)
    );
    let r = c.send(9, &produce_req("idem", 0, batch(1, 1000, Compression::None, Some((pid, 0, 5))), -1)).await?;
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 5);
    // A new producer id is never reused after a restart.
    let init2 = c.send(4, &init_req()).await?;
    assert!(init2.producer_id.0 > pid);
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_gets_no_response() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    assert_eq!(create_topic(&mut c, "a0", 1).await?, 0);
    let frame = c.frame(9, &produce_req("a0", 0, batch(2, 0, Compression::None, None), 0))?;
    c.stream().write_all(&frame).await?;
    // The next request's answer is the first frame to arrive: nothing was sent for acks=0.
    let v = c.send(3, &ApiVersionsRequest::default()).await?;
    assert_eq!(v.error_code, 0);
    assert_eq!(latest_offset(&mut c, "a0", 0).await?, 2);
    b.stop().await?;
    Ok(())
}
