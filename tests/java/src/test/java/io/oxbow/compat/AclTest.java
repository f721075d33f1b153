package io.oxbow.compat;

import static io.oxbow.compat.AclKit.*;
import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DeleteAclsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The ACL matrix of Kafka's StandardAuthorizer as the Java client sees it. One broker with the
 * harness's PLAINTEXT listener and a SASL_PLAINTEXT listener (PLAIN users admin, alice, bob,
 * carol); {@code super.users=User:admin;User:ANONYMOUS}; no ACL means no access. Every row is a
 * request made by a principal without the right (Kafka's exception class, and no effect: the
 * records, offsets, topics and groups are checked afterwards) and the same request with it
 * (served). Each test uses fresh topic and group names, creates its ACLs as admin and waits until
 * DescribeAcls shows them; after each test every ACL is deleted again.
 *
 * <p>Every row prints one line {@code [acl] API | principal and its ACLs -> outcome}, so a run
 * against Oxbow can be compared with a run against Kafka line by line.
 */
class AclTest {
    static final String JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required"
            + " user_admin=\"admin-secret\" user_alice=\"alice-secret\" user_bob=\"bob-secret\""
            + " user_carol=\"carol-secret\";";

    @RegisterExtension
    static final OxbowBrokerExtension BROKER = new OxbowBrokerExtension(AclTest::brokerOverrides);

    /**
     * Kafka's keys. User:ANONYMOUS is everyone on the PLAINTEXT listeners: the harness's own
     * admin, the inter-broker listener and, in Kafka's one-node reference, the node's connection
     * to its own CONTROLLER listener. Without it Kafka 4.1.1 denies ControllerRegistration and
     * BrokerRegistration (CLUSTER_ACTION on the cluster) and the node gives up starting.
     */
    static List<String> brokerOverrides(int plaintextPort) {
        return List.of(
                "listeners=PLAINTEXT://127.0.0.1:" + plaintextPort + ",SASL_PLAINTEXT://127.0.0.1:" + SASL_PORT,
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config=" + JAAS,
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users=User:admin;User:ANONYMOUS",
                "allow.everyone.if.no.acl.found=false");
    }

    /** Every test starts without ACLs. */
    @AfterEach
    void deleteAllAcls() throws Exception {
        try (Admin admin = admin("admin")) {
            get(admin.deleteAcls(List.of(AclBindingFilter.ANY)).all());
            awaitAcls(admin, "deleted ACLs", Set::isEmpty);
        }
    }

    // ---- super users ------------------------------------------------------------------------

    @Test
    void superUsersNeedNoAcls(OxbowBroker broker) throws Exception {
        String t = name("super");
        String g = t + "-g";
        try (Admin admin = admin("admin")) {
            assertEquals(Set.of(), describeAcls(admin, AclBindingFilter.ANY), "no ACL exists");
            get(admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all());
            assertEquals(1, get(admin.describeTopics(List.of(t)).allTopicNames()).get(t).partitions().size());
            Config config = get(admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, t))).all())
                    .values().iterator().next();
            assertEquals("delete", config.get("cleanup.policy").value());
            Set<AclOperation> ops = get(admin.describeCluster(new DescribeClusterOptions()
                    .includeAuthorizedOperations(true)).authorizedOperations());
            assertTrue(ops.containsAll(List.of(AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CREATE,
                    AclOperation.CLUSTER_ACTION, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE)),
                    ops.toString());
            served("CreateTopics/Describe*/DescribeCluster", "admin (super user), no ACLs",
                    "cluster ops " + new TreeSet<>(ops));
        }
        assertEquals(List.of(0L, 1L, 2L), produce(broker, t, 3));
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.GROUP_ID_CONFIG, g);
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(broker, "admin", c)) {
            consumer.subscribe(List.of(t));
            Polled p = poll(consumer, 3);
            assertNull(p.error());
            assertEquals(List.of("v0", "v1", "v2"), p.values());
            consumer.commitSync();
            assertEquals(3, consumer.committed(Set.of(tp(t, 0))).get(tp(t, 0)).offset());
        }
        served("Produce/Fetch/OffsetCommit", "admin (super user), no ACLs", "3 records at offsets 0..2, committed 3");
        try (Admin anonymous = broker.admin()) {
            String t2 = name("anonymous");
            Kit.createTopic(anonymous, t2, 1);
            assertTrue(get(anonymous.listTopics().names()).contains(t2));
            served("CreateTopics", "ANONYMOUS (PLAINTEXT, super user)", "created " + t2);
        }
    }

    // ---- metadata ---------------------------------------------------------------------------

    @Test
    void describeTopicsNeedsDescribe(OxbowBroker broker) throws Exception {
        String t = name("describe");
        String missing = name("missing");
        createTopics(t);
        grant(allow("bob", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, missing, AclOperation.DESCRIBE));
        try (Admin alice = admin("alice")) {
            denied("DescribeTopics (existing topic)", "alice, no ACL", TopicAuthorizationException.class,
                    () -> get(alice.describeTopics(List.of(t)).allTopicNames()));
            denied("DescribeTopics (missing topic)", "alice, no ACL", TopicAuthorizationException.class,
                    () -> get(alice.describeTopics(List.of(missing)).allTopicNames()));
        }
        try (Admin bob = admin("bob")) {
            TopicDescription d = get(bob.describeTopics(List.of(t)).allTopicNames()).get(t);
            assertEquals(1, d.partitions().size());
            served("DescribeTopics (existing topic)", "bob DESCRIBE topic", d.partitions().size() + " partition");
            denied("DescribeTopics (missing topic)", "bob DESCRIBE on the missing name",
                    UnknownTopicOrPartitionException.class,
                    () -> get(bob.describeTopics(List.of(missing)).allTopicNames()));
        }
    }

    @Test
    void listTopicsShowsOnlyDescribableTopics(OxbowBroker broker) throws Exception {
        String t1 = name("list");
        String t2 = name("list");
        createTopics(t1, t2);
        grant(allow("alice", ResourceType.TOPIC, t1, AclOperation.DESCRIBE));
        try (Admin alice = admin("alice"); Admin carol = admin("carol")) {
            Set<String> seen = get(alice.listTopics().names());
            served("ListTopics (Metadata all topics)", "alice DESCRIBE on one of two", seen);
            assertEquals(Set.of(t1), seen);
            Set<String> none = get(carol.listTopics().names());
            served("ListTopics (Metadata all topics)", "carol, no ACL", none);
            assertEquals(Set.of(), none);
        }
        assertTrue(topicsAsAdmin().containsAll(List.of(t1, t2)));
    }

    // ---- produce ----------------------------------------------------------------------------

    @Test
    void produceNeedsWriteOnTopic(OxbowBroker broker) throws Exception {
        String t = name("produce");
        createTopics(t);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.WRITE));
        try (KafkaProducer<byte[], byte[]> carol = producer(broker, "carol", NOT_IDEMPOTENT)) {
            denied("Produce", "carol, no ACL", TopicAuthorizationException.class,
                    () -> get(carol.send(new ProducerRecord<>(t, 0, null, utf8("carol")))));
        }
        try (KafkaProducer<byte[], byte[]> alice = producer(broker, "alice", NOT_IDEMPOTENT)) {
            denied("Produce", "alice DESCRIBE topic", TopicAuthorizationException.class,
                    () -> get(alice.send(new ProducerRecord<>(t, 0, null, utf8("alice")))));
        }
        try (KafkaProducer<byte[], byte[]> bob = producer(broker, "bob", NOT_IDEMPOTENT)) {
            List<Long> offsets = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                offsets.add(get(bob.send(new ProducerRecord<>(t, 0, null, utf8("bob" + i)))).offset());
            }
            served("Produce", "bob WRITE topic (only)", "offsets " + offsets);
            assertEquals(List.of(0L, 1L), offsets);
        }
        assertEquals(List.of("bob0", "bob1"), values(broker, t, IsolationLevel.READ_UNCOMMITTED));
    }

    @Test
    void idempotentProducerNeedsOnlyWriteOnATopic(OxbowBroker broker) throws Exception {
        String t = name("idempotent");
        createTopics(t);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.WRITE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.DESCRIBE));
        try (KafkaProducer<byte[], byte[]> alice = producer(broker, "alice", Map.of())) {
            List<Long> offsets = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                offsets.add(get(alice.send(new ProducerRecord<>(t, 0, null, utf8("alice" + i)))).offset());
            }
            served("InitProducerId (idempotent) + Produce", "alice WRITE topic, no IDEMPOTENT_WRITE",
                    "offsets " + offsets);
            assertEquals(List.of(0L, 1L, 2L), offsets);
        }
        try (Admin admin = admin("admin")) {
            var producers = get(admin.describeProducers(List.of(tp(t, 0))).partitionResult(tp(t, 0))).activeProducers();
            assertEquals(1, producers.size(), "the producer was idempotent: " + producers);
            assertEquals(2, producers.get(0).lastSequence());
        }
        // The InitProducerId error reaches send() either as the record's failure or, when it came
        // first, as KafkaException("... in an error state") caused by it.
        try (KafkaProducer<byte[], byte[]> bob = producer(broker, "bob", Map.of())) {
            deniedWithCause("InitProducerId (idempotent)", "bob DESCRIBE topic, no WRITE anywhere",
                    ClusterAuthorizationException.class,
                    () -> get(bob.send(new ProducerRecord<>(t, 0, null, utf8("bob")))));
        }
        assertEquals(List.of("alice0", "alice1", "alice2"), values(broker, t, IsolationLevel.READ_UNCOMMITTED));
    }

    // ---- consume ----------------------------------------------------------------------------

    @ParameterizedTest(name = "group.protocol={0}")
    @ValueSource(strings = {"classic", "consumer"})
    void groupConsumeNeedsReadOnTopicAndGroup(String protocol, OxbowBroker broker) throws Exception {
        String t = name("consume-" + protocol);
        String ga = t + "-alice";
        String gb = t + "-bob";
        String gd = t + "-bob-describe";
        String gc = t + "-carol";
        createTopics(t);
        produce(broker, t, 3);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.READ),
                allow("alice", ResourceType.GROUP, ga, AclOperation.READ),
                allow("bob", ResourceType.TOPIC, t, AclOperation.READ),
                allow("bob", ResourceType.GROUP, gd, AclOperation.DESCRIBE),
                allow("carol", ResourceType.GROUP, gc, AclOperation.READ));
        String api = "Consume subscribe (" + protocol + ")";
        try (KafkaConsumer<byte[], byte[]> bob = consumer(broker, "bob", group(gb, protocol))) {
            bob.subscribe(List.of(t));
            pollDenied(api, "bob READ topic, no group ACL", GroupAuthorizationException.class, bob);
        }
        try (KafkaConsumer<byte[], byte[]> bob = consumer(broker, "bob", group(gd, protocol))) {
            bob.subscribe(List.of(t));
            pollDenied(api, "bob READ topic, DESCRIBE group", GroupAuthorizationException.class, bob);
        }
        try (KafkaConsumer<byte[], byte[]> carol = consumer(broker, "carol", group(gc, protocol))) {
            carol.subscribe(List.of(t));
            pollDenied(api, "carol READ group, no topic ACL", TopicAuthorizationException.class, carol);
        }
        try (KafkaConsumer<byte[], byte[]> alice = consumer(broker, "alice", group(ga, protocol))) {
            alice.subscribe(List.of(t));
            Polled p = poll(alice, 3);
            assertNull(p.error(), "alice READ topic + READ group: " + p.error());
            assertEquals(List.of("v0", "v1", "v2"), p.values());
            alice.commitSync();
            long committed = alice.committed(Set.of(tp(t, 0))).get(tp(t, 0)).offset();
            served(api, "alice READ topic + READ group", p.values() + ", committed " + committed);
            assertEquals(3, committed);
        }
        try (Admin admin = admin("admin")) {
            assertEquals(Map.of(tp(t, 0), 3L), committedOffsets(admin, ga));
            for (String g : List.of(gb, gd, gc)) {
                assertEquals(Map.of(), committedOffsets(admin, g), "no offsets for " + g);
            }
        }
    }

    @Test
    void assignWithoutGroupNeedsReadOnTopicOnly(OxbowBroker broker) throws Exception {
        String t = name("assign");
        createTopics(t);
        produce(broker, t, 3);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.READ),
                allow("carol", ResourceType.TOPIC, t, AclOperation.DESCRIBE));
        try (KafkaConsumer<byte[], byte[]> bob = consumer(broker, "bob", Map.of())) {
            bob.assign(List.of(tp(t, 0)));
            pollDenied("Fetch (assign, no group)", "bob, no ACL", TopicAuthorizationException.class, bob);
        }
        try (KafkaConsumer<byte[], byte[]> carol = consumer(broker, "carol", Map.of())) {
            carol.assign(List.of(tp(t, 0)));
            pollDenied("Fetch (assign, no group)", "carol DESCRIBE topic", TopicAuthorizationException.class, carol);
        }
        try (KafkaConsumer<byte[], byte[]> alice = consumer(broker, "alice", Map.of())) {
            alice.assign(List.of(tp(t, 0)));
            Polled p = poll(alice, 3);
            assertNull(p.error());
            served("Fetch (assign, no group)", "alice READ topic", p.values());
            assertEquals(List.of("v0", "v1", "v2"), p.values());
        }
    }

    @Test
    void commitSyncNeedsReadOnGroupAndTopic(OxbowBroker broker) throws Exception {
        String t = name("commit");
        String ga = t + "-alice";
        String gb = t + "-bob";
        String gc = t + "-carol";
        createTopics(t);
        produce(broker, t, 3);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.READ),
                allow("bob", ResourceType.TOPIC, t, AclOperation.READ),
                allow("bob", ResourceType.GROUP, gb, AclOperation.READ),
                allow("carol", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("carol", ResourceType.GROUP, gc, AclOperation.READ));
        Map<TopicPartition, OffsetAndMetadata> two = Map.of(tp(t, 0), new OffsetAndMetadata(2));
        try (KafkaConsumer<byte[], byte[]> alice = consumer(broker, "alice", groupId(ga))) {
            alice.assign(List.of(tp(t, 0)));
            denied("OffsetCommit (commitSync)", "alice READ topic, no group ACL", GroupAuthorizationException.class,
                    () -> alice.commitSync(two));
        }
        try (KafkaConsumer<byte[], byte[]> carol = consumer(broker, "carol", groupId(gc))) {
            carol.assign(List.of(tp(t, 0)));
            denied("OffsetCommit (commitSync)", "carol READ group, DESCRIBE topic", TopicAuthorizationException.class,
                    () -> carol.commitSync(two));
        }
        try (KafkaConsumer<byte[], byte[]> bob = consumer(broker, "bob", groupId(gb))) {
            bob.assign(List.of(tp(t, 0)));
            bob.commitSync(two);
            long committed = bob.committed(Set.of(tp(t, 0))).get(tp(t, 0)).offset();
            served("OffsetCommit + OffsetFetch", "bob READ topic + READ group", "committed " + committed);
            assertEquals(2, committed);
        }
        try (Admin admin = admin("admin")) {
            assertEquals(Map.of(tp(t, 0), 2L), committedOffsets(admin, gb));
            assertEquals(Map.of(), committedOffsets(admin, ga));
            assertEquals(Map.of(), committedOffsets(admin, gc));
        }
    }

    // ---- topic administration ---------------------------------------------------------------

    @Test
    void createTopicsNeedsCreateOnClusterOrTopic(OxbowBroker broker) throws Exception {
        String base = name("create");
        String a = base + "-a";
        String b = base + "-b";
        String lit = base + "-lit";
        String preX = base + "-pre-x";
        String prex = base + "-prex";
        String other = base + "-other";
        try (Admin alice = admin("alice")) {
            denied("CreateTopics", "alice, no ACL", TopicAuthorizationException.class,
                    () -> get(alice.createTopics(List.of(new NewTopic(a, 1, (short) 1))).all()));
        }
        grant(allow("bob", ResourceType.CLUSTER, CLUSTER, AclOperation.CREATE),
                allow("carol", ResourceType.TOPIC, lit, AclOperation.CREATE),
                allowPrefixed("carol", ResourceType.TOPIC, base + "-pre-", AclOperation.CREATE));
        try (Admin bob = admin("bob")) {
            CreateTopicsResult r = bob.createTopics(List.of(new NewTopic(b, 2, (short) 1)));
            get(r.all());
            served("CreateTopics", "bob CREATE cluster", "created " + b);
            denied("CreateTopics result configs", "bob CREATE cluster, no DESCRIBE_CONFIGS",
                    TopicAuthorizationException.class, () -> get(r.numPartitions(b)));
        }
        try (Admin carol = admin("carol")) {
            CreateTopicsResult r = carol.createTopics(List.of(lit, preX, prex, other).stream()
                    .map(n -> new NewTopic(n, 1, (short) 1)).collect(Collectors.toList()));
            get(r.values().get(lit));
            served("CreateTopics (one of four)", "carol CREATE LITERAL topic", "created " + lit);
            get(r.values().get(preX));
            served("CreateTopics (one of four)", "carol CREATE PREFIXED '-pre-'", "created " + preX);
            denied("CreateTopics (one of four)", "carol CREATE PREFIXED '-pre-' on -prex",
                    TopicAuthorizationException.class, () -> get(r.values().get(prex)));
            denied("CreateTopics (one of four)", "carol, other name", TopicAuthorizationException.class,
                    () -> get(r.values().get(other)));
        }
        Set<String> topics = topicsAsAdmin();
        assertTrue(topics.containsAll(List.of(b, lit, preX)), topics.toString());
        for (String absent : List.of(a, prex, other)) {
            assertFalse(topics.contains(absent), absent + " was created");
        }
    }

    @Test
    void deleteTopicsNeedsDelete(OxbowBroker broker) throws Exception {
        String t = name("delete");
        createTopics(t);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.DELETE));
        try (Admin carol = admin("carol")) {
            denied("DeleteTopics", "carol, no ACL", TopicAuthorizationException.class,
                    () -> get(carol.deleteTopics(List.of(t)).all()));
        }
        try (Admin alice = admin("alice")) {
            denied("DeleteTopics", "alice DESCRIBE topic", TopicAuthorizationException.class,
                    () -> get(alice.deleteTopics(List.of(t)).all()));
        }
        assertTrue(topicsAsAdmin().contains(t));
        try (Admin bob = admin("bob")) {
            get(bob.deleteTopics(List.of(t)).all());
            served("DeleteTopics", "bob DELETE topic", "deleted " + t);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (topicsAsAdmin().contains(t)) {
            assertTrue(System.nanoTime() < deadline, t + " still listed 30 s after its deletion");
            Thread.sleep(100);
        }
    }

    @Test
    void topicConfigsNeedDescribeConfigsAndAlterConfigs(OxbowBroker broker) throws Exception {
        String t = name("configs");
        createTopics(t);
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, t);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.DESCRIBE_CONFIGS),
                allow("carol", ResourceType.TOPIC, t, AclOperation.ALTER_CONFIGS));
        Map<ConfigResource, Collection<AlterConfigOp>> alter = Map.of(res, List.of(new AlterConfigOp(
                new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET)));
        try (Admin alice = admin("alice")) {
            denied("DescribeConfigs topic", "alice DESCRIBE topic", TopicAuthorizationException.class,
                    () -> get(alice.describeConfigs(List.of(res)).all()));
            denied("IncrementalAlterConfigs topic", "alice DESCRIBE topic", TopicAuthorizationException.class,
                    () -> get(alice.incrementalAlterConfigs(alter).all()));
        }
        try (Admin bob = admin("bob")) {
            String retention = get(bob.describeConfigs(List.of(res)).all()).get(res).get("retention.ms").value();
            served("DescribeConfigs topic", "bob DESCRIBE_CONFIGS topic", "retention.ms=" + retention);
            assertEquals("604800000", retention);
            denied("IncrementalAlterConfigs topic", "bob DESCRIBE_CONFIGS topic", TopicAuthorizationException.class,
                    () -> get(bob.incrementalAlterConfigs(alter).all()));
            int node = get(bob.describeCluster().nodes()).iterator().next().id();
            ConfigResource brokerRes = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(node));
            denied("DescribeConfigs broker", "bob DESCRIBE_CONFIGS topic only", ClusterAuthorizationException.class,
                    () -> get(bob.describeConfigs(List.of(brokerRes)).all()));
        }
        try (Admin carol = admin("carol")) {
            get(carol.incrementalAlterConfigs(alter).all());
            served("IncrementalAlterConfigs topic", "carol ALTER_CONFIGS topic", "retention.ms=3600000");
            String seen = awaitConfig(carol, res, "retention.ms", "3600000");
            served("DescribeConfigs topic", "carol ALTER_CONFIGS topic (implies DESCRIBE_CONFIGS)",
                    "retention.ms=" + seen);
        }
        try (Admin admin = admin("admin")) {
            assertEquals("3600000",
                    get(admin.describeConfigs(List.of(res)).all()).get(res).get("retention.ms").value());
        }
    }

    @Test
    void createPartitionsNeedsAlter(OxbowBroker broker) throws Exception {
        String t = name("partitions");
        createTopics(t);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.ALTER));
        try (Admin alice = admin("alice")) {
            denied("CreatePartitions", "alice DESCRIBE topic", TopicAuthorizationException.class,
                    () -> get(alice.createPartitions(Map.of(t, NewPartitions.increaseTo(2))).all()));
        }
        try (Admin admin = admin("admin")) {
            assertEquals(1, get(admin.describeTopics(List.of(t)).allTopicNames()).get(t).partitions().size());
        }
        try (Admin bob = admin("bob")) {
            get(bob.createPartitions(Map.of(t, NewPartitions.increaseTo(2))).all());
            served("CreatePartitions", "bob ALTER topic", "1 -> 2 partitions");
        }
        try (Admin admin = admin("admin")) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            int n;
            while ((n = get(admin.describeTopics(List.of(t)).allTopicNames()).get(t).partitions().size()) != 2) {
                assertTrue(System.nanoTime() < deadline, "still " + n + " partitions");
                Thread.sleep(100);
            }
        }
    }

    @Test
    void deleteRecordsNeedsDelete(OxbowBroker broker) throws Exception {
        String t = name("records");
        createTopics(t);
        produce(broker, t, 5);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.DELETE));
        Map<TopicPartition, RecordsToDelete> before2 = Map.of(tp(t, 0), RecordsToDelete.beforeOffset(2));
        try (Admin alice = admin("alice")) {
            denied("DeleteRecords", "alice DESCRIBE topic", TopicAuthorizationException.class,
                    () -> get(alice.deleteRecords(before2).all()));
        }
        assertEquals(0, offset(t, OffsetSpec.earliest()));
        try (Admin bob = admin("bob")) {
            long low = get(bob.deleteRecords(before2).lowWatermarks().get(tp(t, 0))).lowWatermark();
            served("DeleteRecords", "bob DELETE topic", "low watermark " + low);
            assertEquals(2, low);
        }
        assertEquals(2, offset(t, OffsetSpec.earliest()));
        assertEquals(List.of("v2", "v3", "v4"), values(broker, t, IsolationLevel.READ_UNCOMMITTED));
    }

    @Test
    void listOffsetsNeedsDescribe(OxbowBroker broker) throws Exception {
        String t = name("offsets");
        createTopics(t);
        produce(broker, t, 4);
        grant(allow("bob", ResourceType.TOPIC, t, AclOperation.DESCRIBE));
        try (Admin alice = admin("alice")) {
            denied("ListOffsets", "alice, no ACL", TopicAuthorizationException.class,
                    () -> get(alice.listOffsets(Map.of(tp(t, 0), OffsetSpec.latest())).all()));
        }
        try (Admin bob = admin("bob")) {
            long end = latest(bob, t);
            served("ListOffsets", "bob DESCRIBE topic", "latest " + end);
            assertEquals(4, end);
        }
    }

    // ---- group administration ---------------------------------------------------------------

    @Test
    void groupAdministration(OxbowBroker broker) throws Exception {
        String t = name("groups");
        String t2 = t + "-second";
        String g1 = t + "-g1";
        String g2 = t + "-g2";
        String g3 = t + "-g3";
        createTopics(t, t2);
        produce(broker, t, 3);
        produce(broker, t2, 3);
        try (Admin admin = admin("admin")) {
            get(admin.alterConsumerGroupOffsets(g1, Map.of(tp(t, 0), new OffsetAndMetadata(1))).all());
            get(admin.alterConsumerGroupOffsets(g2, Map.of(tp(t, 0), new OffsetAndMetadata(2))).all());
            get(admin.alterConsumerGroupOffsets(g3, Map.of(tp(t, 0), new OffsetAndMetadata(3),
                    tp(t2, 0), new OffsetAndMetadata(1))).all());
        }
        Set<String> mine = Set.of(g1, g2, g3);

        // ListGroups: DESCRIBE on the cluster lists every group, otherwise DESCRIBE per group.
        try (Admin carol = admin("carol")) {
            Set<String> seen = groupIds(carol);
            served("ListGroups", "carol, no ACL", seen);
            assertEquals(Set.of(), seen);
        }
        grant(allow("alice", ResourceType.CLUSTER, CLUSTER, AclOperation.DESCRIBE),
                allow("bob", ResourceType.GROUP, g1, AclOperation.DESCRIBE));
        try (Admin alice = admin("alice"); Admin bob = admin("bob")) {
            Set<String> all = groupIds(alice);
            served("ListGroups", "alice DESCRIBE cluster", "sees all " + mine.size() + " (" + all.size() + " in all)");
            assertTrue(all.containsAll(mine), all.toString());
            Set<String> one = groupIds(bob);
            served("ListGroups", "bob DESCRIBE one group", one);
            assertEquals(Set.of(g1), one);

            // DescribeGroups / ConsumerGroupDescribe
            denied("DescribeConsumerGroups", "alice DESCRIBE cluster, no group ACL", GroupAuthorizationException.class,
                    () -> get(alice.describeConsumerGroups(List.of(g1)).all()));
            ConsumerGroupDescription d = get(bob.describeConsumerGroups(List.of(g1)).all()).get(g1);
            served("DescribeConsumerGroups", "bob DESCRIBE group", d.groupId() + " " + d.groupState());
            assertEquals(g1, d.groupId());
            assertEquals(GroupState.EMPTY, d.groupState());

            // DeleteGroups
            denied("DeleteConsumerGroups", "bob DESCRIBE group", GroupAuthorizationException.class,
                    () -> get(bob.deleteConsumerGroups(List.of(g1)).all()));
        }
        try (Admin carol = admin("carol")) {
            denied("DeleteConsumerGroups", "carol, no ACL", GroupAuthorizationException.class,
                    () -> get(carol.deleteConsumerGroups(List.of(g2)).all()));
        }
        grant(allow("carol", ResourceType.GROUP, g2, AclOperation.DELETE));
        try (Admin carol = admin("carol")) {
            get(carol.deleteConsumerGroups(List.of(g2)).all());
            served("DeleteConsumerGroups", "carol DELETE group", "deleted " + g2);
        }
        try (Admin admin = admin("admin")) {
            Set<String> left = groupIds(admin);
            assertTrue(left.containsAll(List.of(g1, g3)), left.toString());
            assertFalse(left.contains(g2), g2 + " still listed");
        }

        // OffsetFetch: DESCRIBE on the group; partitions of topics without DESCRIBE are left out.
        try (Admin carol = admin("carol")) {
            denied("ListConsumerGroupOffsets", "carol, no ACL on the group", GroupAuthorizationException.class,
                    () -> get(carol.listConsumerGroupOffsets(g3).partitionsToOffsetAndMetadata()));
        }
        grant(allow("alice", ResourceType.GROUP, g3, AclOperation.DESCRIBE),
                allow("alice", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("carol", ResourceType.GROUP, g3, AclOperation.DESCRIBE));
        try (Admin alice = admin("alice"); Admin carol = admin("carol")) {
            Map<TopicPartition, Long> aliceSees = committedOffsets(alice, g3);
            served("ListConsumerGroupOffsets (all)", "alice DESCRIBE group + one of two topics", aliceSees);
            assertEquals(Map.of(tp(t, 0), 3L), aliceSees);
            Map<TopicPartition, Long> carolSees = committedOffsets(carol, g3);
            served("ListConsumerGroupOffsets (all)", "carol DESCRIBE group, no topic ACL", carolSees);
            assertEquals(Map.of(), carolSees);
            ListConsumerGroupOffsetsSpec both = new ListConsumerGroupOffsetsSpec()
                    .topicPartitions(List.of(tp(t, 0), tp(t2, 0)));
            // Kafka answers the unauthorized partition with TOPIC_AUTHORIZATION_FAILED; the Java
            // admin client logs a WARN and leaves it out of the map (no exception).
            Map<TopicPartition, Long> named = new LinkedHashMap<>();
            get(alice.listConsumerGroupOffsets(Map.of(g3, both)).partitionsToOffsetAndMetadata(g3))
                    .forEach((tp, om) -> named.put(tp, om == null ? null : om.offset()));
            served("ListConsumerGroupOffsets (named)", "alice DESCRIBE group + one of two topics", named);
            assertEquals(Map.of(tp(t, 0), 3L), named);
        }
        try (Admin admin = admin("admin")) {
            assertEquals(Map.of(tp(t, 0), 3L, tp(t2, 0), 1L), committedOffsets(admin, g3));
        }
    }

    // ---- transactions -----------------------------------------------------------------------

    @Test
    void transactionalProducerNeedsWriteOnTransactionalIdAndTopic(OxbowBroker broker) throws Exception {
        String t = name("txn");
        String txa = t + "-alice";
        String txd = t + "-alice-describe";
        String txb = t + "-bob";
        String txc = t + "-carol";
        createTopics(t);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.WRITE),
                allow("alice", ResourceType.TRANSACTIONAL_ID, txd, AclOperation.DESCRIBE),
                allow("bob", ResourceType.TOPIC, t, AclOperation.WRITE),
                allow("bob", ResourceType.TRANSACTIONAL_ID, txb, AclOperation.WRITE),
                allow("carol", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                allow("carol", ResourceType.TRANSACTIONAL_ID, txc, AclOperation.WRITE));
        try (KafkaProducer<byte[], byte[]> alice = producer(broker, "alice", txn(txa))) {
            denied("FindCoordinator/InitProducerId (txn)", "alice WRITE topic, no transactional-id ACL",
                    TransactionalIdAuthorizationException.class, alice::initTransactions);
        }
        try (KafkaProducer<byte[], byte[]> alice = producer(broker, "alice", txn(txd))) {
            denied("InitProducerId (txn)", "alice WRITE topic, DESCRIBE transactional id",
                    TransactionalIdAuthorizationException.class, alice::initTransactions);
        }
        try (KafkaProducer<byte[], byte[]> carol = producer(broker, "carol", txn(txc))) {
            carol.initTransactions();
            carol.beginTransaction();
            denied("Produce in a transaction", "carol WRITE transactional id, DESCRIBE topic",
                    TopicAuthorizationException.class,
                    () -> get(carol.send(new ProducerRecord<>(t, 0, null, utf8("carol")))));
        }
        try (KafkaProducer<byte[], byte[]> bob = producer(broker, "bob", txn(txb))) {
            bob.initTransactions();
            bob.beginTransaction();
            List<Long> offsets = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                offsets.add(get(bob.send(new ProducerRecord<>(t, 0, null, utf8("bob" + i)))).offset());
            }
            bob.commitTransaction();
            served("Transaction commit", "bob WRITE transactional id + WRITE topic", "offsets " + offsets);
        }
        assertEquals(List.of("bob0", "bob1"), values(broker, t, IsolationLevel.READ_COMMITTED));
    }

    // ---- the ACL and SCRAM APIs -------------------------------------------------------------

    @Test
    void aclApisNeedAlterOrDescribeOnCluster(OxbowBroker broker) throws Exception {
        String t = name("acl-apis");
        AclBinding bobs = allow("bob", ResourceType.CLUSTER, CLUSTER, AclOperation.ALTER);
        AclBinding carols = allow("carol", ResourceType.CLUSTER, CLUSTER, AclOperation.DESCRIBE);
        grant(bobs, carols);
        AclBinding probe = allow("alice", ResourceType.TOPIC, t, AclOperation.READ);
        try (Admin alice = admin("alice")) {
            denied("CreateAcls", "alice, no ACL", ClusterAuthorizationException.class,
                    () -> get(alice.createAcls(List.of(probe)).all()));
            denied("DescribeAcls", "alice, no ACL", ClusterAuthorizationException.class,
                    () -> get(alice.describeAcls(AclBindingFilter.ANY).values()));
            denied("DeleteAcls", "alice, no ACL", ClusterAuthorizationException.class,
                    () -> get(alice.deleteAcls(List.of(AclBindingFilter.ANY)).all()));
        }
        try (Admin carol = admin("carol")) {
            Set<AclBinding> seen = describeAcls(carol, AclBindingFilter.ANY);
            served("DescribeAcls", "carol DESCRIBE cluster", seen.size() + " bindings");
            assertEquals(Set.of(bobs, carols), seen);
            denied("CreateAcls", "carol DESCRIBE cluster", ClusterAuthorizationException.class,
                    () -> get(carol.createAcls(List.of(probe)).all()));
            denied("DeleteAcls", "carol DESCRIBE cluster", ClusterAuthorizationException.class,
                    () -> get(carol.deleteAcls(List.of(probe.toFilter())).all()));
        }
        try (Admin bob = admin("bob")) {
            get(bob.createAcls(List.of(probe)).all());
            served("CreateAcls", "bob ALTER cluster", probe.pattern().name());
            try (Admin admin = admin("admin")) {
                awaitAcls(admin, "bob's ACL", acls -> acls.contains(probe));
            }
            Set<AclBinding> seen = describeAcls(bob, AclBindingFilter.ANY);
            served("DescribeAcls", "bob ALTER cluster (implies DESCRIBE)", seen.size() + " bindings");
            assertEquals(Set.of(bobs, carols, probe), seen);
            Collection<AclBinding> deleted = get(bob.deleteAcls(List.of(probe.toFilter())).all());
            served("DeleteAcls", "bob ALTER cluster", "deleted " + deleted.size());
            assertEquals(List.of(probe), List.copyOf(deleted));
        }
        try (Admin admin = admin("admin")) {
            awaitAcls(admin, "after bob's delete", acls -> acls.equals(Set.of(bobs, carols)));
        }
    }

    @Test
    void scramAdminNeedsDescribeOrAlterOnCluster(OxbowBroker broker) throws Exception {
        String user = name("scram");
        grant(allow("alice", ResourceType.CLUSTER, CLUSTER, AclOperation.DESCRIBE),
                allow("bob", ResourceType.CLUSTER, CLUSTER, AclOperation.ALTER));
        UserScramCredentialUpsertion upsert = new UserScramCredentialUpsertion(
                user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "pw");
        try (Admin carol = admin("carol")) {
            denied("AlterUserScramCredentials", "carol, no ACL", ClusterAuthorizationException.class,
                    () -> get(carol.alterUserScramCredentials(List.of(upsert)).all()));
            denied("DescribeUserScramCredentials", "carol, no ACL", ClusterAuthorizationException.class,
                    () -> get(carol.describeUserScramCredentials().all()));
        }
        try (Admin alice = admin("alice")) {
            denied("AlterUserScramCredentials", "alice DESCRIBE cluster", ClusterAuthorizationException.class,
                    () -> get(alice.alterUserScramCredentials(List.of(upsert)).all()));
        }
        try (Admin bob = admin("bob")) {
            get(bob.alterUserScramCredentials(List.of(upsert)).all());
            served("AlterUserScramCredentials", "bob ALTER cluster", "upserted " + user);
        }
        try (Admin alice = admin("alice")) {
            UserScramCredentialsDescription d = awaitScram(alice, user);
            served("DescribeUserScramCredentials", "alice DESCRIBE cluster", d.credentialInfos());
            assertEquals(List.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)), d.credentialInfos());
        }
        try (Admin bob = admin("bob")) {
            UserScramCredentialsDescription d = awaitScram(bob, user);
            served("DescribeUserScramCredentials", "bob ALTER cluster (implies DESCRIBE)", d.credentialInfos());
        }
    }

    // ---- patterns and precedence ------------------------------------------------------------

    @Test
    void prefixedPatternMatchesByPrefix(OxbowBroker broker) throws Exception {
        String base = name("prefix");
        String preX = base + "-pre-x";
        String prex = base + "-prex";
        String other = base + "-other";
        createTopics(preX, prex, other);
        grant(allowPrefixed("alice", ResourceType.TOPIC, base + "-pre-", AclOperation.DESCRIBE));
        String who = "alice DESCRIBE PREFIXED '" + base + "-pre-'";
        try (Admin alice = admin("alice")) {
            describeOk(alice, who, preX);
            describeDenied(alice, who, prex);
            describeDenied(alice, who, other);
            Set<String> seen = get(alice.listTopics().names());
            served("ListTopics", who, seen);
            assertEquals(Set.of(preX), seen);
        }
    }

    @Test
    void literalWildcardTopicMatchesEveryTopic(OxbowBroker broker) throws Exception {
        String t1 = name("wild");
        String t2 = name("wild");
        createTopics(t1, t2);
        grant(allow("alice", ResourceType.TOPIC, "*", AclOperation.DESCRIBE));
        try (Admin alice = admin("alice"); Admin bob = admin("bob")) {
            describeOk(alice, "alice DESCRIBE LITERAL '*'", t1);
            describeOk(alice, "alice DESCRIBE LITERAL '*'", t2);
            Set<String> seen = get(alice.listTopics().names());
            assertTrue(seen.containsAll(List.of(t1, t2)), seen.toString());
            served("ListTopics", "alice DESCRIBE LITERAL '*'", "includes both (" + seen.size() + " in all)");
            describeDenied(bob, "bob, no ACL", t1);
        }
    }

    @Test
    void wildcardPrincipalMatchesEveryUser(OxbowBroker broker) throws Exception {
        String t = name("anyone");
        String other = name("anyone");
        createTopics(t, other);
        grant(acl("User:*", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.DESCRIBE,
                AclPermissionType.ALLOW, "*"));
        try (Admin bob = admin("bob"); Admin carol = admin("carol")) {
            describeOk(bob, "bob via User:* DESCRIBE", t);
            describeOk(carol, "carol via User:* DESCRIBE", t);
            describeDenied(carol, "carol via User:* DESCRIBE (other topic)", other);
        }
    }

    @Test
    void denyOverridesAllow(OxbowBroker broker) throws Exception {
        String t = name("deny");
        createTopics(t);
        produce(broker, t, 2);
        String prefix = t.substring(0, t.length() - 2);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.READ),
                deny("alice", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.READ),
                allow("bob", ResourceType.TOPIC, t, AclOperation.READ),
                deny("bob", ResourceType.TOPIC, prefix, PatternType.PREFIXED, AclOperation.READ),
                allow("carol", ResourceType.TOPIC, t, AclOperation.READ),
                deny("carol", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.ALL),
                deny("admin", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.ALL));
        String api = "Fetch (assign)";
        try (KafkaConsumer<byte[], byte[]> alice = consumer(broker, "alice", Map.of())) {
            alice.assign(List.of(tp(t, 0)));
            pollDenied(api, "alice ALLOW READ + DENY READ", TopicAuthorizationException.class, alice);
        }
        try (KafkaConsumer<byte[], byte[]> bob = consumer(broker, "bob", Map.of())) {
            bob.assign(List.of(tp(t, 0)));
            pollDenied(api, "bob ALLOW READ + DENY READ PREFIXED", TopicAuthorizationException.class, bob);
        }
        try (KafkaConsumer<byte[], byte[]> carol = consumer(broker, "carol", Map.of())) {
            carol.assign(List.of(tp(t, 0)));
            pollDenied(api, "carol ALLOW READ + DENY ALL", TopicAuthorizationException.class, carol);
        }
        // A DENY of READ does not deny the DESCRIBE that ALLOW READ implies; DENY ALL does.
        try (Admin alice = admin("alice"); Admin carol = admin("carol")) {
            describeOk(alice, "alice ALLOW READ + DENY READ", t);
            describeDenied(carol, "carol ALLOW READ + DENY ALL", t);
        }
        // Super users are not subject to ACLs, DENY included.
        assertEquals(List.of("v0", "v1"), values(broker, t, IsolationLevel.READ_UNCOMMITTED));
        served(api, "admin (super user) + DENY ALL", "v0, v1");
    }

    @Test
    void allGrantsEveryOperation(OxbowBroker broker) throws Exception {
        String t = name("all");
        String g = t + "-g";
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.ALL),
                allow("alice", ResourceType.GROUP, g, AclOperation.ALL));
        String who = "alice ALL topic + ALL group";
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, t);
        try (Admin alice = admin("alice")) {
            get(alice.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all());
            served("CreateTopics", who, "created");
            describeOk(alice, who, t);
        }
        try (KafkaProducer<byte[], byte[]> alice = producer(broker, "alice", Map.of())) {
            List<Long> offsets = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                offsets.add(get(alice.send(new ProducerRecord<>(t, 0, null, utf8("v" + i)))).offset());
            }
            served("InitProducerId + Produce", who, "offsets " + offsets);
            assertEquals(List.of(0L, 1L, 2L), offsets);
        }
        try (KafkaConsumer<byte[], byte[]> alice = consumer(broker, "alice", groupId(g))) {
            alice.subscribe(List.of(t));
            Polled p = poll(alice, 3);
            assertNull(p.error());
            alice.commitSync();
            served("JoinGroup + Fetch + OffsetCommit", who, p.values());
            assertEquals(List.of("v0", "v1", "v2"), p.values());
        }
        try (Admin alice = admin("alice")) {
            get(alice.describeConfigs(List.of(res)).all());
            get(alice.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all());
            get(alice.createPartitions(Map.of(t, NewPartitions.increaseTo(2))).all());
            assertEquals(3, latest(alice, t));
            assertEquals(1, get(alice.deleteRecords(Map.of(tp(t, 0), RecordsToDelete.beforeOffset(1)))
                    .lowWatermarks().get(tp(t, 0))).lowWatermark());
            assertEquals(Map.of(tp(t, 0), 3L), committedOffsets(alice, g));
            get(alice.describeConsumerGroups(List.of(g)).all());
            get(alice.deleteConsumerGroups(List.of(g)).all());
            get(alice.deleteTopics(List.of(t)).all());
            served("DescribeConfigs, IncrementalAlterConfigs, CreatePartitions, ListOffsets, DeleteRecords,"
                    + " OffsetFetch, DescribeGroups, DeleteGroups, DeleteTopics", who, "all served");
        }
    }

    @Test
    void impliedOperations(OxbowBroker broker) throws Exception {
        String t = name("implied");
        createTopics(t);
        produce(broker, t, 1);
        grant(allow("alice", ResourceType.TOPIC, t, AclOperation.READ),
                allow("bob", ResourceType.TOPIC, t, AclOperation.WRITE),
                allow("carol", ResourceType.TOPIC, t, AclOperation.DELETE));
        try (Admin alice = admin("alice")) {
            TopicDescription d = get(alice.describeTopics(List.of(t),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames()).get(t);
            served("DescribeTopics (authorized ops)", "alice READ topic", d.authorizedOperations());
            assertEquals(Set.of(AclOperation.READ, AclOperation.DESCRIBE), d.authorizedOperations());
            assertTrue(get(alice.listTopics().names()).contains(t));
            assertEquals(1, latest(alice, t));
            served("ListTopics + ListOffsets", "alice READ topic (implies DESCRIBE)", "served");
            denied("DescribeConfigs topic", "alice READ topic", TopicAuthorizationException.class,
                    () -> get(alice.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, t))).all()));
        }
        try (KafkaProducer<byte[], byte[]> alice = producer(broker, "alice", NOT_IDEMPOTENT)) {
            denied("Produce", "alice READ topic", TopicAuthorizationException.class,
                    () -> get(alice.send(new ProducerRecord<>(t, 0, null, utf8("alice")))));
        }
        try (Admin bob = admin("bob"); Admin carol = admin("carol")) {
            TopicDescription d = get(bob.describeTopics(List.of(t),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames()).get(t);
            served("DescribeTopics (authorized ops)", "bob WRITE topic", d.authorizedOperations());
            assertEquals(Set.of(AclOperation.WRITE, AclOperation.DESCRIBE), d.authorizedOperations());
            describeOk(carol, "carol DELETE topic (implies DESCRIBE)", t);
        }
    }

    @Test
    void hostMustMatch(OxbowBroker broker) throws Exception {
        String t = name("host");
        createTopics(t);
        grant(acl("User:alice", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.DESCRIBE,
                        AclPermissionType.ALLOW, "127.0.0.1"),
                acl("User:bob", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.DESCRIBE,
                        AclPermissionType.ALLOW, "10.0.0.1"),
                allow("carol", ResourceType.TOPIC, t, AclOperation.DESCRIBE),
                acl("User:carol", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.DESCRIBE,
                        AclPermissionType.DENY, "10.0.0.1"));
        try (Admin alice = admin("alice"); Admin bob = admin("bob"); Admin carol = admin("carol")) {
            describeOk(alice, "alice ALLOW from 127.0.0.1", t);
            describeDenied(bob, "bob ALLOW from 10.0.0.1 only", t);
            describeOk(carol, "carol ALLOW from * + DENY from 10.0.0.1", t);
        }
    }

    // ---- DescribeAcls filters and DeleteAcls ------------------------------------------------

    @Test
    void describeAclsFiltersAndDeleteAclsReturnsDeleted(OxbowBroker broker) throws Exception {
        String base = name("filters");
        String t = base + "-t";
        AclBinding b1 = allow("alice", ResourceType.TOPIC, t, AclOperation.READ);
        AclBinding b2 = allowPrefixed("bob", ResourceType.TOPIC, base + "-", AclOperation.WRITE);
        AclBinding b3 = allow("carol", ResourceType.TOPIC, "*", AclOperation.DESCRIBE);
        AclBinding b4 = allow("alice", ResourceType.GROUP, base + "-g", AclOperation.READ);
        AclBinding b5 = acl("User:alice", ResourceType.TOPIC, base + "-other", PatternType.LITERAL,
                AclOperation.DESCRIBE, AclPermissionType.DENY, "10.0.0.1");
        grant(b1, b2, b3, b4, b5);
        try (Admin admin = admin("admin")) {
            List<AclBinding> ordered = List.copyOf(get(admin.describeAcls(AclBindingFilter.ANY).values()));
            row("DescribeAcls ANY (order as returned)", "admin", "");
            for (AclBinding b : ordered) {
                row("", "", b.pattern().resourceType() + " " + b.pattern().patternType() + " "
                        + b.pattern().name() + " " + b.entry().principal() + " " + b.entry().operation()
                        + " " + b.entry().permissionType() + " " + b.entry().host());
            }
            assertEquals(Set.of(b1, b2, b3, b4, b5), Set.copyOf(ordered));

            Map<String, AclBindingFilter> filters = new LinkedHashMap<>();
            filters.put("TOPIC LITERAL t", resource(ResourceType.TOPIC, t, PatternType.LITERAL));
            filters.put("TOPIC PREFIXED base-", resource(ResourceType.TOPIC, base + "-", PatternType.PREFIXED));
            filters.put("TOPIC MATCH t", resource(ResourceType.TOPIC, t, PatternType.MATCH));
            filters.put("TOPIC ANY t", resource(ResourceType.TOPIC, t, PatternType.ANY));
            filters.put("TOPIC LITERAL *", resource(ResourceType.TOPIC, "*", PatternType.LITERAL));
            filters.put("TOPIC ANY (any name)", resource(ResourceType.TOPIC, null, PatternType.ANY));
            filters.put("ANY MATCH base-g", resource(ResourceType.ANY, base + "-g", PatternType.MATCH));
            filters.put("principal User:alice", entry(new AccessControlEntryFilter(
                    "User:alice", null, AclOperation.ANY, AclPermissionType.ANY)));
            filters.put("TOPIC + User:alice", new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, null, PatternType.ANY),
                    new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY)));
            filters.put("DENY", entry(new AccessControlEntryFilter(null, null, AclOperation.ANY,
                    AclPermissionType.DENY)));
            filters.put("host 10.0.0.1", entry(new AccessControlEntryFilter(null, "10.0.0.1", AclOperation.ANY,
                    AclPermissionType.ANY)));
            filters.put("operation WRITE", entry(new AccessControlEntryFilter(null, null, AclOperation.WRITE,
                    AclPermissionType.ANY)));
            Map<String, Set<AclBinding>> expected = new LinkedHashMap<>();
            expected.put("TOPIC LITERAL t", Set.of(b1));
            expected.put("TOPIC PREFIXED base-", Set.of(b2));
            expected.put("TOPIC MATCH t", Set.of(b1, b2, b3));
            expected.put("TOPIC ANY t", Set.of(b1));
            expected.put("TOPIC LITERAL *", Set.of(b3));
            expected.put("TOPIC ANY (any name)", Set.of(b1, b2, b3, b5));
            expected.put("ANY MATCH base-g", Set.of(b2, b3, b4));
            expected.put("principal User:alice", Set.of(b1, b4, b5));
            expected.put("TOPIC + User:alice", Set.of(b1, b5));
            expected.put("DENY", Set.of(b5));
            expected.put("host 10.0.0.1", Set.of(b5));
            expected.put("operation WRITE", Set.of(b2));
            Map<AclBinding, String> label = Map.of(b1, "b1", b2, "b2", b3, "b3", b4, "b4", b5, "b5");
            for (var e : filters.entrySet()) {
                Set<AclBinding> got = describeAcls(admin, e.getValue());
                served("DescribeAcls " + e.getKey(), "admin", got.stream().map(b -> label.getOrDefault(b, b.toString()))
                        .sorted().collect(Collectors.toList()));
                assertEquals(expected.get(e.getKey()), got, e.getKey());
            }

            DeleteAclsResult byBob = admin.deleteAcls(List.of(entry(new AccessControlEntryFilter(
                    "User:bob", null, AclOperation.ANY, AclPermissionType.ANY))));
            Collection<AclBinding> deleted = get(byBob.all());
            served("DeleteAcls principal User:bob", "admin", deleted.size() + " deleted");
            assertEquals(List.of(b2), List.copyOf(deleted));
            AclBindingFilter match = resource(ResourceType.TOPIC, t, PatternType.MATCH);
            AclBindingFilter nothing = resource(ResourceType.TOPIC, base + "-none", PatternType.LITERAL);
            DeleteAclsResult two = admin.deleteAcls(List.of(match, nothing));
            Set<AclBinding> deletedByMatch = get(two.values().get(match)).values().stream()
                    .map(DeleteAclsResult.FilterResult::binding).collect(Collectors.toSet());
            served("DeleteAcls TOPIC MATCH t", "admin", deletedByMatch.size() + " deleted");
            assertEquals(Set.of(b1, b3), deletedByMatch);
            assertEquals(List.of(), get(two.values().get(nothing)).values());
            served("DeleteAcls matching nothing", "admin", "0 deleted, no error");
            awaitAcls(admin, "after DeleteAcls", acls -> acls.equals(Set.of(b4, b5)));
        }
    }

}
