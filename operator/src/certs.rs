//! Certificates, as pure functions of PEM text and the time: certificate authorities (made,
//! renewed with the same key), certificates they sign, and when each is due for renewal.
//!
//! Every key is ECDSA P-256 in PKCS#8 PEM (what rustls, Java 17 and librdkafka all read).
//! Subjects are written most significant first (`O`, then `CN`), so that their RFC 2253 form,
//! the principal brokers and Kafka derive, reads `CN=<name>,O=oxbow.io`.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

/// The organisation of every subject the operator writes.
pub const ORGANIZATION: &str = "oxbow.io";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
}

fn invalid(what: &str, e: impl std::fmt::Display) -> CertError {
    CertError::Invalid { what: what.into(), message: e.to_string() }
}

/// A certificate authority: its current certificate, its key, and the trust bundle (the
/// current certificate first, then earlier ones of the same CA until they expire).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    pub cert: String,
    pub key: String,
    pub bundle: String,
}

/// A certificate and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub cert: String,
    pub key: String,
}

fn subject(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(DnType::CommonName, common_name);
    dn
}

fn serial() -> Result<SerialNumber, CertError> {
    let mut bytes = oxbow_protocol::scram::random_bytes(16).map_err(|e| invalid("serial number", e))?;
    bytes[0] &= 0x7f; // positive
    bytes[0] |= 0x01; // and not zero
    Ok(SerialNumber::from_slice(&bytes))
}

fn ca_params(common_name: &str, now: OffsetDateTime, days: i32) -> Result<CertificateParams, CertError> {
    let mut p = CertificateParams::default();
    p.distinguished_name = subject(common_name);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(i64::from(days));
    p.serial_number = Some(serial()?);
    Ok(p)
}

/// A new CA named `common_name`, valid `days` from `now`.
pub fn new_authority(common_name: &str, now: OffsetDateTime, days: i32) -> Result<Authority, CertError> {
    let key = KeyPair::generate().map_err(|e| invalid("CA key", e))?;
    let cert = ca_params(common_name, now, days)?.self_signed(&key).map_err(|e| invalid("CA certificate", e))?;
    let cert = cert.pem();
    Ok(Authority { bundle: cert.clone(), cert, key: key.serialize_pem() })
}

/// The CA renewed: a new certificate for the same name and key, valid `days` from `now`.
/// Certificates the old one signed still verify (same subject, same key); the bundle keeps the
/// old certificate until it expires, for clients that pinned it.
pub fn renew_authority(
    ca: &Authority,
    common_name: &str,
    now: OffsetDateTime,
    days: i32,
) -> Result<Authority, CertError> {
    let key = KeyPair::from_pem(&ca.key).map_err(|e| invalid("CA key", e))?;
    let cert = ca_params(common_name, now, days)?.self_signed(&key).map_err(|e| invalid("CA certificate", e))?;
    let cert = cert.pem();
    let mut bundle = vec![cert.clone()];
    for old in split_pem(&ca.bundle) {
        if not_after(&old).is_ok_and(|t| t > now) && !bundle.contains(&old) {
            bundle.push(old);
        }
    }
    Ok(Authority { bundle: bundle.concat(), cert, key: ca.key.clone() })
}

/// The first certificate's public key, as a fingerprint: certificates of one key pair share it
/// (a CA and its renewals), a replaced key has another.
pub fn key_of(pem: &str) -> Result<String, CertError> {
    parse(pem, |c| {
        let spki = c.public_key().raw;
        Sha256::digest(spki).iter().take(8).map(|b| format!("{b:02x}")).collect()
    })
}

/// The public keys a trust bundle holds, sorted, without repeats.
pub fn keys_of(bundle: &str) -> Vec<String> {
    let mut keys: Vec<String> = split_pem(bundle).iter().filter_map(|c| key_of(c).ok()).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The first step of replacing a CA's key: a new CA (new key, same name) that signs nothing
/// yet, and the bundle trusting it besides every current certificate.
pub fn next_authority(
    ca: &Authority,
    common_name: &str,
    now: OffsetDateTime,
    days: i32,
) -> Result<Authority, CertError> {
    let next = new_authority(common_name, now, days)?;
    Ok(Authority { bundle: format!("{}{}", ca.bundle, next.cert), ..next })
}

/// The last step of replacing a CA's key: the bundle keeps only the certificates of `ca`'s
/// key, so nothing the old key signed verifies any more.
pub fn retire_other_keys(ca: &Authority) -> Result<Authority, CertError> {
    let key = key_of(&ca.cert)?;
    let bundle: String = split_pem(&ca.bundle).into_iter().filter(|c| key_of(c).ok().as_ref() == Some(&key)).collect();
    Ok(Authority { bundle, ..ca.clone() })
}

/// What a certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A broker: server and client (it dials other brokers and the quorum).
    Broker,
    /// A client (the operator, a user).
    Client,
}

/// A certificate for `common_name` (and the DNS names `sans`), signed by `ca`, valid `days`
/// from `now` but never past the CA certificate. `organization`: the subject gets
/// `O=oxbow.io` (brokers, the operator) or only a common name (users, whose principal is it).
pub fn issue(
    ca: &Authority,
    common_name: &str,
    organization: bool,
    sans: &[String],
    usage: Usage,
    now: OffsetDateTime,
    days: i32,
) -> Result<Issued, CertError> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(|e| invalid("CA key (PKCS#8 PEM expected)", e))?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(|e| invalid("CA certificate", e))?;
    let mut p = CertificateParams::new(sans.to_vec()).map_err(|e| invalid("subject alternative names", e))?;
    p.distinguished_name = if organization {
        subject(common_name)
    } else {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        dn
    };
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    p.extended_key_usages = match usage {
        Usage::Broker => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
        Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    p.use_authority_key_identifier_extension = true;
    p.not_before = now - Duration::hours(1);
    let ca_end = not_after(&ca.cert)?;
    p.not_after = (now + Duration::days(i64::from(days))).min(ca_end);
    p.serial_number = Some(serial()?);
    let key = KeyPair::generate().map_err(|e| invalid("key", e))?;
    let cert = p.signed_by(&key, &issuer).map_err(|e| invalid("certificate", e))?;
    Ok(Issued { cert: cert.pem(), key: key.serialize_pem() })
}

/// The PEM blocks of `text`, each with its trailing newline.
pub fn split_pem(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if line.starts_with("-----BEGIN") {
            cur.clear();
        }
        cur.push_str(line.trim_end());
        cur.push('\n');
        if line.starts_with("-----END") {
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

fn parse<T>(pem: &str, f: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T) -> Result<T, CertError> {
    let block = split_pem(pem).into_iter().next().ok_or_else(|| invalid("certificate", "no PEM block"))?;
    let (_, p) = x509_parser::pem::parse_x509_pem(block.as_bytes()).map_err(|e| invalid("certificate PEM", e))?;
    let cert = p.parse_x509().map_err(|e| invalid("certificate", e))?;
    Ok(f(&cert))
}

/// When the first certificate of `pem` expires.
pub fn not_after(pem: &str) -> Result<OffsetDateTime, CertError> {
    parse(pem, |c| c.validity().not_after.to_datetime())
}

/// The first certificate's serial number, in hex (as `openssl x509 -serial` prints it).
pub fn serial_hex(pem: &str) -> Result<String, CertError> {
    parse(pem, |c| c.raw_serial_as_string().replace(':', "").to_uppercase())
}

/// Whether a certificate expiring at `expiry` is due for renewal at `now`.
pub fn due(expiry: OffsetDateTime, now: OffsetDateTime, renewal_days: i32) -> bool {
    expiry - now < Duration::days(i64::from(renewal_days))
}

/// First 16 hex digits of the SHA-256 of `text` (names a certificate or a set of names).
pub fn fingerprint(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    /// Verifies `leaf` against `roots` with webpki, the verifier the brokers use.
    fn verifies(leaf: &str, roots: &str, name: &str, at: OffsetDateTime) -> bool {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut store = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(roots.as_bytes()) {
            store.add(c.unwrap()).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let v = rustls::client::WebPkiServerVerifier::builder_with_provider(std::sync::Arc::new(store), provider)
            .build()
            .unwrap();
        let leaf = CertificateDer::from_pem_slice(leaf.as_bytes()).unwrap();
        let t = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.unix_timestamp() as u64));
        use rustls::client::danger::ServerCertVerifier;
        v.verify_server_cert(&leaf, &[], &ServerName::try_from(name.to_string()).unwrap(), &[], t).is_ok()
    }

    #[test]
    fn a_broker_certificate_verifies_under_its_ca_and_its_renewal() {
        let ca = new_authority("c-cluster-ca", now(), 365).unwrap();
        let sans = vec!["*.c-brokers.ns.svc.cluster.local".to_string(), "c-bootstrap.ns.svc".to_string()];
        let leaf = issue(&ca, "c-broker", true, &sans, Usage::Broker, now(), 365).unwrap();
        assert!(verifies(&leaf.cert, &ca.bundle, "c-broker-0.c-brokers.ns.svc.cluster.local", now()));
        assert!(verifies(&leaf.cert, &ca.bundle, "c-bootstrap.ns.svc", now()));
        assert!(!verifies(&leaf.cert, &ca.bundle, "elsewhere.example", now()));
        let foreign = new_authority("other", now(), 365).unwrap();
        assert!(!verifies(&leaf.cert, &foreign.bundle, "c-bootstrap.ns.svc", now()));

        // Renewed with the same key: the old leaf verifies under the new CA certificate alone,
        // a new leaf under the old one alone (brokers that have not reloaded yet).
        let later = now() + Duration::days(340);
        let renewed = renew_authority(&ca, "c-cluster-ca", later, 365).unwrap();
        assert_eq!(renewed.key, ca.key);
        assert_ne!(renewed.cert, ca.cert);
        assert_eq!(split_pem(&renewed.bundle), vec![renewed.cert.clone(), ca.cert.clone()]);
        assert!(verifies(&leaf.cert, &renewed.cert, "c-bootstrap.ns.svc", later));
        let new_leaf = issue(&renewed, "c-broker", true, &sans, Usage::Broker, later, 365).unwrap();
        assert!(verifies(&new_leaf.cert, &ca.cert, "c-bootstrap.ns.svc", later));
        assert_ne!(serial_hex(&new_leaf.cert).unwrap(), serial_hex(&leaf.cert).unwrap());

        // Once the old CA certificate expires it leaves the bundle.
        let much_later = now() + Duration::days(400);
        let again = renew_authority(&renewed, "c-cluster-ca", much_later, 365).unwrap();
        assert_eq!(split_pem(&again.bundle).len(), 2, "the first certificate expired");
    }

    #[test]
    fn a_leaf_never_outlives_its_ca_and_renewal_is_due_in_the_window() {
        let ca = new_authority("c", now(), 10).unwrap();
        let leaf = issue(&ca, "alice", false, &[], Usage::Client, now(), 365).unwrap();
        assert!(not_after(&leaf.cert).unwrap() <= not_after(&ca.cert).unwrap());
        let end = not_after(&ca.cert).unwrap();
        assert!(!due(end, now(), 5));
        assert!(due(end, now() + Duration::days(6), 5));
    }

    #[test]
    fn replacing_a_key_trusts_both_then_only_the_new_one() {
        let old = new_authority("c-cluster-ca", now(), 365).unwrap();
        let renewed = renew_authority(&old, "c-cluster-ca", now() + Duration::days(1), 365).unwrap();
        let leaf = issue(&renewed, "b", true, &["b.example".into()], Usage::Broker, now(), 30).unwrap();
        assert_eq!(keys_of(&renewed.bundle).len(), 1, "a renewal keeps the key");

        let next = next_authority(&renewed, "c-cluster-ca", now() + Duration::days(2), 365).unwrap();
        assert_ne!(key_of(&next.cert).unwrap(), key_of(&old.cert).unwrap());
        assert_eq!(keys_of(&next.bundle).len(), 2);
        let at = now() + Duration::days(3);
        // While both are trusted, old and new leaves verify.
        let new_leaf = issue(&next, "b", true, &["b.example".into()], Usage::Broker, at, 30).unwrap();
        assert!(verifies(&leaf.cert, &next.bundle, "b.example", at));
        assert!(verifies(&new_leaf.cert, &next.bundle, "b.example", at));

        let retired = retire_other_keys(&next).unwrap();
        assert_eq!(split_pem(&retired.bundle), vec![next.cert.clone()]);
        assert!(verifies(&new_leaf.cert, &retired.bundle, "b.example", at));
        assert!(!verifies(&leaf.cert, &retired.bundle, "b.example", at));
    }

    #[test]
    fn subjects_read_as_kafka_principals() {
        let ca = new_authority("c-cluster-ca", now(), 365).unwrap();
        let broker = issue(&ca, "c-broker", true, &[], Usage::Broker, now(), 30).unwrap();
        let user = issue(&ca, "alice", false, &[], Usage::Client, now(), 30).unwrap();
        let dn = |pem: &str| parse(pem, |c| c.subject().to_string()).unwrap();
        // x509-parser prints in encoding order: O first, so RFC 2253 (reversed) is CN=...,O=...
        assert_eq!(dn(&broker.cert), "O=oxbow.io, CN=c-broker");
        assert_eq!(dn(&user.cert), "CN=alice");
    }
}
