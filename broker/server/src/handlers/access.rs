//! The one place handlers ask whether a request's principal may do what it asks: each check
//! names the operation and resource as Kafka's `KafkaApis` does, and a refusal is the error Kafka
//! answers (TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Which APIs need
//! what is listed in docs/security.md (ACLs).

use oxbow_meta::acl::{Operation, ResourceType};

use super::Ctx;
use crate::errors::BrokerError;
use crate::security::authorizer::CLUSTER_NAME;

impl Ctx<'_> {
    pub fn allowed(&self, op: Operation, rt: ResourceType, name: &str) -> bool {
        let a = &self.broker.authorizer;
        !a.enabled() || a.authorize(&self.broker.image(), self.session, self.peer.ip(), op, rt, name)
    }

    pub fn topic_allowed(&self, op: Operation, topic: &str) -> bool {
        self.allowed(op, ResourceType::Topic, topic)
    }

    pub fn group_allowed(&self, op: Operation, group: &str) -> bool {
        self.allowed(op, ResourceType::Group, group)
    }

    pub fn cluster_allowed(&self, op: Operation) -> bool {
        self.allowed(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    pub fn txn_allowed(&self, op: Operation, transactional_id: &str) -> bool {
        self.allowed(op, ResourceType::TransactionalId, transactional_id)
    }

    /// `op` on a topic, or TOPIC_AUTHORIZATION_FAILED.
    pub fn check_topic(&self, op: Operation, topic: &str) -> Result<(), BrokerError> {
        if self.topic_allowed(op, topic) { Ok(()) } else { Err(BrokerError::TopicAuthorizationFailed) }
    }

    /// `op` on a group, or GROUP_AUTHORIZATION_FAILED.
    pub fn check_group(&self, op: Operation, group: &str) -> Result<(), BrokerError> {
        if self.group_allowed(op, group) { Ok(()) } else { Err(BrokerError::GroupAuthorizationFailed) }
    }

    /// `op` on the cluster, or CLUSTER_AUTHORIZATION_FAILED.
    pub fn check_cluster(&self, op: Operation) -> Result<(), BrokerError> {
        if self.cluster_allowed(op) { Ok(()) } else { Err(BrokerError::ClusterAuthorizationFailed) }
    }

    /// `op` on a transactional id, or TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    pub fn check_txn(&self, op: Operation, transactional_id: &str) -> Result<(), BrokerError> {
        if self.txn_allowed(op, transactional_id) {
            Ok(())
        } else {
            Err(BrokerError::TransactionalIdAuthorizationFailed("Transactional Id authorization failed.".into()))
        }
    }

    /// An idempotent producer's InitProducerId: IDEMPOTENT_WRITE on the cluster, or WRITE on
    /// any topic (as Kafka 3+), else CLUSTER_AUTHORIZATION_FAILED.
    pub fn check_idempotent_write(&self) -> Result<(), BrokerError> {
        let a = &self.broker.authorizer;
        if self.cluster_allowed(Operation::IdempotentWrite)
            || !a.enabled()
            || a.authorize_any(
                &self.broker.image(),
                self.session,
                self.peer.ip(),
                Operation::Write,
                ResourceType::Topic,
            )
        {
            Ok(())
        } else {
            Err(BrokerError::ClusterAuthorizationFailed)
        }
    }

    /// Whether this request comes from a broker acting as one (a follower's fetch, markers,
    /// verification): CLUSTER_ACTION on the cluster.
    pub fn cluster_action_allowed(&self) -> bool {
        self.cluster_allowed(Operation::ClusterAction)
    }
}

/// The operations Kafka reports in `*_authorized_operations` for each resource type.
pub const TOPIC_OPERATIONS: &[Operation] = &[
    Operation::Read,
    Operation::Write,
    Operation::Create,
    Operation::Delete,
    Operation::Alter,
    Operation::Describe,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
];
pub const GROUP_OPERATIONS: &[Operation] = &[Operation::Read, Operation::Delete, Operation::Describe];
pub const CLUSTER_OPERATIONS: &[Operation] = &[
    Operation::Create,
    Operation::Alter,
    Operation::Describe,
    Operation::ClusterAction,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::IdempotentWrite,
];

impl Ctx<'_> {
    /// The `authorized_operations` bitfield (bit = the operation's code) of a resource.
    pub fn authorized_operations(&self, rt: ResourceType, name: &str, ops: &[Operation]) -> i32 {
        ops.iter().filter(|op| self.allowed(**op, rt, name)).fold(0, |acc, op| acc | (1 << op.code()))
    }
}
