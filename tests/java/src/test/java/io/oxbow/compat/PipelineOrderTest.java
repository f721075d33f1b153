package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.message.OffsetCommitRequestData;
import org.apache.kafka.common.message.OffsetCommitRequestData.OffsetCommitRequestPartition;
import org.apache.kafka.common.message.OffsetCommitRequestData.OffsetCommitRequestTopic;
import org.apache.kafka.common.message.OffsetFetchRequestData;
import org.apache.kafka.common.message.ProduceRequestData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.SimpleRecord;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.FetchRequest;
import org.apache.kafka.common.requests.FetchResponse;
import org.apache.kafka.common.requests.OffsetCommitRequest;
import org.apache.kafka.common.requests.OffsetCommitResponse;
import org.apache.kafka.common.requests.OffsetFetchRequest;
import org.apache.kafka.common.requests.OffsetFetchResponse;
import org.apache.kafka.common.requests.ProduceRequest;
import org.apache.kafka.common.requests.ProduceResponse;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Requests of one connection take effect in order (issue 23): many requests are written back to
 * back on one socket without waiting for answers, and the last one must see the effect of every
 * one before it, as on Apache Kafka (which handles one request of a connection at a time). Passes
 * against the reference broker too.
 */
@ExtendWith(OxbowBrokerExtension.class)
class PipelineOrderTest {
    private static final int N = 1000;

    private static Uuid createTopic(OxbowBroker broker, String topic) throws Exception {
        try (Admin admin = broker.admin()) {
            CreateTopicsResult res = admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)));
            get(res.all());
            return get(res.topicId(topic));
        }
    }

    @Test
    void pipelinedOffsetCommitsThenOffsetFetchReadTheLast(OxbowBroker broker) throws Exception {
        String topic = "pipelined-commits";
        String group = "pipelined-commits-group";
        createTopic(broker, topic);
        try (RawKafkaClient raw = new RawKafkaClient("127.0.0.1", broker.port())) {
            GroupProtocolTest.findCoordinator(raw, broker, group);
            // v10 names topics by id; these requests name them.
            short cv = (short) Math.min(9, raw.negotiate(ApiKeys.OFFSET_COMMIT));
            short fv = (short) Math.min(9, raw.negotiate(ApiKeys.OFFSET_FETCH));
            // A first commit (waited for) so that the topic is known to the coordinator's broker.
            // Kafka answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while it loads the
            // group's partition of __consumer_offsets.
            untilNone("the first commit", () -> {
                OffsetCommitResponse r = raw.send(commit(group, topic, 0), cv);
                return r.data().topics().get(0).partitions().get(0).errorCode();
            }, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS);
            List<AbstractResponse> answers = pipelined(raw, i -> commit(group, topic, i), cv,
                    OffsetFetchRequest.Builder.forTopicNames(new OffsetFetchRequestData()
                            .setGroups(List.of(new OffsetFetchRequestData.OffsetFetchRequestGroup()
                                    .setGroupId(group)
                                    .setTopics(List.of(new OffsetFetchRequestData.OffsetFetchRequestTopics()
                                            .setName(topic).setPartitionIndexes(List.of(0)))))), false), fv);
            for (int i = 0; i < N; i++) {
                OffsetCommitResponse r = (OffsetCommitResponse) answers.get(i);
                assertEquals(Errors.NONE.code(), r.data().topics().get(0).partitions().get(0).errorCode(),
                        "commit of offset " + (i + 1) + ": " + r.data());
            }
            OffsetFetchResponse fetched = (OffsetFetchResponse) answers.get(N);
            var p = fetched.data().groups().get(0).topics().get(0).partitions().get(0);
            assertEquals(Errors.NONE.code(), p.errorCode(), fetched.data().toString());
            assertEquals(N, p.committedOffset(), "OffsetFetch after " + N + " pipelined commits reads the last");
        }
    }

    interface Code {
        short get() throws Exception;
    }

    /** Sends until the answer is NONE (a new topic or coordinator may take a moment), with only
     * the `meanwhile` errors accepted before that, for at most 30 s. */
    private static void untilNone(String what, Code send, Errors... meanwhile) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        short code;
        while ((code = send.get()) != Errors.NONE.code()) {
            short c = code;
            assertTrue(java.util.Arrays.stream(meanwhile).anyMatch(e -> e.code() == c), what + ": " + Errors.forCode(c));
            assertTrue(System.currentTimeMillis() < deadline, what + " never succeeded: " + Errors.forCode(c));
            Thread.sleep(100);
        }
    }

    /** The requests `each(1..N)` at `version`, then `last` at `lastVersion`, pipelined on one
     * connection: the N + 1 answers in order. */
    private static List<AbstractResponse> pipelined(RawKafkaClient raw,
            java.util.function.IntFunction<AbstractRequest.Builder<?>> each, short version,
            AbstractRequest.Builder<?> last, short lastVersion) throws Exception {
        List<AbstractRequest.Builder<?>> requests = new ArrayList<>();
        List<Short> versions = new ArrayList<>();
        for (int i = 1; i <= N; i++) {
            requests.add(each.apply(i));
            versions.add(version);
        }
        requests.add(last);
        versions.add(lastVersion);
        return raw.pipeline(requests, versions);
    }

    private static OffsetCommitRequest.Builder commit(String group, String topic, long offset) {
        return OffsetCommitRequest.Builder.forTopicNames(new OffsetCommitRequestData()
                .setGroupId(group).setMemberId("").setGenerationIdOrMemberEpoch(-1)
                .setTopics(List.of(new OffsetCommitRequestTopic().setName(topic).setPartitions(List.of(
                        new OffsetCommitRequestPartition().setPartitionIndex(0).setCommittedOffset(offset)
                                .setCommittedMetadata(""))))));
    }

    @Test
    void pipelinedAcks1ProducesThenFetchSeeEveryRecord(OxbowBroker broker) throws Exception {
        String topic = "pipelined-produce";
        Uuid id = createTopic(broker, topic);
        try (RawKafkaClient raw = new RawKafkaClient("127.0.0.1", broker.port())) {
            short pv = raw.negotiate(ApiKeys.PRODUCE);
            short fv = raw.negotiate(ApiKeys.FETCH);
            // Kafka's brokers may learn of the new topic a moment after CreateTopics returns.
            untilNone("the first produce", () -> {
                ProduceResponse r = raw.send(produce(topic, id, 0), pv);
                return r.data().responses().iterator().next().partitionResponses().get(0).errorCode();
            }, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_ID);
            // No waiting (max wait 0): the fetch answers at once with what it sees.
            List<AbstractResponse> answers = pipelined(raw, i -> produce(topic, id, i), pv,
                    FetchRequest.Builder.forConsumer(fv, 0, 0, Map.of(new TopicPartition(topic, 0),
                            new FetchRequest.PartitionData(id, N, -1, 1 << 20, Optional.empty()))), fv);
            for (int i = 0; i < N; i++) {
                var pr = ((ProduceResponse) answers.get(i)).data().responses().iterator().next()
                        .partitionResponses().get(0);
                assertEquals(Errors.NONE.code(), pr.errorCode(), "produce " + (i + 1));
                assertEquals(i + 1, pr.baseOffset(), "produce " + (i + 1) + " was appended in order");
            }
            FetchResponse f = (FetchResponse) answers.get(N);
            var pd = f.data().responses().get(0).partitions().get(0);
            assertEquals(Errors.NONE.code(), pd.errorCode(), f.data().toString());
            assertEquals(N + 1, pd.highWatermark(), "the fetch sees every acks=1 write before it");
            List<String> values = new ArrayList<>();
            for (RecordBatch b : ((MemoryRecords) pd.records()).batches()) {
                for (Record r : b) {
                    if (r.offset() >= N) {
                        values.add(java.nio.charset.StandardCharsets.UTF_8.decode(r.value()).toString());
                    }
                }
            }
            assertEquals(List.of("v" + N), values, "the last record, read by the fetch pipelined after it");
        }
    }

    private static ProduceRequest.Builder produce(String topic, Uuid id, int i) {
        ProduceRequestData.TopicProduceDataCollection topics = new ProduceRequestData.TopicProduceDataCollection();
        topics.add(new ProduceRequestData.TopicProduceData().setName(topic).setTopicId(id)
                .setPartitionData(List.of(new ProduceRequestData.PartitionProduceData().setIndex(0)
                        .setRecords(MemoryRecords.withRecords(Compression.NONE,
                                new SimpleRecord(System.currentTimeMillis(), utf8("k" + i), utf8("v" + i)))))));
        return ProduceRequest.builder(new ProduceRequestData().setAcks((short) 1).setTimeoutMs(30_000)
                .setTopicData(topics));
    }
}
