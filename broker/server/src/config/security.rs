//! Listener security from `server.properties`, with Kafka's keys: each listener's protocol
//! (`listener.security.protocol.map`), its TLS settings (`ssl.*`) and SASL mechanisms
//! (`sasl.enabled.mechanisms`, PLAIN users from the JAAS config), each key overridable per
//! listener as `listener.name.<name>.<key>`.
//!
//! Only what is parsed here is checked here; loading certificates happens when the listener is
//! bound (`crate::security::tls`), which names the key of a file it cannot use.

use std::collections::BTreeMap;
use std::path::PathBuf;

use oxbow_protocol::secret::Secret;

use super::{ConfigError, Listener};
use crate::security::principal::PrincipalRules;

/// A listener's security protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        [Self::Plaintext, Self::Ssl, Self::SaslPlaintext, Self::SaslSsl].into_iter().find(|p| p.name() == s.trim())
    }

    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// PEM text: a file (re-read when it changes) or inline in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pem {
    File(PathBuf),
    Inline(Secret),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    Required,
    Requested,
    None,
}

#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The listener's `listener.name.<l>.` prefix, for messages naming a key.
    pub prefix: String,
    /// Key and chain: one file holding both, or both inline.
    pub key: Pem,
    pub chain: Pem,
    pub truststore: Option<Pem>,
    pub client_auth: ClientAuth,
    pub principal_rules: PrincipalRules,
    pub tls12: bool,
    pub tls13: bool,
}

/// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the client side logs in with the same names).
pub use oxbow_protocol::connection::SaslMechanism;

#[derive(Debug, Clone)]
pub struct SaslSettings {
    pub mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users and passwords (`user_<name>="<password>"` in the JAAS config).
    pub plain_users: BTreeMap<String, Secret>,
}

/// One listener's security.
#[derive(Debug, Clone)]
pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    pub tls: Option<TlsSettings>,
    pub sasl: Option<SaslSettings>,
}

/// How this broker connects to the others' inter-broker listener (replica fetchers,
/// transaction markers, partition verification): TLS as a client, and a SASL login.
#[derive(Debug, Clone)]
pub struct InterBrokerClient {
    pub protocol: SecurityProtocol,
    /// CAs the other brokers' certificates chain to, the certificate this broker presents (its
    /// keystore on that listener), and whether the certificate must name the host
    /// (`ssl.endpoint.identification.algorithm=https`).
    pub tls: Option<ClientTlsSettings>,
    pub sasl: Option<oxbow_protocol::connection::SaslLogin>,
}

#[derive(Debug, Clone)]
pub struct ClientTlsSettings {
    pub prefix: String,
    pub truststore: Pem,
    pub key: Pem,
    pub chain: Pem,
    pub verify_hostname: bool,
}

#[derive(Debug, Clone)]
pub struct SecurityConfig {
    /// Every client listener by name.
    pub listeners: BTreeMap<String, ListenerSecurity>,
    /// The listener other brokers reach this one on (`None` on a controller-only node).
    pub inter_broker_listener: Option<String>,
    /// How to reach the other brokers on it.
    pub inter_broker_client: Option<InterBrokerClient>,
    /// TLS of the controller listener (metadata quorum traffic), served and dialled alike.
    pub controller_tls: Option<ClientTlsSettings>,
    /// `connections.max.reauth.ms` (0: sessions do not expire).
    pub reauth_ms: i64,
    pub failed_auth_delay_ms: u64,
    pub sasl_max_receive: usize,
}

type Values = BTreeMap<&'static str, Option<String>>;

fn invalid(key: impl Into<String>, value: &str, accepted: &str) -> ConfigError {
    ConfigError::Invalid { key: key.into(), value: value.into(), accepted: accepted.into() }
}

fn inconsistent(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Inconsistent { key: key.into(), reason: reason.into() }
}

/// `listener.name.<name>.` (Kafka lower-cases the listener name in these keys).
pub fn listener_prefix(name: &str) -> String {
    format!("listener.name.{}.", name.to_ascii_lowercase())
}

/// A key's value for one listener: its `listener.name.` override, else the broker-wide value.
/// Returns the key it came from too, for messages.
fn lookup(explicit: &BTreeMap<String, String>, values: &Values, prefix: &str, key: &str) -> Option<(String, String)> {
    let own = format!("{prefix}{key}");
    if let Some(v) = explicit.get(&own) {
        return Some((own, v.trim().to_string()));
    }
    values.get(key).cloned().flatten().map(|v| (key.to_string(), v))
}

/// Parses `listener.security.protocol.map`.
fn protocol_map(text: &str) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let key = "listener.security.protocol.map";
    let accepted = "NAME:PROTOCOL,... with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL";
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, proto) = entry.split_once(':').ok_or_else(|| invalid(key, text, accepted))?;
        let proto = SecurityProtocol::parse(proto).ok_or_else(|| invalid(key, text, accepted))?;
        out.insert(name.trim().to_string(), proto);
    }
    Ok(out)
}

pub fn parse(
    explicit: &BTreeMap<String, String>,
    values: &Values,
    client: &[Listener],
) -> Result<SecurityConfig, ConfigError> {
    let get = |k: &str| values.get(k).cloned().flatten();
    let map = protocol_map(&get("listener.security.protocol.map").unwrap_or_default())?;
    // The controller listener (the first of controller.listener.names, whether or not this node
    // hosts it: broker-only nodes dial it): PLAINTEXT, or SSL (always mutual).
    let controller_name = get("controller.listener.names").unwrap_or_default();
    let controller_name = controller_name.split(',').next().unwrap_or_default().trim();
    let controller_tls = match map.get(controller_name) {
        None | Some(SecurityProtocol::Plaintext) => None,
        Some(SecurityProtocol::Ssl) => {
            let prefix = listener_prefix(controller_name);
            let t = tls_settings(explicit, values, &prefix)?;
            let truststore = t.truststore.clone().ok_or_else(|| {
                inconsistent(
                    format!("{prefix}ssl.truststore.location"),
                    "TLS on the controller listener is mutual: every node needs the CA the others' certificates chain to",
                )
            })?;
            Some(ClientTlsSettings { prefix, truststore, key: t.key, chain: t.chain, verify_hostname: true })
        }
        Some(p) => {
            return Err(inconsistent(
                "listener.security.protocol.map",
                format!(
                    "controller listener {controller_name}: {} is not supported for controller traffic; use PLAINTEXT or SSL (mutual TLS)",
                    p.name()
                ),
            ));
        }
    };
    let mut listeners = BTreeMap::new();
    for l in client {
        let protocol = *map.get(&l.name).ok_or_else(|| {
            inconsistent(
                "listener.security.protocol.map",
                format!(
                    "listener {} has no security protocol: add {}:<PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL>",
                    l.name, l.name
                ),
            )
        })?;
        let prefix = listener_prefix(&l.name);
        let tls = if protocol.tls() { Some(tls_settings(explicit, values, &prefix)?) } else { None };
        let sasl = if protocol.sasl() { Some(sasl_settings(explicit, values, &prefix, &l.name)?) } else { None };
        listeners.insert(l.name.clone(), ListenerSecurity { protocol, tls, sasl });
    }
    let inter_broker_listener = if client.is_empty() {
        None
    } else {
        let (key, name) = match get("inter.broker.listener.name") {
            Some(n) => ("inter.broker.listener.name", n),
            None => ("security.inter.broker.protocol", get("security.inter.broker.protocol").unwrap_or_default()),
        };
        if !listeners.contains_key(&name) {
            return Err(inconsistent(
                key,
                format!(
                    "the inter-broker listener {name} is not among the client listeners ({}); set inter.broker.listener.name",
                    client.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        Some(name)
    };
    let inter_broker_client = match &inter_broker_listener {
        Some(name) => match listeners.get(name) {
            Some(sec) => Some(inter_broker_client(explicit, values, name, sec)?),
            None => None,
        },
        None => None,
    };
    let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or_default();
    Ok(SecurityConfig {
        listeners,
        inter_broker_listener,
        inter_broker_client,
        controller_tls,
        reauth_ms: int("connections.max.reauth.ms"),
        failed_auth_delay_ms: int("connection.failed.authentication.delay.ms") as u64,
        sasl_max_receive: int("sasl.server.max.receive.size") as usize,
    })
}

/// The client side of the inter-broker listener: its trust store and keystore, and the login of
/// `sasl.mechanism.inter.broker.protocol` from that mechanism's JAAS line (`username`,
/// `password`), as Kafka's brokers take them.
fn inter_broker_client(
    explicit: &BTreeMap<String, String>,
    values: &Values,
    name: &str,
    sec: &ListenerSecurity,
) -> Result<InterBrokerClient, ConfigError> {
    let prefix = listener_prefix(name);
    let tls = match &sec.tls {
        Some(t) => {
            let truststore = t.truststore.clone().ok_or_else(|| {
                inconsistent(
                    format!("{prefix}ssl.truststore.location"),
                    format!("the inter-broker listener {name} uses TLS: brokers need the CA certificates other brokers' certificates chain to"),
                )
            })?;
            let algo = lookup(explicit, values, &prefix, "ssl.endpoint.identification.algorithm").map(|(_, v)| v);
            Some(ClientTlsSettings {
                prefix: prefix.clone(),
                truststore,
                key: t.key.clone(),
                chain: t.chain.clone(),
                verify_hostname: algo.is_none_or(|a| a.eq_ignore_ascii_case("https")),
            })
        }
        None => None,
    };
    let sasl = match &sec.sasl {
        Some(settings) => {
            let (key, mech) =
                lookup(explicit, values, &prefix, "sasl.mechanism.inter.broker.protocol").unwrap_or_default();
            let mechanism = oxbow_protocol::connection::SaslMechanism::parse(&mech).ok_or_else(|| {
                inconsistent(
                    key.clone(),
                    format!("{mech} is not supported: the inter-broker listener {name} uses SASL; set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
                )
            })?;
            if !settings.mechanisms.iter().any(|m| m.name() == mechanism.name()) {
                return Err(inconsistent(
                    key,
                    format!("{mech} is not in the sasl.enabled.mechanisms of listener {name}"),
                ));
            }
            let jaas_key = format!("{prefix}{}.sasl.jaas.config", mechanism.name().to_ascii_lowercase());
            let text = explicit.get(&jaas_key).ok_or_else(|| {
                inconsistent(jaas_key.clone(), "the broker's own login for inter-broker traffic: ... required username=\"<user>\" password=\"<password>\";")
            })?;
            let (_, options) = parse_jaas(text).map_err(|reason| inconsistent(jaas_key.clone(), reason))?;
            let get = |k: &str| options.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let (Some(user), Some(password)) = (get("username"), get("password")) else {
                return Err(inconsistent(
                    jaas_key,
                    "username=\"...\" and password=\"...\" are needed for inter-broker logins",
                ));
            };
            Some(oxbow_protocol::connection::SaslLogin { mechanism, user: user.expose().to_string(), password })
        }
        None => None,
    };
    Ok(InterBrokerClient { protocol: sec.protocol, tls, sasl })
}

fn tls_settings(
    explicit: &BTreeMap<String, String>,
    values: &Values,
    prefix: &str,
) -> Result<TlsSettings, ConfigError> {
    let get = |k: &str| lookup(explicit, values, prefix, k);
    let pem_only = |k: &str| -> Result<(), ConfigError> {
        match get(k) {
            Some((key, v)) if v != "PEM" => Err(inconsistent(
                key,
                format!("{v} stores are not supported on TLS listeners; set it to PEM (PEM files or inline PEM)"),
            )),
            _ => Ok(()),
        }
    };
    let (key, chain) = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.key"),
        get("ssl.keystore.certificate.chain"),
    ) {
        (Some((_, path)), None, None) => (Pem::File(path.clone().into()), Pem::File(path.into())),
        (None, Some((_, k)), Some((_, c))) => (Pem::Inline(Secret::new(k)), Pem::Inline(Secret::new(c))),
        (None, None, None) => {
            return Err(inconsistent(
                format!("{prefix}ssl.keystore.location"),
                "a TLS listener needs its certificate and key: ssl.keystore.location (a PEM file with both), or ssl.keystore.key and ssl.keystore.certificate.chain",
            ));
        }
        _ => {
            return Err(inconsistent(
                "ssl.keystore.location",
                "set either ssl.keystore.location, or both ssl.keystore.key and ssl.keystore.certificate.chain",
            ));
        }
    };
    pem_only("ssl.keystore.type")?;
    if let Some((k, _)) = get("ssl.key.password") {
        return Err(inconsistent(
            k,
            "encrypted private keys are not supported yet: store the key unencrypted (PKCS#8) and guard the file",
        ));
    }
    let truststore = match (get("ssl.truststore.location"), get("ssl.truststore.certificates")) {
        (Some((_, p)), None) => Some(Pem::File(p.into())),
        (None, Some((_, c))) => Some(Pem::Inline(Secret::new(c))),
        (None, None) => None,
        _ => {
            return Err(inconsistent(
                "ssl.truststore.location",
                "set ssl.truststore.location or ssl.truststore.certificates, not both",
            ));
        }
    };
    if truststore.is_some() {
        pem_only("ssl.truststore.type")?;
    }
    let client_auth = match get("ssl.client.auth").map(|(_, v)| v).as_deref() {
        Some("required") => ClientAuth::Required,
        Some("requested") => ClientAuth::Requested,
        Some("none") | None => ClientAuth::None,
        Some(other) => {
            return Err(invalid(format!("{prefix}ssl.client.auth"), other, "one of: required, requested, none"));
        }
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        return Err(inconsistent(
            "ssl.truststore.location",
            "ssl.client.auth=required or requested needs the CAs client certificates are checked against",
        ));
    }
    let (rules_key, rules) =
        get("ssl.principal.mapping.rules").unwrap_or(("ssl.principal.mapping.rules".into(), "DEFAULT".into()));
    let principal_rules = PrincipalRules::parse(&rules).map_err(|reason| inconsistent(rules_key, reason))?;
    let (pkey, protocols) = get("ssl.enabled.protocols").unwrap_or_default();
    let mut tls12 = false;
    let mut tls13 = false;
    for p in protocols.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p {
            "TLSv1.2" => tls12 = true,
            "TLSv1.3" => tls13 = true,
            _ => return Err(invalid(pkey, &protocols, "a comma-separated list of TLSv1.2 and TLSv1.3")),
        }
    }
    if !tls12 && !tls13 {
        return Err(invalid(pkey, &protocols, "a comma-separated list of TLSv1.2 and TLSv1.3"));
    }
    Ok(TlsSettings { prefix: prefix.to_string(), key, chain, truststore, client_auth, principal_rules, tls12, tls13 })
}

fn sasl_settings(
    explicit: &BTreeMap<String, String>,
    values: &Values,
    prefix: &str,
    name: &str,
) -> Result<SaslSettings, ConfigError> {
    let (key, list) = lookup(explicit, values, prefix, "sasl.enabled.mechanisms").unwrap_or_default();
    let mut mechanisms = Vec::new();
    for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let parsed = SaslMechanism::parse(m).ok_or_else(|| {
            inconsistent(
                key.clone(),
                format!("SASL mechanism {m} is not supported on listener {name}: the accepted ones are PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"),
            )
        })?;
        if !mechanisms.contains(&parsed) {
            mechanisms.push(parsed);
        }
    }
    if mechanisms.is_empty() {
        return Err(inconsistent(key, format!("SASL listener {name} has no mechanism enabled")));
    }
    let mut plain_users = BTreeMap::new();
    if mechanisms.contains(&SaslMechanism::Plain) {
        let jaas_key = format!("{prefix}plain.sasl.jaas.config");
        let text = explicit.get(&jaas_key).ok_or_else(|| {
            inconsistent(
                jaas_key.clone(),
                "PLAIN needs its users: org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>=\"<password>\" ...;",
            )
        })?;
        let (module, options) = parse_jaas(text).map_err(|reason| inconsistent(jaas_key.clone(), reason))?;
        if module != "org.apache.kafka.common.security.plain.PlainLoginModule" {
            return Err(inconsistent(
                jaas_key,
                format!(
                    "{module} is not supported: PLAIN users come from org.apache.kafka.common.security.plain.PlainLoginModule"
                ),
            ));
        }
        for (k, v) in options {
            if let Some(user) = k.strip_prefix("user_") {
                plain_users.insert(user.to_string(), v);
            }
        }
    }
    Ok(SaslSettings { mechanisms, plain_users })
}

/// Parses one JAAS login module entry (`<class> <flag> key="value" ...;`) without evaluating
/// anything: its class and options.
pub fn parse_jaas(text: &str) -> Result<(String, Vec<(String, Secret)>), String> {
    let mut tokens = Vec::new();
    let mut chars = text.trim().chars().peekable();
    let mut ended = false;
    while let Some(&c) = chars.peek() {
        if ended {
            if c.is_whitespace() {
                chars.next();
                continue;
            }
            return Err("only one login module entry is supported".into());
        }
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            ';' => {
                chars.next();
                ended = true;
            }
            '=' => {
                chars.next();
                tokens.push(Token::Eq);
            }
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some('\\') => s.extend(chars.next()),
                        Some('"') => break,
                        Some(c) => s.push(c),
                        None => return Err("unterminated quoted value".into()),
                    }
                }
                tokens.push(Token::Word(s));
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || c == '=' || c == ';' || c == '"' {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(s));
            }
        }
    }
    if !ended {
        return Err("the entry must end with ';'".into());
    }
    let mut it = tokens.into_iter();
    let module = match it.next() {
        Some(Token::Word(m)) => m,
        _ => return Err("expected a login module class".into()),
    };
    match it.next() {
        Some(Token::Word(f)) if ["required", "requisite", "sufficient", "optional"].contains(&f.as_str()) => {}
        _ => return Err("expected a control flag (required, requisite, sufficient or optional)".into()),
    }
    let mut options = Vec::new();
    loop {
        match (it.next(), it.next(), it.next()) {
            (None, _, _) => break,
            (Some(Token::Word(k)), Some(Token::Eq), Some(Token::Word(v))) => options.push((k, Secret::new(v))),
            _ => return Err("expected key=\"value\" options".into()),
        }
    }
    Ok((module, options))
}

enum Token {
    Word(String),
    Eq,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn jaas_entries_parse_and_print_no_password() {
        let (m, o) = parse_jaas(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a;b" user_admin="a;b" user_bob="p\"w" user_carol=plain;"#,
        )
        .unwrap();
        assert_eq!(m, "org.apache.kafka.common.security.plain.PlainLoginModule");
        let o: Vec<(String, String)> = o.into_iter().map(|(k, v)| (k, v.expose().to_string())).collect();
        assert_eq!(o[2], ("user_admin".to_string(), "a;b".to_string()));
        assert_eq!(o[3], ("user_bob".to_string(), "p\"w".to_string()));
        assert_eq!(o[4], ("user_carol".to_string(), "plain".to_string()));
        for bad in ["", "x required", "x bogus;", "x required a=;", "x required a=\"b;", "x required; y required;"] {
            assert!(parse_jaas(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn protocol_map_is_checked() {
        assert!(protocol_map("A:SSL,B:SASL_SSL").is_ok_and(|m| m["B"] == SecurityProtocol::SaslSsl));
        assert!(protocol_map("A:TLS").is_err());
        assert!(protocol_map("A").is_err());
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        let m = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        match crate::config::BrokerConfig::from_map(m) {
            Ok(_) => panic!("accepted: {pairs:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_security_settings_stop_startup_naming_the_key() {
        let two = ("listeners", "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093");
        let e = refused(&[("listeners", "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093")]);
        assert!(e.contains("listener.security.protocol.map") && e.contains("INTERNAL"), "{e}");
        let e = refused(&[two]);
        assert!(e.contains("listener.name.ssl.ssl.keystore.location"), "{e}");
        let e = refused(&[two, ("ssl.keystore.location", "/k.pem")]);
        assert!(e.contains("ssl.keystore.type") && e.contains("PEM"), "{e}");
        let sasl = ("listeners", "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093");
        let e = refused(&[sasl]);
        assert!(e.contains("sasl.enabled.mechanisms") && e.contains("GSSAPI"), "{e}");
        let e = refused(&[sasl, ("sasl.enabled.mechanisms", "PLAIN")]);
        assert!(e.contains("listener.name.sasl_plaintext.plain.sasl.jaas.config"), "{e}");
        let e = refused(&[
            sasl,
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
            ("inter.broker.listener.name", "SASL_PLAINTEXT"),
        ]);
        assert!(e.contains("sasl.mechanism.inter.broker.protocol"), "{e}");
        let e = refused(&[
            two,
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/k.pem"),
            ("ssl.key.password", "x"),
        ]);
        assert!(e.contains("ssl.key.password") && e.contains("encrypted"), "{e}");
        let e = refused(&[("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL")]);
        assert!(e.contains("controller listener CONTROLLER") && e.contains("SSL"), "{e}");
        let e = refused(&[
            two,
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/k.pem"),
            ("listener.name.ssl.ssl.client.auth", "sometimes"),
        ]);
        assert!(e.contains("listener.name.ssl.ssl.client.auth"), "{e}");
    }

    #[test]
    fn listeners_get_their_own_settings_and_inter_broker_credentials() {
        let m = [
            ("listeners", "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094"),
            ("inter.broker.listener.name", "SASL_SSL"),
            ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
            ("listener.name.sasl_ssl.sasl.enabled.mechanisms", "PLAIN"),
            (
                "listener.name.sasl_ssl.plain.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="pw" user_broker="pw";"#,
            ),
            ("ssl.keystore.type", "PEM"),
            ("listener.name.sasl_ssl.ssl.keystore.location", "/tls/node.pem"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/tls/ca.pem"),
            ("ssl.endpoint.identification.algorithm", ""),
        ];
        let c = crate::config::BrokerConfig::from_map(m.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
            .unwrap();
        assert!(c.unknown.is_empty(), "{:?}", c.unknown);
        let l = &c.security.listeners["SASL_SSL"];
        assert_eq!(l.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(l.tls.as_ref().unwrap().key, Pem::File("/tls/node.pem".into()));
        assert_eq!(l.sasl.as_ref().unwrap().plain_users.len(), 1);
        let ib = c.security.inter_broker_client.unwrap();
        let login = ib.sasl.unwrap();
        assert_eq!((login.user.as_str(), login.password.expose()), ("broker", "pw"));
        assert!(!ib.tls.unwrap().verify_hostname);
        assert!(!format!("{:?}", c.security.listeners).contains("pw"), "a password printed");
    }
}
