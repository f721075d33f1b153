package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.message.ProduceRequestData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.SimpleRecord;
import org.apache.kafka.common.requests.ProduceRequest;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Producer delivery modes: the default (idempotent, acks=all), explicit idempotence, and the
 * non-idempotent acks=1 and acks=0. Every mode must land exactly the records sent, in order.
 */
@ExtendWith(OxbowBrokerExtension.class)
class IdempotenceTest {
    static final int N = 2_000;

    static long baseTs() {
        return (System.currentTimeMillis() / 1000) * 1000 - 600_000;
    }

    /** Sends N records to partition 0 of a fresh topic; returns their metadata in send order. */
    static List<RecordMetadata> produce(OxbowBroker broker, String topic, Map<String, Object> cfg, long base)
            throws Exception {
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1);
        }
        List<RecordMetadata> out = new ArrayList<>(N);
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(cfg)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>(N);
            for (int i = 0; i < N; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, 0, base + i, utf8("k-" + i), Kit.payload(i))));
            }
            for (Future<RecordMetadata> f : fs) {
                out.add(get(f));
            }
        }
        return out;
    }

    /** Reads partition 0 from the beginning and checks it holds exactly records 0..N-1 in order. */
    static void assertLogHoldsExactly(OxbowBroker broker, String topic, long base) {
        TopicPartition tp = tp(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Kit.pollAtLeast(consumer, N);
            assertEquals(N, got.size(), "records in " + topic);
            for (int i = 0; i < N; i++) {
                ConsumerRecord<byte[], byte[]> r = got.get(i);
                assertEquals(i, r.offset(), "offset of record " + i);
                assertEquals("k-" + i, str(r.key()), "key at offset " + i);
                assertArrayEquals(Kit.payload(i), r.value(), "value at offset " + i);
                assertEquals(base + i, r.timestamp(), "timestamp at offset " + i);
            }
            assertEquals((long) N, consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp),
                    "endOffsets of " + topic + " (duplicates would show here)");
        }
    }

    static void assertOffsetsContiguous(List<RecordMetadata> meta) {
        for (int i = 0; i < meta.size(); i++) {
            assertEquals(i, meta.get(i).offset(), "RecordMetadata offset of record " + i);
        }
    }

    @Test
    void defaultProducerIsIdempotentAndExact(OxbowBroker broker) throws Exception {
        String topic = "idem-default";
        long base = baseTs();
        List<RecordMetadata> meta = produce(broker, topic, Map.of(), base);
        assertOffsetsContiguous(meta);
        assertLogHoldsExactly(broker, topic, base);
    }

    @Test
    void explicitIdempotence(OxbowBroker broker) throws Exception {
        String topic = "idem-explicit";
        long base = baseTs();
        List<RecordMetadata> meta = produce(broker, topic, Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
                ProducerConfig.BATCH_SIZE_CONFIG, 4096), base);
        assertOffsetsContiguous(meta);
        assertLogHoldsExactly(broker, topic, base);
    }

    @Test
    void twoIdempotentProducersInterleaved(OxbowBroker broker) throws Exception {
        String topic = "idem-two-producers";
        int each = 500;
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1);
        }
        try (KafkaProducer<byte[], byte[]> a = broker.producer(Map.of());
                KafkaProducer<byte[], byte[]> b = broker.producer(Map.of())) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < each; i++) {
                fs.add(a.send(new ProducerRecord<>(topic, 0, null, utf8("a-" + i))));
                fs.add(b.send(new ProducerRecord<>(topic, 0, null, utf8("b-" + i))));
                if (i % 50 == 49) {
                    a.flush();
                    b.flush();
                }
            }
            a.flush();
            b.flush();
            for (Future<RecordMetadata> f : fs) {
                get(f);
            }
        }
        TopicPartition tp = tp(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Kit.pollAtLeast(consumer, 2 * each);
            assertEquals(2 * each, got.size(), "records from two producers");
            Map<String, Integer> next = new HashMap<>(Map.of("a", 0, "b", 0));
            for (int j = 0; j < got.size(); j++) {
                assertEquals(j, got.get(j).offset());
                String[] v = str(got.get(j).value()).split("-");
                assertEquals((int) next.get(v[0]), Integer.parseInt(v[1]), "per-producer order at offset " + j);
                next.put(v[0], next.get(v[0]) + 1);
            }
            assertEquals(Map.of("a", each, "b", each), next);
        }
    }

    /**
     * DescribeProducers shows what the broker tracks for idempotence: one state per producer id,
     * with the last sequence number it accepted; nothing for a non-idempotent producer.
     */
    @Test
    void describeProducersShowsIdempotentState(OxbowBroker broker) throws Exception {
        String topic = "idem-describe-producers";
        int n = 300;
        long base = baseTs();
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 3);
        }
        TopicPartition one = tp(topic, 0);
        TopicPartition two = tp(topic, 1);
        TopicPartition none = tp(topic, 2);
        try (KafkaProducer<byte[], byte[]> a = broker.producer(Map.of());
                KafkaProducer<byte[], byte[]> b = broker.producer(Map.of());
                KafkaProducer<byte[], byte[]> plain = broker.producer(Map.of(
                        ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false, ProducerConfig.ACKS_CONFIG, "1"))) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                fs.add(a.send(new ProducerRecord<>(topic, 0, base + i, null, utf8("a-" + i))));
                fs.add(a.send(new ProducerRecord<>(topic, 1, base + i, null, utf8("a-" + i))));
                fs.add(b.send(new ProducerRecord<>(topic, 1, base + i, null, utf8("b-" + i))));
                fs.add(plain.send(new ProducerRecord<>(topic, 2, base + i, null, utf8("p-" + i))));
            }
            for (Future<RecordMetadata> f : fs) {
                get(f);
            }
        }
        List<ProducerState> s1 = activeProducers(broker, one);
        assertEquals(1, s1.size(), "active producers on " + one + ": " + s1);
        ProducerState s = s1.get(0);
        assertTrue(s.producerId() >= 0, "producerId " + s.producerId());
        assertTrue(s.producerEpoch() >= 0, "producerEpoch " + s.producerEpoch());
        assertEquals(n - 1, s.lastSequence(), "last sequence on " + one);
        assertEquals(base + n - 1, s.lastTimestamp(), "last timestamp on " + one);
        assertFalse(s.currentTransactionStartOffset().isPresent(), "no open transaction");

        List<ProducerState> s2 = activeProducers(broker, two);
        assertEquals(2, s2.size(), "active producers on " + two + ": " + s2);
        assertNotEquals(s2.get(0).producerId(), s2.get(1).producerId(), "distinct producer ids");
        assertTrue(s2.stream().anyMatch(x -> x.producerId() == s.producerId()), "producer a on both partitions");
        for (ProducerState x : s2) {
            assertEquals(n - 1, x.lastSequence(), "last sequence of " + x);
        }

        assertEquals(List.of(), activeProducers(broker, none), "a non-idempotent producer leaves no state");
    }

    @Test
    void nonIdempotentAcksOne(OxbowBroker broker) throws Exception {
        String topic = "acks-1";
        long base = baseTs();
        List<RecordMetadata> meta = produce(broker, topic, Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false,
                ProducerConfig.ACKS_CONFIG, "1"), base);
        assertOffsetsContiguous(meta);
        assertLogHoldsExactly(broker, topic, base);
    }

    @Test
    void nonIdempotentAcksZero(OxbowBroker broker) throws Exception {
        String topic = "acks-0";
        long base = baseTs();
        List<RecordMetadata> meta = produce(broker, topic, Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false,
                ProducerConfig.ACKS_CONFIG, "0"), base);
        // with acks=0 the client never learns offsets
        for (RecordMetadata m : meta) {
            assertEquals(-1L, m.offset(), "acks=0 RecordMetadata offset");
        }
        assertLogHoldsExactly(broker, topic, base);
    }

    @Test
    void acksZeroProduceGetsNoResponse(OxbowBroker broker) throws Exception {
        // An acks=0 Produce must get no response at all: a stray response would be read as the
        // answer to the next request on the connection (correlation id mismatch).
        String topic = "acks-0-raw";
        Uuid topicId;
        try (Admin admin = broker.admin()) {
            CreateTopicsResult res = admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)));
            get(res.all());
            topicId = get(res.topicId(topic));
        }
        long ts = baseTs();
        try (RawKafkaClient raw = new RawKafkaClient("127.0.0.1", broker.port())) {
            // v13+ addresses topics by id; both name and id are set, so any version works
            short v = raw.negotiate(ApiKeys.PRODUCE);
            ProduceRequestData.TopicProduceDataCollection topics = new ProduceRequestData.TopicProduceDataCollection();
            topics.add(new ProduceRequestData.TopicProduceData()
                    .setName(topic)
                    .setTopicId(topicId)
                    .setPartitionData(List.of(new ProduceRequestData.PartitionProduceData()
                            .setIndex(0)
                            .setRecords(MemoryRecords.withRecords(Compression.NONE,
                                    new SimpleRecord(ts, utf8("k0"), utf8("v0")),
                                    new SimpleRecord(ts + 1, utf8("k1"), utf8("v1")))))));
            raw.sendOneWay(ProduceRequest.builder(new ProduceRequestData()
                    .setAcks((short) 0).setTimeoutMs(30_000).setTopicData(topics)), v);
            // the next response on this connection must belong to the next request
            raw.fetchApiVersions();
        }
        TopicPartition tp = tp(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Kit.pollAtLeast(consumer, 2);
            assertEquals(2, got.size(), "records from the acks=0 produce");
            for (int i = 0; i < 2; i++) {
                assertEquals(i, got.get(i).offset());
                assertEquals("k" + i, str(got.get(i).key()));
                assertEquals("v" + i, str(got.get(i).value()));
                assertEquals(ts + i, got.get(i).timestamp());
            }
        }
    }

    static List<ProducerState> activeProducers(OxbowBroker broker, TopicPartition tp) throws Exception {
        try (Admin admin = broker.admin()) {
            List<ProducerState> states = new ArrayList<>(
                    get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers());
            states.sort(Comparator.comparingLong(ProducerState::producerId));
            return states;
        }
    }
}
