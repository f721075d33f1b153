package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.KafkaFuture;

/** Small helpers shared by the tests: bounded waits and deterministic record contents. */
final class Kit {
    static final long TIMEOUT_S = 30;

    private Kit() {}

    static <T> T get(KafkaFuture<T> f) throws Exception {
        return f.get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    static <T> T get(Future<T> f) throws Exception {
        return f.get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    /** Asserts the future fails with an ExecutionException caused by {@code cause}. */
    static <E extends Throwable> E assertFailsWith(Class<E> cause, KafkaFuture<?> f) {
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> f.get(TIMEOUT_S, TimeUnit.SECONDS),
                "expected the request to fail with " + cause.getSimpleName());
        return assertInstanceOf(cause, e.getCause(),
                "expected " + cause.getSimpleName() + " but got " + e.getCause());
    }

    static void createTopic(Admin admin, String name, int partitions) throws Exception {
        get(admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all());
    }

    static void createTopic(Admin admin, String name, int partitions, Map<String, String> configs)
            throws Exception {
        get(admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs))).all());
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    /**
     * A deterministic value of 10..1000 bytes for record {@code i}: a readable prefix (compresses
     * well) followed by pseudo-random bytes from a per-record LCG (does not).
     */
    static byte[] payload(int i) {
        int size = 10 + (int) ((i * 7919L) % 991);
        byte[] out = new byte[size];
        byte[] prefix = utf8("value-" + i + "|");
        int half = size / 2;
        for (int j = 0; j < half; j++) {
            out[j] = prefix[j % prefix.length];
        }
        long x = 0x9E3779B97F4A7C15L ^ i;
        for (int j = half; j < size; j++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            out[j] = (byte) (x >>> 56);
        }
        return out;
    }

    /**
     * Polls {@code consumer} until {@code expected} records arrived or 60 s passed; returns what
     * arrived (callers assert on the count).
     */
    static List<ConsumerRecord<byte[], byte[]>> pollAtLeast(
            KafkaConsumer<byte[], byte[]> consumer, int expected) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>(expected);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (out.size() < expected && System.nanoTime() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                out.add(r);
            }
        }
        return out;
    }

    static TopicPartition tp(String topic, int p) {
        return new TopicPartition(topic, p);
    }

    /**
     * Admin ListOffsets "latest" of one partition under {@code isolation}: the high watermark for
     * READ_UNCOMMITTED, the last stable offset for READ_COMMITTED.
     */
    static long latestOffset(Admin admin, TopicPartition tp, IsolationLevel isolation) throws Exception {
        return get(admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(isolation))
                .partitionResult(tp)).offset();
    }

    /**
     * Polls the (assigned) {@code consumer} until its position in every partition of {@code tps}
     * reached the end offset the consumer itself reports (the LSO under read_committed), or 60 s
     * passed; returns the records per partition in the order they arrived. Callers assert on the
     * records and on the positions.
     */
    static Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> readToEnd(
            KafkaConsumer<byte[], byte[]> consumer, Collection<TopicPartition> tps) {
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = new LinkedHashMap<>();
        for (TopicPartition tp : tps) {
            out.put(tp, new ArrayList<>());
        }
        Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(TIMEOUT_S));
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            boolean done = true;
            for (TopicPartition tp : tps) {
                if (consumer.position(tp, Duration.ofSeconds(TIMEOUT_S)) < end.get(tp)) {
                    done = false;
                    break;
                }
            }
            if (done) {
                break;
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                out.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new ArrayList<>()).add(r);
            }
        }
        return out;
    }
}
