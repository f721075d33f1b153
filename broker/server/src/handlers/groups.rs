//! Consumer group APIs (classic protocol; KIP-848's are in `consumer_groups`): FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, and the admin side: ListGroups, DescribeGroups, DeleteGroups. The decisions are
//! the coordinator's ([`crate::coordinator`]); this module translates the wire messages.

use oxbow_group::classic::{JoinRequest, JoinResponse, SyncRequest, SyncResponse};
use oxbow_group::{GroupError, GroupState, answer_code, code_of};
use oxbow_protocol::messages::delete_groups_response::DeletableGroupResult;
use oxbow_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use oxbow_protocol::messages::find_coordinator_response::Coordinator as FoundCoordinator;
use oxbow_protocol::messages::join_group_response::JoinGroupResponseMember;
use oxbow_protocol::messages::leave_group_response::MemberResponse;
use oxbow_protocol::messages::list_groups_response::ListedGroup;
use oxbow_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest,
    SyncGroupResponse,
};

use oxbow_meta::acl::{Operation, ResourceType};

use super::Ctx;
use super::access::GROUP_OPERATIONS;
use super::util::{OPERATIONS_NOT_REQUESTED, s};
use crate::errors::BrokerError;

/// One FindCoordinator answer: (node, host, port, error, message).
async fn find_one(ctx: &Ctx<'_>, key: &str, key_type: i8) -> FoundCoordinator {
    let mut c = FoundCoordinator::default();
    c.key = s(key);
    c.node_id = BrokerId(-1);
    c.port = -1;
    let fail = |mut c: FoundCoordinator, e: BrokerError| {
        c.error_code = e.code();
        c.error_message = Some(s(e.message()));
        c
    };
    let b = ctx.broker;
    // DESCRIBE on the group or transactional id, as Kafka.
    let denied = match key_type {
        0 => ctx.check_group(Operation::Describe, key).err(),
        1 => ctx.check_txn(Operation::Describe, key).err(),
        _ => None,
    };
    if let Some(e) = denied {
        return fail(c, e);
    }
    let (leader, what) = match key_type {
        0 => {
            let topic = match b.offsets_topic().await {
                Ok(t) => t,
                Err(e) => return fail(c, BrokerError::CoordinatorNotAvailable(e.message())),
            };
            let (leader, partition) = b.groups.coordinator_of(&topic, key);
            (leader, format!("partition {partition} of __consumer_offsets"))
        }
        1 => {
            if key.is_empty() {
                return fail(c, BrokerError::InvalidRequest("an empty transactional id".into()));
            }
            let topic = match b.transaction_state_topic().await {
                Ok(t) => t,
                Err(e) => return fail(c, BrokerError::CoordinatorNotAvailable(e.message())),
            };
            let (leader, partition) = b.txns.coordinator_of(&topic, key);
            (leader, format!("partition {partition} of __transaction_state"))
        }
        _ => return fail(c, BrokerError::InvalidRequest(format!("unknown coordinator key type {key_type}"))),
    };
    let endpoint =
        b.image().brokers.get(&leader).filter(|r| !r.fenced).and_then(|r| r.endpoint(&ctx.session.listener).cloned());
    match endpoint {
        Some(l) => {
            c.node_id = BrokerId(leader);
            c.host = s(l.host);
            c.port = i32::from(l.port);
            c.error_message = None;
        }
        None => {
            return fail(c, BrokerError::CoordinatorNotAvailable(format!("{what} has no available leader")));
        }
    }
    c
}

pub async fn find_coordinator(ctx: &Ctx<'_>, req: FindCoordinatorRequest) -> FindCoordinatorResponse {
    let mut resp = FindCoordinatorResponse::default();
    if ctx.version >= 4 {
        for key in &req.coordinator_keys {
            resp.coordinators.push(find_one(ctx, key.as_str(), req.key_type).await);
        }
        return resp;
    }
    let c = find_one(ctx, req.key.as_str(), req.key_type).await;
    resp.error_code = c.error_code;
    resp.error_message = c.error_message;
    resp.node_id = c.node_id;
    resp.host = c.host;
    resp.port = c.port;
    resp
}

pub async fn join_group(ctx: &Ctx<'_>, req: JoinGroupRequest) -> JoinGroupResponse {
    let b = ctx.broker;
    let group = req.group_id.0.to_string();
    if let Err(e) = ctx.check_group(Operation::Read, &group) {
        let mut resp = JoinGroupResponse::default();
        resp.error_code = e.code();
        resp.generation_id = -1;
        resp.protocol_name = (ctx.version < 7).then(|| s(""));
        return resp;
    }
    let session = req.session_timeout_ms;
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: ctx.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: format!("/{}", ctx.peer.ip()),
        session_timeout_ms: session,
        rebalance_timeout_ms: if ctx.version >= 1 { req.rebalance_timeout_ms } else { session },
        protocol_type: req.protocol_type.to_string(),
        protocols: req.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member: ctx.version >= 4,
        supports_skip_assignment: ctx.version >= 9,
    };
    let (bb, g) = (b.clone(), group.clone());
    let r = b
        .groups
        .detached(async move { bb.groups.join(&bb.view, &g, join).await })
        .await
        .unwrap_or_else(|| JoinResponse::error(GroupError::UnknownServerError, ""));
    if r.error.is_some_and(|e| e != GroupError::MemberIdRequired) {
        tracing::debug!(group = %group, error = ?r.error, "JoinGroup refused");
    }
    let mut resp = JoinGroupResponse::default();
    resp.error_code = code_of(r.error);
    resp.generation_id = r.generation;
    resp.protocol_type = r.protocol_type.map(s);
    resp.protocol_name = r.protocol_name.map(s);
    if ctx.version < 7 && resp.protocol_name.is_none() {
        // Before v7 the protocol name is not nullable.
        resp.protocol_name = Some(s(""));
    }
    resp.leader = s(r.leader);
    resp.skip_assignment = r.skip_assignment;
    resp.member_id = s(r.member_id);
    resp.members = r
        .members
        .into_iter()
        .map(|m| {
            let mut x = JoinGroupResponseMember::default();
            x.member_id = s(m.member_id);
            x.group_instance_id = m.instance_id.map(s);
            x.metadata = m.metadata;
            x
        })
        .collect();
    resp
}

pub async fn sync_group(ctx: &Ctx<'_>, req: SyncGroupRequest) -> SyncGroupResponse {
    let b = ctx.broker;
    if ctx.version >= 5 && (req.protocol_type.is_none() || req.protocol_name.is_none()) {
        // As Kafka's request validation: from v5 both are mandatory.
        let mut resp = SyncGroupResponse::default();
        resp.error_code = GroupError::InconsistentGroupProtocol.code();
        return resp;
    }
    let group = req.group_id.0.to_string();
    if let Err(e) = ctx.check_group(Operation::Read, &group) {
        let mut resp = SyncGroupResponse::default();
        resp.error_code = e.code();
        return resp;
    }
    let sync = SyncRequest {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        generation: req.generation_id,
        protocol_type: req.protocol_type.as_ref().map(|p| p.to_string()),
        protocol_name: req.protocol_name.as_ref().map(|p| p.to_string()),
        assignments: req.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect(),
    };
    let (bb, g) = (b.clone(), group.clone());
    let r = b
        .groups
        .detached(async move { bb.groups.sync(&bb.view, &g, sync).await })
        .await
        .unwrap_or_else(|| SyncResponse::error(GroupError::UnknownServerError));
    let mut resp = SyncGroupResponse::default();
    resp.error_code = code_of(r.error);
    resp.protocol_type = r.protocol_type.map(s);
    resp.protocol_name = r.protocol_name.map(s);
    resp.assignment = r.assignment;
    resp
}

pub async fn heartbeat(ctx: &Ctx<'_>, req: HeartbeatRequest) -> HeartbeatResponse {
    let b = ctx.broker;
    if let Err(e) = ctx.check_group(Operation::Read, req.group_id.0.as_str()) {
        let mut resp = HeartbeatResponse::default();
        resp.error_code = e.code();
        return resp;
    }
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let answer = b
        .groups
        .heartbeat(&b.view, req.group_id.0.as_str(), req.member_id.as_str(), instance.as_deref(), req.generation_id)
        .await;
    let mut resp = HeartbeatResponse::default();
    resp.error_code = answer_code(&answer);
    resp
}

pub async fn leave_group(ctx: &Ctx<'_>, req: LeaveGroupRequest) -> LeaveGroupResponse {
    let b = ctx.broker;
    let members: Vec<(String, Option<String>)> = if ctx.version >= 3 {
        req.members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|i| i.to_string())))
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    if let Err(e) = ctx.check_group(Operation::Read, req.group_id.0.as_str()) {
        let mut resp = LeaveGroupResponse::default();
        resp.error_code = e.code();
        return resp;
    }
    let (bb, g, m) = (b.clone(), req.group_id.0.to_string(), members.clone());
    let result = b
        .groups
        .detached(async move { bb.groups.leave(&bb.view, &g, &m).await })
        .await
        .unwrap_or(Err(GroupError::UnknownServerError));
    // A group-level error answers for every member too.
    let (top, answers) = match result {
        Ok(answers) => (Ok(()), answers),
        Err(e) => (Err(e), Vec::new()),
    };
    let mut resp = LeaveGroupResponse::default();
    if ctx.version >= 3 {
        resp.error_code = answer_code(&top);
        resp.members = members
            .iter()
            .zip(answers.iter().copied().chain(std::iter::repeat(top)))
            .map(|((m, i), a)| {
                let mut r = MemberResponse::default();
                r.member_id = s(m.clone());
                r.group_instance_id = i.clone().map(s);
                r.error_code = answer_code(&a);
                r
            })
            .collect();
    } else {
        resp.error_code = answer_code(&top.and(answers.first().copied().unwrap_or(Ok(()))));
    }
    resp
}

pub async fn list_groups(ctx: &Ctx<'_>, req: ListGroupsRequest) -> ListGroupsResponse {
    let b = ctx.broker;
    let mut resp = ListGroupsResponse::default();
    let listed = match b.groups.list(&b.view).await {
        Ok(l) => l,
        Err(e) => {
            resp.error_code = e.code();
            return resp;
        }
    };
    // DESCRIBE on the cluster lists every group; otherwise only those the principal may describe.
    let all = ctx.cluster_allowed(Operation::Describe);
    let states: Vec<String> = req.states_filter.iter().map(|x| x.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|x| x.to_lowercase()).collect();
    for g in listed {
        if !states.is_empty() && !states.contains(&g.state.to_lowercase()) {
            continue;
        }
        if !types.is_empty() && !types.iter().any(|t| t == g.group_type) {
            continue;
        }
        if !all && !ctx.group_allowed(Operation::Describe, &g.group) {
            continue;
        }
        let mut x = ListedGroup::default();
        x.group_id = GroupId(s(g.group));
        x.protocol_type = s(g.protocol_type);
        x.group_state = s(g.state);
        x.group_type = s(g.group_type);
        resp.groups.push(x);
    }
    resp
}

pub async fn describe_groups(ctx: &Ctx<'_>, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let b = ctx.broker;
    let mut resp = DescribeGroupsResponse::default();
    for id in &req.groups {
        let mut g = DescribedGroup::default();
        g.group_id = id.clone();
        g.authorized_operations = if req.include_authorized_operations {
            ctx.authorized_operations(ResourceType::Group, id.0.as_str(), GROUP_OPERATIONS)
        } else {
            OPERATIONS_NOT_REQUESTED
        };
        if let Err(e) = ctx.check_group(Operation::Describe, id.0.as_str()) {
            g.error_code = e.code();
            g.group_state = s(GroupState::Dead.name());
            resp.groups.push(g);
            continue;
        }
        match b.groups.describe(&b.view, id.0.as_str()).await {
            Ok(Some(d)) => {
                g.group_state = s(d.state);
                g.protocol_type = s(d.protocol_type);
                g.protocol_data = s(d.protocol);
                g.members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut x = DescribedGroupMember::default();
                        x.member_id = s(m.member_id);
                        x.group_instance_id = m.instance_id.map(s);
                        x.client_id = s(m.client_id);
                        x.client_host = s(m.client_host);
                        x.member_metadata = m.metadata;
                        x.member_assignment = m.assignment;
                        x
                    })
                    .collect();
            }
            Err(GroupError::GroupIdNotFound) => {
                // A consumer protocol group: not a classic group.
                g.group_state = s(GroupState::Dead.name());
                if ctx.version >= 6 {
                    g.error_code = GroupError::GroupIdNotFound.code();
                    g.error_message = Some(s(format!("Group {} is not a classic group.", id.0.as_str())));
                }
            }
            Ok(None) if ctx.version >= 6 => {
                g.error_code = GroupError::GroupIdNotFound.code();
                g.error_message = Some(s(format!("Group {} not found.", id.0.as_str())));
                g.group_state = s(GroupState::Dead.name());
            }
            Ok(None) => g.group_state = s(GroupState::Dead.name()),
            Err(e) => g.error_code = e.code(),
        }
        resp.groups.push(g);
    }
    resp
}

pub async fn delete_groups(ctx: &Ctx<'_>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let b = ctx.broker;
    let mut resp = DeleteGroupsResponse::default();
    for id in &req.groups_names {
        let mut r = DeletableGroupResult::default();
        r.group_id = id.clone();
        if let Err(e) = ctx.check_group(Operation::Delete, id.0.as_str()) {
            r.error_code = e.code();
            resp.results.push(r);
            continue;
        }
        let (bb, g) = (b.clone(), id.0.to_string());
        let e = b.groups.detached(async move { bb.groups.delete_group(&bb.view, &g).await }).await;
        r.error_code = answer_code(&e.unwrap_or(Err(GroupError::UnknownServerError)));
        resp.results.push(r);
    }
    resp
}
