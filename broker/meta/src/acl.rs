//! ACLs as Kafka's StandardAuthorizer holds them: bindings of a resource pattern to an access
//! control entry (principal, host, operation, allow or deny), stored in the metadata log and
//! matched here without I/O. The broker's authorizer (`oxbow_server::security::authorizer`)
//! adds `super.users` and `allow.everyone.if.no.acl.found` on top of [`AclIndex::decide`].

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Kafka's `ResourceType` (wire codes 2 to 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub const ALL: [ResourceType; 6] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
        ResourceType::DelegationToken,
        ResourceType::User,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }

    pub fn from_code(c: i8) -> Option<ResourceType> {
        Self::ALL.into_iter().find(|t| t.code() == c)
    }
}

/// Kafka's `PatternType` of a binding: LITERAL (3) or PREFIXED (4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(c: i8) -> Option<PatternType> {
        match c {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's `AclOperation` (wire codes 2 to 14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
}

impl Operation {
    pub const EVERY: [Operation; 13] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
    ];

    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
        }
    }

    pub fn from_code(c: i8) -> Option<Operation> {
        Self::EVERY.into_iter().find(|o| o.code() == c)
    }

    /// Whether an ALLOW of `self` grants `op`: ALL grants everything, READ, WRITE, DELETE and
    /// ALTER grant DESCRIBE, ALTER_CONFIGS grants DESCRIBE_CONFIGS (Kafka's implied operations).
    pub fn allows(self, op: Operation) -> bool {
        self == op
            || self == Operation::All
            || (op == Operation::Describe
                && matches!(self, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
            || (op == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY of `self` refuses `op` (no implication for denials, as Kafka).
    pub fn denies(self, op: Operation) -> bool {
        self == op || self == Operation::All
    }
}

/// One ACL: Kafka's `AclBinding` (a resource pattern and an access control entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Acl {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    /// `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// An IP address, or `*` for any.
    pub host: String,
    pub operation: Operation,
    /// True for ALLOW (3), false for DENY (2).
    pub allow: bool,
}

impl Acl {
    /// Whether this binding's pattern covers the resource `name`.
    pub fn covers(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.name == name || self.name == "*",
            PatternType::Prefixed => name.starts_with(&self.name),
        }
    }
}

/// The ACLs of an image, indexed for matching.
#[derive(Debug, Default, Clone)]
pub struct AclIndex {
    literal: HashMap<(ResourceType, String), Vec<Acl>>,
    prefixed: HashMap<ResourceType, Vec<Acl>>,
}

/// What the ACLs say about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
    /// No ACL names the resource at all (`allow.everyone.if.no.acl.found` decides).
    NoAcl,
}

impl Decision {
    /// ALLOWED if an ALLOW matched, else DENIED if any binding named the resource, else NO_ACL.
    fn of(allowed: bool, any: bool) -> Decision {
        match (allowed, any) {
            (true, _) => Decision::Allowed,
            (false, true) => Decision::Denied,
            (false, false) => Decision::NoAcl,
        }
    }
}

impl AclIndex {
    pub fn new<'a>(acls: impl IntoIterator<Item = &'a Acl>) -> AclIndex {
        let mut ix = AclIndex::default();
        for a in acls {
            match a.pattern {
                PatternType::Literal => {
                    ix.literal.entry((a.resource_type, a.name.clone())).or_default().push(a.clone())
                }
                PatternType::Prefixed => ix.prefixed.entry(a.resource_type).or_default().push(a.clone()),
            }
        }
        ix
    }

    /// Kafka's StandardAuthorizer rule: a matching DENY refuses, else a matching ALLOW grants;
    /// `NoAcl` when no binding covers the resource (whatever its principal or operation).
    pub fn decide(&self, principal: &str, host: &str, op: Operation, rt: ResourceType, name: &str) -> Decision {
        let mut any = false;
        let mut allowed = false;
        let literal = [name, "*"].into_iter().filter_map(|n| self.literal.get(&(rt, n.to_string()))).flatten();
        let prefixed = self.prefixed.get(&rt).into_iter().flatten().filter(|a| a.covers(name));
        for a in literal.chain(prefixed) {
            any = true;
            if !(a.principal == principal || a.principal == "User:*") || !(a.host == host || a.host == "*") {
                continue;
            }
            if !a.allow && a.operation.denies(op) {
                return Decision::Denied;
            }
            if a.allow && a.operation.allows(op) {
                allowed = true;
            }
        }
        Decision::of(allowed, any)
    }

    /// Whether some resource of type `rt` is open to `op` for the principal: an ALLOW that
    /// matches it, unless a DENY covers every such resource (LITERAL `*` or PREFIXED ``), as
    /// Kafka's `authorizeByResourceType`.
    pub fn decide_any(&self, principal: &str, host: &str, op: Operation, rt: ResourceType) -> Decision {
        let all = self
            .literal
            .iter()
            .filter(|((t, _), _)| *t == rt)
            .flat_map(|(_, v)| v)
            .chain(self.prefixed.get(&rt).into_iter().flatten());
        let mut any = false;
        let mut allowed = false;
        for a in all {
            any = true;
            if !(a.principal == principal || a.principal == "User:*") || !(a.host == host || a.host == "*") {
                continue;
            }
            let everything = (a.pattern == PatternType::Literal && a.name == "*")
                || (a.pattern == PatternType::Prefixed && a.name.is_empty());
            if !a.allow && a.operation.denies(op) && everything {
                return Decision::Denied;
            }
            if a.allow && a.operation.allows(op) {
                allowed = true;
            }
        }
        Decision::of(allowed, any)
    }
}

/// The image's ACLs by id.
pub type Acls = BTreeMap<Uuid, Acl>;

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: ResourceType, name: &str, pattern: PatternType, principal: &str, op: Operation, allow: bool) -> Acl {
        Acl {
            resource_type: rt,
            name: name.into(),
            pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            allow,
        }
    }

    #[test]
    fn kafkas_rules() {
        use Operation::*;
        use PatternType::*;
        use ResourceType::*;
        let acls = vec![
            acl(Topic, "orders", Literal, "User:alice", Read, true),
            acl(Topic, "pre-", Prefixed, "User:bob", Write, true),
            acl(Topic, "pre-secret", Literal, "User:bob", All, false),
            acl(Group, "*", Literal, "User:*", Read, true),
            acl(Cluster, "kafka-cluster", Literal, "User:carol", AlterConfigs, true),
        ];
        let ix = AclIndex::new(&acls);
        let d = |p: &str, op, rt, n: &str| ix.decide(p, "127.0.0.1", op, rt, n);
        assert_eq!(d("User:alice", Read, Topic, "orders"), Decision::Allowed);
        assert_eq!(d("User:alice", Describe, Topic, "orders"), Decision::Allowed, "READ implies DESCRIBE");
        assert_eq!(d("User:alice", Write, Topic, "orders"), Decision::Denied);
        assert_eq!(d("User:bob", Read, Topic, "orders"), Decision::Denied);
        assert_eq!(d("User:alice", Read, Topic, "other"), Decision::NoAcl);
        assert_eq!(d("User:bob", Write, Topic, "pre-x"), Decision::Allowed);
        assert_eq!(d("User:bob", Write, Topic, "prex"), Decision::NoAcl);
        assert_eq!(d("User:bob", Write, Topic, "pre-secret"), Decision::Denied, "DENY overrides ALLOW");
        assert_eq!(d("User:anyone", Read, Group, "g"), Decision::Allowed);
        assert_eq!(d("User:carol", DescribeConfigs, Cluster, "kafka-cluster"), Decision::Allowed);
        assert_eq!(d("User:carol", Describe, Cluster, "kafka-cluster"), Decision::Denied);
        let mut host = acl(Topic, "h", Literal, "User:alice", Read, true);
        host.host = "10.0.0.1".into();
        let ix = AclIndex::new([&host]);
        assert_eq!(ix.decide("User:alice", "127.0.0.1", Read, Topic, "h"), Decision::Denied);
        assert_eq!(ix.decide("User:alice", "10.0.0.1", Read, Topic, "h"), Decision::Allowed);
    }
}
