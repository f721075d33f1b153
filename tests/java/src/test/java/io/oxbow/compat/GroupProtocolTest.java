package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.kafka.clients.admin.Admin;
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
 * The classic group protocol over the wire, one request at a time, with the error codes Apache
 * Kafka answers (this class passes against the reference broker too; see README).
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
    private static void findCoordinator(RawKafkaClient raw, OxbowBroker broker, String group) throws Exception {
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
