package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * {@link ConsumerGroupTest}'s tests with {@code group.protocol=consumer} (KIP-848): the broker
 * assigns partitions (its default assignor, {@code uniform}) and hands them over member by member,
 * with the session timeout and heartbeat interval set on the broker.
 */
@BrokerOverrides({
    "group.consumer.session.timeout.ms=10000",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=500"
})
class ConsumerProtocolGroupTest extends ConsumerGroupTest {
    @Override
    String protocol() {
        return "consumer";
    }

    @Override
    String defaultAssignor() {
        return "uniform";
    }

    /**
     * The group's state is stored in __consumer_offsets (Kafka's consumer group records): after a
     * SIGKILL of the broker the members carry on at their epochs with their partitions; nothing is
     * lost or rebalanced.
     */
    @Test
    void groupSurvivesBrokerKillWithoutARebalance(OxbowBroker broker) throws Exception {
        String topic = "groups-failover";
        createTopic(broker, topic);
        List<Member> ms = new ArrayList<>();
        try {
            ms.add(member(broker, "failover-1", "failover", topic));
            ms.add(member(broker, "failover-2", "failover", topic));
            awaitAssignment(ms, 2, 2);
            Optional<Integer> epoch = awaitStable(broker, "failover", 2).groupEpoch();
            Map<String, Set<Integer>> owned = new HashMap<>();
            ms.forEach(m -> owned.put(m.name, m.owned()));
            broker.restart(true);
            produce(broker, topic, 10, 0);
            awaitConsumed(ms, 4 * 10);
            assertEquals(epoch, awaitStable(broker, "failover", 2).groupEpoch(), "no new group epoch");
            for (Member m : ms) {
                assertTrue(m.allIn("LOST").isEmpty(), m.name + " was fenced: " + m.lines());
                assertEquals(owned.get(m.name), m.owned(), m.name + " kept its partitions");
            }
        } finally {
            closeAll(ms);
        }
    }

    /**
     * A regex subscription resolved by the broker (KIP-848 SubscriptionPattern) matches internal
     * topics too: Kafka 4.x's coordinator scans every topic of its image, and franz-go relies on
     * it. Here the regex names __consumer_offsets and gets every partition of it.
     */
    @Test
    void regexSubscriptionNamingAnInternalTopicGetsItAssigned(OxbowBroker broker) throws Exception {
        Map<String, Object> cfg = new HashMap<>();
        cfg.put("group.id", "regex-internal");
        cfg.put("group.protocol", "consumer");
        try (var c = broker.consumer(cfg); var admin = broker.admin()) {
            c.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern("__consumer_offsets"));
            long deadline = System.currentTimeMillis() + 60_000;
            while (c.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                c.poll(java.time.Duration.ofMillis(200));
            }
            int partitions = Kit.get(admin.describeTopics(List.of("__consumer_offsets")).allTopicNames())
                    .get("__consumer_offsets").partitions().size();
            Set<String> got = new java.util.TreeSet<>();
            c.assignment().forEach(tp -> got.add(tp.topic()));
            assertEquals(Set.of("__consumer_offsets"), got, "assigned: " + c.assignment());
            assertEquals(partitions, c.assignment().size(), "every partition of __consumer_offsets");
        }
    }
}
