//! CreateAcls, DescribeAcls and DeleteAcls: Kafka's ACL bindings and filters over the ACLs in
//! the metadata log (any broker forwards changes to the active controller). Without an
//! authorizer every one answers SECURITY_DISABLED, as Kafka.

use oxbow_meta::Command;
use oxbow_meta::acl::{Acl, Operation, PatternType, ResourceType};
use oxbow_protocol::messages::create_acls_response::AclCreationResult;
use oxbow_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use oxbow_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use oxbow_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use uuid::Uuid;

use super::Ctx;
use super::util::s;
use crate::errors::BrokerError;
use crate::security::authorizer::CLUSTER_NAME;

const ANY: i8 = 1;
const MATCH: i8 = 2;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn disabled() -> BrokerError {
    BrokerError::SecurityDisabled("No Authorizer is configured.".into())
}

/// What a DescribeAcls or DeleteAcls filter selects (Kafka's `AclBindingFilter`).
struct Filter {
    resource_type: Option<ResourceType>,
    name: Option<String>,
    /// ANY, MATCH, LITERAL or PREFIXED.
    pattern: i8,
    principal: Option<String>,
    host: Option<String>,
    operation: Option<Operation>,
    permission: Option<bool>,
}

impl Filter {
    #[allow(clippy::too_many_arguments)]
    fn new(
        rt: i8,
        name: Option<&str>,
        pattern: i8,
        principal: Option<&str>,
        host: Option<&str>,
        op: i8,
        permission: i8,
    ) -> Result<Filter, BrokerError> {
        let bad = |what: &str| BrokerError::InvalidRequest(format!("Invalid {what} in the ACL filter"));
        let resource_type = match rt {
            ANY => None,
            c => Some(ResourceType::from_code(c).ok_or_else(|| bad("resource type"))?),
        };
        if !(ANY..=4).contains(&pattern) {
            return Err(bad("pattern type"));
        }
        let operation = match op {
            ANY => None,
            c => Some(Operation::from_code(c).ok_or_else(|| bad("operation"))?),
        };
        let permission = match permission {
            ANY => None,
            DENY => Some(false),
            ALLOW => Some(true),
            _ => return Err(bad("permission type")),
        };
        Ok(Filter {
            resource_type,
            name: name.map(String::from),
            pattern,
            principal: principal.map(String::from),
            host: host.map(String::from),
            operation,
            permission,
        })
    }

    fn matches(&self, a: &Acl) -> bool {
        let name_ok = match (self.pattern, &self.name) {
            (ANY, None) => true,
            (ANY, Some(n)) => &a.name == n,
            (MATCH, None) => true,
            (MATCH, Some(n)) => a.covers(n),
            (p, n) => PatternType::from_code(p) == Some(a.pattern) && n.as_ref().is_none_or(|n| &a.name == n),
        };
        name_ok
            && self.resource_type.is_none_or(|t| t == a.resource_type)
            && self.principal.as_ref().is_none_or(|p| p == &a.principal)
            && self.host.as_ref().is_none_or(|h| h == &a.host)
            && self.operation.is_none_or(|o| o == a.operation)
            && self.permission.is_none_or(|p| p == a.allow)
    }
}

fn permission_code(allow: bool) -> i8 {
    if allow { ALLOW } else { DENY }
}

/// A binding from CreateAcls, checked as Kafka's controller checks it.
fn binding(c: &oxbow_protocol::messages::create_acls_request::AclCreation) -> Result<Acl, BrokerError> {
    let bad = |m: &str| BrokerError::InvalidRequest(m.to_string());
    let resource_type = ResourceType::from_code(c.resource_type).ok_or_else(|| bad("Invalid resource type"))?;
    let pattern = PatternType::from_code(c.resource_pattern_type).ok_or_else(|| bad("Invalid pattern type"))?;
    let operation = Operation::from_code(c.operation).ok_or_else(|| bad("Invalid operation"))?;
    let allow = match c.permission_type {
        DENY => false,
        ALLOW => true,
        _ => return Err(bad("Invalid permission type")),
    };
    let name = c.resource_name.to_string();
    if name.is_empty() {
        return Err(bad("Resource name should not be empty"));
    }
    if resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
        return Err(bad("The only valid name for the CLUSTER resource is kafka-cluster"));
    }
    let principal = c.principal.to_string();
    if !principal.split_once(':').is_some_and(|(t, n)| !t.is_empty() && !n.is_empty()) {
        return Err(bad(&format!("Could not parse principal from `{principal}` (no colon is found)")));
    }
    let host = c.host.to_string();
    if host.is_empty() {
        return Err(bad("Invalid host"));
    }
    Ok(Acl { resource_type, name, pattern, principal, host, operation, allow })
}

pub async fn create(ctx: &Ctx<'_>, req: CreateAclsRequest) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    let whole =
        if !ctx.broker.authorizer.enabled() { Some(disabled()) } else { ctx.check_cluster(Operation::Alter).err() };
    let mut checked: Vec<Result<Acl, BrokerError>> = req
        .creations
        .iter()
        .map(|c| match &whole {
            Some(e) => Err(e.clone()),
            None => binding(c),
        })
        .collect();
    let valid: Vec<(Uuid, Acl)> = checked.iter().flatten().map(|a| (Uuid::new_v4(), a.clone())).collect();
    if !valid.is_empty()
        && let Err(e) = ctx.broker.controller.execute(Command::CreateAcls { acls: valid }).await
    {
        for r in checked.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(e.clone());
        }
    }
    for r in checked {
        let mut out = AclCreationResult::default();
        if let Err(e) = r {
            out.error_code = e.code();
            out.error_message = Some(s(e.message()));
        }
        resp.results.push(out);
    }
    resp
}

pub async fn describe(ctx: &Ctx<'_>, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    let filter = if !ctx.broker.authorizer.enabled() {
        Err(disabled())
    } else {
        ctx.check_cluster(Operation::Describe).and_then(|()| {
            Filter::new(
                req.resource_type_filter,
                req.resource_name_filter.as_deref(),
                req.pattern_type_filter,
                req.principal_filter.as_deref(),
                req.host_filter.as_deref(),
                req.operation,
                req.permission_type,
            )
        })
    };
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            resp.error_code = e.code();
            resp.error_message = Some(s(e.message()));
            return resp;
        }
    };
    let image = ctx.broker.image();
    let mut by_resource: std::collections::BTreeMap<(i8, String, i8), Vec<AclDescription>> = Default::default();
    for a in image.acls.values().filter(|a| filter.matches(a)) {
        let mut d = AclDescription::default();
        d.principal = s(a.principal.clone());
        d.host = s(a.host.clone());
        d.operation = a.operation.code();
        d.permission_type = permission_code(a.allow);
        by_resource.entry((a.resource_type.code(), a.name.clone(), a.pattern.code())).or_default().push(d);
    }
    for ((rt, name, pattern), acls) in by_resource {
        let mut r = DescribeAclsResource::default();
        r.resource_type = rt;
        r.resource_name = s(name);
        r.pattern_type = pattern;
        r.acls = acls;
        resp.resources.push(r);
    }
    resp
}

pub async fn delete(ctx: &Ctx<'_>, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    let whole =
        if !ctx.broker.authorizer.enabled() { Some(disabled()) } else { ctx.check_cluster(Operation::Alter).err() };
    let image = ctx.broker.image();
    let mut results: Vec<Result<Vec<(Uuid, Acl)>, BrokerError>> = Vec::new();
    for f in &req.filters {
        let r = match &whole {
            Some(e) => Err(e.clone()),
            None => Filter::new(
                f.resource_type_filter,
                f.resource_name_filter.as_deref(),
                f.pattern_type_filter,
                f.principal_filter.as_deref(),
                f.host_filter.as_deref(),
                f.operation,
                f.permission_type,
            )
            .map(|filter| {
                image.acls.iter().filter(|(_, a)| filter.matches(a)).map(|(id, a)| (*id, a.clone())).collect()
            }),
        };
        results.push(r);
    }
    let ids: Vec<Uuid> = results.iter().flatten().flatten().map(|(id, _)| *id).collect();
    if !ids.is_empty()
        && let Err(e) = ctx.broker.controller.execute(Command::DeleteAcls { ids }).await
    {
        for r in results.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(e.clone());
        }
    }
    for r in results {
        let mut out = DeleteAclsFilterResult::default();
        match r {
            Err(e) => {
                out.error_code = e.code();
                out.error_message = Some(s(e.message()));
            }
            Ok(deleted) => {
                out.matching_acls = deleted
                    .into_iter()
                    .map(|(_, a)| {
                        let mut m = DeleteAclsMatchingAcl::default();
                        m.resource_type = a.resource_type.code();
                        m.resource_name = s(a.name);
                        m.pattern_type = a.pattern.code();
                        m.principal = s(a.principal);
                        m.host = s(a.host);
                        m.operation = a.operation.code();
                        m.permission_type = permission_code(a.allow);
                        m
                    })
                    .collect()
            }
        }
        resp.filter_results.push(out);
    }
    resp
}
