package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Fetch edge cases: starting inside a batch, fetch sizes smaller than a batch, and offsets out
 * of range. One partition of 100 records written as 10 batches of 10 (zstd-compressed).
 */
@ExtendWith(OxbowBrokerExtension.class)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FetchTest {
    static final String TOPIC = "fetch-edges";
    static final int N = 100;
    final TopicPartition tp = tp(TOPIC, 0);

    @BeforeAll
    void produce(OxbowBroker broker) throws Exception {
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, TOPIC, 1);
        }
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of("compression.type", "zstd"))) {
            for (int b = 0; b < 10; b++) {
                var fs = new java.util.ArrayList<java.util.concurrent.Future<?>>();
                for (int i = b * 10; i < b * 10 + 10; i++) {
                    fs.add(producer.send(new ProducerRecord<>(TOPIC, 0, utf8("k" + i), Kit.payload(i))));
                }
                producer.flush(); // one batch per 10 records
                for (var f : fs) {
                    get(f);
                }
            }
        }
    }

    private static void assertRecords(List<ConsumerRecord<byte[], byte[]>> got, int from) {
        assertEquals(N - from, got.size(), "records from offset " + from);
        for (int j = 0; j < got.size(); j++) {
            int i = from + j;
            assertEquals(i, got.get(j).offset(), "offset");
            assertEquals("k" + i, str(got.get(j).key()), "key at " + i);
            assertArrayEquals(Kit.payload(i), got.get(j).value(), "value at " + i);
        }
    }

    @Test
    void seekIntoTheMiddleOfABatch(OxbowBroker broker) {
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, 35);
            assertRecords(Kit.pollAtLeast(consumer, N - 35), 35);
        }
    }

    @Test
    void fetchSizesSmallerThanOneBatchStillMakeProgress(OxbowBroker broker) {
        // KIP-74: the first batch is returned even when it exceeds the fetch size limits
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, 1,
                ConsumerConfig.FETCH_MAX_BYTES_CONFIG, 1))) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            assertRecords(Kit.pollAtLeast(consumer, N), 0);
        }
    }

    @Test
    void offsetPastTheEndIsOutOfRange(OxbowBroker broker) {
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none"))) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, 500);
            OffsetOutOfRangeException e = assertThrows(OffsetOutOfRangeException.class, () -> {
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (System.nanoTime() < deadline) {
                    consumer.poll(Duration.ofMillis(200));
                }
            }, "fetch at offset 500 of a 100-record log");
            assertEquals(Map.of(tp, 500L), e.offsetOutOfRangePartitions());
        }
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest"))) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, 500);
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (System.nanoTime() < deadline && consumer.position(tp) != N) {
                assertTrue(consumer.poll(Duration.ofMillis(200)).isEmpty(), "nothing past the end");
            }
            assertEquals((long) N, consumer.position(tp), "reset to latest after out of range");
        }
    }

    @Test
    void readCommittedWithoutTransactionsSeesEverything(OxbowBroker broker) {
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            assertEquals((long) N, consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp),
                    "last stable offset with no open transaction");
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            assertRecords(Kit.pollAtLeast(consumer, N), 0);
        }
    }

    @Test
    void fetchAtTheEndWaitsAndReturnsNothing(OxbowBroker broker) {
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 200))) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, N);
            for (int k = 0; k < 3; k++) {
                assertTrue(consumer.poll(Duration.ofMillis(500)).isEmpty(), "no records past the end");
            }
            assertEquals((long) N, consumer.position(tp));
        }
    }
}
