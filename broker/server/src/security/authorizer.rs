//! The authorizer: Kafka's StandardAuthorizer rules (`oxbow_meta::acl`) over the ACLs of the
//! metadata image, plus `super.users` and `allow.everyone.if.no.acl.found`. Without
//! `authorizer.class.name` it allows everything. Handlers ask it through `handlers::access`.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use oxbow_meta::MetadataImage;
use oxbow_meta::acl::{AclIndex, Decision, Operation, ResourceType};
use parking_lot::Mutex;

use super::Session;
use crate::config::BrokerConfig;

/// The name of Kafka's one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

pub struct Authorizer {
    enabled: bool,
    super_users: HashSet<String>,
    allow_if_no_acl: bool,
    /// The index of the image's ACLs, rebuilt when its `acl_version` changes.
    index: Mutex<(u64, Arc<AclIndex>)>,
}

impl Authorizer {
    pub fn new(config: &BrokerConfig) -> Authorizer {
        let get = |k: &str| config.values.get(k).cloned().flatten().unwrap_or_default();
        Authorizer {
            enabled: !get("authorizer.class.name").is_empty(),
            super_users: get("super.users")
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            allow_if_no_acl: get("allow.everyone.if.no.acl.found") == "true",
            index: Mutex::new((0, Arc::new(AclIndex::default()))),
        }
    }

    /// Whether ACLs are checked at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn index(&self, image: &MetadataImage) -> Arc<AclIndex> {
        let mut ix = self.index.lock();
        if ix.0 != image.acl_version || (image.acl_version == 0 && !image.acls.is_empty()) {
            *ix = (image.acl_version, Arc::new(AclIndex::new(image.acls.values())));
        }
        ix.1.clone()
    }

    /// Super users and a disabled authorizer allow everything; otherwise `decide`'s answer,
    /// with `allow.everyone.if.no.acl.found` for a resource no ACL names.
    fn check(
        &self,
        session: &Session,
        decide: impl FnOnce(&AclIndex, &str) -> Decision,
        image: &MetadataImage,
    ) -> bool {
        let principal = session.principal.to_string();
        if !self.enabled || self.super_users.contains(&principal) {
            return true;
        }
        match decide(&self.index(image), &principal) {
            Decision::Allowed => true,
            Decision::Denied => false,
            Decision::NoAcl => self.allow_if_no_acl,
        }
    }

    /// Whether `session`, connected from `host`, may do `op` on the resource.
    pub fn authorize(
        &self,
        image: &MetadataImage,
        session: &Session,
        host: IpAddr,
        op: Operation,
        rt: ResourceType,
        name: &str,
    ) -> bool {
        self.check(session, |ix, principal| ix.decide(principal, &host.to_string(), op, rt, name), image)
    }

    /// Whether `session` may do `op` on some resource of type `rt` (Kafka's
    /// `authorizeByResourceType`: an idempotent producer needs WRITE on any topic).
    pub fn authorize_any(
        &self,
        image: &MetadataImage,
        session: &Session,
        host: IpAddr,
        op: Operation,
        rt: ResourceType,
    ) -> bool {
        self.check(session, |ix, principal| ix.decide_any(principal, &host.to_string(), op, rt), image)
    }
}
