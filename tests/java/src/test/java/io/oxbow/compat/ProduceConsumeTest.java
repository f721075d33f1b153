package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * 25,000 records per codec through a default (idempotent, acks=all) producer, read back by a
 * group-less consumer and checked field by field and offset by offset.
 */
@ExtendWith(OxbowBrokerExtension.class)
class ProduceConsumeTest {
    static final int RECORDS = 25_000;
    static final int PARTITIONS = 4;
    static final int PER_PARTITION = RECORDS / PARTITIONS;

    @ParameterizedTest(name = "compression.type={0}")
    @ValueSource(strings = {"gzip", "snappy", "lz4", "zstd"})
    void produceAndConsumeEveryRecord(String codec, OxbowBroker broker) throws Exception {
        String topic = "java-" + codec;
        // Within Kafka 4's default log.message.timestamp.after.max.ms / before.max.ms windows.
        long baseTs = (System.currentTimeMillis() / 1000) * 1000 - 600_000;

        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, PARTITIONS);
        }

        RecordMetadata[] meta = new RecordMetadata[RECORDS];
        try (KafkaProducer<byte[], byte[]> producer =
                broker.producer(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec))) {
            List<Future<RecordMetadata>> futures = new ArrayList<>(RECORDS);
            for (int i = 0; i < RECORDS; i++) {
                futures.add(producer.send(record(topic, i, baseTs)));
            }
            for (int i = 0; i < RECORDS; i++) { // bounded waits; flush() could block for delivery.timeout.ms
                meta[i] = get(futures.get(i));
            }
        }

        long[] nextOffset = new long[PARTITIONS];
        for (int i = 0; i < RECORDS; i++) {
            int p = i % PARTITIONS;
            assertEquals(topic, meta[i].topic());
            assertEquals(p, meta[i].partition(), "partition of record " + i);
            assertEquals(nextOffset[p], meta[i].offset(),
                    "RecordMetadata offset of record " + i + " (partition " + p + ")");
            assertEquals(baseTs + i, meta[i].timestamp(), "RecordMetadata timestamp of record " + i);
            nextOffset[p]++;
        }

        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            tps.add(Kit.tp(topic, p));
        }
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(30));
            for (TopicPartition tp : tps) {
                assertEquals(0L, begin.get(tp), "beginningOffsets " + tp);
                assertEquals((long) PER_PARTITION, end.get(tp), "endOffsets " + tp);
            }

            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            List<ConsumerRecord<byte[], byte[]>> got = Kit.pollAtLeast(consumer, RECORDS);
            if (got.size() < RECORDS) {
                fail("consumed only " + got.size() + " of " + RECORDS + " records within the deadline");
            }
            assertEquals(RECORDS, got.size(), "consumed more records than produced");

            long[] expectOffset = new long[PARTITIONS];
            for (ConsumerRecord<byte[], byte[]> r : got) {
                int p = r.partition();
                long off = r.offset();
                assertEquals(expectOffset[p], off,
                        "offsets of " + r.topic() + "-" + p + " must be contiguous from 0");
                expectOffset[p]++;
                int i = (int) (p + PARTITIONS * off); // record i went to partition i % 4, in order
                String at = topic + "-" + p + "@" + off;
                assertEquals(meta[i].offset(), off, "offset vs RecordMetadata at " + at);
                assertEquals("k-" + i, str(r.key()), "key at " + at);
                assertArrayEquals(Kit.payload(i), r.value(), "value at " + at);
                assertEquals(baseTs + i, r.timestamp(), "timestamp at " + at);
                assertEquals(TimestampType.CREATE_TIME, r.timestampType(), "timestamp type at " + at);
                Header[] hs = r.headers().toArray();
                assertEquals(2, hs.length, "header count at " + at);
                assertEquals("h1", hs[0].key());
                assertEquals(Integer.toString(i), str(hs[0].value()), "h1 at " + at);
                assertEquals("h2", hs[1].key());
                byte[] h2 = h2(i);
                if (h2 == null) {
                    assertNull(hs[1].value(), "null h2 at " + at);
                } else {
                    assertNotNull(hs[1].value(), "h2 at " + at);
                    assertArrayEquals(h2, hs[1].value(), "h2 at " + at);
                }
            }
            for (TopicPartition tp : tps) {
                assertEquals((long) PER_PARTITION, expectOffset[tp.partition()], "records read from " + tp);
                assertEquals((long) PER_PARTITION, consumer.position(tp, Duration.ofSeconds(30)),
                        "position after reading " + tp);
            }
        }
    }

    static ProducerRecord<byte[], byte[]> record(String topic, int i, long baseTs) {
        RecordHeaders headers = new RecordHeaders();
        headers.add("h1", utf8(Integer.toString(i)));
        headers.add("h2", h2(i));
        return new ProducerRecord<>(topic, i % PARTITIONS, baseTs + i, utf8("k-" + i), Kit.payload(i), headers);
    }

    /** Null for every third record, otherwise 0..4 bytes (an empty value is not a null value). */
    static byte[] h2(int i) {
        if (i % 3 == 0) {
            return null;
        }
        byte[] b = new byte[i % 5];
        for (int j = 0; j < b.length; j++) {
            b[j] = (byte) (i + j);
        }
        return b;
    }
}
