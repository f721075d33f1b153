//! TLS on a listener (rustls with the ring provider): the server configuration from PEM
//! settings, rebuilt when its files change on disk, and the principal of a client certificate.
//!
//! Reload: on a new connection, at most once a second, the files' modification times are
//! compared with those the configuration was built from; a change rebuilds it. Connections
//! already open keep the certificate they were made with. A file that does not load (a rotation
//! caught half-written) leaves the previous configuration in place and is logged once per change.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::security::{ClientAuth, Pem, TlsSettings};
use crate::security::principal::Principal;

const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A listener's TLS server side.
pub struct ServerTls {
    settings: TlsSettings,
    state: Mutex<State>,
}

struct State {
    config: Arc<ServerConfig>,
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the certificate, key and trust store; the error names the key of what failed.
    pub fn new(settings: TlsSettings) -> Result<ServerTls, String> {
        let stamps = stamps(&settings);
        let config = build(&settings)?;
        Ok(ServerTls { settings, state: Mutex::new(State { config, stamps, checked: Instant::now() }) })
    }

    /// The configuration for a new connection (rebuilt first if its files changed).
    pub fn config(&self) -> Arc<ServerConfig> {
        let mut st = self.state.lock();
        if st.checked.elapsed() >= RELOAD_CHECK {
            st.checked = Instant::now();
            let now = stamps(&self.settings);
            if now != st.stamps {
                st.stamps = now;
                match build(&self.settings) {
                    Ok(c) => {
                        tracing::info!(listener = %self.settings.prefix, "TLS certificate or trust store changed on disk: reloaded");
                        st.config = c;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS files changed but do not load; keeping the previous ones")
                    }
                }
            }
        }
        st.config.clone()
    }

    /// The principal of a verified client certificate (its subject, mapped by
    /// `ssl.principal.mapping.rules`), or ANONYMOUS without one.
    pub fn principal(&self, peer_certs: Option<&[CertificateDer<'_>]>) -> Principal {
        match peer_certs.and_then(|c| c.first()).and_then(|c| super::dn::subject(c)) {
            Some(subject) => Principal::user(self.settings.principal_rules.apply(&subject)),
            None => Principal::anonymous(),
        }
    }
}

fn files(s: &TlsSettings) -> Vec<&Path> {
    let mut out = Vec::new();
    for pem in [Some(&s.key), Some(&s.chain), s.truststore.as_ref()].into_iter().flatten() {
        if let Pem::File(p) = pem {
            out.push(p.as_path());
        }
    }
    out
}

fn stamps(s: &TlsSettings) -> Vec<Option<SystemTime>> {
    files(s).into_iter().map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()).collect()
}

fn read(pem: &Pem, key: &str, prefix: &str) -> Result<Vec<u8>, String> {
    match pem {
        Pem::File(p) => std::fs::read(p).map_err(|e| format!("{prefix}{key}: cannot read {}: {e}", p.display())),
        Pem::Inline(s) => Ok(s.expose().as_bytes().to_vec()),
    }
}

fn location(pem: &Pem) -> Option<&PathBuf> {
    match pem {
        Pem::File(p) => Some(p),
        Pem::Inline(_) => None,
    }
}

fn build(s: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    let p = &s.prefix;
    let (key_key, chain_key) = match location(&s.key) {
        Some(_) => ("ssl.keystore.location", "ssl.keystore.location"),
        None => ("ssl.keystore.key", "ssl.keystore.certificate.chain"),
    };
    let chain_pem = read(&s.chain, chain_key, p)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{p}{chain_key}: bad PEM certificate: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{p}{chain_key}: no certificate (-----BEGIN CERTIFICATE-----) found"));
    }
    let key_pem = read(&s.key, key_key, p)?;
    if String::from_utf8_lossy(&key_pem).contains("ENCRYPTED PRIVATE KEY") {
        return Err(format!("{p}{key_key}: the private key is encrypted; encrypted keys are not supported yet"));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("{p}{key_key}: no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut versions = Vec::new();
    if s.tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if s.tls12 {
        versions.push(&rustls::version::TLS12);
    }
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("{p}ssl.enabled.protocols: {e}"))?;
    let builder = match (&s.truststore, s.client_auth) {
        (_, ClientAuth::None) | (None, _) => builder.with_no_client_auth(),
        (Some(trust), auth) => {
            let tkey =
                if location(trust).is_some() { "ssl.truststore.location" } else { "ssl.truststore.certificates" };
            let pem = read(trust, tkey, p)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("{p}{tkey}: bad PEM certificate: {e}"))?;
                roots.add(cert).map_err(|e| format!("{p}{tkey}: unusable CA certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("{p}{tkey}: no CA certificate found"));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("{p}{tkey}: {e}"))?)
        }
    };
    let mut config =
        builder.with_single_cert(chain, key).map_err(|e| format!("{p}{key_key}: key and certificate: {e}"))?;
    config.alpn_protocols.clear();
    Ok(Arc::new(config))
}

/// How this broker dials the others (TLS client configuration from the inter-broker listener's
/// files, read now so a rotated certificate is used by the next connection), and its login.
pub fn inter_broker_security(
    c: &crate::config::security::InterBrokerClient,
) -> Result<oxbow_protocol::connection::ClientSecurity, String> {
    let tls = match &c.tls {
        None => None,
        Some(t) => {
            let p = &t.prefix;
            let pem = read(&t.truststore, "ssl.truststore.location", p)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("{p}ssl.truststore.location: bad PEM certificate: {e}"))?;
                roots.add(cert).map_err(|e| format!("{p}ssl.truststore.location: unusable CA certificate: {e}"))?;
            }
            let chain_pem = read(&t.chain, "ssl.keystore.location", p)?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{p}ssl.keystore.location: bad PEM certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&read(&t.key, "ssl.keystore.location", p)?)
                .map_err(|e| format!("{p}ssl.keystore.location: no usable private key: {e}"))?;
            Some(oxbow_protocol::connection::client_tls(roots, Some((chain, key)), t.verify_hostname)?)
        }
    };
    Ok(oxbow_protocol::connection::ClientSecurity { tls, sasl: c.sasl.clone() })
}

/// The controller listener's TLS as the metadata quorum takes it (PEM bytes, checked here so a
/// bad file stops startup naming its key).
pub fn controller_tls(
    c: &crate::config::security::ClientTlsSettings,
) -> Result<oxbow_meta::network::ControllerTls, String> {
    let p = &c.prefix;
    let key_key = if location(&c.key).is_some() { "ssl.keystore.location" } else { "ssl.keystore.key" };
    let chain_key =
        if location(&c.chain).is_some() { "ssl.keystore.location" } else { "ssl.keystore.certificate.chain" };
    let ca = read(&c.truststore, "ssl.truststore.location", p)?;
    let cert_chain = read(&c.chain, chain_key, p)?;
    let key = read(&c.key, key_key, p)?;
    if CertificateDer::pem_slice_iter(&cert_chain).next().is_none() {
        return Err(format!("{p}{chain_key}: no certificate (-----BEGIN CERTIFICATE-----) found"));
    }
    if CertificateDer::pem_slice_iter(&ca).next().is_none() {
        return Err(format!("{p}ssl.truststore.location: no CA certificate found"));
    }
    PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("{p}{key_key}: no usable private key: {e}"))?;
    Ok(oxbow_meta::network::ControllerTls { ca, cert_chain, key })
}
