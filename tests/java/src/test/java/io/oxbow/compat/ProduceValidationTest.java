package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidTimestampException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The broker enforces per-topic produce rules: size limits, timestamp type and bounds. */
@ExtendWith(OxbowBrokerExtension.class)
class ProduceValidationTest {

    private static Throwable sendFails(KafkaProducer<byte[], byte[]> p, ProducerRecord<byte[], byte[]> r) {
        Future<RecordMetadata> f = p.send(r);
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS),
                "the broker accepted a record it must reject");
        return e.getCause();
    }

    private static long endOffset(OxbowBroker broker, TopicPartition tp) {
        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of())) {
            return c.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp);
        }
    }

    @Test
    void recordsOverMaxMessageBytesAreRejected(OxbowBroker broker) throws Exception {
        String dflt = "too-large-default";
        String small = "too-large-topic-limit";
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, dflt, 1);
            Kit.createTopic(admin, small, 1, Map.of("max.message.bytes", "2000"));
        }
        // the producer's own limits are raised so that only the broker can refuse
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of(
                ProducerConfig.MAX_REQUEST_SIZE_CONFIG, 4 * 1024 * 1024,
                ProducerConfig.BATCH_SIZE_CONFIG, 1))) {
            Throwable big = sendFails(p, new ProducerRecord<>(dflt, 0, null, new byte[2 * 1024 * 1024]));
            assertInstanceOf(RecordTooLargeException.class, big, "2 MiB record vs default max.message.bytes");
            assertEquals(0L, get(p.send(new ProducerRecord<>(dflt, 0, null, new byte[900_000]))).offset(),
                    "a 900 kB record fits the default limit");

            Throwable over = sendFails(p, new ProducerRecord<>(small, 0, null, new byte[3000]));
            assertInstanceOf(RecordTooLargeException.class, over, "3000 B record vs max.message.bytes=2000");
            assertEquals(0L, get(p.send(new ProducerRecord<>(small, 0, null, new byte[1000]))).offset(),
                    "a 1000 B record fits max.message.bytes=2000");
        }
        assertEquals(1L, endOffset(broker, tp(dflt, 0)), "only the accepted record was written");
        assertEquals(1L, endOffset(broker, tp(small, 0)), "only the accepted record was written");
    }

    @Test
    void logAppendTimeTopicsStampRecords(OxbowBroker broker) throws Exception {
        String topic = "log-append-time";
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1, Map.of("message.timestamp.type", "LogAppendTime"));
        }
        long clientTs = 1_000_000L; // far in the past: must be replaced, not validated
        RecordMetadata m;
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            m = get(p.send(new ProducerRecord<>(topic, 0, clientTs, utf8("k"), utf8("v"))));
        }
        assertNotEquals(clientTs, m.timestamp(), "RecordMetadata carries the broker's append time");
        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of())) {
            TopicPartition tp = tp(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Kit.pollAtLeast(c, 1);
            assertEquals(1, got.size());
            assertEquals(TimestampType.LOG_APPEND_TIME, got.get(0).timestampType());
            assertEquals(m.timestamp(), got.get(0).timestamp(), "consumed timestamp == RecordMetadata timestamp");
        }
    }

    @Test
    void timestampsTooFarInTheFutureAreRejected(OxbowBroker broker) throws Exception {
        // Kafka 4 default: message.timestamp.after.max.ms = 3600000 (1 h)
        String topic = "future-ts";
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1);
        }
        long now = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            assertInstanceOf(InvalidTimestampException.class,
                    sendFails(p, new ProducerRecord<>(topic, 0, now + 86_400_000L, utf8("k"), utf8("tomorrow"))));
            assertEquals(0L, get(p.send(new ProducerRecord<>(topic, 0, now, utf8("k"), utf8("now")))).offset());
        }
    }

    @Test
    void timestampsTooOldAreRejectedWithBeforeMaxMs(OxbowBroker broker) throws Exception {
        String topic = "old-ts-strict";
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1, Map.of("message.timestamp.before.max.ms", "86400000"));
        }
        long now = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            assertInstanceOf(InvalidTimestampException.class,
                    sendFails(p, new ProducerRecord<>(topic, 0, now - 7 * 86_400_000L, utf8("k"), utf8("last week"))));
            assertEquals(0L, get(p.send(new ProducerRecord<>(topic, 0, now, utf8("k"), utf8("now")))).offset());
        }
    }
}
