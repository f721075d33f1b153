package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.ConsumerGroupDescribeRequestData;
import org.apache.kafka.common.message.ConsumerGroupDescribeResponseData;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatRequestData;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatResponseData;
import org.apache.kafka.common.message.DeleteGroupsRequestData;
import org.apache.kafka.common.message.FindCoordinatorRequestData;
import org.apache.kafka.common.message.HeartbeatRequestData;
import org.apache.kafka.common.message.JoinGroupRequestData;
import org.apache.kafka.common.message.JoinGroupRequestData.JoinGroupRequestProtocol;
import org.apache.kafka.common.message.JoinGroupRequestData.JoinGroupRequestProtocolCollection;
import org.apache.kafka.common.message.LeaveGroupRequestData;
import org.apache.kafka.common.message.LeaveGroupRequestData.MemberIdentity;
import org.apache.kafka.common.message.OffsetCommitRequestData;
import org.apache.kafka.common.message.OffsetCommitRequestData.OffsetCommitRequestPartition;
import org.apache.kafka.common.message.OffsetCommitRequestData.OffsetCommitRequestTopic;
import org.apache.kafka.common.message.SyncGroupRequestData;
import org.apache.kafka.common.message.SyncGroupRequestData.SyncGroupRequestAssignment;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.ConsumerGroupDescribeRequest;
import org.apache.kafka.common.requests.ConsumerGroupDescribeResponse;
import org.apache.kafka.common.requests.ConsumerGroupHeartbeatRequest;
import org.apache.kafka.common.requests.ConsumerGroupHeartbeatResponse;
import org.apache.kafka.common.requests.DeleteGroupsRequest;
import org.apache.kafka.common.requests.DeleteGroupsResponse;
import org.apache.kafka.common.requests.FindCoordinatorRequest;
import org.apache.kafka.common.requests.FindCoordinatorResponse;
import org.apache.kafka.common.requests.HeartbeatRequest;
import org.apache.kafka.common.requests.HeartbeatResponse;
import org.apache.kafka.common.requests.JoinGroupRequest;
import org.apache.kafka.common.requests.JoinGroupResponse;
import org.apache.kafka.common.requests.LeaveGroupRequest;
import org.apache.kafka.common.requests.LeaveGroupResponse;
import org.apache.kafka.common.requests.OffsetCommitRequest;
import org.apache.kafka.common.requests.OffsetCommitResponse;
import org.apache.kafka.common.requests.SyncGroupRequest;
import org.apache.kafka.common.requests.SyncGroupResponse;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The classic and consumer (KIP-848) group protocols over the wire, one request at a time, with
 * the error codes Apache Kafka answers (this class passes against the reference broker too; see
 * README).
 */
@ExtendWith(OxbowBrokerExtension.class)
@BrokerOverrides({"group.initial.rebalance.delay.ms=0"})
class GroupProtocolTest {
    private static JoinGroupRequestData join(String group, String member, int sessionMs) {
        JoinGroupRequestProtocolCollection protocols = new JoinGroupRequestProtocolCollection();
        protocols.add(new JoinGroupRequestProtocol().setName("range").setMetadata(new byte[] {0, 1}));
        return new JoinGroupRequestData()
                .setGroupId(group)
                .setMemberId(member)
                .setSessionTimeoutMs(sessionMs)
                .setRebalanceTimeoutMs(10_000)
                .setProtocolType("consumer")
                .setProtocols(protocols);
    }

    /** FindCoordinator until the coordinator is ready (Kafka creates __consumer_offsets first). */
    static void findCoordinator(RawKafkaClient raw, OxbowBroker broker, String group) throws Exception {
        short v = raw.negotiate(ApiKeys.FIND_COORDINATOR);
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            FindCoordinatorResponse r = raw.send(new FindCoordinatorRequest.Builder(new FindCoordinatorRequestData()
                    .setKeyType((byte) 0).setCoordinatorKeys(List.of(group))), v);
            var c = r.data().coordinators().get(0);
            if (c.errorCode() == Errors.NONE.code()) {
                assertEquals(broker.port(), c.port());
                return;
            }
            assertEquals(Errors.COORDINATOR_NOT_AVAILABLE.code(), c.errorCode(), "FindCoordinator: " + r.data());
            assertTrue(System.currentTimeMillis() < deadline, "coordinator never became available");
            Thread.sleep(200);
        }
    }

    @Test
    void joinSyncHeartbeatLeaveAndTheirErrors(OxbowBroker broker) throws Exception {
        try (RawKafkaClient raw = new RawKafkaClient("127.0.0.1", broker.port())) {
            String g = "raw-group";
            findCoordinator(raw, broker, g);
            findCoordinator(raw, broker, "raw-nope");
            short jv = raw.negotiate(ApiKeys.JOIN_GROUP);
            short sv = raw.negotiate(ApiKeys.SYNC_GROUP);
            short hv = raw.negotiate(ApiKeys.HEARTBEAT);

            JoinGroupResponse bad = raw.send(new JoinGroupRequest.Builder(join(g, "", 1000)), jv);
            assertEquals(Errors.INVALID_SESSION_TIMEOUT.code(), bad.data().errorCode());
            JoinGroupResponse unknown = joinRetrying(raw, join("raw-nope", "ghost", 10_000), jv);
            assertEquals(Errors.UNKNOWN_MEMBER_ID.code(), unknown.data().errorCode());

            // KIP-394: the first join gets a member id to rejoin with.
            JoinGroupResponse first = joinRetrying(raw, join(g, "", 10_000), jv);
            assertEquals(Errors.MEMBER_ID_REQUIRED.code(), first.data().errorCode());
            String member = first.data().memberId();
            assertTrue(member.startsWith("oxbow-compat-raw-"), member);
            JoinGroupResponse joined = raw.send(new JoinGroupRequest.Builder(join(g, member, 10_000)), jv);
            assertEquals(Errors.NONE.code(), joined.data().errorCode());
            assertEquals(member, joined.data().leader());
            assertEquals(1, joined.data().generationId());
            assertEquals("range", joined.data().protocolName());
            assertEquals(1, joined.data().members().size());
            int gen = joined.data().generationId();

            HeartbeatResponse early = raw.send(new HeartbeatRequest.Builder(new HeartbeatRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen)), hv);
            assertEquals(Errors.NONE.code(), early.data().errorCode(), "heartbeat before SyncGroup");
            assertTrue(sv >= 5);
            SyncGroupResponse noProtocol = raw.send(new SyncGroupRequest.Builder(new SyncGroupRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen)), sv);
            assertEquals(Errors.INCONSISTENT_GROUP_PROTOCOL.code(), noProtocol.data().errorCode(),
                    "SyncGroup v5+ must name the protocol type and name");
            SyncGroupResponse wrongGen = raw.send(new SyncGroupRequest.Builder(new SyncGroupRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen + 5)
                    .setProtocolType("consumer").setProtocolName("range")), sv);
            assertEquals(Errors.ILLEGAL_GENERATION.code(), wrongGen.data().errorCode());
            SyncGroupResponse synced = raw.send(new SyncGroupRequest.Builder(new SyncGroupRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen)
                    .setProtocolType("consumer").setProtocolName("range")
                    .setAssignments(List.of(new SyncGroupRequestAssignment()
                            .setMemberId(member).setAssignment(new byte[] {9, 9})))), sv);
            assertEquals(Errors.NONE.code(), synced.data().errorCode());
            assertEquals(List.of((byte) 9, (byte) 9), List.of(synced.data().assignment()[0], synced.data().assignment()[1]));

            HeartbeatResponse ok = raw.send(new HeartbeatRequest.Builder(new HeartbeatRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen)), hv);
            assertEquals(Errors.NONE.code(), ok.data().errorCode());
            HeartbeatResponse stale = raw.send(new HeartbeatRequest.Builder(new HeartbeatRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen - 1)), hv);
            assertEquals(Errors.ILLEGAL_GENERATION.code(), stale.data().errorCode());
            HeartbeatResponse stranger = raw.send(new HeartbeatRequest.Builder(new HeartbeatRequestData()
                    .setGroupId(g).setMemberId("stranger").setGenerationId(gen)), hv);
            assertEquals(Errors.UNKNOWN_MEMBER_ID.code(), stranger.data().errorCode());

            // Commits: generation checks, unknown topics, oversized metadata.
            try (Admin admin = broker.admin()) {
                Kit.createTopic(admin, "raw-topic", 2);
            }
            // v10 names topics by id; this test names them.
            short ov = (short) Math.min(9, raw.negotiate(ApiKeys.OFFSET_COMMIT));
            OffsetCommitResponse commits;
            long deadline = System.currentTimeMillis() + 30_000;
            do {
                // Kafka's brokers may learn of the new topic a moment after CreateTopics returns.
                commits = raw.send(OffsetCommitRequest.Builder.forTopicNames(new OffsetCommitRequestData()
                        .setGroupId(g).setMemberId(member).setGenerationIdOrMemberEpoch(gen)
                        .setTopics(List.of(
                                topic("raw-topic", 0, "ok"),
                                topic("raw-missing", 0, "ok"),
                                topic("raw-topic", 1, "x".repeat(5000))))), ov);
            } while (commits.data().topics().stream().anyMatch(t -> t.name().equals("raw-topic") && t.partitions().stream()
                    .anyMatch(p -> p.errorCode() == Errors.UNKNOWN_TOPIC_OR_PARTITION.code()))
                    && System.currentTimeMillis() < deadline);
            // Responses may group partitions by topic in any order (Kafka puts unknown topics first).
            java.util.Map<String, Short> errors = new java.util.HashMap<>();
            commits.data().topics().forEach(t -> t.partitions().forEach(
                    p -> errors.put(t.name() + "-" + p.partitionIndex(), p.errorCode())));
            assertEquals(java.util.Map.of(
                    "raw-topic-0", Errors.NONE.code(),
                    "raw-missing-0", Errors.UNKNOWN_TOPIC_OR_PARTITION.code(),
                    "raw-topic-1", Errors.OFFSET_METADATA_TOO_LARGE.code()), errors);
            OffsetCommitResponse staleCommit = raw.send(OffsetCommitRequest.Builder.forTopicNames(new OffsetCommitRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationIdOrMemberEpoch(gen + 1)
                    .setTopics(List.of(topic("raw-topic", 0, "")))), ov);
            assertEquals(Errors.ILLEGAL_GENERATION.code(), staleCommit.data().topics().get(0).partitions().get(0).errorCode());

            // A group with members cannot be deleted; once its member left, it can.
            short dv = raw.negotiate(ApiKeys.DELETE_GROUPS);
            DeleteGroupsResponse busy = raw.send(new DeleteGroupsRequest.Builder(new DeleteGroupsRequestData()
                    .setGroupsNames(List.of(g, "raw-never-existed"))), dv);
            assertEquals(Errors.NON_EMPTY_GROUP.code(), busy.data().results().find(g).errorCode());
            assertEquals(Errors.GROUP_ID_NOT_FOUND.code(), busy.data().results().find("raw-never-existed").errorCode());
            short lv = raw.negotiate(ApiKeys.LEAVE_GROUP);
            LeaveGroupResponse left = raw.send(new LeaveGroupRequest.Builder(g, List.of(
                    new MemberIdentity().setMemberId(member),
                    new MemberIdentity().setMemberId("stranger"))), lv);
            assertEquals(Errors.NONE.code(), left.data().errorCode());
            assertEquals(Errors.NONE.code(), left.data().members().get(0).errorCode());
            assertEquals(Errors.UNKNOWN_MEMBER_ID.code(), left.data().members().get(1).errorCode());
            HeartbeatResponse gone = raw.send(new HeartbeatRequest.Builder(new HeartbeatRequestData()
                    .setGroupId(g).setMemberId(member).setGenerationId(gen)), hv);
            assertEquals(Errors.UNKNOWN_MEMBER_ID.code(), gone.data().errorCode());
            DeleteGroupsResponse deleted = raw.send(new DeleteGroupsRequest.Builder(new DeleteGroupsRequestData()
                    .setGroupsNames(List.of(g))), dv);
            assertEquals(Errors.NONE.code(), deleted.data().results().find(g).errorCode());
            try (Admin admin = broker.admin()) {
                assertFalse(Kit.get(admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata())
                        .values().stream().anyMatch(o -> o != null), "offsets of a deleted group");
            }
        }
    }

    private static ConsumerGroupHeartbeatRequestData joinHeartbeat(String group, String member, String topic) {
        return new ConsumerGroupHeartbeatRequestData()
                .setGroupId(group)
                .setMemberId(member)
                .setMemberEpoch(0)
                .setRebalanceTimeoutMs(30_000)
                .setSubscribedTopicNames(List.of(topic))
                .setTopicPartitions(List.of());
    }

    private static ConsumerGroupHeartbeatResponseData heartbeat(RawKafkaClient raw, ConsumerGroupHeartbeatRequestData d,
            short v) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            ConsumerGroupHeartbeatResponse r = raw.send(new ConsumerGroupHeartbeatRequest.Builder(d), v);
            short e = r.data().errorCode();
            boolean retriable = e == Errors.NOT_COORDINATOR.code() || e == Errors.COORDINATOR_LOAD_IN_PROGRESS.code()
                    || e == Errors.COORDINATOR_NOT_AVAILABLE.code();
            if (!retriable || System.currentTimeMillis() > deadline) {
                return r.data();
            }
            Thread.sleep(200);
        }
    }

    @Test
    void consumerGroupHeartbeatAndItsErrors(OxbowBroker broker) throws Exception {
        String g = "raw-kip848";
        String topic = "raw-kip848-topic";
        Uuid topicId;
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 4);
            topicId = Kit.get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).topicId();
        }
        try (RawKafkaClient raw = new RawKafkaClient("127.0.0.1", broker.port())) {
            findCoordinator(raw, broker, g);
            short v = raw.negotiate(ApiKeys.CONSUMER_GROUP_HEARTBEAT);
            assertTrue(v >= 1, "ConsumerGroupHeartbeat v1 (client-generated member ids) is served");

            // Request checks.
            assertEquals(Errors.INVALID_REQUEST.code(),
                    heartbeat(raw, joinHeartbeat(g, "", topic), v).errorCode(), "v1 needs a member id");
            assertEquals(Errors.INVALID_REQUEST.code(),
                    heartbeat(raw, joinHeartbeat(g, "m1", topic).setRebalanceTimeoutMs(-1), v).errorCode());
            assertEquals(Errors.INVALID_REQUEST.code(),
                    heartbeat(raw, joinHeartbeat(g, "m1", topic).setTopicPartitions(null), v).errorCode());
            assertEquals(Errors.UNSUPPORTED_ASSIGNOR.code(),
                    heartbeat(raw, joinHeartbeat(g, "m1", topic).setServerAssignor("nope"), v).errorCode());

            // The first member gets every partition at epoch 1.
            ConsumerGroupHeartbeatResponseData joined = heartbeat(raw, joinHeartbeat(g, "m1", topic), v);
            assertEquals(Errors.NONE.code(), joined.errorCode(), joined.toString());
            assertEquals("m1", joined.memberId());
            assertEquals(1, joined.memberEpoch());
            assertTrue(joined.heartbeatIntervalMs() > 0);
            assertEquals(1, joined.assignment().topicPartitions().size());
            assertEquals(topicId, joined.assignment().topicPartitions().get(0).topicId());
            assertEquals(List.of(0, 1, 2, 3), joined.assignment().topicPartitions().get(0).partitions());

            ConsumerGroupHeartbeatRequestData steady = new ConsumerGroupHeartbeatRequestData()
                    .setGroupId(g).setMemberId("m1").setMemberEpoch(1).setRebalanceTimeoutMs(-1);
            ConsumerGroupHeartbeatResponseData same = heartbeat(raw, steady, v);
            assertEquals(Errors.NONE.code(), same.errorCode());
            assertEquals(1, same.memberEpoch());
            assertEquals(null, same.assignment(), "an unchanged assignment is not resent");
            assertEquals(Errors.FENCED_MEMBER_EPOCH.code(),
                    heartbeat(raw, steady.duplicate().setMemberEpoch(7), v).errorCode());
            assertEquals(Errors.UNKNOWN_MEMBER_ID.code(),
                    heartbeat(raw, steady.duplicate().setMemberId("ghost"), v).errorCode());

            // Commits carry the member epoch, through OffsetCommit v9.
            short ov = (short) Math.min(9, raw.negotiate(ApiKeys.OFFSET_COMMIT));
            assertEquals(9, ov);
            OffsetCommitResponse stale = raw.send(OffsetCommitRequest.Builder.forTopicNames(new OffsetCommitRequestData()
                    .setGroupId(g).setMemberId("m1").setGenerationIdOrMemberEpoch(0)
                    .setTopics(List.of(topic(topic, 0, "")))), ov);
            assertEquals(Errors.STALE_MEMBER_EPOCH.code(), stale.data().topics().get(0).partitions().get(0).errorCode());
            OffsetCommitResponse ok = raw.send(OffsetCommitRequest.Builder.forTopicNames(new OffsetCommitRequestData()
                    .setGroupId(g).setMemberId("m1").setGenerationIdOrMemberEpoch(1)
                    .setTopics(List.of(topic(topic, 0, "")))), ov);
            assertEquals(Errors.NONE.code(), ok.data().topics().get(0).partitions().get(0).errorCode());

            // Static members: a second incarnation is refused while the first holds the instance id.
            ConsumerGroupHeartbeatResponseData s1 = heartbeat(raw, joinHeartbeat(g, "s1", topic).setInstanceId("i1"), v);
            assertEquals(Errors.NONE.code(), s1.errorCode());
            assertEquals(Errors.UNRELEASED_INSTANCE_ID.code(),
                    heartbeat(raw, joinHeartbeat(g, "s2", topic).setInstanceId("i1"), v).errorCode());

            // ConsumerGroupDescribe: the group and its members; a classic or missing group is not found.
            short dv = raw.negotiate(ApiKeys.CONSUMER_GROUP_DESCRIBE);
            ConsumerGroupDescribeResponse described = raw.send(new ConsumerGroupDescribeRequest.Builder(
                    new ConsumerGroupDescribeRequestData().setGroupIds(List.of(g, "raw-kip848-missing"))), dv);
            ConsumerGroupDescribeResponseData.DescribedGroup dg = described.data().groups().get(0);
            assertEquals(Errors.NONE.code(), dg.errorCode());
            assertEquals("uniform", dg.assignorName());
            assertEquals(2, dg.members().size());
            assertTrue(dg.members().stream().anyMatch(m -> m.memberId().equals("s1")
                    && "i1".equals(m.instanceId()) && m.subscribedTopicNames().equals(List.of(topic))));
            assertEquals(Errors.GROUP_ID_NOT_FOUND.code(), described.data().groups().get(1).errorCode());

            // Leaving: epoch -1 in, -1 out; then the member is unknown.
            ConsumerGroupHeartbeatResponseData left =
                    heartbeat(raw, steady.duplicate().setMemberEpoch(-1), v);
            assertEquals(Errors.NONE.code(), left.errorCode());
            assertEquals(-1, left.memberEpoch());
            assertEquals(Errors.UNKNOWN_MEMBER_ID.code(), heartbeat(raw, steady, v).errorCode());
        }
    }

    /** JoinGroup, retried while the coordinator is still loading (as clients do). */
    private static JoinGroupResponse joinRetrying(RawKafkaClient raw, JoinGroupRequestData data, short v) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            JoinGroupResponse r = raw.send(new JoinGroupRequest.Builder(data), v);
            short e = r.data().errorCode();
            boolean retriable = e == Errors.NOT_COORDINATOR.code() || e == Errors.COORDINATOR_LOAD_IN_PROGRESS.code()
                    || e == Errors.COORDINATOR_NOT_AVAILABLE.code();
            if (!retriable || System.currentTimeMillis() > deadline) {
                return r;
            }
            Thread.sleep(200);
        }
    }

    private static OffsetCommitRequestTopic topic(String name, int partition, String metadata) {
        return new OffsetCommitRequestTopic().setName(name).setPartitions(List.of(
                new OffsetCommitRequestPartition().setPartitionIndex(partition).setCommittedOffset(5)
                        .setCommittedMetadata(metadata)));
    }
}
