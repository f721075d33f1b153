// A Kafka Java producer (defaults: idempotent, acks=all) sending numbered records "PREFIX<n>"
// until STOPFILE exists, for test_reassignment.py:
//   java -cp <kafka-clients classpath> Produce.java BOOTSTRAP TOPIC PREFIX ACKEDFILE STOPFILE [PER_SECOND]
// (PER_SECOND: at most that many records a second; unlimited without it)
// Writes every acknowledged value to ACKEDFILE (one per line) and prints, as its last line,
// {"sent":N,"acked":N,"failed":N,"errors":[...],"longest_stall_ms":N}: the longest time without an
// acknowledgement while records were outstanding. Every 10 s, and when it sees STOPFILE, it prints
// a progress line to stderr (sent, acknowledged, failed, outstanding), so that a stall's start
// shows in its log.
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class Produce {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "300000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        String topic = args[1], prefix = args[2];
        Path acked = Paths.get(args[3]), stop = Paths.get(args[4]);
        long perSecond = args.length > 5 ? Long.parseLong(args[5]) : 0;
        long start = System.nanoTime();
        ConcurrentLinkedQueue<String> ok = new ConcurrentLinkedQueue<>();
        ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
        AtomicLong lastAck = new AtomicLong(System.nanoTime()), longest = new AtomicLong(), outstanding = new AtomicLong();
        long sent = 0, lastProgress = System.nanoTime();
        try (Producer<String, String> producer = new KafkaProducer<>(p)) {
            while (!Files.exists(stop)) {
                for (int i = 0; i < 50; i++, sent++) {
                    String v = prefix + sent;
                    outstanding.incrementAndGet();
                    producer.send(new ProducerRecord<>(topic, v, v), (m, e) -> {
                        long now = System.nanoTime();
                        long gap = now - lastAck.getAndSet(now);
                        longest.accumulateAndGet(gap, Math::max);
                        outstanding.decrementAndGet();
                        if (e == null) ok.add(v); else errors.add(e.toString());
                    });
                }
                Thread.sleep(5);
                while (perSecond > 0 && sent > perSecond * (System.nanoTime() - start) / 1_000_000_000L) Thread.sleep(5);
                // No acknowledgement while records are outstanding counts as a stall too.
                if (outstanding.get() > 0) longest.accumulateAndGet(System.nanoTime() - lastAck.get(), Math::max);
                if (System.nanoTime() - lastProgress > 10_000_000_000L) {
                    lastProgress = System.nanoTime();
                    progress("running", sent, ok.size(), errors.size(), outstanding.get());
                }
            }
            progress("stop seen, flushing", sent, ok.size(), errors.size(), outstanding.get());
            producer.flush();
        }
        progress("closed", sent, ok.size(), errors.size(), outstanding.get());
        Files.write(acked, ok);
        List<String> errs = errors.stream().limit(5).map(e -> "\"" + e.replace("\"", "'") + "\"").toList();
        System.out.println("{\"sent\":" + sent + ",\"acked\":" + ok.size() + ",\"failed\":" + errors.size()
                + ",\"errors\":[" + String.join(",", errs) + "],\"longest_stall_ms\":" + longest.get() / 1_000_000 + "}");
    }

    static void progress(String what, long sent, long acked, long failed, long outstanding) {
        System.err.println("[" + java.time.LocalTime.now().withNano(0) + "] Produce: " + what + ": sent " + sent
                + ", acknowledged " + acked + ", failed " + failed + ", outstanding " + outstanding);
    }
}
