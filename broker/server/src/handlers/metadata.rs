//! Metadata: brokers, topics and partitions, with auto topic creation.

use oxbow_protocol::ResponseError;
use oxbow_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use oxbow_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use uuid::Uuid;

use super::Ctx;
use super::util::{ALL_CLUSTER_OPERATIONS, ALL_TOPIC_OPERATIONS, OPERATIONS_NOT_REQUESTED, s, topic_name};
use crate::broker::{Topic, validate_topic_name};

fn describe_topic(ctx: &Ctx<'_>, t: &Topic, with_ops: bool) -> MetadataResponseTopic {
    let node = BrokerId(ctx.broker.node_id());
    let mut out = MetadataResponseTopic::default();
    out.name = Some(topic_name(&t.meta.name));
    out.topic_id = t.meta.id;
    out.is_internal = t.meta.name.starts_with("__");
    out.topic_authorized_operations = if with_ops { ALL_TOPIC_OPERATIONS } else { OPERATIONS_NOT_REQUESTED };
    for p in &t.partitions {
        let mut mp = MetadataResponsePartition::default();
        mp.partition_index = p.index;
        match p.replica() {
            Ok(r) => {
                mp.leader_id = BrokerId(r.leader);
                mp.leader_epoch = r.leader_epoch;
                mp.replica_nodes = r.replicas.iter().map(|b| BrokerId(*b)).collect();
                mp.isr_nodes = r.isr.iter().map(|b| BrokerId(*b)).collect();
            }
            Err(e) => {
                mp.error_code = e.code();
                mp.leader_id = BrokerId(-1);
                mp.replica_nodes = vec![node];
            }
        }
        out.partitions.push(mp);
    }
    out
}

fn topic_error(name: Option<String>, id: Uuid, e: ResponseError) -> MetadataResponseTopic {
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
    let mut resp = MetadataResponse::default();
    let adv = b.advertised();
    let mut broker = MetadataResponseBroker::default();
    broker.node_id = BrokerId(b.node_id());
    broker.host = s(adv.host.clone());
    broker.port = i32::from(adv.port);
    resp.brokers = vec![broker];
    resp.cluster_id = Some(s(b.cluster_id.clone()));
    resp.controller_id = BrokerId(b.node_id());
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations && (8..=10).contains(&ctx.version)
    {
        ALL_CLUSTER_OPERATIONS
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
        resp.topics = b.all_topics().iter().map(|t| describe_topic(ctx, t, with_ops)).collect();
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
                Some(t) if !rt.topic_id.is_nil() => resp.topics.push(describe_topic(ctx, &t, with_ops)),
                _ => resp.topics.push(topic_error(None, rt.topic_id, ResponseError::UnknownTopicId)),
            }
            continue;
        };
        if let Some(t) = b.topic(&name) {
            resp.topics.push(describe_topic(ctx, &t, with_ops));
            continue;
        }
        if let Err(e) = validate_topic_name(&name) {
            resp.topics.push(topic_error(Some(name), Uuid::nil(), e.error));
            continue;
        }
        if allow_auto && b.config.auto_create_topics {
            match b.create_topic(&name, b.config.num_partitions, Default::default()) {
                Ok(t) => resp.topics.push(describe_topic(ctx, &t, with_ops)),
                Err(e) if e.error == ResponseError::TopicAlreadyExists => match b.topic(&name) {
                    Some(t) => resp.topics.push(describe_topic(ctx, &t, with_ops)),
                    None => resp.topics.push(topic_error(Some(name), Uuid::nil(), ResponseError::LeaderNotAvailable)),
                },
                Err(e) => resp.topics.push(topic_error(Some(name), Uuid::nil(), e.error)),
            }
        } else {
            resp.topics.push(topic_error(Some(name), Uuid::nil(), ResponseError::UnknownTopicOrPartition));
        }
    }
    resp
}
