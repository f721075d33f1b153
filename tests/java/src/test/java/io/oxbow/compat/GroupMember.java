package io.oxbow.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A consumer group member run as its own JVM (so a test can SIGKILL it). Arguments are
 * {@code key=value}: bootstrap, topic, group, assignor (range, roundrobin, sticky,
 * cooperative-sticky), protocol (classic or consumer), instance (group.instance.id), session.
 *
 * <p>It prints one line per event on stdout, flushed: {@code REVOKED p,p}, {@code ASSIGNED p,p},
 * {@code LOST p,p}, each followed by {@code NOW p,p gen=N}; {@code RECORD partition offset};
 * {@code COMMITTED p:offset,...}; {@code CLOSED}. It reads commands on stdin: {@code commit}
 * (commitSync of what it has consumed) and {@code stop} (close, which leaves the group).
 */
public final class GroupMember {
    private GroupMember() {}

    private static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String parts(Collection<TopicPartition> ps) {
        TreeSet<Integer> s = new TreeSet<>();
        for (TopicPartition p : ps) {
            s.add(p.partition());
        }
        StringBuilder b = new StringBuilder();
        for (int p : s) {
            if (b.length() > 0) {
                b.append(',');
            }
            b.append(p);
        }
        return b.toString();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            int i = arg.indexOf('=');
            a.put(arg.substring(0, i), arg.substring(i + 1));
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, a.get("group"));
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, a.getOrDefault("name", "member"));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20");
        String protocol = a.getOrDefault("protocol", "classic");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, a.getOrDefault("session", "10000"));
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            String assignor = switch (a.getOrDefault("assignor", "range")) {
                case "roundrobin" -> RoundRobinAssignor.class.getName();
                case "sticky" -> StickyAssignor.class.getName();
                case "cooperative-sticky" -> CooperativeStickyAssignor.class.getName();
                default -> RangeAssignor.class.getName();
            };
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
        }
        if (a.containsKey("instance")) {
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, a.get("instance"));
        }
        ConcurrentLinkedQueue<String> commands = new ConcurrentLinkedQueue<>();
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    commands.add(line.trim());
                }
            } catch (Exception e) {
                // stdin closed: the parent went away.
            }
            commands.add("stop");
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                private void now() {
                    out("NOW " + parts(c.assignment()) + " gen=" + c.groupMetadata().generationId());
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                    out("REVOKED " + parts(ps));
                    now();
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                    out("ASSIGNED " + parts(ps));
                    now();
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> ps) {
                    out("LOST " + parts(ps));
                    now();
                }
            };
            c.subscribe(List.of(a.get("topic")), listener);
            boolean running = true;
            while (running) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    out("RECORD " + r.partition() + " " + r.offset());
                }
                String cmd;
                while ((cmd = commands.poll()) != null) {
                    if (cmd.equals("commit")) {
                        c.commitSync();
                        List<TopicPartition> owned = new ArrayList<>(c.assignment());
                        owned.sort(Comparator.comparingInt(TopicPartition::partition));
                        List<String> done = new ArrayList<>();
                        for (TopicPartition tp : owned) {
                            done.add(tp.partition() + ":" + c.position(tp));
                        }
                        out("COMMITTED " + String.join(",", done));
                    } else if (cmd.equals("stop")) {
                        running = false;
                    }
                }
            }
        }
        out("CLOSED");
    }
}
