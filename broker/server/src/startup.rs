//! A broker's life in the cluster: registration with the active controller, heartbeats that
//! keep it unfenced, the import of pre-quorum single-node metadata, and controlled shutdown.

use std::sync::Arc;
use std::time::Duration;

use oxbow_meta::Command;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::errors::BrokerError;
use crate::metadata::Legacy;

/// Registers and heartbeats until the controller unfences this broker. Retries while there is
/// no quorum yet (other voters still starting) or the previous incarnation's session has not
/// expired (DUPLICATE_BROKER_REGISTRATION, after a crash).
pub async fn join_cluster(broker: &Broker) {
    let mut attempts = 0u32;
    loop {
        match broker.register().await {
            Ok(_) => break,
            Err(e) => {
                attempts += 1;
                tracing::warn!(error = %e, code = e.code(), attempts, "registration failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    loop {
        match broker.heartbeat(false).await {
            Ok((false, _)) => break,
            Ok((true, _)) => {}
            Err(e) if is_registration_lost(&e) => {
                Box::pin(join_cluster(broker)).await;
                return;
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::info!(node = broker.node_id(), epoch = broker.controller.broker_epoch(), "broker unfenced");
}

fn is_registration_lost(e: &BrokerError) -> bool {
    matches!(e, BrokerError::StaleBrokerEpoch(_) | BrokerError::BrokerNotRegistered(_))
}

/// Heartbeats every `broker.heartbeat.interval.ms` until `stop`; re-registers if the
/// controller lost this broker's registration.
pub async fn heartbeats(broker: Arc<Broker>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(broker.config.heartbeat_interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let beat = tokio::select! {
            _ = stop.cancelled() => return,
            r = broker.heartbeat(false) => r,
        };
        match beat {
            Ok((true, _)) => tracing::warn!("this broker is fenced; heartbeating to be unfenced"),
            Ok(_) => {}
            Err(e) if is_registration_lost(&e) => {
                tracing::warn!(error = %e, "registration lost; registering again");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = join_cluster(&broker) => {}
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Tells the active controller this broker is going away, so it leads nothing and clients
/// move on at once instead of after the session timeout. Best effort, bounded.
pub async fn controlled_shutdown(broker: &Broker) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(2), broker.heartbeat(true)).await {
            Ok(Ok((_, true))) => {
                tracing::info!("controlled shutdown: this broker leads no partition");
                return;
            }
            Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            // A leader change meanwhile (NOT_CONTROLLER, no controller yet): try again until
            // the deadline; ordinary heartbeats have stopped, so giving up would leave this
            // broker's partitions led until its session expired.
            Ok(Err(e)) if is_registration_lost(&e) => {
                tracing::warn!(error = %e, "controlled shutdown: this broker is not registered any more");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "controlled shutdown heartbeat failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => {
                tracing::warn!("controlled shutdown: the controller did not answer");
                return;
            }
        }
    }
}

/// Imports the topics, dynamic configs and producer id counter of a single-node version that
/// predates the metadata quorum, keeping topic ids (partition directories carry them).
pub async fn import_legacy(broker: &Broker, legacy: Legacy) -> anyhow::Result<()> {
    if !broker.image().topics.is_empty() {
        tracing::warn!(path = %legacy.path.display(), "the metadata quorum already has topics; not importing the old metadata file");
        legacy.mark_imported()?;
        return Ok(());
    }
    let me = broker.node_id();
    // One operation writes at most MAX_RECORDS_PER_USER_OP records (the topic's, one per config,
    // one per partition): a larger topic is created, then grown, in steps.
    let step = oxbow_meta::controller::MAX_RECORDS_PER_USER_OP as i32;
    for t in &legacy.file.topics {
        let first = t.partitions.min((step - 1 - t.configs.len() as i32).max(1));
        let cmd = Command::CreateTopic {
            name: t.name.clone(),
            partitions: first,
            replication_factor: 1,
            assignments: Some(vec![vec![me]; first.max(0) as usize]),
            configs: t.configs.clone(),
            topic_id: Some(t.id),
            validate_only: false,
        };
        broker.execute(cmd).await.map_err(|e| anyhow::anyhow!("importing topic {}: {}", t.name, e))?;
        let mut count = first;
        while count < t.partitions {
            count = (count + step).min(t.partitions);
            let grow =
                Command::CreatePartitions { name: t.name.clone(), count, assignments: None, validate_only: false };
            broker.execute(grow).await.map_err(|e| anyhow::anyhow!("importing topic {}: {}", t.name, e))?;
        }
    }
    if !legacy.file.broker_configs.is_empty() {
        let cmd = Command::SetBrokerConfigs { node: None, configs: legacy.file.broker_configs.clone() };
        broker.execute(cmd).await.map_err(|e| anyhow::anyhow!("importing broker configs: {}", e))?;
    }
    broker
        .execute(Command::ReserveProducerIds { below: legacy.next_producer_id })
        .await
        .map_err(|e| anyhow::anyhow!("importing the producer id counter: {}", e))?;
    legacy.mark_imported()?;
    tracing::info!(topics = legacy.file.topics.len(), "imported the single-node metadata of an earlier version");
    Ok(())
}
