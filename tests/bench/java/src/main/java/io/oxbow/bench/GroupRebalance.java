package io.oxbow.bench;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Rebalance time of a consumer group of N members (Kafka's Java consumer) on a topic of P
 * partitions, under one protocol: {@code eager} (classic, RangeAssignor), {@code cooperative}
 * (classic, CooperativeStickyAssignor) or {@code consumer} (KIP-848, the broker's assignor).
 *
 * <p>N-1 members run in this JVM, one thread each, and one in a child JVM (this class in
 * {@code member} mode, which prints its assignment on every change). Once the N members own
 * every partition (each at least one, none twice):
 * <ul>
 *   <li><b>join</b>: one more member subscribes; timed until the N+1 members own every partition
 *   again, each at least one;</li>
 *   <li><b>die</b>: the child JVM is SIGKILLed (no LeaveGroup); timed until the N members left own
 *   every partition. This includes the session timeout, which detects the death.</li>
 * </ul>
 * Prints {@code RESULT form_ms=F join_ms=J die_ms=D}.
 *
 * <p>Usage: GroupRebalance bootstrap topic partitions protocol members
 * <br>or: GroupRebalance member bootstrap topic protocol group
 */
public final class GroupRebalance {
    private static final long TIMEOUT_MS = 120_000;

    public static void main(String[] args) throws Exception {
        if (args.length == 5 && args[0].equals("member")) {
            child(args[1], args[2], args[3], args[4]);
            return;
        }
        if (args.length != 5) {
            System.err.println("usage: GroupRebalance bootstrap topic partitions protocol members");
            System.exit(2);
        }
        String bootstrap = args[0], topic = args[1], protocol = args[3];
        int partitions = Integer.parseInt(args[2]), members = Integer.parseInt(args[4]);
        String group = "rebalance-" + protocol + "-" + System.nanoTime();
        Map<String, Set<Integer>> owned = new ConcurrentHashMap<>();
        List<Member> local = new ArrayList<>();

        long t0 = System.nanoTime();
        Process child = startChild(bootstrap, topic, protocol, group, owned);
        for (int i = 1; i < members; i++) {
            local.add(Member.start("m" + i, props(bootstrap, protocol, group), topic, owned));
        }
        long form = waitCovered(owned, members, partitions, t0, "the group of " + members + " to form");

        long t1 = System.nanoTime();
        local.add(Member.start("joiner", props(bootstrap, protocol, group), topic, owned));
        long join = waitCovered(owned, members + 1, partitions, t1, "the joiner's rebalance");

        long t2 = System.nanoTime();
        child.destroyForcibly(); // SIGKILL
        child.waitFor();
        owned.remove("child");
        long die = waitCovered(owned, members, partitions, t2, "the rebalance after the SIGKILL");

        System.out.printf("RESULT form_ms=%d join_ms=%d die_ms=%d%n", form, join, die);
        System.out.flush();
        System.exit(0); // the members die with the JVM; their groups are not reused
    }

    static Properties props(String bootstrap, String protocol, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        switch (protocol) {
            case "eager" -> {
                p.put("group.protocol", "classic");
                p.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
            }
            case "cooperative" -> {
                p.put("group.protocol", "classic");
                p.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
            }
            case "consumer" -> p.put("group.protocol", "consumer");
            default -> throw new IllegalArgumentException("protocol: eager, cooperative or consumer, not " + protocol);
        }
        if (!protocol.equals("consumer")) {
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "500");
        }
        return p;
    }

    /** Milliseconds from {@code start} until `n` owners hold every partition, each at least one, none twice. */
    static long waitCovered(Map<String, Set<Integer>> owned, int n, int partitions, long start, String what)
            throws InterruptedException {
        long deadline = start + TIMEOUT_MS * 1_000_000L;
        while (System.nanoTime() < deadline) {
            if (covered(owned, n, partitions)) {
                return (System.nanoTime() - start) / 1_000_000;
            }
            Thread.sleep(2);
        }
        System.err.println("timed out waiting for " + what + ": " + owned);
        System.exit(1);
        return -1;
    }

    static boolean covered(Map<String, Set<Integer>> owned, int n, int partitions) {
        if (owned.size() != n) {
            return false;
        }
        Set<Integer> all = new HashSet<>();
        int sum = 0;
        for (Set<Integer> s : owned.values()) {
            if (s.isEmpty()) {
                return false;
            }
            all.addAll(s);
            sum += s.size();
        }
        return all.size() == partitions && sum == partitions;
    }

    /** The member in the child JVM; its assignment arrives as lines on its stdout. */
    static Process startChild(String bootstrap, String topic, String protocol, String group,
                              Map<String, Set<Integer>> owned) throws Exception {
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        ProcessBuilder pb = new ProcessBuilder(java, "-Xmx256m", "-Dlog4j.configuration=file:/dev/null",
                "-cp", System.getProperty("java.class.path"), GroupRebalance.class.getName(),
                "member", bootstrap, topic, protocol, group);
        pb.redirectError(ProcessBuilder.Redirect.DISCARD);
        Process p = pb.start();
        owned.put("child", Set.of());
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.startsWith("OWNED")) {
                        Set<Integer> s = new HashSet<>();
                        for (String x : line.substring(5).trim().split(",")) {
                            if (!x.isEmpty()) {
                                s.add(Integer.parseInt(x));
                            }
                        }
                        owned.computeIfPresent("child", (k, v) -> Set.copyOf(s));
                    }
                }
            } catch (Exception e) {
                // the child was killed
            }
        });
        reader.setDaemon(true);
        reader.start();
        return p;
    }

    static void child(String bootstrap, String topic, String protocol, String group) {
        Map<String, Set<Integer>> owned = new ConcurrentHashMap<>();
        Member.start("child", props(bootstrap, protocol, group), topic, owned);
        Set<Integer> last = null;
        while (true) {
            Set<Integer> now = owned.getOrDefault("child", Set.of());
            if (!now.equals(last)) {
                StringBuilder b = new StringBuilder("OWNED ");
                for (int x : now) {
                    b.append(x).append(',');
                }
                System.out.println(b);
                System.out.flush();
                last = now;
            }
            try {
                Thread.sleep(1);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** One consumer on its own thread, polling; its owned partitions kept in `owned` under its name. */
    static final class Member implements ConsumerRebalanceListener {
        final String name;
        final Map<String, Set<Integer>> owned;
        final AtomicBoolean running = new AtomicBoolean(true);
        final Set<Integer> mine = new HashSet<>();
        Thread thread;

        Member(String name, Map<String, Set<Integer>> owned) {
            this.name = name;
            this.owned = owned;
        }

        static Member start(String name, Properties p, String topic, Map<String, Set<Integer>> owned) {
            Member m = new Member(name, owned);
            owned.put(name, Set.of());
            m.thread = new Thread(() -> {
                try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                    c.subscribe(List.of(topic), m);
                    while (m.running.get()) {
                        c.poll(Duration.ofMillis(50));
                    }
                }
            }, name);
            m.thread.start();
            return m;
        }

        void publish() {
            owned.put(name, Set.copyOf(mine));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            parts.forEach(tp -> mine.remove(tp.partition()));
            publish();
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            parts.forEach(tp -> mine.add(tp.partition()));
            publish();
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
            onPartitionsRevoked(parts);
        }

        void stop() throws InterruptedException {
            running.set(false);
            thread.join(30_000);
        }
    }
}
