//! Topic-level behaviour through the wire protocol: recompression, LogAppendTime, timestamp
//! bounds, long-poll fetches, DeleteRecords surviving a restart, dynamic broker defaults, and a
//! shutdown that leaves no task behind.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::{Client, TestBroker, batch, produce_req, topic_name as name};
use kafka_protocol::messages::*;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use oxbow_log::batch::{BatchHeader, Codec};

async fn create(c: &mut Client, topic: &str, configs: &[(&str, &str)]) -> anyhow::Result<()> {
    let code = common::create_topic(c, topic, 1, configs).await?;
    anyhow::ensure!(code == 0, "create {topic}: error {code}");
    Ok(())
}

async fn produce(
    c: &mut Client,
    topic: &str,
    records: Bytes,
) -> anyhow::Result<produce_response::PartitionProduceResponse> {
    let mut resp = c.send(9, &produce_req(topic, 0, records, -1)).await?;
    Ok(resp.responses.remove(0).partition_responses.remove(0))
}

fn fetch_req(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.topics = vec![t];
    req
}

async fn fetch(c: &mut Client, topic: &str, offset: i64) -> anyhow::Result<Bytes> {
    let resp = c.send(11, &fetch_req(topic, offset, 0)).await?;
    let p = &resp.responses[0].partitions[0];
    anyhow::ensure!(p.error_code == 0, "fetch error {}", p.error_code);
    Ok(p.records.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_type_recompresses_and_keeps_records() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    create(&mut c, "z", &[("compression.type", "zstd")]).await?;
    create(&mut c, "p", &[]).await?;
    for topic in ["z", "p"] {
        let r = produce(&mut c, topic, batch(50, 1_000, Compression::Gzip, None)).await?;
        assert_eq!((r.error_code, r.base_offset), (0, 0));
    }
    let stored = fetch(&mut c, "z", 0).await?;
    assert_eq!(BatchHeader::parse(&stored).and_then(|h| h.codec()), Some(Codec::Zstd));
    let kept = fetch(&mut c, "p", 0).await?;
    assert_eq!(BatchHeader::parse(&kept).and_then(|h| h.codec()), Some(Codec::Gzip));
    let recs = RecordBatchDecoder::decode(&mut stored.clone())?.records;
    assert_eq!(recs.len(), 50);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.offset, i as i64);
        assert_eq!(r.timestamp, 1_000 + i as i64);
        assert_eq!(r.key.as_deref(), Some(format!("key-{i}").as_bytes()));
        assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
    }
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_append_time_and_timestamp_bounds() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    create(&mut c, "lat", &[("message.timestamp.type", "LogAppendTime")]).await?;
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let r = produce(&mut c, "lat", batch(3, 5, Compression::Lz4, None)).await?;
    assert_eq!(r.error_code, 0);
    assert!(r.log_append_time_ms >= before, "log append time {} < {before}", r.log_append_time_ms);
    let stored = fetch(&mut c, "lat", 0).await?;
    let h = BatchHeader::parse(&stored).expect("header");
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, r.log_append_time_ms);
    // CreateTime topics refuse batches more than message.timestamp.after.max.ms ahead.
    create(&mut c, "ct", &[("message.timestamp.after.max.ms", "60000")]).await?;
    let r = produce(&mut c, "ct", batch(1, before + 3_600_000, Compression::None, None)).await?;
    assert_eq!(r.error_code, 32, "INVALID_TIMESTAMP");
    let r = produce(&mut c, "ct", batch(1, before, Compression::None, None)).await?;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_fetch_returns_data_that_arrives_while_waiting() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    create(&mut c, "lp", &[]).await?;
    let mut waiter = b.client().await?;
    let poll = tokio::spawn(async move {
        let resp = waiter.send(11, &fetch_req("lp", 0, 30_000)).await?;
        anyhow::Ok(resp.responses[0].partitions[0].records.clone().unwrap_or_default())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(produce(&mut c, "lp", batch(4, 0, Compression::None, None)).await?.error_code, 0);
    let bytes = poll.await??;
    let recs = RecordBatchDecoder::decode(&mut bytes.clone())?.records;
    assert_eq!(recs.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    // An empty partition answers with empty bytes (never null) once max_wait_ms passes.
    let resp = c.send(11, &fetch_req("lp", 4, 50)).await?;
    assert_eq!(resp.responses[0].partitions[0].records.as_ref().map(|r| r.len()), Some(0));
    assert_eq!(resp.responses[0].partitions[0].high_watermark, 4);
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_survives_restart() -> anyhow::Result<()> {
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    create(&mut c, "dr", &[]).await?;
    for _ in 0..5 {
        produce(&mut c, "dr", batch(10, 0, Compression::None, None)).await?;
    }
    let mut p = delete_records_request::DeleteRecordsPartition::default();
    p.offset = 25;
    let mut t = delete_records_request::DeleteRecordsTopic::default();
    t.name = name("dr");
    t.partitions = vec![p];
    let mut req = DeleteRecordsRequest::default();
    req.topics = vec![t];
    let resp = c.send(2, &req).await?;
    assert_eq!(resp.topics[0].partitions[0].low_watermark, 25);
    let dir = b.stop().await?;
    let b = TestBroker::start_in(dir, &[]).await?;
    let mut c = b.client().await?;
    let resp = c.send(11, &fetch_req("dr", 0, 0)).await?;
    assert_eq!(resp.responses[0].partitions[0].error_code, 1, "OFFSET_OUT_OF_RANGE below the log start");
    assert_eq!(resp.responses[0].partitions[0].log_start_offset, 25);
    let recs = RecordBatchDecoder::decode(&mut fetch(&mut c, "dr", 25).await?)?.records;
    assert_eq!(recs.first().map(|r| r.offset), Some(20), "the batch containing offset 25 is returned whole");
    b.stop().await?;
    Ok(())
}

/// IncrementalAlterConfigs on one resource; returns (error code, message).
async fn inc_alter(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
) -> anyhow::Result<(i16, String)> {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let mut r = AlterConfigsResource::default();
    r.resource_type = resource_type;
    r.resource_name = kafka_protocol::protocol::StrBytes::from_string(name.into());
    r.configs = ops
        .iter()
        .map(|(k, op, v)| {
            let mut a = AlterableConfig::default();
            a.name = kafka_protocol::protocol::StrBytes::from_string(k.to_string());
            a.config_operation = *op;
            a.value = v.map(|v| kafka_protocol::protocol::StrBytes::from_string(v.into()));
            a
        })
        .collect();
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.send(1, &req).await?;
    let r = &resp.responses[0];
    Ok((r.error_code, r.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default()))
}

/// (value, source, read_only) of one key of a config resource.
async fn describe_key(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    key: &str,
) -> anyhow::Result<Option<(String, i8, bool)>> {
    let mut r = describe_configs_request::DescribeConfigsResource::default();
    r.resource_type = resource_type;
    r.resource_name = kafka_protocol::protocol::StrBytes::from_string(name.into());
    r.configuration_keys = None;
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.send(4, &req).await?;
    let res = &resp.results[0];
    anyhow::ensure!(res.error_code == 0, "describe {name}: error {}", res.error_code);
    Ok(res
        .configs
        .iter()
        .find(|e| e.name.as_str() == key)
        .map(|e| (e.value.as_ref().map(|v| v.to_string()).unwrap_or_default(), e.config_source, e.read_only)))
}

#[tokio::test]
async fn dynamic_broker_defaults_apply_to_topics_at_once_and_survive_restart() -> anyhow::Result<()> {
    const TOPIC: i8 = 2;
    const BROKER: i8 = 4;
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    create(&mut c, "dyn", &[]).await?;
    create(&mut c, "own", &[("retention.ms", "5000")]).await?;
    assert_eq!(describe_key(&mut c, TOPIC, "dyn", "retention.ms").await?.map(|v| v.0), Some("604800000".into()));
    // A node's view says which keys are dynamic.
    assert_eq!(describe_key(&mut c, BROKER, "1", "log.retention.ms").await?.map(|v| v.2), Some(false));
    assert_eq!(describe_key(&mut c, BROKER, "1", "listeners").await?.map(|v| v.2), Some(true));

    assert_eq!(inc_alter(&mut c, BROKER, "", &[("log.retention.ms", 0, Some("1234"))]).await?.0, 0);
    assert_eq!(describe_key(&mut c, TOPIC, "dyn", "retention.ms").await?.map(|v| v.0), Some("1234".into()));
    assert_eq!(describe_key(&mut c, TOPIC, "own", "retention.ms").await?.map(|v| v.0), Some("5000".into()));
    assert_eq!(describe_key(&mut c, BROKER, "", "log.retention.ms").await?, Some(("1234".into(), 3, false)));
    assert_eq!(describe_key(&mut c, BROKER, "", "log.segment.bytes").await?, None, "\"\" lists dynamic configs only");

    let (code, msg) = inc_alter(&mut c, BROKER, "", &[("listeners", 0, Some("PLAINTEXT://:1"))]).await?;
    assert_eq!(code, 42, "{msg}");
    assert!(msg.contains("Cannot update these configs dynamically: listeners"), "{msg}");
    let (code, msg) = inc_alter(&mut c, BROKER, "", &[("log.retention.ms", 0, Some("soon"))]).await?;
    assert_eq!(code, 40, "INVALID_CONFIG: {msg}");
    // This broker's own dynamic configs (Kafka's DYNAMIC_BROKER_CONFIG) win over the
    // cluster-wide ones; another broker's are altered through that broker.
    assert_eq!(inc_alter(&mut c, BROKER, "1", &[("log.retention.ms", 0, Some("777"))]).await?.0, 0);
    assert_eq!(describe_key(&mut c, TOPIC, "dyn", "retention.ms").await?.map(|v| v.0), Some("777".into()));
    assert_eq!(describe_key(&mut c, BROKER, "1", "log.retention.ms").await?, Some(("777".into(), 2, false)));
    let (code, msg) = inc_alter(&mut c, BROKER, "2", &[("log.retention.ms", 0, Some("1"))]).await?;
    assert_eq!((code, msg.as_str()), (42, "Unexpected broker id, expected 1, but received 2"));
    assert_eq!(inc_alter(&mut c, BROKER, "1", &[("log.retention.ms", 1, None)]).await?.0, 0);
    assert_eq!(describe_key(&mut c, TOPIC, "dyn", "retention.ms").await?.map(|v| v.0), Some("1234".into()));

    let dir = b.stop().await?;
    let b = TestBroker::start_in(dir, &[]).await?;
    let mut c = b.client().await?;
    assert_eq!(describe_key(&mut c, TOPIC, "dyn", "retention.ms").await?.map(|v| v.0), Some("1234".into()));
    assert_eq!(inc_alter(&mut c, BROKER, "", &[("log.retention.ms", 1, None)]).await?.0, 0);
    assert_eq!(describe_key(&mut c, TOPIC, "dyn", "retention.ms").await?.map(|v| v.0), Some("604800000".into()));
    b.stop().await?;
    Ok(())
}

/// Every task the server spawns (connections, replication, the ISR change queue, background
/// jobs, group timers, the metadata quorum) is joined before `Server::run` returns: none is
/// left alive on the runtime once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_outlives_the_server() -> anyhow::Result<()> {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let b = TestBroker::start(&[]).await?;
    let mut c = b.client().await?;
    create(&mut c, "s", &[]).await?;
    let r = produce(&mut c, "s", batch(10, 1_000, Compression::None, None)).await?;
    assert_eq!(r.error_code, 0);
    // A long poll in flight on a second connection while the server stops.
    let mut waiting = b.client().await?;
    let poll = tokio::spawn(async move { waiting.send(11, &fetch_req("s", 10, 5_000)).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(metrics.num_alive_tasks() > before + 1, "the server runs tasks");
    b.stop().await?;
    let _ = poll.await;
    drop(c);
    assert_eq!(metrics.num_alive_tasks(), before, "tasks still alive after Server::run returned");
    Ok(())
}
