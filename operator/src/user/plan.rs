//! What a `User` should be, as pure functions: its ACL bindings in Kafka's codes (and what to
//! create and delete to get there), its password, and the client settings in its Secret.

use crate::cluster::listeners::Listener;
use crate::crd::{AclOperation, AclPatternType, AclResourceType, AclType, AuthenticationType, User};
use crate::kafka::AclBinding;

/// The Kafka principal of a user: `User:<resource name>`.
pub fn principal(user: &User) -> String {
    format!("User:{}", user.metadata.name.clone().unwrap_or_default())
}

fn resource_code(t: AclResourceType) -> i8 {
    match t {
        AclResourceType::Topic => 2,
        AclResourceType::Group => 3,
        AclResourceType::Cluster => 4,
        AclResourceType::TransactionalId => 5,
    }
}

fn operation_code(o: AclOperation) -> i8 {
    match o {
        AclOperation::All => 2,
        AclOperation::Read => 3,
        AclOperation::Write => 4,
        AclOperation::Create => 5,
        AclOperation::Delete => 6,
        AclOperation::Alter => 7,
        AclOperation::Describe => 8,
        AclOperation::ClusterAction => 9,
        AclOperation::DescribeConfigs => 10,
        AclOperation::AlterConfigs => 11,
        AclOperation::IdempotentWrite => 12,
    }
}

/// Every binding the spec asks for, sorted, without repeats.
pub fn bindings(user: &User) -> Vec<AclBinding> {
    let who = principal(user);
    let mut out: Vec<AclBinding> = user
        .spec
        .acls
        .iter()
        .flat_map(|rule| {
            let r = &rule.resource;
            let name = match r.type_ {
                AclResourceType::Cluster => "kafka-cluster".to_string(),
                _ => r.name.clone().unwrap_or_else(|| "*".into()),
            };
            let pattern = match (r.type_, r.pattern_type) {
                (AclResourceType::Cluster, _) | (_, AclPatternType::Literal) => 3,
                (_, AclPatternType::Prefix) => 4,
            };
            let permission = if rule.type_ == AclType::Deny { 2 } else { 3 };
            let who = who.clone();
            rule.operations.iter().map(move |op| AclBinding {
                resource_type: resource_code(r.type_),
                resource_name: name.clone(),
                pattern_type: pattern,
                principal: who.clone(),
                host: rule.host.clone(),
                operation: operation_code(*op),
                permission,
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// (to create, to delete) to turn `have` into `want`.
pub fn diff(want: &[AclBinding], have: &[AclBinding]) -> (Vec<AclBinding>, Vec<AclBinding>) {
    let create = want.iter().filter(|a| !have.contains(a)).cloned().collect();
    let delete = have.iter().filter(|a| !want.contains(a)).cloned().collect();
    (create, delete)
}

/// A new password: 32 letters and digits (190 bits).
pub fn new_password() -> Result<String, String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let bytes = oxbow_protocol::scram::random_bytes(64).map_err(|e| e.to_string())?;
    // Rejection sampling keeps every character equally likely.
    let limit = 256 - 256 % ALPHABET.len();
    let out: String = bytes
        .iter()
        .filter(|b| usize::from(**b) < limit)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .take(32)
        .collect();
    if out.len() < 32 { Err("not enough random bytes".into()) } else { Ok(out) }
}

/// The listener a user of this authentication connects to: the first with it.
pub fn listener_for(listeners: &[Listener], auth: AuthenticationType) -> Option<&Listener> {
    listeners.iter().find(|l| match auth {
        AuthenticationType::ScramSha512 => l.sasl == Some("SCRAM-SHA-512"),
        AuthenticationType::Tls => l.client_certificates,
    })
}

/// A `.properties` value: backslashes, and line breaks as `\n` (java.util.Properties reads them
/// back), so a PEM block fits on one line.
fn value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// The JAAS line of a SCRAM login.
pub fn jaas(user: &str, password: &str) -> String {
    format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{password}\";"
    )
}

/// What the user's credentials are, for [`client_properties`].
pub enum Credentials<'a> {
    Scram { password: &'a str },
    Tls { cert: &'a str, key: &'a str },
}

/// A ready-made `client.properties` for Kafka's Java clients and tools
/// (`--command-config` / `--producer.config`): bootstrap address, protocol, the login, and the
/// CA to trust, with PEM inline.
pub fn client_properties(bootstrap: &str, listener: &Listener, user: &str, creds: &Credentials, ca: &str) -> String {
    let mut p = vec![format!("bootstrap.servers={bootstrap}"), format!("security.protocol={}", listener.protocol)];
    match creds {
        Credentials::Scram { password } => {
            p.push("sasl.mechanism=SCRAM-SHA-512".into());
            p.push(format!("sasl.jaas.config={}", value(&jaas(user, password))));
        }
        Credentials::Tls { cert, key } => {
            p.push("ssl.keystore.type=PEM".into());
            p.push(format!("ssl.keystore.certificate.chain={}", value(cert)));
            p.push(format!("ssl.keystore.key={}", value(key)));
        }
    }
    if listener.protocol.ends_with("SSL") {
        p.push("ssl.truststore.type=PEM".into());
        p.push(format!("ssl.truststore.certificates={}", value(ca)));
    }
    p.push(String::new());
    p.join("\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::crd::{AclResource, AclRule, Authentication, UserSpec};

    fn user(acls: Vec<AclRule>) -> User {
        User::new(
            "alice",
            UserSpec {
                cluster: "c".into(),
                authentication: Authentication { type_: AuthenticationType::ScramSha512 },
                acls,
            },
        )
    }

    fn rule(t: AclResourceType, name: Option<&str>, p: AclPatternType, ops: Vec<AclOperation>, ty: AclType) -> AclRule {
        AclRule {
            resource: AclResource { type_: t, name: name.map(str::to_string), pattern_type: p },
            operations: ops,
            host: "*".into(),
            type_: ty,
        }
    }

    #[test]
    fn rules_become_kafka_bindings() {
        let u = user(vec![
            rule(
                AclResourceType::Topic,
                Some("orders"),
                AclPatternType::Literal,
                vec![AclOperation::Read, AclOperation::Describe],
                AclType::Allow,
            ),
            rule(
                AclResourceType::Group,
                Some("app-"),
                AclPatternType::Prefix,
                vec![AclOperation::Read],
                AclType::Allow,
            ),
            rule(
                AclResourceType::Cluster,
                None,
                AclPatternType::Prefix,
                vec![AclOperation::IdempotentWrite],
                AclType::Deny,
            ),
            rule(
                AclResourceType::Topic,
                Some("orders"),
                AclPatternType::Literal,
                vec![AclOperation::Read],
                AclType::Allow,
            ),
        ]);
        let b = bindings(&u);
        let short: Vec<(i8, &str, i8, i8, i8)> = b
            .iter()
            .map(|a| (a.resource_type, a.resource_name.as_str(), a.pattern_type, a.operation, a.permission))
            .collect();
        assert_eq!(
            short,
            vec![(2, "orders", 3, 3, 3), (2, "orders", 3, 8, 3), (3, "app-", 4, 3, 3), (4, "kafka-cluster", 3, 12, 2)]
        );
        assert!(b.iter().all(|a| a.principal == "User:alice" && a.host == "*"));
        let (create, delete) = diff(&b[1..], &b[..2]);
        assert_eq!(create, b[2..].to_vec());
        assert_eq!(delete, vec![b[0].clone()]);
    }

    #[test]
    fn passwords_are_long_and_different() {
        let a = new_password().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, new_password().unwrap());
    }

    #[test]
    fn client_properties_carry_pem_on_one_line() {
        let l = Listener {
            name: "TLS".into(),
            port: 9093,
            protocol: "SASL_SSL",
            client_certificates: false,
            sasl: Some("SCRAM-SHA-512"),
        };
        let p = client_properties(
            "b:9093",
            &l,
            "alice",
            &Credentials::Scram { password: "pw" },
            "-----BEGIN X-----\nAA\n-----END X-----\n",
        );
        assert!(p.contains("security.protocol=SASL_SSL\n"));
        assert!(p.contains("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"pw\";\n"));
        assert!(p.contains("ssl.truststore.certificates=-----BEGIN X-----\\nAA\\n-----END X-----\\n\n"));
        assert_eq!(p.lines().count(), 6);
    }
}
