//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics; DescribeConfigs for
//! the broker (its static configuration, read-only).

use std::collections::BTreeMap;

use oxbow_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as AlterResult;
use oxbow_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use oxbow_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncResult;
use oxbow_protocol::messages::*;

use oxbow_meta::acl::Operation;

use super::Ctx;
use super::util::s;
use crate::errors::BrokerError;
use crate::topic_config::{self, source};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// One config entry before encoding.
struct Entry<'a> {
    name: &'a str,
    value: Option<String>,
    read_only: bool,
    source: i8,
    config_type: i8,
    doc: &'a str,
    synonyms: Vec<(String, String, i8)>,
}

fn entry(x: Entry<'_>, ctx: &Ctx<'_>, with_syn: bool, with_doc: bool) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default();
    e.name = s(x.name);
    // Passwords and keys are never shown, as Kafka's PASSWORD configs.
    let sensitive = x.config_type == crate::config::Kind::Password.config_type();
    e.is_sensitive = sensitive;
    e.value = x.value.filter(|_| !sensitive).map(s);
    e.read_only = x.read_only;
    e.config_source = x.source;
    e.config_type = x.config_type;
    if with_doc && ctx.version >= 3 {
        e.documentation = Some(s(x.doc));
    }
    if with_syn {
        e.synonyms = x
            .synonyms
            .into_iter()
            .map(|(n, v, src)| {
                let mut sy = DescribeConfigsSynonym::default();
                sy.name = s(n);
                sy.value = Some(s(v)).filter(|_| !sensitive);
                sy.source = src;
                sy
            })
            .collect();
    }
    e
}

pub async fn describe(ctx: &Ctx<'_>, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let b = ctx.broker;
    let mut resp = DescribeConfigsResponse::default();
    let (with_syn, with_doc) = (req.include_synonyms, req.include_documentation);
    for r in req.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name.clone();
        let only: Option<Vec<String>> =
            r.configuration_keys.as_ref().map(|k| k.iter().map(|k| k.to_string()).collect());
        let denied = match r.resource_type {
            TOPIC => ctx.check_topic(Operation::DescribeConfigs, r.resource_name.as_str()).err(),
            BROKER => ctx.check_cluster(Operation::DescribeConfigs).err(),
            _ => None,
        };
        if let Some(e) = denied {
            out.error_code = e.code();
            out.error_message = Some(s(e.message()));
            resp.results.push(out);
            continue;
        }
        match r.resource_type {
            TOPIC => match b.topic(r.resource_name.as_str()) {
                None => {
                    out.error_code = BrokerError::unknown_topic(false).code();
                    out.error_message = Some(s(format!("topic {} does not exist", r.resource_name.as_str())));
                }
                Some(t) => {
                    for d in topic_config::describe(&b.view.topic_defaults(), &t.meta.configs, only.as_deref()) {
                        let x = Entry {
                            name: d.name,
                            value: Some(d.value),
                            read_only: false,
                            source: d.source,
                            config_type: d.config_type,
                            doc: d.doc,
                            synonyms: d.synonyms,
                        };
                        out.configs.push(entry(x, ctx, with_syn, with_doc));
                    }
                }
            },
            BROKER => {
                let name = r.resource_name.as_str();
                let cluster_dynamic = b.view.dynamic_broker_configs(None);
                let own_dynamic = b.view.dynamic_broker_configs(Some(b.node_id()));
                if !name.is_empty() && name != b.node_id().to_string() {
                    let e = BrokerError::InvalidRequest(format!(
                        "Unexpected broker id, expected {} or empty string, but received {name}",
                        b.node_id()
                    ));
                    out.error_code = e.code();
                    out.error_message = Some(s(e.message()));
                } else {
                    // "" is the cluster-wide default resource: only its dynamic configs, as Kafka
                    // answers. A broker id gets every key with its effective value and source.
                    let cluster_default = name.is_empty();
                    for def in crate::config::KEYS {
                        if only.as_ref().is_some_and(|o| !o.iter().any(|k| k == def.name)) {
                            continue;
                        }
                        let own_value = own_dynamic.get(def.name).cloned().filter(|_| !cluster_default);
                        let cluster_value = cluster_dynamic.get(def.name).cloned();
                        if cluster_default && cluster_value.is_none() {
                            continue;
                        }
                        let explicit = b.config.explicit.get(def.name).cloned();
                        let mut syn = Vec::new();
                        if let Some(v) = &own_value {
                            syn.push((def.name.to_string(), v.clone(), source::DYNAMIC_BROKER_CONFIG));
                        }
                        if let Some(v) = &cluster_value {
                            syn.push((def.name.to_string(), v.clone(), source::DYNAMIC_DEFAULT_BROKER_CONFIG));
                        }
                        if let Some(v) = &explicit {
                            syn.push((def.name.to_string(), v.clone(), source::STATIC_BROKER_CONFIG));
                        }
                        if let Some(d) = def.default {
                            syn.push((def.name.to_string(), d.to_string(), source::DEFAULT_CONFIG));
                        }
                        // The most specific synonym is the value and its source.
                        let src = syn.first().map_or(source::DEFAULT_CONFIG, |(_, _, src)| *src);
                        let value =
                            own_value.or(cluster_value).or_else(|| b.config.values.get(def.name).cloned().flatten());
                        let x = Entry {
                            name: def.name,
                            value,
                            read_only: !topic_config::is_dynamic_broker_key(def.name),
                            source: src,
                            config_type: def.kind.config_type(),
                            doc: def.doc,
                            synonyms: syn,
                        };
                        out.configs.push(entry(x, ctx, with_syn, with_doc));
                    }
                }
            }
            other => {
                let e = BrokerError::InvalidRequest(format!("resource type {other} is not supported"));
                out.error_code = e.code();
                out.error_message = Some(s(e.message()));
            }
        }
        resp.results.push(out);
    }
    resp
}

/// ALTER_CONFIGS on the topic, or on the cluster for a broker resource.
fn check_alter(ctx: &Ctx<'_>, resource_type: i8, name: &str) -> Result<(), BrokerError> {
    match resource_type {
        TOPIC => ctx.check_topic(Operation::AlterConfigs, name),
        BROKER => ctx.check_cluster(Operation::AlterConfigs),
        _ => Ok(()),
    }
}

/// The topic an Alter*Configs resource names; brokers and other resource types are refused.
/// `fresh`: the topic as the active controller has it, configs included (`Broker::catch_up`
/// first, for operations merged into its overrides); else from this broker's image, or after a
/// barrier if the image lacks it (`Broker::topic_to_change`).
async fn alter_target(
    b: &crate::broker::Broker,
    resource_type: i8,
    name: &str,
    fresh: bool,
) -> Result<std::sync::Arc<crate::broker::Topic>, BrokerError> {
    match resource_type {
        TOPIC => {
            let topic = if fresh {
                b.catch_up().await?;
                b.topic(name)
            } else {
                b.topic_to_change(name).await?
            };
            topic.ok_or_else(|| BrokerError::UnknownTopic(format!("topic {name} does not exist")))
        }
        BROKER => Err(BrokerError::InvalidRequest(
            "AlterConfigs on brokers is not supported; use IncrementalAlterConfigs on the cluster-wide default".into(),
        )),
        other => Err(BrokerError::InvalidRequest(format!("resource type {other} is not supported"))),
    }
}

/// Legacy AlterConfigs: replaces the topic's whole set of overrides.
pub async fn alter(ctx: &Ctx<'_>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let b = ctx.broker;
    let mut resp = AlterConfigsResponse::default();
    for r in req.resources {
        let mut out = AlterResult::default();
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name.clone();
        let result: Result<(), BrokerError> = async {
            let name = r.resource_name.as_str();
            check_alter(ctx, r.resource_type, name)?;
            alter_target(b, r.resource_type, name, false).await?;
            let mut configs = BTreeMap::new();
            for c in &r.configs {
                let Some(v) = &c.value else { continue };
                topic_config::validate(c.name.as_str(), Some(v.as_str()))?;
                configs.insert(c.name.to_string(), v.to_string());
            }
            if !req.validate_only {
                b.set_topic_configs(name, configs).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            out.error_code = e.code();
            out.error_message = Some(s(e.message()));
        }
        resp.responses.push(out);
    }
    resp
}

/// IncrementalAlterConfigs on a BROKER resource: the cluster-wide default (name "") or this
/// broker's own configs (its id; as Kafka, a broker's own configs are altered through that
/// broker, which forwards them to the controller) take SET and DELETE of dynamic keys.
async fn alter_dynamic_broker(
    b: &crate::broker::Broker,
    name: &str,
    ops: &[oxbow_protocol::messages::incremental_alter_configs_request::AlterableConfig],
    validate_only: bool,
) -> Result<(), BrokerError> {
    let node = if name.is_empty() {
        None
    } else {
        let id: i32 = name
            .parse()
            .map_err(|_| BrokerError::InvalidRequest(format!("Node id must be an integer, but it is: {name}")))?;
        if id != b.node_id() {
            return Err(BrokerError::InvalidRequest(format!(
                "Unexpected broker id, expected {}, but received {name}",
                b.node_id()
            )));
        }
        Some(id)
    };
    let static_only: Vec<&str> =
        ops.iter().map(|c| c.name.as_str()).filter(|k| !topic_config::is_dynamic_broker_key(k)).collect();
    if !static_only.is_empty() {
        return Err(BrokerError::InvalidRequest(format!(
            "Cannot update these configs dynamically: {}",
            static_only.join(", ")
        )));
    }
    let mut configs = b.view.dynamic_broker_configs(node);
    for c in ops {
        let key = c.name.to_string();
        match (c.config_operation, &c.value) {
            (SET, Some(v)) => {
                configs.insert(key, v.to_string());
            }
            (SET, None) => {
                return Err(BrokerError::InvalidConfig(format!("{key}: null value")));
            }
            (DELETE, _) => {
                configs.remove(&key);
            }
            (op, _) => {
                return Err(BrokerError::InvalidRequest(format!(
                    "config operation {op} is not supported for broker configs"
                )));
            }
        }
    }
    b.set_dynamic_broker_configs(node, configs, validate_only).await
}

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub async fn incremental_alter(ctx: &Ctx<'_>, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let b = ctx.broker;
    let mut resp = IncrementalAlterConfigsResponse::default();
    for r in req.resources {
        let mut out = IncResult::default();
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name.clone();
        let result: Result<(), BrokerError> = async {
            let name = r.resource_name.as_str();
            check_alter(ctx, r.resource_type, name)?;
            if r.resource_type == BROKER {
                return alter_dynamic_broker(b, name, &r.configs, req.validate_only).await;
            }
            // The operations apply to the overrides as the active controller has them, so a
            // change made through another broker a moment ago is kept (Kafka applies them on its
            // controller). Two changes at the same moment can still race; the last one wins.
            let topic = alter_target(b, r.resource_type, name, true).await?;
            let mut configs = topic.meta.configs.clone();
            for c in &r.configs {
                let key = c.name.to_string();
                let value = c.value.as_ref().map(|v| v.to_string());
                match c.config_operation {
                    SET => {
                        topic_config::validate(&key, value.as_deref())?;
                        configs.insert(key, value.unwrap_or_default());
                    }
                    DELETE => {
                        if topic_config::topic_key(&key).is_none() {
                            return Err(BrokerError::InvalidConfig(format!("unknown topic config {key:?}")));
                        }
                        configs.remove(&key);
                    }
                    APPEND | SUBTRACT => {
                        // Only list-typed keys support these; cleanup.policy is the one list here.
                        if key != "cleanup.policy" {
                            return Err(BrokerError::InvalidConfig(format!(
                                "{key} is not a list; APPEND/SUBTRACT do not apply"
                            )));
                        }
                        let current = configs
                            .get(&key)
                            .cloned()
                            .unwrap_or_else(|| topic_config::broker_default(&b.view.topic_defaults(), &key));
                        let mut items: Vec<String> =
                            current.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                        for v in value.as_deref().unwrap_or("").split(',').map(str::trim).filter(|v| !v.is_empty()) {
                            if c.config_operation == APPEND && !items.iter().any(|i| i == v) {
                                items.push(v.to_string());
                            } else if c.config_operation == SUBTRACT {
                                items.retain(|i| i != v);
                            }
                        }
                        let joined = items.join(",");
                        topic_config::validate(&key, Some(&joined))?;
                        configs.insert(key, joined);
                    }
                    op => {
                        return Err(BrokerError::InvalidRequest(format!("unknown config operation {op}")));
                    }
                }
            }
            if !req.validate_only {
                b.set_topic_configs(name, configs).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            out.error_code = e.code();
            out.error_message = Some(s(e.message()));
        }
        resp.responses.push(out);
    }
    resp
}
