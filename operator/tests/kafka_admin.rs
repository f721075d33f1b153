//! The operator's Kafka admin client against a real oxbow-broker process: every operation a
//! Topic needs, with the results read back. The broker binary comes from OXBOW_BROKER_BIN
//! (tests/run-all sets it) or the workspace's target/release; without one the test fails.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oxbow_operator::kafka::Admin;

struct Broker {
    _process: common::Process,
    addr: String,
}

async fn start() -> Broker {
    let bin = common::broker_bin();
    assert!(bin.exists(), "no broker binary at {} (cargo build --release -p oxbow-server)", bin.display());
    let port = common::free_port();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let child = Command::new(&bin)
        .args(["--override", &format!("listeners=PLAINTEXT://127.0.0.1:{port}")])
        .args(["--override", &format!("log.dirs={}", dir.path().display())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(Instant::now() < deadline, "broker did not listen on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Broker { _process: common::Process { child, dir }, addr }
}

fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test]
async fn topic_lifecycle_through_the_admin_client() {
    let b = start().await;
    let mut admin = Admin::connect(&b.addr, &Default::default()).await.unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(admin.describe_topic("orders").await.ok(), Some(None));
    admin.create_topic("orders", 2, 1, &map(&[("retention.ms", "3600000")])).await.unwrap_or_else(|e| panic!("{e}"));
    let info = admin.describe_topic("orders").await.ok().flatten().unwrap_or_else(|| panic!("orders missing"));
    assert_eq!((info.partitions, info.replication_factor, info.id.len()), (2, 1, 22));
    assert_eq!(admin.topic_configs("orders").await.ok(), Some(map(&[("retention.ms", "3600000")])));

    admin
        .alter_topic_configs("orders", &map(&[("segment.bytes", "1048576")]), &["retention.ms".to_string()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(admin.topic_configs("orders").await.ok(), Some(map(&[("segment.bytes", "1048576")])));

    admin.create_partitions("orders", 4).await.unwrap_or_else(|e| panic!("{e}"));
    let grown = admin.describe_topic("orders").await.ok().flatten().map(|i| (i.id, i.partitions));
    assert_eq!(grown, Some((info.id.clone(), 4)));

    let err = admin.create_topic("orders", 1, 1, &BTreeMap::new()).await.err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("error 36")), "{err:?}");

    admin.delete_topic("orders").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(admin.describe_topic("orders").await.ok(), Some(None));
    // Deleting what is not there succeeds: the finalizer may run twice.
    admin.delete_topic("orders").await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn dynamic_broker_configs_and_the_operators_list_of_dynamic_keys() {
    let b = start().await;
    let mut admin = Admin::connect(&b.addr, &Default::default()).await.unwrap_or_else(|e| panic!("{e}"));
    // The operator restarts brokers for every key it does not know to be dynamic: its list
    // must be exactly what the broker can change at runtime.
    let node = admin.broker_configs("1").await.unwrap_or_else(|e| panic!("{e}"));
    let mut updatable: Vec<&str> = node.iter().filter(|(_, _, ro)| !ro).map(|(k, _, _)| k.as_str()).collect();
    updatable.sort_unstable();
    let mut ours = oxbow_operator::cluster::desired::DYNAMIC_BROKER_KEYS.to_vec();
    ours.sort_unstable();
    assert_eq!(updatable, ours);

    assert_eq!(admin.broker_configs("").await.ok().map(|v| v.len()), Some(0));
    admin.alter_broker_defaults(&map(&[("log.retention.ms", "1234")]), &[]).await.unwrap_or_else(|e| panic!("{e}"));
    let defaults = admin.broker_configs("").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(defaults, vec![("log.retention.ms".to_string(), "1234".to_string(), false)]);
    admin
        .alter_broker_defaults(&BTreeMap::new(), &["log.retention.ms".to_string()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(admin.broker_configs("").await.ok().map(|v| v.len()), Some(0));
    let err = admin.alter_broker_defaults(&map(&[("num.partitions", "3")]), &[]).await.err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("Cannot update these configs dynamically")), "{err:?}");
}
