package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Consumer groups with the classic protocol, each member its own JVM (so it can be SIGKILLed):
 * assignments as members come and go, failure detection, resuming at committed offsets, static
 * membership, cooperative rebalancing, committed offsets across a broker crash, and Kafka's own
 * kafka-consumer-groups tool. {@link ConsumerProtocolGroupTest} runs the same tests with
 * {@code group.protocol=consumer} (KIP-848).
 */
@ExtendWith(OxbowBrokerExtension.class)
class ConsumerGroupTest {
    static final int PARTITIONS = 4;
    static final int SESSION_MS = 10_000;

    /** The members' {@code group.protocol}. */
    String protocol() {
        return "classic";
    }

    boolean consumerProtocol() {
        return protocol().equals("consumer");
    }

    /** The assignor DescribeGroups/ConsumerGroupDescribe names for a group of default members. */
    String defaultAssignor() {
        return "range";
    }

    static void createTopic(OxbowBroker broker, String topic) throws Exception {
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, PARTITIONS);
        }
    }

    static ConsumerGroupDescription describe(OxbowBroker broker, String group) throws Exception {
        try (Admin admin = broker.admin()) {
            return get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
        }
    }

    /**
     * Waits until the group is Stable with {@code members} members. Under the consumer protocol a
     * member learns a new epoch at its next heartbeat, so the group may be Reconciling for a moment
     * after every member already owns its final partitions.
     */
    static ConsumerGroupDescription awaitStable(OxbowBroker broker, String group, int members)
            throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        ConsumerGroupDescription d = describe(broker, group);
        while (!(d.groupState() == GroupState.STABLE && d.members().size() == members)) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("group " + group + " not Stable with " + members + " members: " + d);
            }
            Thread.sleep(100);
            d = describe(broker, group);
        }
        return d;
    }

    static void closeAll(List<Member> members) throws Exception {
        for (Member m : members) {
            m.close();
        }
    }

    static void produce(OxbowBroker broker, String topic, int perPartition, int from) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            for (int i = from; i < from + perPartition; i++) {
                for (int part = 0; part < PARTITIONS; part++) {
                    p.send(new ProducerRecord<>(topic, part, utf8("k" + i), utf8(part + "-" + i)));
                }
            }
            p.flush();
        }
    }

    Member member(OxbowBroker b, String name, String group, String topic, String... extra) throws Exception {
        List<String> args = new ArrayList<>(
                List.of("group=" + group, "topic=" + topic, "session=" + SESSION_MS, "protocol=" + protocol()));
        args.addAll(List.of(extra));
        return Member.start(name, b, args.toArray(new String[0]));
    }

    /**
     * Waits until the partitions are split among the members without overlap, the sizes of their
     * shares are {@code sizes} (in any order), every member has had its first assignment, and
     * (classic protocol) all report the same generation. Under the consumer protocol each member
     * has its own epoch and a member whose partitions did not change is not told of a new one, so
     * epochs are not compared.
     */
    void awaitAssignment(List<Member> members, int... sizes) throws InterruptedException {
        List<Integer> want = new ArrayList<>();
        for (int s : sizes) {
            want.add(s);
        }
        want.sort(null);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        String last = "";
        while (System.nanoTime() < deadline) {
            Set<Integer> gens = new HashSet<>();
            List<Integer> got = new ArrayList<>();
            Set<Integer> union = new TreeSet<>();
            int total = 0;
            for (Member m : members) {
                gens.add(m.generation());
                got.add(m.owned().size());
                union.addAll(m.owned());
                total += m.owned().size();
            }
            got.sort(null);
            last = members.stream().map(m -> m.name + "=" + m.owned() + "@" + m.generation())
                    .collect(Collectors.joining(" "));
            boolean generations = !gens.contains(-1) && (consumerProtocol() || gens.size() == 1);
            if (generations && got.equals(want) && total == union.size() && union.size() == PARTITIONS) {
                return;
            }
            Thread.sleep(100);
        }
        throw new AssertionError("assignment did not settle to " + want + "; last seen: " + last);
    }

    @Test
    void membersJoinAndAKilledMembersPartitionsMove(OxbowBroker broker) throws Exception {
        String topic = "groups-scale";
        createTopic(broker, topic);
        List<Member> ms = new ArrayList<>();
        try {
            ms.add(member(broker, "scale-1", "scale", topic));
            awaitAssignment(ms, 4);
            ms.add(member(broker, "scale-2", "scale", topic));
            awaitAssignment(ms, 2, 2);
            ms.add(member(broker, "scale-3", "scale", topic));
            ms.add(member(broker, "scale-4", "scale", topic));
            awaitAssignment(ms, 1, 1, 1, 1);
            ms.add(member(broker, "scale-5", "scale", topic));
            awaitAssignment(ms, 0, 1, 1, 1, 1);
            Member idle = ms.stream().filter(m -> m.owned().isEmpty()).findFirst().orElseThrow();
            ConsumerGroupDescription d = awaitStable(broker, "scale", 5);
            assertEquals(defaultAssignor(), d.partitionAssignor());

            Member victim = ms.stream().filter(m -> !m.owned().isEmpty()).findFirst().orElseThrow();
            Set<Integer> lost = victim.owned();
            long t0 = System.nanoTime();
            victim.kill();
            ms.remove(victim);
            awaitAssignment(ms, 1, 1, 1, 1);
            long ms_ = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertEquals(1, idle.owned().size(), "the idle member took over a partition");
            Set<Integer> owners = new TreeSet<>();
            ms.forEach(m -> owners.addAll(m.owned()));
            assertTrue(owners.containsAll(lost), "the killed member's partitions " + lost + " moved");
            System.out.printf("[oxbow-compat] %s protocol: SIGKILLed member's partitions %s moved after %d ms"
                    + " (session timeout %d ms)%n", protocol(), lost, ms_, SESSION_MS);
        } finally {
            closeAll(ms);
        }
    }

    /** Offsets each member consumed per partition, from RECORD lines. */
    static Map<Integer, List<Long>> consumed(Collection<Member> ms) {
        Map<Integer, List<Long>> out = new TreeMap<>();
        for (Member m : ms) {
            for (String l : m.lines()) {
                if (l.startsWith("RECORD ")) {
                    String[] f = l.split(" ");
                    out.computeIfAbsent(Integer.parseInt(f[1]), k -> new ArrayList<>()).add(Long.parseLong(f[2]));
                }
            }
        }
        return out;
    }

    static void awaitConsumed(List<Member> ms, int total) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        while (consumed(ms).values().stream().mapToInt(List::size).sum() < total) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("consumed " + consumed(ms).values().stream().mapToInt(List::size).sum()
                        + " of " + total);
            }
            Thread.sleep(100);
        }
    }

    @Test
    void restartedGroupResumesAtCommittedOffsets(OxbowBroker broker) throws Exception {
        String topic = "groups-resume";
        createTopic(broker, topic);
        List<Member> first = new ArrayList<>();
        first.add(member(broker, "resume-a", "resume", topic));
        first.add(member(broker, "resume-b", "resume", topic));
        Map<Integer, Long> committed = new TreeMap<>();
        try {
            awaitAssignment(first, 2, 2);
            // Records go in once the two members share the partitions: nothing is committed yet,
            // so a partition moving mid-read (the consumer protocol has no initial rebalance
            // delay) would be read again from the start by its new owner.
            produce(broker, topic, 100, 0);
            awaitConsumed(first, 4 * 100);
            for (Member m : first) {
                m.send("commit");
                m.await("COMMITTED", 30, l -> l.stream().anyMatch(x -> x.startsWith("COMMITTED")));
                String line = m.lastStarting("COMMITTED ");
                for (String pc : line.substring(10).trim().split(",")) {
                    String[] f = pc.split(":");
                    committed.put(Integer.parseInt(f[0]), Long.parseLong(f[1]));
                }
            }
            assertEquals(Map.of(0, 100L, 1, 100L, 2, 100L, 3, 100L), committed);
            // 100 more per partition, consumed but not committed, then both members crash.
            produce(broker, topic, 100, 100);
            awaitConsumed(first, 4 * 200);
        } finally {
            for (Member m : first) {
                m.kill();
            }
        }
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, OffsetAndMetadata> stored =
                    get(admin.listConsumerGroupOffsets("resume").partitionsToOffsetAndMetadata());
            for (int p = 0; p < PARTITIONS; p++) {
                assertEquals(100L, stored.get(tp(topic, p)).offset(), "committed offset of partition " + p);
            }
        }
        List<Member> second = new ArrayList<>();
        second.add(member(broker, "resume-c", "resume", topic));
        second.add(member(broker, "resume-d", "resume", topic));
        try {
            // The crashed members are dropped after their session; then the new ones share the topic.
            awaitAssignment(second, 2, 2);
            awaitConsumed(second, 4 * 100);
            Thread.sleep(1000);
            Map<Integer, List<Long>> got = consumed(second);
            for (int p = 0; p < PARTITIONS; p++) {
                List<Long> offsets = got.get(p);
                List<Long> want = new ArrayList<>();
                for (long o = 100; o < 200; o++) {
                    want.add(o);
                }
                assertEquals(want, offsets, "partition " + p + ": exactly the uncommitted records, once, in order");
            }
        } finally {
            closeAll(second);
        }
    }

    @Test
    void staticMemberRestartCausesNoRebalance(OxbowBroker broker) throws Exception {
        String topic = "groups-static";
        createTopic(broker, topic);
        String[] slow = {"session=30000"};
        Member s1 = member(broker, "static-1", "static", topic, "instance=i1", slow[0]);
        Member s2 = member(broker, "static-2", "static", topic, "instance=i2", slow[0]);
        Member s2b = null;
        try {
            awaitAssignment(List.of(s1, s2), 2, 2);
            int generation = s2.generation();
            Optional<Integer> groupEpoch = awaitStable(broker, "static", 2).groupEpoch();
            long s1Events = s1.count("NOW");
            Set<Integer> s2Owned = s2.owned();
            if (consumerProtocol()) {
                // KIP-848: a static member that closes leaves "temporarily" (epoch -2) and keeps
                // its partitions for the session; a new incarnation while the old one is still in
                // the group would be refused (UNRELEASED_INSTANCE_ID).
                s2.stop();
            } else {
                s2.kill();
            }
            s2b = member(broker, "static-2b", "static", topic, "instance=i2", slow[0]);
            s2b.await("an assignment", 60, l -> l.stream().anyMatch(x -> x.startsWith("NOW")));
            Member restarted = s2b;
            restarted.await("its partitions", 60, l -> restarted.owned().equals(s2Owned));
            if (consumerProtocol()) {
                // Members' epochs as the client reports them in callbacks can lag; the group's
                // epoch is what a rebalance would move.
                assertEquals(groupEpoch, awaitStable(broker, "static", 2).groupEpoch(), "no new group epoch");
            } else {
                assertEquals(generation, s2b.generation(), "the restarted static member rejoined the same generation");
            }
            assertEquals(s2Owned, s2b.owned(), "and got its partitions back");
            Thread.sleep(3000);
            assertEquals(s1Events, s1.count("NOW"), "the other member saw no rebalance: " + s1.lines());
            ConsumerGroupDescription d = awaitStable(broker, "static", 2);
            assertEquals(Set.of("i1", "i2"), d.members().stream()
                    .map(m -> m.groupInstanceId().orElse("?")).collect(Collectors.toSet()));
        } finally {
            s1.close();
            s2.kill();
            if (s2b != null) {
                s2b.close();
            }
        }
    }

    @Test
    void cooperativeStickyNeverRevokesPartitionsThatStay(OxbowBroker broker) throws Exception {
        String topic = "groups-coop";
        createTopic(broker, topic);
        List<Member> ms = new ArrayList<>();
        try {
            ms.add(member(broker, "coop-1", "coop", topic, "assignor=cooperative-sticky"));
            awaitAssignment(ms, 4);
            ms.add(member(broker, "coop-2", "coop", topic, "assignor=cooperative-sticky"));
            awaitAssignment(ms, 2, 2);
            ms.add(member(broker, "coop-3", "coop", topic, "assignor=cooperative-sticky"));
            awaitAssignment(ms, 1, 1, 2);
            Member first = ms.get(0);
            for (Member m : ms) {
                Set<Integer> revoked = m.allIn("REVOKED");
                Set<Integer> kept = new TreeSet<>(m.owned());
                kept.retainAll(revoked);
                assertTrue(kept.isEmpty(), m.name + " had partitions it still owns revoked: " + kept + "\n" + m.lines());
                assertTrue(m.allIn("LOST").isEmpty(), m.name + " lost partitions: " + m.lines());
            }
            // The first member gave up exactly the partitions that moved away from it.
            Set<Integer> gaveUp = new TreeSet<>(Set.of(0, 1, 2, 3));
            gaveUp.removeAll(first.owned());
            assertEquals(gaveUp, first.allIn("REVOKED"));
            ConsumerGroupDescription d = describe(broker, "coop");
            assertEquals(consumerProtocol() ? defaultAssignor() : "cooperative-sticky", d.partitionAssignor());
        } finally {
            closeAll(ms);
        }
    }

    @Test
    void committedOffsetsSurviveBrokerKill(OxbowBroker broker) throws Exception {
        String topic = "groups-durable";
        createTopic(broker, topic);
        Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
        for (int p = 0; p < PARTITIONS; p++) {
            commit.put(tp(topic, p), new OffsetAndMetadata(10L * (p + 1), "meta-" + p));
        }
        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of("group.id", "durable"))) {
            c.assign(commit.keySet());
            c.commitSync(commit);
        }
        broker.restart(true);
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, OffsetAndMetadata> stored =
                    get(admin.listConsumerGroupOffsets("durable").partitionsToOffsetAndMetadata());
            assertEquals(commit.keySet(), stored.keySet());
            for (TopicPartition t : commit.keySet()) {
                assertEquals(commit.get(t).offset(), stored.get(t).offset(), t.toString());
                assertEquals(commit.get(t).metadata(), stored.get(t).metadata(), t.toString());
            }
            Collection<GroupListing> groups = get(admin.listGroups().all());
            assertTrue(groups.stream().anyMatch(g -> g.groupId().equals("durable")), "group listed after restart");
        }
    }

    /** Runs Kafka's kafka-consumer-groups tool (from kafka-tools) in a child JVM; returns stdout. */
    private static String consumerGroupsTool(OxbowBroker broker, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(
                java.nio.file.Paths.get(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xmx256m", "-cp", System.getProperty("java.class.path"),
                "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                "--bootstrap-server", broker.bootstrap()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "kafka-consumer-groups did not finish");
        assertEquals(0, p.exitValue(), "kafka-consumer-groups " + String.join(" ", args) + " failed:\n" + out);
        System.out.println("[oxbow-compat] kafka-consumer-groups " + String.join(" ", args) + "\n" + out);
        return out;
    }

    /** Rows of the tool's --describe table for {@code topic}: partition -> columns. */
    private static Map<Integer, String[]> describeRows(String out, String topic) {
        Map<Integer, String[]> rows = new TreeMap<>();
        for (String line : out.split("\n")) {
            String[] f = line.trim().split("\\s+");
            if (f.length >= 6 && f[1].equals(topic)) {
                rows.put(Integer.parseInt(f[2]), f);
            }
        }
        return rows;
    }

    @Test
    void kafkaConsumerGroupsToolDescribesLagAndResetsOffsets(OxbowBroker broker) throws Exception {
        String topic = "groups-tool";
        createTopic(broker, topic);
        produce(broker, topic, 50, 0);
        Member m = member(broker, "tool-1", "tool", topic);
        try {
            awaitAssignment(List.of(m), 4);
            awaitConsumed(List.of(m), 4 * 50);
            m.send("commit");
            m.await("COMMITTED", 30, l -> l.stream().anyMatch(x -> x.startsWith("COMMITTED")));
            // 30 more on partition 0 only, consumed but not committed: lag 30 there.
            try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
                for (int i = 0; i < 30; i++) {
                    p.send(new ProducerRecord<>(topic, 0, utf8("x"), utf8("x" + i)));
                }
                p.flush();
            }
            awaitConsumed(List.of(m), 4 * 50 + 30);
            String out = consumerGroupsTool(broker, "--describe", "--group", "tool");
            Map<Integer, String[]> rows = describeRows(out, topic);
            assertEquals(Set.of(0, 1, 2, 3), rows.keySet(), out);
            // GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
            assertEquals(List.of("50", "80", "30"), List.of(rows.get(0)[3], rows.get(0)[4], rows.get(0)[5]), out);
            for (int p = 1; p < PARTITIONS; p++) {
                assertEquals(List.of("50", "50", "0"), List.of(rows.get(p)[3], rows.get(p)[4], rows.get(p)[5]), out);
                assertEquals("tool-1", rows.get(p)[8], "client id of a live member: " + out);
                assertFalse(rows.get(p)[6].equals("-"), "consumer id of a live member: " + out);
            }
            String list = consumerGroupsTool(broker, "--list");
            assertTrue(list.lines().anyMatch(l -> l.trim().equals("tool")), list);
        } finally {
            m.close();
        }
        // An empty group's offsets can be reset, then the group deleted.
        consumerGroupsTool(broker, "--reset-offsets", "--group", "tool", "--topic", topic, "--to-offset", "7",
                "--execute");
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, OffsetAndMetadata> stored =
                    get(admin.listConsumerGroupOffsets("tool").partitionsToOffsetAndMetadata());
            for (int p = 0; p < PARTITIONS; p++) {
                assertEquals(7L, stored.get(tp(topic, p)).offset());
            }
            String out = consumerGroupsTool(broker, "--describe", "--group", "tool");
            assertTrue(out.contains("has no active members"), out);
            assertEquals("7", describeRows(out, topic).get(0)[3], out);
            consumerGroupsTool(broker, "--delete", "--group", "tool");
            Collection<GroupListing> groups = get(admin.listGroups().all());
            assertFalse(groups.stream().anyMatch(g -> g.groupId().equals("tool")), "deleted group still listed");
        }
    }
}
