//! A secured Cluster's broker settings, exactly as the operator writes them
//! (`cluster::listeners::properties`), with certificates from the operator's own CAs
//! (`certs`), run by a real oxbow-broker process: the operator administers it over
//! REPLICATION with its certificate as a super user, sets a user's SCRAM credential and ACLs,
//! and the user gets exactly what the ACLs grant, over SASL_SSL and over mutual TLS; revoking
//! takes it away. The broker binary comes from OXBOW_BROKER_BIN or target/release.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oxbow_operator::certs::{self, Authority, Usage};
use oxbow_operator::cluster::{listeners, tls};
use oxbow_operator::crd::{
    AclOperation, AclPatternType, AclResource, AclResourceType, AclRule, AclType, Authentication, AuthenticationType,
    AuthorizationSpec, Cluster, ClusterSpec, ListenerSpec, User, UserSpec,
};
use oxbow_operator::kafka::{Admin, KafkaError};
use oxbow_operator::user::plan;
use oxbow_protocol::connection::{ClientSecurity, SaslLogin, SaslMechanism};
use oxbow_protocol::scram::Mechanism;
use oxbow_protocol::secret::Secret;
use time::OffsetDateTime;

struct Broker {
    _process: common::Process,
    /// Kafka listener name -> 127.0.0.1:port
    addrs: BTreeMap<String, String>,
}

fn cluster() -> Cluster {
    let l = |name: &str, port, auth| ListenerSpec {
        name: name.into(),
        port,
        tls: true,
        authentication: Some(Authentication { type_: auth }),
        type_: Default::default(),
        configuration: None,
    };
    Cluster::new(
        "c",
        ClusterSpec {
            replicas: 1,
            listeners: vec![
                l("scram", 9092, AuthenticationType::ScramSha512),
                l("mtls", 9094, AuthenticationType::Tls),
            ],
            authorization: Some(AuthorizationSpec::default()),
            ..Default::default()
        },
    )
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Starts a broker with the operator's settings for `c`; the broker certificate also names
/// 127.0.0.1, where the test reaches it.
async fn start(c: &Cluster, ca: &Authority, clients: &Authority) -> Broker {
    let bin = common::broker_bin();
    assert!(bin.exists(), "no broker binary at {} (cargo build --release -p oxbow-server)", bin.display());
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut names = listeners::broker_names("c-brokers", "c-bootstrap", "ns", "cluster.local");
    names.push("127.0.0.1".into());
    let leaf = certs::issue(ca, "c-broker", true, &names, Usage::Broker, now(), 30).unwrap_or_else(|e| panic!("{e}"));
    let tls_dir = dir.path().join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap_or_else(|e| panic!("{e}"));
    for (file, text) in [
        ("keystore.pem", format!("{}{}{}", leaf.key, leaf.cert, ca.cert)),
        ("ca.crt", ca.bundle.clone()),
        ("clients-ca.crt", clients.bundle.clone()),
    ] {
        std::fs::write(tls_dir.join(file), text).unwrap_or_else(|e| panic!("{e}"));
    }

    let mut props = listeners::properties(c, "c");
    let mut addrs = BTreeMap::new();
    let mut bound = Vec::new();
    let mut advertised = Vec::new();
    for l in props["listeners"].split(',') {
        let (name, _) = l.split_once("://").unwrap_or_else(|| panic!("{l}"));
        let addr = format!("127.0.0.1:{}", common::free_port());
        bound.push(format!("{name}://{addr}"));
        if name != "CONTROLLER" {
            advertised.push(format!("{name}://{addr}"));
        }
        addrs.insert(name.to_string(), addr);
    }
    props.insert("listeners".into(), bound.join(","));
    props.insert("advertised.listeners".into(), advertised.join(","));
    props.insert("node.id".into(), "0".into());
    props.insert("process.roles".into(), "broker,controller".into());
    props.insert("controller.quorum.voters".into(), format!("0@{}", addrs["CONTROLLER"]));
    props.insert("log.dirs".into(), dir.path().join("data").display().to_string());
    let mut cmd = Command::new(&bin);
    for (k, v) in &props {
        let v = v.replace(listeners::TLS_DIR, &tls_dir.display().to_string());
        cmd.args(["--override", &format!("{k}={v}")]);
    }
    // OXBOW_TEST_BROKER_LOG=1 shows the broker's log.
    let log = || if std::env::var_os("OXBOW_TEST_BROKER_LOG").is_some() { Stdio::inherit() } else { Stdio::null() };
    let child = cmd.stdout(log()).stderr(log()).spawn().unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&addrs["REPLICATION"]).await.is_err() {
        assert!(Instant::now() < deadline, "broker did not listen on {}", addrs["REPLICATION"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Broker { _process: common::Process { child, dir }, addrs }
}

fn identity(ca: &Authority, cn: &str, organization: bool, roots: &str) -> ClientSecurity {
    let me = certs::issue(ca, cn, organization, &[], Usage::Client, now(), 2).unwrap_or_else(|e| panic!("{e}"));
    tls::client_security(roots, Some((&me.cert, &me.key))).unwrap_or_else(|e| panic!("{e}"))
}

/// Retries while the quorum elects itself and the broker registers.
async fn operator_admin(b: &Broker, security: &ClientSecurity) -> Admin {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = match Admin::connect(&b.addrs["REPLICATION"], security).await {
            Ok(mut a) => a.describe_topic("probe").await.map(|_| a),
            Err(e) => Err(e),
        };
        match r {
            Ok(a) => return a,
            Err(e) if Instant::now() > deadline => panic!("the operator cannot administer the broker: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn refused_code(r: Result<Option<oxbow_operator::kafka::TopicInfo>, KafkaError>) -> i16 {
    match r {
        Err(KafkaError::Refused { code, .. }) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Waits (10 s at most) until the broker reports exactly `want` as `principal`'s bindings.
async fn settle(admin: &mut Admin, principal: &str, want: &[oxbow_operator::kafka::AclBinding]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let have = admin.acls_of(principal).await.unwrap_or_else(|e| panic!("{e}"));
        if have == want {
            return;
        }
        assert!(Instant::now() < deadline, "ACLs of {principal}: {have:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kafka's TOPIC_AUTHORIZATION_FAILED.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

fn user(name: &str, auth: AuthenticationType, topic: &str) -> User {
    User::new(
        name,
        UserSpec {
            cluster: "c".into(),
            authentication: Authentication { type_: auth },
            acls: vec![AclRule {
                resource: AclResource {
                    type_: AclResourceType::Topic,
                    name: Some(topic.into()),
                    pattern_type: AclPatternType::Literal,
                },
                operations: vec![AclOperation::Describe, AclOperation::Read, AclOperation::Write],
                host: "*".into(),
                type_: AclType::Allow,
            }],
        },
    )
}

#[tokio::test]
async fn users_get_what_their_acls_grant_and_lose_it_when_revoked() {
    let c = cluster();
    let ca = certs::new_authority("c-cluster-ca", now(), 30).unwrap_or_else(|e| panic!("{e}"));
    let clients = certs::new_authority("c-clients-ca", now(), 30).unwrap_or_else(|e| panic!("{e}"));
    let b = start(&c, &ca, &clients).await;

    // The operator: its certificate makes it a super user on REPLICATION.
    let op = identity(&ca, listeners::OPERATOR_COMMON_NAME, true, &ca.bundle);
    let mut admin = operator_admin(&b, &op).await;
    for t in ["granted", "denied"] {
        admin.create_topic(t, 1, 1, &BTreeMap::new()).await.unwrap_or_else(|e| panic!("{e}"));
    }

    // alice (SCRAM): credential and ACLs set as the User controller sets them.
    let alice = user("alice", AuthenticationType::ScramSha512, "granted");
    let password = plan::new_password().unwrap_or_else(|e| panic!("{e}"));
    let salt = oxbow_protocol::scram::random_bytes(32).unwrap_or_else(|e| panic!("{e}"));
    let salted = Mechanism::Sha512.salted_password(password.as_bytes(), &salt, 4096);
    admin.upsert_scram("alice", 4096, salt, salted).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(admin.has_scram("alice").await.unwrap_or_else(|e| panic!("{e}")));
    let want = plan::bindings(&alice);
    admin.create_acls(&want).await.unwrap_or_else(|e| panic!("{e}"));
    // Bindings and credentials reach the brokers through the metadata log: soon, not at once.
    settle(&mut admin, "User:alice", &want).await;

    let login = |password: &str| {
        let mut s = tls::client_security(&ca.bundle, None).unwrap_or_else(|e| panic!("{e}"));
        s.sasl = Some(SaslLogin {
            mechanism: SaslMechanism::Scram(Mechanism::Sha512),
            user: "alice".into(),
            password: Secret::new(password),
        });
        s
    };
    let mut a = Admin::connect(&b.addrs["SCRAM"], &login(&password)).await.unwrap_or_else(|e| panic!("alice: {e}"));
    assert_eq!(a.describe_topic("granted").await.ok().flatten().map(|t| t.partitions), Some(1));
    assert_eq!(refused_code(a.describe_topic("denied").await), TOPIC_AUTHORIZATION_FAILED);
    let wrong = Admin::connect(&b.addrs["SCRAM"], &login("not-the-password")).await;
    assert!(wrong.is_err(), "a wrong password logged in");
    // REPLICATION wants a cluster-CA certificate: TLS without one is refused.
    assert!(
        refused(&b.addrs["REPLICATION"], &tls::client_security(&ca.bundle, None).unwrap_or_else(|e| panic!("{e}")))
            .await
    );

    // bob (mutual TLS): a clients-CA certificate whose common name is his principal.
    let bob = user("bob", AuthenticationType::Tls, "denied");
    admin.create_acls(&plan::bindings(&bob)).await.unwrap_or_else(|e| panic!("{e}"));
    settle(&mut admin, "User:bob", &plan::bindings(&bob)).await;
    let bob_tls = identity(&clients, "bob", false, &ca.bundle);
    let mut bo = Admin::connect(&b.addrs["MTLS"], &bob_tls).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bo.describe_topic("denied").await.ok().flatten().map(|t| t.partitions), Some(1));
    assert_eq!(refused_code(bo.describe_topic("granted").await), TOPIC_AUTHORIZATION_FAILED);
    // A certificate of the cluster CA is no user certificate: the MTLS listener trusts only
    // the clients CA.
    let forged = identity(&ca, "bob", false, &ca.bundle);
    assert!(refused(&b.addrs["MTLS"], &forged).await, "a cluster-CA certificate was accepted on the MTLS listener");

    // Revoking alice (what the finalizer does): her login and her rights are gone.
    let have = admin.acls_of("User:alice").await.unwrap_or_else(|e| panic!("{e}"));
    admin.delete_acls(&have).await.unwrap_or_else(|e| panic!("{e}"));
    admin.delete_scram("alice").await.unwrap_or_else(|e| panic!("{e}"));
    admin.delete_scram("alice").await.unwrap_or_else(|e| panic!("deleting twice: {e}"));
    settle(&mut admin, "User:alice", &[]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Admin::connect(&b.addrs["SCRAM"], &login(&password)).await.is_ok() {
        assert!(Instant::now() < deadline, "alice still logs in 10 s after her credential was deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the listener at `addr` refuses this client: the handshake fails, or the first
/// request does (with TLS 1.3 the server may refuse the certificate after the client's side of
/// the handshake is done).
async fn refused(addr: &str, security: &ClientSecurity) -> bool {
    match Admin::connect(addr, security).await {
        Ok(mut a) => a.describe_topic("granted").await.is_err(),
        Err(_) => true,
    }
}
