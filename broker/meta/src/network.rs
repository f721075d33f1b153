//! Raft traffic between controllers over gRPC (tonic, HTTP/2 on the CONTROLLER listener). Each
//! message is one [`Payload`](crate::rpc::Payload) carrying openraft's own types as JSON;
//! replies carry `Result<response, RaftError>` so the remote node's Raft errors reach openraft
//! unchanged.

use std::net::IpAddr;
use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

use crate::raft::TypeConfig;
use crate::rpc::Payload;
use crate::rpc::quorum_client::QuorumClient;

/// Encodes a message for the wire.
pub fn encode<T: Serialize>(v: &T) -> Payload {
    Payload { data: serde_json::to_vec(v).unwrap_or_default() }
}

pub fn decode<T: DeserializeOwned>(p: &Payload) -> Result<T, serde_json::Error> {
    serde_json::from_slice(&p.data)
}

/// TLS on the CONTROLLER listener (mapped to SSL in `listener.security.protocol.map`): PEM
/// read at startup. It is mutual: every node presents its certificate, the controller listener
/// requires one signed by `ca` from every peer (controllers and brokers), and a client checks
/// that the controller's certificate names the host it dialled.
#[derive(Clone)]
pub struct ControllerTls {
    pub ca: Vec<u8>,
    pub cert_chain: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ControllerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControllerTls { key: [hidden], .. }")
    }
}

impl ControllerTls {
    /// The server side of the controller listener.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_chain, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    fn client(&self, host: &str) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert_chain, &self.key))
            .domain_name(host)
    }
}

/// A lazily connected gRPC channel to `addr` (`host:port`), from `local_ip` if given (so a
/// node's quorum traffic leaves from its own address), over TLS if the controllers use it.
pub fn channel(
    addr: &str,
    local_ip: Option<IpAddr>,
    tls: Option<&ControllerTls>,
) -> Result<Channel, tonic::transport::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))?
        .local_address(local_ip)
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5));
    if let Some(t) = tls {
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
        endpoint = endpoint.tls_config(t.client(host))?;
    }
    Ok(endpoint.connect_lazy())
}

pub struct NetworkFactory {
    pub local_ip: Option<IpAddr>,
    pub tls: Option<ControllerTls>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Connection {
        let client = channel(&node.addr, self.local_ip, self.tls.as_ref())
            .ok()
            .map(|c| QuorumClient::new(c).max_decoding_message_size(256 << 20));
        Connection { target, client }
    }
}

pub struct Connection {
    target: u64,
    client: Option<QuorumClient<Channel>>,
}

type RpcResult<T, E> = Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

impl Connection {
    async fn call<Req, Resp, E>(&mut self, method: Method, req: &Req, option: &RPCOption) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |e: &dyn std::error::Error| RPCError::Unreachable(Unreachable::new(&AnyError(e.to_string())));
        let Some(client) = self.client.as_mut() else {
            return Err(unreachable(&AnyError(format!("bad address of node {}", self.target))));
        };
        let mut request = tonic::Request::new(encode(req));
        request.set_timeout(option.hard_ttl());
        let reply = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = reply.map_err(|s| unreachable(&AnyError(format!("{}: {}", s.code(), s.message()))))?;
        let result: Result<Resp, RaftError<u64, E>> =
            decode(reply.get_ref()).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

#[derive(Debug)]
struct AnyError(String);

impl std::fmt::Display for AnyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AnyError {}

enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        self.call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        self.call(Method::Vote, &rpc, &option).await
    }
}
