//! The controller gRPC service every node with the controller role serves: Raft's own RPCs,
//! commands and admin requests from other nodes, and the metadata fetch broker-only nodes
//! follow the image with. A request this node cannot decode is refused as INVALID_ARGUMENT,
//! which the sender takes for a command its controller does not have (`remote_error`).

use std::net::SocketAddr;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::routing::RETRY_HEADER;
use super::{AdminReply, AdminResult, CommandError, FetchReply, FetchRequest, Quorum, QuorumAdmin};
use crate::controller::Command;
use crate::network::{check_target, decode, encode};
use crate::raft::{Raft, TypeConfig};
use crate::records::NodeId;
use crate::rpc::Payload;
use crate::rpc::quorum_server::Quorum as QuorumRpc;

pub(super) struct Service {
    pub(super) q: Quorum,
}

/// A controller's refusal of a command call: one it could not decode (`bad_request`) is
/// [`CommandError::Unsupported`], anything else (a timeout, a lost connection) is worth trying
/// again elsewhere.
pub(super) fn remote_error(node: NodeId, s: &Status) -> CommandError {
    match s.code() {
        tonic::Code::InvalidArgument => CommandError::Unsupported(format!("controller {node}: {}", s.message())),
        _ => CommandError::Unavailable(format!("controller {node}: {}", s.message())),
    }
}

fn bad_request(e: serde_json::Error) -> Status {
    Status::invalid_argument(format!("cannot decode the request: {e}"))
}

impl Service {
    fn raft(&self) -> Result<&Raft, Status> {
        self.q.inner.raft.as_ref().ok_or_else(|| Status::unavailable("not a controller"))
    }
}

#[tonic::async_trait]
impl QuorumRpc for Service {
    async fn append_entries(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let rpc = decode(req.get_ref()).map_err(bad_request)?;
        self.q.inner.heard_from_leader.notify_one();
        Ok(Response::new(encode(&self.raft()?.append_entries(rpc).await)))
    }

    async fn vote(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let rpc = decode(req.get_ref()).map_err(bad_request)?;
        Ok(Response::new(encode(&self.raft()?.vote(rpc).await)))
    }

    async fn install_snapshot(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let rpc: openraft::raft::InstallSnapshotRequest<TypeConfig> = decode(req.get_ref()).map_err(bad_request)?;
        self.q.inner.heard_from_leader.notify_one();
        Ok(Response::new(encode(&self.raft()?.install_snapshot(rpc).await)))
    }

    async fn command(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let cmd: Command = decode(req.get_ref()).map_err(bad_request)?;
        let retry = req.metadata().contains_key(RETRY_HEADER);
        let result = self.q.execute_local(&cmd, retry).await;
        Ok(Response::new(encode(&result)))
    }

    async fn fetch(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let f: FetchRequest = decode(req.get_ref()).map_err(bad_request)?;
        let mut rx = self.q.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|i| i.version > f.after_version)).await;
        let image = self.q.image();
        let image = (image.version > f.after_version).then(|| (*image).clone());
        let leader = self.q.leader();
        let leader_addr = leader.and_then(|l| self.q.inner.addrs.lock().get(&l).cloned());
        Ok(Response::new(encode(&FetchReply { leader, leader_addr, image })))
    }

    async fn quorum_admin(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let a: QuorumAdmin = decode(req.get_ref()).map_err(bad_request)?;
        if let QuorumAdmin::Announce { node_id, port } = a {
            // Only another voter this node knows, from an address that can be it.
            let known = node_id >= 0 && node_id != self.q.node_id() && self.q.inner.addrs.lock().contains_key(&node_id);
            if !known {
                return Err(Status::invalid_argument(format!("node {node_id} is not another voter this node knows")));
            }
            let Some(peer) = req.remote_addr().filter(|p| !p.ip().is_loopback() && !p.ip().is_unspecified()) else {
                return Err(Status::failed_precondition("the announcing node's address is unknown or local"));
            };
            let addr = SocketAddr::new(peer.ip(), port).to_string();
            tracing::info!(node = node_id, %addr, "a restarted controller announced its address");
            self.q.inner.redirects.set(node_id as u64, addr);
            let done: AdminResult = Ok(Ok(AdminReply::Done));
            return Ok(Response::new(encode(&done)));
        }
        Ok(Response::new(encode(&self.q.admin_local(&a).await)))
    }
}
