//! Helpers for the server's integration tests: an in-process broker on a free loopback port
//! and a minimal Kafka client built on the kafka-protocol crate.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::records::Compression;
use oxbow_protocol::connection::Connection;
use oxbow_server::{BrokerConfig, Server};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

pub struct TestBroker {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestBroker {
    pub async fn start(extra: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        Self::start_in(dir, extra).await
    }

    pub async fn start_in(dir: tempfile::TempDir, extra: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut overrides = vec![
            "listeners=PLAINTEXT://127.0.0.1:0".to_string(),
            format!("log.dirs={}", dir.path().display()),
            "num.partitions=2".to_string(),
        ];
        overrides.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let config = BrokerConfig::load(None, &overrides)?;
        let server = Server::bind(config).await?;
        let addr = server.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Ok(Self { addr, dir, stop: Some(tx), task: Some(task) })
    }

    /// Clean shutdown; returns the data dir for a restart.
    pub async fn stop(mut self) -> anyhow::Result<tempfile::TempDir> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await??;
        }
        Ok(self.dir)
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        Client::connect(self.addr).await
    }
}

/// A test client: the one client connection the broker and the operator use
/// ([`oxbow_protocol::connection`]), plus raw access for tests of malformed input.
pub struct Client {
    conn: Connection,
}

/// How long a test waits for any one answer.
const ANSWER: Duration = Duration::from_secs(10);

impl Client {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        Ok(Self { conn: Connection::connect(&addr.to_string(), "oxbow-test", ANSWER).await? })
    }

    /// The frame of `req` under the next correlation id, for tests that write it themselves.
    pub fn frame<R: Request>(&mut self, version: i16, req: &R) -> anyhow::Result<Bytes> {
        Ok(self.conn.frame(version, req)?)
    }

    /// Sends a request and decodes its response (no bytes may follow it).
    pub async fn send<R: Request>(&mut self, version: i16, req: &R) -> anyhow::Result<R::Response> {
        Ok(self.conn.send(version, req, ANSWER).await?)
    }

    pub async fn read_frame(&mut self) -> anyhow::Result<Bytes> {
        Ok(tokio::time::timeout(ANSWER, self.conn.read_frame()).await??)
    }

    /// The socket, to write raw bytes.
    pub fn stream(&mut self) -> &mut TcpStream {
        self.conn.stream_mut()
    }

    /// True if the broker closed the connection (EOF or reset) within a few seconds.
    pub async fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.stream().read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

pub fn topic_name(s: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(s.into()))
}

/// A Produce request with one batch set for one partition.
pub fn produce_req(topic: &str, partition: i32, records: Bytes, acks: i16) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let mut pd = PartitionProduceData::default();
    pd.index = partition;
    pd.records = Some(records);
    let mut td = TopicProduceData::default();
    td.name = topic_name(topic);
    td.partition_data = vec![pd];
    let mut req = kafka_protocol::messages::ProduceRequest::default();
    req.acks = acks;
    req.timeout_ms = 5000;
    req.topic_data = vec![td];
    req
}

/// Creates a topic (replication factor 1) and returns the topic's error code.
pub async fn create_topic(
    c: &mut Client,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<i16> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    let mut t = CreatableTopic::default();
    t.name = topic_name(topic);
    t.num_partitions = partitions;
    t.replication_factor = 1;
    t.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_string(k.to_string());
            c.value = Some(StrBytes::from_string(v.to_string()));
            c
        })
        .collect();
    let mut req = kafka_protocol::messages::CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let resp = c.send(7, &req).await?;
    Ok(resp.topics[0].error_code)
}

/// One producer batch of `n` records; `producer` = (id, epoch, base sequence).
pub fn batch(n: i64, ts0: i64, compression: Compression, producer: Option<(i64, i16, i32)>) -> Bytes {
    oxbow_log::testing::batch(n, ts0, 0, compression, producer)
}
