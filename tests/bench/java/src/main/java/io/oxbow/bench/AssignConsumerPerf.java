package io.oxbow.bench;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consume throughput with assign() (no consumer group): reads every partition of a topic from the
 * beginning until `messages` records arrived, and prints one line in the spirit of Kafka's
 * ConsumerPerformance:
 * {@code RESULT messages=N bytes=B seconds=S mb_per_sec=X msg_per_sec=Y}.
 *
 * Usage: AssignConsumerPerf bootstrap topic messages [key=value consumer props...]
 */
public final class AssignConsumerPerf {
    public static void main(String[] args) {
        if (args.length < 3) {
            System.err.println("usage: AssignConsumerPerf bootstrap topic messages [key=value...]");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("fetch.max.bytes", String.valueOf(50 * 1024 * 1024));
        p.put("max.partition.fetch.bytes", String.valueOf(1024 * 1024));
        p.put("max.poll.records", "2000");
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            p.put(kv[0], kv[1]);
        }
        String topic = args[1];
        long want = Long.parseLong(args[2]);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(topic, pi.partition()));
            }
            c.assign(parts);
            c.seekToBeginning(parts);
            long got = 0, bytes = 0;
            long start = System.nanoTime();
            long deadline = start + Duration.ofMinutes(10).toNanos();
            while (got < want && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    got++;
                    bytes += r.serializedValueSize() + Math.max(0, r.serializedKeySize());
                }
            }
            double secs = (System.nanoTime() - start) / 1e9;
            System.out.printf("RESULT messages=%d bytes=%d seconds=%.3f mb_per_sec=%.2f msg_per_sec=%.1f%n",
                    got, bytes, secs, bytes / 1048576.0 / secs, got / secs);
            if (got < want) {
                System.err.println("only " + got + " of " + want + " records arrived before the deadline");
                System.exit(1);
            }
        }
    }
}
