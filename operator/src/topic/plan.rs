//! What to do to make the cluster's topic match a Topic's spec: a pure function of the spec and
//! what the cluster has.

use std::collections::BTreeMap;

use crate::crd::TopicSpec;
use crate::kafka::ConfigChanges;

/// The topic as the cluster has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub partitions: i32,
    pub replication_factor: i32,
    /// Configs set on the topic itself (broker defaults excluded).
    pub configs: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Create { partitions: i32, replication_factor: i16, configs: BTreeMap<String, String> },
    Grow { to: i32 },
    AlterConfigs { set: BTreeMap<String, String>, delete: Vec<String> },
}

/// A part of the spec that cannot be applied; reported on the Ready condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub refusals: Vec<Refusal>,
}

/// Steps that bring `observed` to `spec`; what cannot be done is refused, and the rest still
/// happens (a refused partition decrease does not hold back a config change).
pub fn plan(spec: &TopicSpec, observed: Option<&Observed>) -> Plan {
    let mut out = Plan::default();
    let Some(have) = observed else {
        out.steps.push(Step::Create {
            partitions: spec.partitions,
            // -1: the cluster's default.replication.factor (KIP-464).
            replication_factor: spec.replication_factor.map_or(-1, |rf| i16::try_from(rf).unwrap_or(i16::MAX)),
            configs: spec.config.clone(),
        });
        return out;
    };
    if spec.partitions > have.partitions {
        out.steps.push(Step::Grow { to: spec.partitions });
    } else if spec.partitions < have.partitions {
        out.refusals.push(Refusal {
            reason: "PartitionDecreaseRefused",
            message: format!(
                "spec.partitions is {} but the topic has {}: Kafka cannot remove partitions; set partitions to {} or more",
                spec.partitions, have.partitions, have.partitions
            ),
        });
    }
    if let Some(rf) = spec.replication_factor.filter(|rf| *rf != have.replication_factor) {
        out.refusals.push(Refusal {
            reason: "ReplicationFactorChangeUnsupported",
            message: format!(
                "spec.replicationFactor is {rf} but the topic has {}: the operator does not change a topic's replication factor; use kafka-reassign-partitions",
                have.replication_factor
            ),
        });
    }
    let changes = ConfigChanges::between(&spec.config, &have.configs);
    if !changes.is_empty() {
        out.steps.push(Step::AlterConfigs { set: changes.set, delete: changes.delete });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(partitions: i32, config: &[(&str, &str)]) -> TopicSpec {
        TopicSpec {
            cluster: "c".into(),
            topic_name: None,
            partitions,
            replication_factor: Some(1),
            config: config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn have(partitions: i32, config: &[(&str, &str)]) -> Observed {
        Observed {
            partitions,
            replication_factor: 1,
            configs: config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn a_missing_topic_is_created_with_its_configs() {
        let p = plan(&spec(3, &[("retention.ms", "1000")]), None);
        assert_eq!(
            p.steps,
            vec![Step::Create {
                partitions: 3,
                replication_factor: 1,
                configs: BTreeMap::from([("retention.ms".into(), "1000".into())])
            }]
        );
        assert!(p.refusals.is_empty());
    }

    #[test]
    fn a_matching_topic_needs_nothing() {
        assert_eq!(
            plan(&spec(3, &[("retention.ms", "1000")]), Some(&have(3, &[("retention.ms", "1000")]))),
            Plan::default()
        );
    }

    #[test]
    fn partitions_grow() {
        assert_eq!(plan(&spec(6, &[]), Some(&have(3, &[]))).steps, vec![Step::Grow { to: 6 }]);
    }

    #[test]
    fn a_shrink_is_refused_and_config_changes_still_apply() {
        let p = plan(&spec(2, &[("cleanup.policy", "compact")]), Some(&have(4, &[])));
        assert_eq!(p.refusals.len(), 1);
        assert_eq!(p.refusals[0].reason, "PartitionDecreaseRefused");
        assert!(p.refusals[0].message.contains("set partitions to 4 or more"), "{}", p.refusals[0].message);
        assert_eq!(
            p.steps,
            vec![Step::AlterConfigs {
                set: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
                delete: vec![]
            }]
        );
    }

    #[test]
    fn configs_are_set_changed_and_removed() {
        let p = plan(
            &spec(1, &[("retention.ms", "2000"), ("segment.bytes", "1048576")]),
            Some(&have(1, &[("retention.ms", "1000"), ("max.message.bytes", "2048")])),
        );
        assert_eq!(
            p.steps,
            vec![Step::AlterConfigs {
                set: BTreeMap::from([
                    ("retention.ms".into(), "2000".into()),
                    ("segment.bytes".into(), "1048576".into())
                ]),
                delete: vec!["max.message.bytes".into()],
            }]
        );
    }

    #[test]
    fn a_replication_factor_change_is_refused() {
        let mut s = spec(1, &[]);
        s.replication_factor = Some(3);
        let p = plan(&s, Some(&have(1, &[])));
        assert!(p.steps.is_empty());
        assert_eq!(p.refusals[0].reason, "ReplicationFactorChangeUnsupported");
    }

    #[test]
    fn an_unset_replication_factor_takes_the_cluster_default_and_accepts_any_existing_one() {
        let mut s = spec(2, &[]);
        s.replication_factor = None;
        assert_eq!(
            plan(&s, None).steps,
            vec![Step::Create { partitions: 2, replication_factor: -1, configs: BTreeMap::new() }]
        );
        let mut three = have(2, &[]);
        three.replication_factor = 3;
        assert_eq!(plan(&s, Some(&three)), Plan::default());
    }
}
