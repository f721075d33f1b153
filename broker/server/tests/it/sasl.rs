//! SASL on a listener, over raw frames: what is served before authentication, PLAIN and SCRAM
//! (with credentials created through AlterUserScramCredentials), v0 handshakes with raw tokens,
//! failed logins, KIP-368 re-authentication and session expiry, garbage tokens and oversized
//! frames before authentication. The real clients (Java, librdkafka) are in tests/java and
//! tests/clients/test_security.py.

use crate::common;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::{Client, TestBroker};
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use oxbow_protocol::scram::{ClientExchange, Mechanism};
use oxbow_protocol::secret::Secret;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SASL_FAILED: i16 = 58;
const UNSUPPORTED_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;

struct Sasl {
    broker: TestBroker,
    port: u16,
}

async fn start(extra: &[(&str, &str)]) -> anyhow::Result<Sasl> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let jaas =
        r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw" user_bob="bob-pw";"#;
    let mut all = vec![
        ("listeners", listeners.as_str()),
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", jaas),
        ("connection.failed.authentication.delay.ms", "10"),
    ];
    all.extend_from_slice(extra);
    let broker = TestBroker::start(&all).await?;
    Ok(Sasl { broker, port })
}

impl Sasl {
    async fn client(&self) -> anyhow::Result<Client> {
        Client::connect(([127, 0, 0, 1], self.port).into()).await
    }
}

fn handshake(mech: &str) -> SaslHandshakeRequest {
    let mut r = SaslHandshakeRequest::default();
    r.mechanism = StrBytes::from_string(mech.into());
    r
}

fn auth(bytes: impl Into<Bytes>) -> SaslAuthenticateRequest {
    let mut r = SaslAuthenticateRequest::default();
    r.auth_bytes = bytes.into();
    r
}

/// PLAIN login; returns SaslAuthenticate's error code and session lifetime.
async fn plain(c: &mut Client, user: &str, password: &str) -> anyhow::Result<(i16, i64)> {
    let h = c.send(1, &handshake("PLAIN")).await?;
    assert_eq!(h.error_code, 0);
    let a = c.send(2, &auth(format!("\0{user}\0{password}"))).await?;
    Ok((a.error_code, a.session_lifetime_ms))
}

async fn scram(c: &mut Client, mech: Mechanism, user: &str, password: &str) -> anyhow::Result<i16> {
    let h = c.send(1, &handshake(mech.name())).await?;
    assert_eq!(h.error_code, 0);
    let mut ex = ClientExchange::new(mech, user, Secret::new(password))?;
    let first = c.send(2, &auth(ex.client_first())).await?;
    if first.error_code != 0 {
        return Ok(first.error_code);
    }
    let last = c.send(2, &auth(ex.client_final(&first.auth_bytes)?)).await?;
    if last.error_code == 0 {
        ex.verify_server_final(&last.auth_bytes)?;
    }
    Ok(last.error_code)
}

async fn metadata_works(c: &mut Client) -> anyhow::Result<()> {
    let m = c.send(12, &MetadataRequest::default()).await?;
    assert!(!m.brokers.is_empty());
    Ok(())
}

async fn add_scram_user(b: &TestBroker, mech: Mechanism, user: &str, password: &str) -> anyhow::Result<()> {
    let salt = b"0123456789abcdef".to_vec();
    let mut u = ScramCredentialUpsertion::default();
    u.name = StrBytes::from_string(user.into());
    u.mechanism = mech.id();
    u.iterations = 4096;
    u.salt = salt.clone().into();
    u.salted_password = mech.salted_password(password.as_bytes(), &salt, 4096).into();
    let mut req = AlterUserScramCredentialsRequest::default();
    req.upsertions = vec![u];
    let resp = b.client().await?.send(0, &req).await?;
    assert_eq!(resp.results[0].error_code, 0, "{:?}", resp.results[0].error_message);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_sasl_exchange_is_served_before_authentication() -> anyhow::Result<()> {
    let s = start(&[]).await?;
    let mut c = s.client().await?;
    assert_eq!(c.send(3, &ApiVersionsRequest::default()).await?.error_code, 0);
    let f = c.frame(12, &MetadataRequest::default())?;
    c.stream().write_all(&f).await?;
    assert!(c.is_closed().await, "Metadata before authentication must close the connection");
    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut c = s.client().await?;
    let h = c.send(1, &handshake("GSSAPI")).await?;
    assert_eq!(h.error_code, UNSUPPORTED_MECHANISM);
    let names: Vec<&str> = h.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(c.is_closed().await);
    // SaslAuthenticate without a handshake.
    let mut c = s.client().await?;
    assert_eq!(c.send(2, &auth(&b"\0alice\0alice-pw"[..])).await?.error_code, ILLEGAL_SASL_STATE);
    assert!(c.is_closed().await);
    // On the PLAINTEXT listener the SASL APIs are ILLEGAL_SASL_STATE.
    let mut p = s.broker.client().await?;
    assert_eq!(p.send(1, &handshake("PLAIN")).await?.error_code, ILLEGAL_SASL_STATE);
    s.broker.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_and_scram_logins() -> anyhow::Result<()> {
    let s = start(&[]).await?;
    let mut c = s.client().await?;
    assert_eq!(plain(&mut c, "alice", "alice-pw").await?, (0, 0));
    metadata_works(&mut c).await?;
    for (user, pw) in [("alice", "wrong"), ("nobody", "alice-pw")] {
        let mut c = s.client().await?;
        assert_eq!(plain(&mut c, user, pw).await?.0, SASL_FAILED, "{user}");
        assert!(c.is_closed().await);
    }
    for mech in Mechanism::ALL {
        add_scram_user(&s.broker, mech, "carol", "carol-pw").await?;
        let mut c = s.client().await?;
        assert_eq!(scram(&mut c, mech, "carol", "carol-pw").await?, 0);
        metadata_works(&mut c).await?;
        for (user, pw) in [("carol", "nope"), ("dave", "carol-pw")] {
            let mut c = s.client().await?;
            assert_eq!(scram(&mut c, mech, user, pw).await?, SASL_FAILED, "{mech:?} {user}");
            assert!(c.is_closed().await);
        }
    }
    s.broker.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v0_handshake_takes_raw_tokens() -> anyhow::Result<()> {
    let s = start(&[]).await?;
    let mut c = s.client().await?;
    assert_eq!(c.send(0, &handshake("PLAIN")).await?.error_code, 0);
    let token = b"\0bob\0bob-pw";
    let mut f = BytesMut::new();
    f.put_u32(token.len() as u32);
    f.put_slice(token);
    c.stream().write_all(&f).await?;
    let mut len = [0u8; 4];
    c.stream().read_exact(&mut len).await?;
    assert_eq!(u32::from_be_bytes(len), 0, "PLAIN's empty server token");
    metadata_works(&mut c).await?;
    s.broker.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_and_re_authentication_keeps_the_connection() -> anyhow::Result<()> {
    let s = start(&[("connections.max.reauth.ms", "1500")]).await?;
    let mut c = s.client().await?;
    assert_eq!(plain(&mut c, "alice", "alice-pw").await?, (0, 1500));
    metadata_works(&mut c).await?;
    // Re-authentication (KIP-368) on the same connection, as the same principal.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(plain(&mut c, "alice", "alice-pw").await?, (0, 1500));
        metadata_works(&mut c).await?;
    }
    // A different principal may not take the connection over.
    assert_eq!(plain(&mut c, "bob", "bob-pw").await?.0, SASL_FAILED);
    assert!(c.is_closed().await);
    // Past its lifetime, anything but re-authentication closes the connection.
    let mut c = s.client().await?;
    assert_eq!(plain(&mut c, "alice", "alice-pw").await?.0, 0);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let f = c.frame(12, &MetadataRequest::default())?;
    c.stream().write_all(&f).await?;
    assert!(c.is_closed().await, "an expired session must not be served");
    s.broker.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_tokens_and_oversized_frames_close_only_their_connection() -> anyhow::Result<()> {
    let s = start(&[("sasl.server.max.receive.size", "4096")]).await?;
    let mut bystander = s.client().await?;
    assert_eq!(plain(&mut bystander, "alice", "alice-pw").await?.0, 0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5a51);
    for i in 0..120 {
        let mut c = s.client().await?;
        let mech = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"][i % 3];
        assert_eq!(c.send(1, &handshake(mech)).await?.error_code, 0);
        let len = rng.random_range(0..300usize);
        let mut token: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if i % 2 == 1 {
            // Nearly well-formed SCRAM messages reach the parser's later checks.
            let prefix: &[u8] = if i % 4 == 1 { b"n,,n=carol,r=" } else { b"c=biws,r=x,p=" };
            token.splice(0..0, prefix.iter().copied());
        }
        let a = tokio::time::timeout(Duration::from_secs(5), c.send(2, &auth(token))).await;
        if let Ok(Ok(a)) = a
            && a.error_code == 0
        {
            // A SCRAM client-first for a user without credentials is refused like any other.
            panic!("garbage token {i} was accepted: {a:?}");
        }
    }
    // Before authentication a frame over sasl.server.max.receive.size closes the connection
    // before anything is read into memory.
    let mut c = s.client().await?;
    c.stream().write_all(&(64 * 1024 * 1024i32).to_be_bytes()).await?;
    assert!(c.is_closed().await);
    metadata_works(&mut bystander).await?;
    s.broker.stop().await?;
    Ok(())
}
