//! The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.
//! Requests are checked here as Kafka's `GroupCoordinatorService` checks them; the group
//! decisions are `oxbow_group::consumer`'s, run by the coordinator.

use std::collections::BTreeSet;

use oxbow_group::assignor::{Assignment, Assignor};
use oxbow_group::consumer::{Catalog, HeartbeatRequest, JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH};
use oxbow_group::{GroupError, code_of, consumer};
use oxbow_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedPartitions,
};
use oxbow_protocol::messages::consumer_group_heartbeat_response::{Assignment as HbAssignment, TopicPartitions};
use oxbow_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId,
};

use oxbow_meta::acl::{Operation, ResourceType};

use super::Ctx;
use super::access::GROUP_OPERATIONS;
use super::util::{OPERATIONS_NOT_REQUESTED, s, topic_name};

/// From v1 the client names itself (KIP-1082); v0 joins get an id from the coordinator.
const CLIENT_MEMBER_ID_VERSION: i16 = 1;

/// Kafka's request checks, in its order: the error and message, or `None` if it is valid.
fn invalid(ctx: &Ctx<'_>, req: &ConsumerGroupHeartbeatRequest) -> Option<(GroupError, String)> {
    let bad = |m: &str| Some((GroupError::InvalidRequest, m.to_string()));
    let epoch = req.member_epoch;
    if (ctx.version >= CLIENT_MEMBER_ID_VERSION || epoch > 0 || epoch == LEAVE_EPOCH) && req.member_id.is_empty() {
        return bad("MemberId can't be empty.");
    }
    if req.group_id.0.is_empty() {
        return bad("GroupId can't be empty.");
    }
    // Stored keys hold int16-length strings (as Kafka's records).
    if req.member_id.len() > i16::MAX as usize || req.group_id.0.len() > i16::MAX as usize {
        return bad("MemberId and GroupId must be shorter than 32768 bytes.");
    }
    if req.instance_id.as_ref().is_some_and(|i| i.is_empty()) {
        return bad("InstanceId can't be empty.");
    }
    if req.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
        return bad("RackId can't be empty.");
    }
    if epoch == JOIN_EPOCH {
        if req.rebalance_timeout_ms == -1 {
            return bad("RebalanceTimeoutMs must be provided in first request.");
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return bad("TopicPartitions must be empty when (re-)joining.");
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return bad("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.");
        }
    } else if epoch == LEAVE_STATIC_EPOCH {
        if req.instance_id.is_none() {
            return bad("InstanceId can't be null.");
        }
    } else if epoch < LEAVE_STATIC_EPOCH {
        return bad("MemberEpoch is invalid.");
    }
    if let Some(a) = &req.server_assignor {
        let allowed = &ctx.broker.groups.consumer_config().assignors;
        if !Assignor::from_name(a.as_str()).is_some_and(|a| allowed.contains(&a)) {
            let names: Vec<&str> = allowed.iter().map(|a| a.name()).collect();
            return Some((
                GroupError::UnsupportedAssignor,
                format!("ServerAssignor {} is not supported. Supported assignors: {}.", a.as_str(), names.join(", ")),
            ));
        }
    }
    if let Some(re) = &req.subscribed_topic_regex
        && !re.is_empty()
        && consumer::compile(re.as_str()).is_none()
    {
        return Some((
            GroupError::InvalidRegularExpression,
            format!(
                "SubscribedTopicRegex is not a valid regular expression (or longer than {} bytes).",
                consumer::REGEX_MAX_LEN
            ),
        ));
    }
    None
}

pub async fn heartbeat(ctx: &Ctx<'_>, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse {
    let b = ctx.broker;
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    let fail = |mut resp: ConsumerGroupHeartbeatResponse, e: GroupError, msg: String| {
        resp.error_code = e.code();
        resp.error_message = Some(s(msg));
        resp
    };
    if !b.groups.consumer_protocol() {
        return fail(
            resp,
            GroupError::UnsupportedVersion,
            "The consumer group protocol is not enabled (group.coordinator.rebalance.protocols).".into(),
        );
    }
    if let Some((e, msg)) = invalid(ctx, &req) {
        return fail(resp, e, msg);
    }
    // READ on the group, and DESCRIBE on every topic subscribed to by name, as Kafka.
    let auth = ctx.check_group(Operation::Read, req.group_id.0.as_str()).and_then(|()| {
        req.subscribed_topic_names.iter().flatten().try_for_each(|n| ctx.check_topic(Operation::Describe, n.0.as_str()))
    });
    if let Err(e) = auth {
        resp.error_code = e.code();
        resp.error_message = Some(s(e.message()));
        return resp;
    }
    let mut member_id = req.member_id.to_string();
    if member_id.is_empty() {
        // v0 join: the coordinator names the member.
        member_id = oxbow_protocol::ids::to_kafka_string(uuid::Uuid::new_v4());
    }
    let owned: Option<Assignment> = req.topic_partitions.as_ref().map(|tps| {
        let mut a = Assignment::new();
        for tp in tps {
            a.entry(tp.topic_id).or_default().extend(tp.partitions.iter().copied());
        }
        a.retain(|_, ps: &mut BTreeSet<i32>| !ps.is_empty());
        a
    });
    let hb = HeartbeatRequest {
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|i| i.to_string()),
        rack_id: req.rack_id.as_ref().map(|r| r.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|ns| ns.iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|r| r.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|a| a.to_string()),
        owned,
        client_id: ctx.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: format!("/{}", ctx.peer.ip()),
    };
    let r = b.groups.consumer_heartbeat(&b.view, req.group_id.0.as_str(), hb).await;
    if r.error.is_some() {
        tracing::debug!(group = %req.group_id.0.as_str(), member = %req.member_id.as_str(), error = ?r.error, message = ?r.message, "ConsumerGroupHeartbeat refused");
        resp.error_code = code_of(r.error);
        resp.error_message = r.message.map(s);
        return resp;
    }
    resp.member_id = r.member_id.map(s);
    resp.member_epoch = r.member_epoch;
    resp.heartbeat_interval_ms = r.heartbeat_interval_ms;
    resp.assignment = r.assignment.map(|a| {
        let mut x = HbAssignment::default();
        x.topic_partitions = a
            .into_iter()
            .map(|(id, ps)| {
                let mut tp = TopicPartitions::default();
                tp.topic_id = id;
                tp.partitions = ps.into_iter().collect();
                tp
            })
            .collect();
        x
    });
    resp
}

fn described(a: Option<&Assignment>, catalog: &Catalog) -> DescribedAssignment {
    let mut x = DescribedAssignment::default();
    x.topic_partitions = a
        .into_iter()
        .flatten()
        .map(|(id, ps)| {
            let mut tp = DescribedPartitions::default();
            tp.topic_id = *id;
            tp.topic_name = topic_name(catalog.name_of(*id).unwrap_or_default());
            tp.partitions = ps.iter().copied().collect();
            tp
        })
        .collect();
    x
}

pub async fn describe(ctx: &Ctx<'_>, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse {
    let b = ctx.broker;
    let mut resp = ConsumerGroupDescribeResponse::default();
    for id in &req.group_ids {
        let mut g = DescribedGroup::default();
        g.group_id = GroupId(id.0.clone());
        g.authorized_operations = if req.include_authorized_operations {
            ctx.authorized_operations(ResourceType::Group, id.0.as_str(), GROUP_OPERATIONS)
        } else {
            OPERATIONS_NOT_REQUESTED
        };
        if let Err(e) = ctx.check_group(Operation::Describe, id.0.as_str()) {
            g.error_code = e.code();
            g.error_message = Some(s(e.message()));
            resp.groups.push(g);
            continue;
        }
        if id.0.is_empty() {
            g.error_code = GroupError::InvalidGroupId.code();
            g.error_message = Some(s("Group ID can't be empty."));
            resp.groups.push(g);
            continue;
        }
        match b.groups.describe_consumer(&b.view, id.0.as_str()).await {
            Ok((group, catalog)) => {
                g.group_state = s(group.state().name());
                g.group_epoch = group.epoch();
                g.assignment_epoch = group.target_epoch();
                g.assignor_name = s(group.assignor().name());
                g.members = group
                    .members()
                    .map(|m| {
                        let mut x = Member::default();
                        x.member_id = s(m.id.clone());
                        x.instance_id = m.instance_id.clone().map(s);
                        x.rack_id = m.rack_id.clone().map(s);
                        x.member_epoch = m.epoch;
                        x.client_id = s(m.client_id.clone());
                        x.client_host = s(m.client_host.clone());
                        x.subscribed_topic_names = m.subscribed_topic_names.iter().map(|n| topic_name(n)).collect();
                        x.subscribed_topic_regex = m.subscribed_topic_regex.clone().map(s);
                        x.assignment = described(Some(&m.assigned), &catalog);
                        x.target_assignment = described(group.target_of(&m.id), &catalog);
                        // KIP-1099: 1 = a member of the consumer protocol.
                        x.member_type = 1;
                        x
                    })
                    .collect();
            }
            Err((e, msg)) => {
                g.error_code = e.code();
                g.error_message = msg.map(s);
                g.group_state = s("Dead");
            }
        }
        resp.groups.push(g);
    }
    resp
}
