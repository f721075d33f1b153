//! The admin calls a `User` needs: SCRAM credentials (AlterUserScramCredentials,
//! DescribeUserScramCredentials) and ACLs (CreateAcls, DescribeAcls, DeleteAcls), in Kafka's
//! codes.

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
};

use super::{Admin, KafkaError, check, sb};

/// Kafka's id of SCRAM-SHA-512 in the SCRAM credential APIs.
pub const SCRAM_SHA_512: i8 = 2;
/// Kafka's RESOURCE_NOT_FOUND (DescribeUserScramCredentials of a user without credentials).
const RESOURCE_NOT_FOUND: i16 = 91;
/// Kafka's ANY in ACL filters (resource type, pattern type, operation, permission).
const ANY: i8 = 1;

/// One ACL binding, in Kafka's codes (resource type 2 TOPIC .. 5 TRANSACTIONAL_ID, pattern 3
/// LITERAL / 4 PREFIXED, operation 2 ALL .. 12 IDEMPOTENT_WRITE, permission 2 DENY / 3 ALLOW).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl Admin {
    /// Sets `user`'s SCRAM-SHA-512 credential from its salted password.
    pub async fn upsert_scram(
        &mut self,
        user: &str,
        iterations: i32,
        salt: Vec<u8>,
        salted: Vec<u8>,
    ) -> Result<(), KafkaError> {
        let mut u = ScramCredentialUpsertion::default();
        u.name = sb(user);
        u.mechanism = SCRAM_SHA_512;
        u.iterations = iterations;
        u.salt = salt.into();
        u.salted_password = salted.into();
        let mut req = AlterUserScramCredentialsRequest::default();
        req.upsertions = vec![u];
        let resp = self.send(0, &req).await?;
        for r in resp.results {
            check("set SCRAM credential of", user, r.error_code, r.error_message, &[])?;
        }
        Ok(())
    }

    /// Removes `user`'s SCRAM-SHA-512 credential (none is fine).
    pub async fn delete_scram(&mut self, user: &str) -> Result<(), KafkaError> {
        let mut d = ScramCredentialDeletion::default();
        d.name = sb(user);
        d.mechanism = SCRAM_SHA_512;
        let mut req = AlterUserScramCredentialsRequest::default();
        req.deletions = vec![d];
        let resp = self.send(0, &req).await?;
        for r in resp.results {
            // RESOURCE_NOT_FOUND: no such credential, which is what we wanted.
            check("delete SCRAM credential of", user, r.error_code, r.error_message, &[RESOURCE_NOT_FOUND])?;
        }
        Ok(())
    }

    /// Whether `user` has a SCRAM-SHA-512 credential.
    pub async fn has_scram(&mut self, user: &str) -> Result<bool, KafkaError> {
        let mut n = UserName::default();
        n.name = sb(user);
        let mut req = DescribeUserScramCredentialsRequest::default();
        req.users = Some(vec![n]);
        let resp = self.send(0, &req).await?;
        check("describe SCRAM credentials of", user, resp.error_code, resp.error_message, &[])?;
        let mut found = false;
        for r in resp.results {
            check("describe SCRAM credentials of", user, r.error_code, r.error_message, &[RESOURCE_NOT_FOUND])?;
            found |= r.credential_infos.iter().any(|c| c.mechanism == SCRAM_SHA_512);
        }
        Ok(found)
    }

    /// Every ACL binding of `principal`.
    pub async fn acls_of(&mut self, principal: &str) -> Result<Vec<AclBinding>, KafkaError> {
        let mut req = DescribeAclsRequest::default();
        // Every nullable filter explicitly: the message's defaults are empty strings, which
        // match nothing.
        req.resource_type_filter = ANY;
        req.resource_name_filter = None;
        req.pattern_type_filter = ANY;
        req.principal_filter = Some(sb(principal));
        req.host_filter = None;
        req.operation = ANY;
        req.permission_type = ANY;
        let resp = self.send(3, &req).await?;
        check("describe ACLs of", principal, resp.error_code, resp.error_message, &[])?;
        let mut out = Vec::new();
        for r in resp.resources {
            for a in r.acls {
                out.push(AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission: a.permission_type,
                });
            }
        }
        out.sort();
        Ok(out)
    }

    /// Creates ACL bindings.
    pub async fn create_acls(&mut self, acls: &[AclBinding]) -> Result<(), KafkaError> {
        if acls.is_empty() {
            return Ok(());
        }
        let mut req = CreateAclsRequest::default();
        req.creations = acls
            .iter()
            .map(|a| {
                let mut c = AclCreation::default();
                c.resource_type = a.resource_type;
                c.resource_name = sb(&a.resource_name);
                c.resource_pattern_type = a.pattern_type;
                c.principal = sb(&a.principal);
                c.host = sb(&a.host);
                c.operation = a.operation;
                c.permission_type = a.permission;
                c
            })
            .collect();
        let resp = self.send(3, &req).await?;
        for (r, a) in resp.results.into_iter().zip(acls) {
            check("create ACL for", &a.principal, r.error_code, r.error_message, &[])?;
        }
        Ok(())
    }

    /// Deletes exactly these ACL bindings.
    pub async fn delete_acls(&mut self, acls: &[AclBinding]) -> Result<(), KafkaError> {
        if acls.is_empty() {
            return Ok(());
        }
        let mut req = DeleteAclsRequest::default();
        req.filters = acls
            .iter()
            .map(|a| {
                let mut f = DeleteAclsFilter::default();
                f.resource_type_filter = a.resource_type;
                f.resource_name_filter = Some(sb(&a.resource_name));
                f.pattern_type_filter = a.pattern_type;
                f.principal_filter = Some(sb(&a.principal));
                f.host_filter = Some(sb(&a.host));
                f.operation = a.operation;
                f.permission_type = a.permission;
                f
            })
            .collect();
        let resp = self.send(3, &req).await?;
        for (r, a) in resp.filter_results.into_iter().zip(acls) {
            check("delete ACL of", &a.principal, r.error_code, r.error_message, &[])?;
        }
        Ok(())
    }
}
