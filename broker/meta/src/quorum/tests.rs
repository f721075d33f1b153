use tonic::Status;

use super::service::remote_error;
use super::*;
use crate::controller::Refusal;
use crate::network::set_target;
use crate::records::Configs;
use uuid::Uuid;

/// Three controllers in this process, on loopback ports of their own.
async fn three(
    dir: &std::path::Path,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<Quorum>> {
    Ok(three_with(dir, tasks, stop, OBSERVER_SESSION_TIMEOUT).await?.into_iter().map(|(q, _)| q).collect())
}

/// [`three`], with an observer session timeout, and a token that stops each node alone.
/// The ports are found free and then bound by each node, so another process (or test) can
/// take one in between: the three start again on new ports, in a new directory, when a
/// listener cannot be bound.
async fn three_with(
    dir: &std::path::Path,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
    observer_session_timeout: Duration,
) -> anyhow::Result<Vec<(Quorum, CancellationToken)>> {
    let mut attempt = 0;
    loop {
        let tried = dir.join(format!("attempt-{attempt}"));
        match start_three(&tried, tasks, stop, observer_session_timeout).await {
            Err(QuorumError::Bind { addr, source }) if attempt < 4 => {
                eprintln!("port {addr} was taken before the node bound it ({source}); starting the three again");
                attempt += 1;
            }
            r => return Ok(r?),
        }
    }
}

async fn start_three(
    dir: &std::path::Path,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
    observer_session_timeout: Duration,
) -> Result<Vec<(Quorum, CancellationToken)>, QuorumError> {
    let mut listeners = BTreeMap::new();
    for id in 1..=3 {
        let local = "127.0.0.1:0".parse().map_err(|e| QuorumError::Storage(format!("{e}")))?;
        let bind = |source| QuorumError::Bind { addr: local, source };
        let l = std::net::TcpListener::bind(local).map_err(bind)?;
        listeners.insert(id as NodeId, l.local_addr().map_err(bind)?);
    }
    let voters: BTreeMap<NodeId, String> = listeners.iter().map(|(id, a)| (*id, a.to_string())).collect();
    let mut nodes = Vec::new();
    for (id, addr) in &listeners {
        let cfg = QuorumConfig {
            node_id: *id,
            voters: voters.clone(),
            bootstrap: Vec::new(),
            auto_join: false,
            advertised: Some(addr.to_string()),
            controller: true,
            controller_listener: Some(*addr),
            local_ip: None,
            dir: dir.join(format!("node-{id}")),
            session_timeout_ms: 60_000,
            unclean_leader_election: false,
            snapshot_bytes: 1 << 30,
            election_timeout_ms: 1_000,
            tls: None,
            observer_session_timeout,
        };
        let own = stop.child_token();
        match Quorum::start(cfg, tasks, own.clone()).await {
            Ok(q) => nodes.push((q, own)),
            Err(e) => {
                // The nodes started so far stop: the caller may start three others.
                own.cancel();
                nodes.iter().for_each(|(_, t)| t.cancel());
                return Err(e);
            }
        }
    }
    Ok(nodes)
}

async fn leader_of(nodes: &[Quorum]) -> anyhow::Result<NodeId> {
    for _ in 0..300 {
        if let Some(n) = nodes
            .iter()
            .find(|n| n.inner.raft.as_ref().is_some_and(|r| r.metrics().borrow().state == ServerState::Leader))
        {
            return Ok(n.node_id());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("no leader elected in 30 s")
}

/// Three controllers with an elected leader, for tests that talk to it from a follower.
struct Elected {
    _dir: tempfile::TempDir,
    tasks: JoinSet<()>,
    stop: CancellationToken,
    nodes: Vec<Quorum>,
    leader: NodeId,
}

impl Elected {
    async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut tasks = JoinSet::new();
        let stop = CancellationToken::new();
        let nodes = three(dir.path(), &mut tasks, &stop).await?;
        let leader = leader_of(&nodes).await?;
        Ok(Self { _dir: dir, tasks, stop, nodes, leader })
    }

    fn follower(&self) -> anyhow::Result<&Quorum> {
        self.nodes.iter().find(|n| n.node_id() != self.leader).ok_or_else(|| anyhow::anyhow!("no follower"))
    }

    async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// A command whose first answer was lost and that is sent again: a creation finds the
/// topic its own id made, a deletion finds the topic gone, and both answer success; the
/// same refusal to a first attempt stays a refusal. Sent from a follower, so the retry mark
/// crosses the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_committed_command_succeeds() -> anyhow::Result<()> {
    let elected = Elected::start().await?;
    let (nodes, leader, follower) = (&elected.nodes, elected.leader, elected.follower()?);
    let send = |cmd: Command, retry: bool| async move {
        match follower.run_remote(leader, &Routed::Command(cmd), Duration::from_secs(10), retry).await {
            Ok(RoutedReply::Command(_, reply)) => Ok(reply),
            Ok(RoutedReply::Admin(_)) => Err(CommandError::Unavailable("mismatched reply".into())),
            Err(e) => Err(e),
        }
    };
    let reg = Command::RegisterBroker { node_id: 1, incarnation_id: Uuid::new_v4(), listeners: Vec::new(), rack: None };
    send(reg, false).await?;
    let leader_node = nodes.iter().find(|n| n.node_id() == leader).ok_or_else(|| anyhow::anyhow!("no leader"))?;
    let epoch =
        leader_node.image().brokers.get(&1).map(|b| b.epoch).ok_or_else(|| anyhow::anyhow!("not registered"))?;
    // The first heartbeat may come before the new leader can confirm its lead (as a
    // broker's would, it tries again).
    let mut beats = 0;
    while let Err(e) = send(Command::Heartbeat { node_id: 1, epoch, shutting_down: false }, false).await {
        beats += 1;
        anyhow::ensure!(beats < 100, "heartbeat: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let create = Command::CreateTopic {
        name: "t".into(),
        partitions: 2,
        replication_factor: 1,
        assignments: None,
        configs: Configs::new(),
        topic_id: Some(crate::controller::random_topic_id()),
        validate_only: false,
    };
    let first = send(create.clone(), false).await?;
    let Reply::TopicCreated { id, .. } = &first else { anyhow::bail!("{first:?}") };
    assert_eq!(send(create.clone(), true).await?, first);
    // Not a retry of the same request (another id): refused as ever.
    let mut other = create.clone();
    if let Command::CreateTopic { topic_id, .. } = &mut other {
        *topic_id = Some(crate::controller::random_topic_id());
    }
    assert!(matches!(send(other, true).await, Err(CommandError::Refused(Refusal::TopicAlreadyExists(_)))));

    let delete = Command::DeleteTopic { name: "t".into() };
    assert_eq!(send(delete.clone(), false).await?, Reply::Done);
    assert!(matches!(send(delete.clone(), false).await, Err(CommandError::Refused(Refusal::UnknownTopic(_)))));
    assert_eq!(send(delete, true).await?, Reply::Done);
    let image = leader_node.image();
    assert!(image.topic("t").is_none() && image.topic_by_id(*id).is_none());

    elected.stop().await;
    Ok(())
}

/// A command the controller cannot decode (one added in a newer version, sent to a
/// controller not yet upgraded) is refused at once as unsupported, not retried as an
/// unreachable controller would be; the barrier itself is known and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_controller_cannot_decode_is_unsupported() -> anyhow::Result<()> {
    let elected = Elected::start().await?;
    let (leader, follower) = (elected.leader, elected.follower()?);
    let mut client = follower.client(leader).ok_or_else(|| anyhow::anyhow!("no client"))?;
    let mut r = Request::new(encode(&serde_json::json!({"CommandOfANewerVersion": {"x": 1}})));
    set_target(&mut r, leader as u64);
    let status = client.command(r).await.err().ok_or_else(|| anyhow::anyhow!("an unknown command was decoded"))?;
    let e = remote_error(leader, &status);
    assert!(matches!(e, CommandError::Unsupported(_)), "{e:?}");
    let unreachable = remote_error(leader, &Status::unavailable("connection refused"));
    assert!(matches!(unreachable, CommandError::Unavailable(_)), "{unreachable:?}");
    // The barrier, through the routing loop from a follower: answered with no records.
    let mut tries = 0;
    loop {
        match follower.execute(Command::Barrier, Duration::from_secs(10)).await {
            Ok((_, reply)) => {
                assert_eq!(reply, Reply::Done);
                break;
            }
            // A leader that has not yet confirmed its lead answers after it has.
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("barrier: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => anyhow::bail!("barrier: {e}"),
        }
    }
    elected.stop().await;
    Ok(())
}

/// A voter removed with RemoveRaftVoter stays a learner (an observer) while it answers,
/// and leaves the membership once it has been silent for the observer session timeout:
/// a controller removed and then shut down for good is not replicated to forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_voter_that_stops_answering_leaves_the_membership() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut tasks = JoinSet::new();
    let stop = CancellationToken::new();
    let timeout = Duration::from_secs(2);
    let nodes = three_with(dir.path(), &mut tasks, &stop, timeout).await?;
    let quorums: Vec<Quorum> = nodes.iter().map(|(q, _)| q.clone()).collect();
    let leader = leader_of(&quorums).await?;
    let leader_node = quorums.iter().find(|n| n.node_id() == leader).ok_or_else(|| anyhow::anyhow!("no leader"))?;
    let (removed, removed_stop) =
        nodes.iter().find(|(n, _)| n.node_id() != leader).ok_or_else(|| anyhow::anyhow!("no follower"))?;
    let id = removed.node_id();
    let reply = leader_node.admin(QuorumAdmin::RemoveVoter { node_id: id }, Duration::from_secs(10)).await?;
    anyhow::ensure!(matches!(reply, Ok(AdminReply::Done)), "{reply:?}");
    let learners = |q: &Quorum| -> Vec<NodeId> {
        q.state().map(|s| s.learners.iter().map(|l| l.node_id).collect()).unwrap_or_default()
    };
    assert_eq!(learners(leader_node), vec![id]);
    // Running and answering, it stays an observer past the timeout.
    tokio::time::sleep(timeout * 3).await;
    assert_eq!(learners(leader_node), vec![id], "a learner that answers is kept");

    removed_stop.cancel();
    let mut waited = 0;
    while !learners(leader_node).is_empty() {
        waited += 1;
        anyhow::ensure!(waited < 600, "the silent learner {id} is still a member: {:?}", leader_node.state());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state = leader_node.state().ok_or_else(|| anyhow::anyhow!("no state"))?;
    assert_eq!(state.voters.len(), 2);
    assert!(!state.endpoints.contains_key(&id), "{state:?}");

    stop.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}
