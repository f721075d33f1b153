package io.oxbow.bench;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;

import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * End-to-end latency at a fixed rate below saturation: one producer sends `rate` records per
 * second (linger.ms=0) carrying System.nanoTime(); a consumer in the same JVM (assign(), no group)
 * records send-to-receive latency in microseconds. The first 10% of the run is warm-up.
 * Prints {@code RESULT count=N p50_us=.. p99_us=.. p999_us=.. max_us=..}.
 *
 * Usage: FixedRateLatency bootstrap topic rate seconds record_size acks
 */
public final class FixedRateLatency {
    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println("usage: FixedRateLatency bootstrap topic rate seconds record_size acks");
            System.exit(2);
        }
        String bootstrap = args[0], topic = args[1];
        int rate = Integer.parseInt(args[2]);
        int seconds = Integer.parseInt(args[3]);
        int size = Math.max(8, Integer.parseInt(args[4]));
        String acks = args[5];

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("enable.auto.commit", "false");
        cp.put("fetch.max.wait.ms", "500");
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        pp.put("acks", acks);
        pp.put("linger.ms", "0");

        Histogram h = new Histogram(60_000_000L, 3);
        long total = (long) rate * seconds;
        long warmup = total / 10;
        AtomicBoolean done = new AtomicBoolean(false);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo pi : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(topic, pi.partition()));
            }
            consumer.assign(parts);
            consumer.seekToEnd(parts);
            for (TopicPartition tp : parts) {
                consumer.position(tp);
            }
            Thread sender = new Thread(() -> {
                long interval = 1_000_000_000L / rate;
                long next = System.nanoTime();
                byte[] pad = new byte[size];
                for (long i = 0; i < total; i++) {
                    // Sleep, not spin: a spinning sender would take a core from the broker.
                    for (long wait = next - System.nanoTime(); wait > 0; wait = next - System.nanoTime()) {
                        LockSupport.parkNanos(wait);
                    }
                    byte[] v = pad.clone();
                    ByteBuffer.wrap(v).putLong(System.nanoTime());
                    producer.send(new ProducerRecord<>(topic, v));
                    next += interval;
                }
                producer.flush();
                done.set(true);
            });
            sender.start();
            long seen = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(seconds + 60L).toNanos();
            while (seen < total && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    long lat = (System.nanoTime() - ByteBuffer.wrap(r.value()).getLong()) / 1000;
                    if (seen++ >= warmup) {
                        h.recordValue(Math.min(lat, h.getHighestTrackableValue()));
                    }
                }
            }
            sender.join();
            System.out.printf("RESULT count=%d p50_us=%d p99_us=%d p999_us=%d max_us=%d%n", h.getTotalCount(),
                    h.getValueAtPercentile(50), h.getValueAtPercentile(99), h.getValueAtPercentile(99.9), h.getMaxValue());
            if (seen < total) {
                System.err.println("only " + seen + " of " + total + " records arrived");
                System.exit(1);
            }
        }
    }
}
