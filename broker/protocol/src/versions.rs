//! The APIs and versions Oxbow advertises.
//!
//! A version is listed only when its handler implements every field of it: clients pick
//! behaviour from these ranges (see shared/FACTS.md). Each range is intersected with what the
//! `kafka-protocol` crate can decode, so the table can never promise more than the codec does.

use kafka_protocol::messages::ApiKey;

/// `(api, min, max)` for every API this broker serves.
const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::AddRaftVoter, 0, 0),
    (ApiKey::RemoveRaftVoter, 0, 0),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 2, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
    // Not advertised when `group.coordinator.rebalance.protocols` leaves out `consumer` (the
    // broker filters its ApiVersions answer): clients switch protocol when they see it.
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Transactions (Kafka 4.1's ranges). AddPartitionsToTxn v4+ comes from brokers (KIP-890
    // verification and implicit adds); EndTxn v5 and Produce v12 from transaction version 2
    // clients, which use them only once the cluster finalizes `transaction.version` 2.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    // Security. SaslHandshake v0 (raw tokens after it) and v1 (SaslAuthenticate frames); on a
    // listener without SASL both answer ILLEGAL_SASL_STATE, as Kafka's.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// The advertised version range of one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

/// Every advertised API with its range, in API key order.
pub fn supported() -> Vec<ApiRange> {
    let mut out: Vec<ApiRange> = SUPPORTED
        .iter()
        .filter_map(|&(key, min, max)| {
            let codec = key.valid_versions();
            let (min, max) = (min.max(codec.min), max.min(codec.max));
            (min <= max).then_some(ApiRange { key, min, max })
        })
        .collect();
    out.sort_by_key(|r| r.key as i16);
    out
}

/// The advertised range for `key`, if the API is served at all.
pub fn range(key: ApiKey) -> Option<ApiRange> {
    supported().into_iter().find(|r| r.key == key)
}

/// Whether `version` of `key` is served.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    range(key).is_some_and(|r| (r.min..=r.max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_within_the_codec() {
        for r in supported() {
            let codec = r.key.valid_versions();
            assert!(r.min >= codec.min && r.max <= codec.max, "{:?}", r);
        }
        assert_eq!(supported().len(), SUPPORTED.len(), "an advertised API fell out of the codec range");
    }

    #[test]
    fn kafka4_minimums() {
        assert_eq!(range(ApiKey::Produce).map(|r| r.min), Some(3));
        assert_eq!(range(ApiKey::Fetch).map(|r| r.min), Some(4));
        assert!(is_supported(ApiKey::Metadata, 0));
        assert!(!is_supported(ApiKey::JoinGroup, 0));
    }
}
