package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * ListOffsets by timestamp, earliest, latest and max-timestamp, through both the consumer
 * (offsetsForTimes) and the admin client (listOffsets).
 *
 * <p>Partition 0: 100 records, timestamps base + 10*offset (strictly increasing), written as 5
 * separate batches. Partition 1: 50 records with timestamps base + offset except offset 30, which
 * carries the maximum (base + 100_000) in the middle of a batch. Partition 2: empty.
 */
@ExtendWith(OxbowBrokerExtension.class)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ListOffsetsTest {
    static final String TOPIC = "list-offsets";
    static final int P0_RECORDS = 100;
    static final int P1_RECORDS = 50;
    static final int P1_MAX_AT = 30;
    static final long P1_MAX_DELTA = 100_000;

    long base;

    @BeforeAll
    void produce(OxbowBroker broker) throws Exception {
        base = (System.currentTimeMillis() / 1000) * 1000 - 600_000;
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, TOPIC, 3);
        }
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            for (int chunk = 0; chunk < 5; chunk++) {
                for (int i = chunk * 20; i < (chunk + 1) * 20; i++) {
                    RecordMetadata m = get(producer.send(
                            new ProducerRecord<>(TOPIC, 0, ts0(i), utf8("k" + i), utf8("v" + i))));
                    assertEquals(i, m.offset(), "offset of partition-0 record " + i);
                }
            }
            Future<?>[] fs = new Future<?>[P1_RECORDS];
            for (int i = 0; i < P1_RECORDS; i++) {
                fs[i] = producer.send(new ProducerRecord<>(TOPIC, 1, ts1(i), utf8("k" + i), utf8("v" + i)));
            }
            producer.flush();
            for (int i = 0; i < P1_RECORDS; i++) {
                assertEquals((long) i, ((RecordMetadata) get(fs[i])).offset(), "offset of partition-1 record " + i);
            }
        }
    }

    long ts0(int offset) {
        return base + 10L * offset;
    }

    long ts1(int offset) {
        return offset == P1_MAX_AT ? base + P1_MAX_DELTA : base + offset;
    }

    @Test
    void consumerOffsetsForTimes(OxbowBroker broker) {
        TopicPartition p0 = tp(TOPIC, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            // exact hit on the first record, on a middle record, and between two records
            assertOffsetForTime(consumer, p0, ts0(0), 0, ts0(0));
            assertOffsetForTime(consumer, p0, ts0(57), 57, ts0(57));
            assertOffsetForTime(consumer, p0, ts0(57) + 5, 58, ts0(58));
            // earlier than everything -> the first record
            assertOffsetForTime(consumer, p0, base - 1_000, 0, ts0(0));
            // the last record, then past the end -> null
            assertOffsetForTime(consumer, p0, ts0(P0_RECORDS - 1), P0_RECORDS - 1, ts0(P0_RECORDS - 1));
            Map<TopicPartition, OffsetAndTimestamp> past = consumer.offsetsForTimes(
                    Map.of(p0, ts0(P0_RECORDS - 1) + 1), Duration.ofSeconds(30));
            assertNull(past.get(p0), "a timestamp past the last record has no offset");

            // partition 1: the max-timestamp record in the middle of the log wins for later times
            TopicPartition p1 = tp(TOPIC, 1);
            assertOffsetForTime(consumer, p1, base + 31, P1_MAX_AT, base + P1_MAX_DELTA);
            assertOffsetForTime(consumer, p1, base + 10, 10, base + 10);

            // empty partition
            TopicPartition p2 = tp(TOPIC, 2);
            Map<TopicPartition, OffsetAndTimestamp> empty =
                    consumer.offsetsForTimes(Map.of(p2, base), Duration.ofSeconds(30));
            assertNull(empty.get(p2), "an empty partition has no offset for any timestamp");
        }
    }

    private static void assertOffsetForTime(KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp,
            long target, long expectOffset, long expectTs) {
        OffsetAndTimestamp got = consumer.offsetsForTimes(Map.of(tp, target), Duration.ofSeconds(30)).get(tp);
        assertNotNull(got, "offsetsForTimes(" + tp + ", " + target + ") returned null");
        assertEquals(expectOffset, got.offset(), "offsetsForTimes(" + tp + ", " + target + ") offset");
        assertEquals(expectTs, got.timestamp(), "offsetsForTimes(" + tp + ") timestamp");
    }

    @Test
    void consumerBeginningAndEndOffsets(OxbowBroker broker) {
        List<TopicPartition> tps = List.of(tp(TOPIC, 0), tp(TOPIC, 1), tp(TOPIC, 2));
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(30));
            assertEquals(Map.of(tps.get(0), 0L, tps.get(1), 0L, tps.get(2), 0L), begin);
            assertEquals(Map.of(tps.get(0), (long) P0_RECORDS, tps.get(1), (long) P1_RECORDS, tps.get(2), 0L), end);
        }
    }

    @Test
    void adminEarliestLatestMaxTimestamp(OxbowBroker broker) throws Exception {
        TopicPartition p0 = tp(TOPIC, 0);
        TopicPartition p1 = tp(TOPIC, 1);
        TopicPartition p2 = tp(TOPIC, 2);
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, ListOffsetsResultInfo> earliest = list(admin, OffsetSpec.earliest(), p0, p1, p2);
            assertEquals(0L, earliest.get(p0).offset(), "earliest p0");
            assertEquals(0L, earliest.get(p1).offset(), "earliest p1");
            assertEquals(0L, earliest.get(p2).offset(), "earliest p2 (empty)");

            Map<TopicPartition, ListOffsetsResultInfo> latest = list(admin, OffsetSpec.latest(), p0, p1, p2);
            assertEquals((long) P0_RECORDS, latest.get(p0).offset(), "latest p0");
            assertEquals((long) P1_RECORDS, latest.get(p1).offset(), "latest p1");
            assertEquals(0L, latest.get(p2).offset(), "latest p2 (empty)");

            Map<TopicPartition, ListOffsetsResultInfo> max = list(admin, OffsetSpec.maxTimestamp(), p0, p1, p2);
            assertEquals(P0_RECORDS - 1L, max.get(p0).offset(), "maxTimestamp offset p0 (last record)");
            assertEquals(ts0(P0_RECORDS - 1), max.get(p0).timestamp(), "maxTimestamp timestamp p0");
            assertEquals((long) P1_MAX_AT, max.get(p1).offset(), "maxTimestamp offset p1 (record inside a batch)");
            assertEquals(base + P1_MAX_DELTA, max.get(p1).timestamp(), "maxTimestamp timestamp p1");
            assertEquals(-1L, max.get(p2).offset(), "maxTimestamp offset on an empty partition");
            assertEquals(-1L, max.get(p2).timestamp(), "maxTimestamp timestamp on an empty partition");

            Map<TopicPartition, ListOffsetsResultInfo> byTs =
                    list(admin, OffsetSpec.forTimestamp(ts0(42) - 3), p0);
            assertEquals(42L, byTs.get(p0).offset(), "admin forTimestamp offset");
            assertEquals(ts0(42), byTs.get(p0).timestamp(), "admin forTimestamp timestamp");

            Map<TopicPartition, ListOffsetsResultInfo> pastEnd =
                    list(admin, OffsetSpec.forTimestamp(ts0(P0_RECORDS - 1) + 1), p0);
            assertEquals(-1L, pastEnd.get(p0).offset(), "admin forTimestamp past the end -> offset -1");
        }
    }

    private static Map<TopicPartition, ListOffsetsResultInfo> list(Admin admin, OffsetSpec spec,
            TopicPartition... tps) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : tps) {
            req.put(tp, spec);
        }
        return get(admin.listOffsets(req).all());
    }
}
