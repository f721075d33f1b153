//! Raft traffic between controllers over gRPC (tonic, HTTP/2 on the CONTROLLER listener). Each
//! message is one [`Payload`](crate::rpc::Payload) carrying openraft's own types as JSON;
//! replies carry `Result<response, RaftError>` so the remote node's Raft errors reach openraft
//! unchanged.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use parking_lot::Mutex;
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

/// How long a controller's announced address ([`Redirects`]) is used instead of its name, from
/// its last announcement: longer than cluster DNS keeps an old answer (kubeadm's CoreDNS:
/// `ttl 30`, `cache 30`), short enough that a pod deleted meanwhile leaves its IP to no one.
pub const REDIRECT_FOR: Duration = Duration::from_secs(45);

/// gRPC metadata on every request between quorum nodes: the node id it is meant for. A node
/// refuses a request meant for another (`check_target`), so a connection that reaches the
/// wrong process (a stale DNS answer, a redirect to an address another pod took over) is an
/// unreachable node to the sender, never a vote or an acknowledgement counted for the wrong one.
pub const TARGET_HEADER: &str = "oxbow-target";

/// Marks `req` as meant for node `target`.
pub fn set_target<T>(req: &mut tonic::Request<T>, target: u64) {
    if let Ok(v) = target.to_string().parse() {
        req.metadata_mut().insert(TARGET_HEADER, v);
    }
}

/// Refuses a request marked for a node other than `me`.
pub fn check_target<T>(req: &tonic::Request<T>, me: u64) -> Result<(), tonic::Status> {
    match req.metadata().get(TARGET_HEADER).and_then(|v| v.to_str().ok()).map(str::parse::<u64>) {
        Some(Ok(t)) if t != me => Err(tonic::Status::unavailable(format!("this is node {me}, not node {t}"))),
        _ => Ok(()),
    }
}

/// Addresses controllers announced for themselves after a restart, used instead of their names
/// for a while. A restarted pod has a new IP that cluster DNS may keep answering with the old
/// one for up to half a minute; openraft's leader pushes the log to its followers, so without
/// this the leader cannot reach a restarted voter until DNS catches up (KRaft's followers pull,
/// and never meet this). A redirect only changes where a connection goes: TLS still checks the
/// certificate against the node's name, and every request names the node it is meant for
/// ([`TARGET_HEADER`]).
#[derive(Clone, Default)]
pub struct Redirects(Arc<Mutex<HashMap<u64, (String, Instant)>>>);

impl Redirects {
    /// `node` said it listens at `addr` (`ip:port`), now.
    pub fn set(&self, node: u64, addr: String) {
        self.0.lock().insert(node, (addr, Instant::now()));
    }

    /// Where to connect to `node` instead of its name, if it announced itself lately.
    pub fn get(&self, node: u64) -> Option<String> {
        let mut m = self.0.lock();
        match m.get(&node) {
            Some((a, at)) if at.elapsed() < REDIRECT_FOR => Some(a.clone()),
            Some(_) => {
                m.remove(&node);
                None
            }
            None => None,
        }
    }
}

/// A lazily connected gRPC channel to `addr` (`host:port`), from `local_ip` if given (so a
/// node's quorum traffic leaves from its own address), over TLS if the controllers use it.
/// With `via` (`ip:port`) it connects there instead; TLS checks the certificate against
/// `addr`'s host either way.
pub fn channel_via(
    addr: &str,
    via: Option<&str>,
    local_ip: Option<IpAddr>,
    tls: Option<&ControllerTls>,
) -> Result<Channel, tonic::transport::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", via.unwrap_or(addr)))?
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

/// When each node last answered a Raft RPC of this node's (any answer, a refusal included):
/// the active controller drops learners that stopped answering ([`Contacts::silent_since`]).
#[derive(Clone, Default)]
pub struct Contacts(Arc<Mutex<HashMap<u64, Instant>>>);

impl Contacts {
    fn answered(&self, node: u64) {
        self.0.lock().insert(node, Instant::now());
    }

    /// When `node` last answered, if it ever did while this process ran.
    pub fn last(&self, node: u64) -> Option<Instant> {
        self.0.lock().get(&node).copied()
    }
}

pub struct NetworkFactory {
    pub local_ip: Option<IpAddr>,
    pub tls: Option<ControllerTls>,
    pub redirects: Redirects,
    pub contacts: Contacts,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Connection {
        let mut c = Connection {
            target,
            addr: node.addr.clone(),
            local_ip: self.local_ip,
            tls: self.tls.clone(),
            redirects: self.redirects.clone(),
            contacts: self.contacts.clone(),
            via: None,
            client: None,
        };
        c.connect();
        c
    }
}

pub struct Connection {
    target: u64,
    addr: String,
    local_ip: Option<IpAddr>,
    tls: Option<ControllerTls>,
    redirects: Redirects,
    contacts: Contacts,
    /// The announced address the client connects to, if any.
    via: Option<String>,
    client: Option<QuorumClient<Channel>>,
}

impl Connection {
    fn connect(&mut self) {
        self.via = self.redirects.get(self.target);
        self.client = channel_via(&self.addr, self.via.as_deref(), self.local_ip, self.tls.as_ref())
            .ok()
            .map(|c| QuorumClient::new(c).max_decoding_message_size(256 << 20));
    }
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
        if self.redirects.get(self.target) != self.via {
            self.connect();
        }
        let Some(client) = self.client.as_mut() else {
            return Err(unreachable(&AnyError(format!("bad address of node {}", self.target))));
        };
        let mut request = tonic::Request::new(encode(req));
        request.set_timeout(option.hard_ttl());
        set_target(&mut request, self.target);
        let reply = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = reply.map_err(|s| unreachable(&AnyError(format!("{}: {}", s.code(), s.message()))))?;
        self.contacts.answered(self.target);
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
