//! Metadata: brokers, topics and partitions, with auto topic creation.

use oxbow_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use oxbow_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use uuid::Uuid;

use oxbow_meta::acl::{Operation, ResourceType};

use super::Ctx;
use super::access::{CLUSTER_OPERATIONS, TOPIC_OPERATIONS};
use super::util::{OPERATIONS_NOT_REQUESTED, s, topic_name};
use crate::broker::{Topic, validate_topic_name};
use crate::errors::BrokerError;
use crate::security::authorizer::CLUSTER_NAME;

/// `fenced_self`: this broker is not confirmed unfenced, so it reports no partition as its own.
fn describe_topic(ctx: &Ctx<'_>, t: &Topic, with_ops: bool, fenced_self: Option<i32>) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.name = Some(topic_name(&t.meta.name));
    out.topic_id = t.meta.id;
    out.is_internal = t.meta.name.starts_with("__");
    out.topic_authorized_operations = if with_ops {
        ctx.authorized_operations(ResourceType::Topic, &t.meta.name, TOPIC_OPERATIONS)
    } else {
        OPERATIONS_NOT_REQUESTED
    };
    for p in &t.states {
        let mut mp = MetadataResponsePartition::default();
        mp.partition_index = p.partition;
        let leader = if Some(p.leader) == fenced_self { -1 } else { p.leader };
        mp.leader_id = BrokerId(leader);
        mp.leader_epoch = p.leader_epoch;
        mp.replica_nodes = p.replicas.iter().map(|b| BrokerId(*b)).collect();
        mp.isr_nodes = p.isr.iter().map(|b| BrokerId(*b)).collect();
        if leader < 0 {
            mp.error_code = BrokerError::LeaderNotAvailable.code();
        }
        out.partitions.push(mp);
    }
    out
}

fn topic_error(name: Option<String>, id: Uuid, e: &BrokerError) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.name = name.map(|n| topic_name(&n));
    out.topic_id = id;
    out.error_code = e.code();
    out.topic_authorized_operations = OPERATIONS_NOT_REQUESTED;
    out
}

pub async fn handle(ctx: &Ctx<'_>, req: MetadataRequest) -> MetadataResponse {
    let b = ctx.broker;
    let with_ops = req.include_topic_authorized_operations && ctx.version >= 8;
    let fenced_self = b.liveness.is_fenced().then(|| b.node_id());
    let mut resp = MetadataResponse::default();
    // Registered, unfenced brokers from the image this broker serves (as Kafka's brokers do).
    resp.brokers = b
        .image()
        .brokers
        .values()
        .filter(|r| !r.fenced)
        .filter_map(|r| {
            let l = r.endpoint(&ctx.session.listener)?;
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(r.node_id);
            broker.host = s(l.host.clone());
            broker.port = i32::from(l.port);
            broker.rack = r.rack.clone().map(s);
            Some(broker)
        })
        .collect();
    resp.cluster_id = Some(s(b.cluster_id.clone()));
    // As Kafka's KRaft brokers: clients send controller requests (CreateTopics, ...) to this
    // broker, which forwards them to the active controller; DescribeCluster names the real one.
    let me_active = b.image().is_active(b.node_id()) && fenced_self.is_none();
    resp.controller_id = BrokerId(if me_active { b.node_id() } else { b.controller_id() });
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations && (8..=10).contains(&ctx.version)
    {
        ctx.authorized_operations(ResourceType::Cluster, CLUSTER_NAME, CLUSTER_OPERATIONS)
    } else {
        OPERATIONS_NOT_REQUESTED
    };
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let requested = match req.topics {
        None => None,
        Some(t) if t.is_empty() && ctx.version == 0 => None,
        Some(t) => Some(t),
    };
    let Some(requested) = requested else {
        // Only the topics the principal may describe, as Kafka.
        resp.topics = b
            .all_topics()
            .iter()
            .filter(|t| ctx.topic_allowed(Operation::Describe, &t.meta.name))
            .map(|t| describe_topic(ctx, t, with_ops, fenced_self))
            .collect();
        return resp;
    };
    // Before v4 the request has no allow_auto_topic_creation field, and Kafka treats it as true.
    let allow_auto = if ctx.version < 4 { true } else { req.allow_auto_topic_creation };
    for rt in requested {
        // By id (v10+): the Java client sends an empty name rather than null with the id.
        let name = rt.name.map(|n| n.0.to_string()).filter(|n| !n.is_empty() || rt.topic_id.is_nil());
        let Some(name) = name else {
            // By topic id (v10+).
            match b.topic_by_id(rt.topic_id) {
                Some(t) if !rt.topic_id.is_nil() && !ctx.topic_allowed(Operation::Describe, &t.meta.name) => {
                    resp.topics.push(topic_error(None, rt.topic_id, &BrokerError::TopicAuthorizationFailed))
                }
                Some(t) if !rt.topic_id.is_nil() => resp.topics.push(describe_topic(ctx, &t, with_ops, fenced_self)),
                _ => resp.topics.push(topic_error(None, rt.topic_id, &BrokerError::UnknownTopicId)),
            }
            continue;
        };
        // Whether or not it exists: an unauthorized client learns nothing about the topic.
        if !ctx.topic_allowed(Operation::Describe, &name) {
            resp.topics.push(topic_error(Some(name), Uuid::nil(), &BrokerError::TopicAuthorizationFailed));
            continue;
        }
        if let Some(t) = b.topic(&name) {
            resp.topics.push(describe_topic(ctx, &t, with_ops, fenced_self));
            continue;
        }
        if let Err(e) = validate_topic_name(&name) {
            resp.topics.push(topic_error(Some(name), Uuid::nil(), &e));
            continue;
        }
        let may_create = || ctx.cluster_allowed(Operation::Create) || ctx.topic_allowed(Operation::Create, &name);
        if allow_auto && b.config.auto_create_topics && !may_create() {
            resp.topics.push(topic_error(Some(name), Uuid::nil(), &BrokerError::TopicAuthorizationFailed));
        } else if allow_auto && b.config.auto_create_topics {
            match b
                .create_topic(
                    &name,
                    b.config.num_partitions,
                    b.config.default_replication_factor,
                    None,
                    Default::default(),
                    false,
                )
                .await
            {
                Ok(Some(t)) => resp.topics.push(describe_topic(ctx, &t, with_ops, fenced_self)),
                Ok(None) => resp.topics.push(topic_error(Some(name), Uuid::nil(), &BrokerError::LeaderNotAvailable)),
                Err(BrokerError::TopicExists(_)) => match b.topic(&name) {
                    Some(t) => resp.topics.push(describe_topic(ctx, &t, with_ops, fenced_self)),
                    None => resp.topics.push(topic_error(Some(name), Uuid::nil(), &BrokerError::LeaderNotAvailable)),
                },
                Err(e) => resp.topics.push(topic_error(Some(name), Uuid::nil(), &e)),
            }
        } else {
            resp.topics.push(topic_error(Some(name), Uuid::nil(), &BrokerError::unknown_topic(false)));
        }
    }
    resp
}
