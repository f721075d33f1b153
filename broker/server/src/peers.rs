//! Requests this broker sends to other brokers as a Kafka client, as Kafka's inter-broker
//! channels do: WriteTxnMarkers from a transaction coordinator to the partition leaders, and
//! AddPartitionsToTxn from a partition leader to a transaction coordinator. (Replica fetchers
//! keep one connection of their own per leader, see `replication.rs`.)
//!
//! Each peer has a small pool of idle connections: a request takes one (or connects), and puts
//! it back once answered, so requests to one peer may overlap. A connection that failed is
//! dropped (its state is unknown). Peers are found by node id in the metadata image, at the
//! address of their client listener; a broker may be its own peer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use oxbow_protocol::connection::Connection;
use parking_lot::Mutex;

use crate::config::security::InterBrokerClient;
use crate::metadata_view::MetadataView;

/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 4;

/// Why a request to a peer got no answer (the caller retries or gives up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerFailure {
    #[error("broker {0} is not in the metadata")]
    Unknown(i32),
    #[error("broker {node}: {reason}")]
    Failed { node: i32, reason: String },
}

pub struct Peers {
    client_id: String,
    view: Arc<MetadataView>,
    /// How to reach the others' inter-broker listener (TLS, SASL login).
    security: Option<InterBrokerClient>,
    idle: Mutex<HashMap<i32, Vec<Connection>>>,
}

/// Connects to another broker's inter-broker listener as `security` says.
pub async fn connect(
    addr: &str,
    client_id: &str,
    timeout: Duration,
    security: Option<&InterBrokerClient>,
) -> Result<Connection, String> {
    let secured = match security {
        Some(s) => crate::security::tls::inter_broker_security(s)?,
        None => Default::default(),
    };
    Connection::connect_secured(addr, client_id, timeout, &secured).await.map_err(|e| e.to_string())
}

impl Peers {
    pub fn new(node_id: i32, view: Arc<MetadataView>, security: Option<InterBrokerClient>) -> Self {
        Peers { client_id: format!("oxbow-broker-{node_id}"), view, security, idle: Mutex::new(HashMap::new()) }
    }

    /// Sends `req` at `version` to broker `node` and returns its answer; the exchange (with
    /// connecting) is bounded by `timeout`.
    pub async fn send<R: kafka_protocol::protocol::Request>(
        &self,
        node: i32,
        version: i16,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Response, PeerFailure> {
        let addr = self.view.broker_address(node).ok_or(PeerFailure::Unknown(node))?;
        let idle = {
            let mut pools = self.idle.lock();
            let pool = pools.entry(node).or_default();
            // A peer that moved (a new address in the image): its old connections go.
            pool.retain(|c| c.addr() == addr);
            pool.pop()
        };
        let failed = |reason: String| PeerFailure::Failed { node, reason };
        let mut conn = match idle {
            Some(c) => c,
            None => connect(&addr, &self.client_id, CONNECT_TIMEOUT.min(timeout), self.security.as_ref())
                .await
                .map_err(failed)?,
        };
        let resp = conn.send(version, req, timeout).await.map_err(|e| failed(e.to_string()))?;
        let mut pools = self.idle.lock();
        let pool = pools.entry(node).or_default();
        if pool.len() < IDLE_PER_PEER {
            pool.push(conn);
        }
        Ok(resp)
    }
}
