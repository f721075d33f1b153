package io.oxbow.compat;

import static io.oxbow.compat.Kit.assertFailsWith;
import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConfigEntry.ConfigSource;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DeleteRecordsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.OffsetOutOfRangeException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AlterConfigsRequest;
import org.apache.kafka.common.requests.AlterConfigsResponse;
import org.apache.kafka.common.requests.ApiError;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.extension.ExtendWith;

/** Topic and cluster administration through the Java AdminClient. */
@ExtendWith(OxbowBrokerExtension.class)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class AdminTest {
    /** Kafka's own defaults, compared only when the broker reports source DEFAULT_CONFIG. */
    static final Map<String, String> KAFKA_TOPIC_DEFAULTS = Map.of(
            "cleanup.policy", "delete",
            "compression.type", "producer",
            "retention.ms", "604800000",
            "retention.bytes", "-1",
            "segment.bytes", "1073741824",
            "max.message.bytes", "1048588",
            "message.timestamp.type", "CreateTime",
            "min.insync.replicas", "1");

    Admin admin;

    @BeforeAll
    void open(OxbowBroker broker) {
        admin = broker.admin();
    }

    @AfterAll
    void close() {
        if (admin != null) {
            admin.close(Duration.ofSeconds(10));
        }
    }

    static ConfigResource topicResource(String topic) {
        return new ConfigResource(ConfigResource.Type.TOPIC, topic);
    }

    Config describeTopicConfig(String topic) throws Exception {
        ConfigResource r = topicResource(topic);
        Config c = get(admin.describeConfigs(List.of(r)).all()).get(r);
        assertNotNull(c, "describeConfigs returned nothing for " + topic);
        return c;
    }

    static ConfigEntry entry(Config c, String name) {
        ConfigEntry e = c.get(name);
        assertNotNull(e, "describeConfigs lacks entry " + name + "; got " + c.entries());
        return e;
    }

    static void assertDynamic(Config c, String name, String value) {
        ConfigEntry e = entry(c, name);
        assertEquals(value, e.value(), name + " value");
        assertEquals(ConfigSource.DYNAMIC_TOPIC_CONFIG, e.source(), name + " source");
    }

    /**
     * Not set on the topic: inherited from a broker or cluster level (Kafka 4 itself reports
     * min.insync.replicas as DYNAMIC_DEFAULT_BROKER_CONFIG after `kafka-storage format`).
     */
    static void assertNotTopicLevel(Config c, String name) {
        ConfigEntry e = entry(c, name);
        assertTrue(INHERITED.contains(e.source()),
                name + " source should be one of " + INHERITED + ", was " + e.source() + " (value " + e.value() + ")");
        assertNotNull(e.value(), name + " value");
        if (e.source() == ConfigSource.DEFAULT_CONFIG && KAFKA_TOPIC_DEFAULTS.containsKey(name)) {
            assertEquals(KAFKA_TOPIC_DEFAULTS.get(name), e.value(), "default value of " + name);
        }
    }

    static final Set<ConfigSource> INHERITED = Set.of(ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG);

    /** segment.bytes is not set dynamically anywhere by these tests: a plain default. */
    static void assertSegmentBytesDefault(Config c) {
        ConfigEntry e = entry(c, "segment.bytes");
        assertTrue(e.source() == ConfigSource.DEFAULT_CONFIG || e.source() == ConfigSource.STATIC_BROKER_CONFIG,
                "segment.bytes source should be DEFAULT_CONFIG or STATIC_BROKER_CONFIG, was " + e.source());
        assertTrue(Long.parseLong(e.value()) > 0, "segment.bytes value " + e.value());
    }

    Set<String> listTopics() throws Exception {
        return get(admin.listTopics().names());
    }

    Node onlyNode() throws Exception {
        Collection<Node> nodes = get(admin.describeCluster().nodes());
        assertEquals(1, nodes.size(), "cluster nodes: " + nodes);
        return nodes.iterator().next();
    }

    // ---- create ------------------------------------------------------------------------------

    @Test
    void createTopicWithConfigs() throws Exception {
        String topic = "admin-configs";
        CreateTopicsResult res = admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1).configs(Map.of(
                "retention.ms", "3600000",
                "cleanup.policy", "delete",
                "segment.bytes", "1048576"))));
        get(res.all());
        assertEquals(4, get(res.numPartitions(topic)), "CreateTopics numPartitions");
        assertEquals(1, get(res.replicationFactor(topic)), "CreateTopics replicationFactor");
        Uuid id = get(res.topicId(topic));
        assertNotNull(id);
        assertNotEquals(Uuid.ZERO_UUID, id, "CreateTopics topicId");
        Config returned = get(res.config(topic));
        assertEquals("3600000", entry(returned, "retention.ms").value(), "CreateTopics config retention.ms");

        assertTrue(listTopics().contains(topic), "listTopics contains " + topic);

        Config c = describeTopicConfig(topic);
        assertDynamic(c, "retention.ms", "3600000");
        assertDynamic(c, "cleanup.policy", "delete");
        assertDynamic(c, "segment.bytes", "1048576");
        assertNotTopicLevel(c, "max.message.bytes");
    }

    @Test
    void describeConfigsOfUnconfiguredTopicReturnsFullEntries() throws Exception {
        String topic = "admin-defaults";
        Kit.createTopic(admin, topic, 1);
        Config c = describeTopicConfig(topic);
        // every topic config a Kafka 4.1 broker describes (tiered-storage ones aside)
        List<String> missing = new ArrayList<>();
        for (String name : List.of("cleanup.policy", "compression.type", "delete.retention.ms",
                "file.delete.delay.ms", "flush.messages", "flush.ms", "index.interval.bytes",
                "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
                "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
                "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "retention.bytes", "retention.ms",
                "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
                "unclean.leader.election.enable")) {
            if (c.get(name) == null || c.get(name).value() == null) {
                missing.add(name);
            }
        }
        assertEquals(List.of(), missing, "topic configs missing from describeConfigs");
        for (String name : KAFKA_TOPIC_DEFAULTS.keySet()) {
            assertNotTopicLevel(c, name);
        }
        assertSegmentBytesDefault(c);
    }

    @Test
    void createValidateOnlyCreatesNothing() throws Exception {
        String topic = "admin-validate-only";
        CreateTopicsResult res = admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)),
                new CreateTopicsOptions().validateOnly(true));
        get(res.all());
        assertFalse(listTopics().contains(topic), "validateOnly must not create the topic");
        assertFailsWith(UnknownTopicOrPartitionException.class,
                admin.describeTopics(List.of(topic)).allTopicNames());
        // and it can then really be created
        Kit.createTopic(admin, topic, 3);
        assertTrue(listTopics().contains(topic));
    }

    @Test
    void createDuplicateFails() throws Exception {
        String topic = "admin-dup";
        Kit.createTopic(admin, topic, 2);
        assertFailsWith(TopicExistsException.class,
                admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
        assertFailsWith(TopicExistsException.class,
                admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)),
                        new CreateTopicsOptions().validateOnly(true)).all());
        // the original is untouched
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(2, d.partitions().size());
    }

    @Test
    void createInvalidNamesFail() {
        for (String bad : List.of("bad name!", "..", ".", "a/b", "x".repeat(250))) {
            assertFailsWith(InvalidTopicException.class,
                    admin.createTopics(List.of(new NewTopic(bad, 1, (short) 1))).values().get(bad));
        }
    }

    @Test
    void createWithInvalidPartitionsOrReplicationFails() throws Exception {
        assertFailsWith(InvalidPartitionsException.class,
                admin.createTopics(List.of(new NewTopic("admin-zero-partitions", 0, (short) 1))).all());
        assertFailsWith(InvalidReplicationFactorException.class,
                admin.createTopics(List.of(new NewTopic("admin-rf3", 1, (short) 3))).all());
        assertFailsWith(InvalidConfigurationException.class,
                admin.createTopics(List.of(new NewTopic("admin-bad-config", 1, (short) 1)
                        .configs(Map.of("retention.ms", "not-a-number")))).all());
        Set<String> names = listTopics();
        for (String t : List.of("admin-zero-partitions", "admin-rf3", "admin-bad-config")) {
            assertFalse(names.contains(t), "failed create left topic " + t + " behind");
        }
    }

    // ---- describe ----------------------------------------------------------------------------

    @Test
    void describeTopics() throws Exception {
        String topic = "admin-describe";
        CreateTopicsResult res = admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1)));
        get(res.all());
        Uuid id = get(res.topicId(topic));
        int nodeId = onlyNode().id();

        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertEquals(id, d.topicId(), "describeTopics topicId vs CreateTopics topicId");
        assertEquals(4, d.partitions().size(), "partition count");
        for (int p = 0; p < 4; p++) {
            TopicPartitionInfo info = d.partitions().get(p);
            assertEquals(p, info.partition(), "partitions sorted by id");
            assertNotNull(info.leader(), "leader of partition " + p);
            assertEquals(nodeId, info.leader().id(), "leader node id of partition " + p);
            assertEquals(List.of(nodeId), info.replicas().stream().map(Node::id).toList(), "replicas of " + p);
            assertEquals(List.of(nodeId), info.isr().stream().map(Node::id).toList(), "isr of " + p);
        }
    }

    @Test
    void describeTopicsById() throws Exception {
        String topic = "admin-describe-by-id";
        CreateTopicsResult res = admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1)));
        get(res.all());
        Uuid id = get(res.topicId(topic));
        // The Java client sends Metadata topics with the id set and name "" (not null).
        TopicDescription byId = get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds()).get(id);
        assertEquals(topic, byId.name(), "describeTopics by id");
        assertEquals(id, byId.topicId());
        assertEquals(4, byId.partitions().size());
        Uuid unknown = Uuid.randomUuid();
        assertFailsWith(org.apache.kafka.common.errors.UnknownTopicIdException.class,
                admin.describeTopics(TopicCollection.ofTopicIds(List.of(unknown))).allTopicIds());
    }

    @Test
    void describeNonexistentTopicFails() {
        assertFailsWith(UnknownTopicOrPartitionException.class,
                admin.describeTopics(List.of("admin-no-such-topic")).allTopicNames());
        assertFailsWith(UnknownTopicOrPartitionException.class,
                admin.describeConfigs(List.of(topicResource("admin-no-such-topic"))).all());
    }

    @Test
    void describeCluster(OxbowBroker broker) throws Exception {
        DescribeClusterResult res = admin.describeCluster();
        String clusterId = get(res.clusterId());
        assertNotNull(clusterId, "clusterId");
        assertFalse(clusterId.isBlank(), "clusterId");
        Node node = onlyNode();
        assertEquals("127.0.0.1", node.host(), "advertised host");
        assertEquals(broker.port(), node.port(), "advertised port");
        Node controller = get(res.controller());
        assertNotNull(controller, "controller");
        assertEquals(node.id(), controller.id(), "controller is the only node");
    }

    @Test
    void electLeadersWhereNoElectionIsNeeded(OxbowBroker broker) throws Exception {
        String topic = "admin-elect";
        Kit.createTopic(admin, topic, 2);
        Set<TopicPartition> both = Set.of(tp(topic, 0), tp(topic, 1));
        for (ElectionType type : ElectionType.values()) {
            Map<TopicPartition, Optional<Throwable>> r = get(admin.electLeaders(type, both).partitions());
            assertEquals(both, r.keySet(), type + ": a result per partition asked for");
            for (Map.Entry<TopicPartition, Optional<Throwable>> e : r.entrySet()) {
                assertTrue(e.getValue().orElse(null) instanceof ElectionNotNeededException,
                        type + " " + e.getKey() + ": the only replica leads already, got " + e.getValue());
            }
        }
        // Every partition (null): those needing no election are left out, as Kafka does.
        assertEquals(Map.of(), get(admin.electLeaders(ElectionType.PREFERRED, null).partitions()));
        Map<TopicPartition, Optional<Throwable>> unknown =
                get(admin.electLeaders(ElectionType.PREFERRED, Set.of(tp(topic, 9))).partitions());
        assertTrue(unknown.get(tp(topic, 9)).orElse(null) instanceof UnknownTopicOrPartitionException, unknown.toString());

        // Kafka's own tool (kafka-leader-election.sh) over the same API.
        List<String> cmd = List.of(
                java.nio.file.Paths.get(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xmx256m", "-cp", System.getProperty("java.class.path"),
                "org.apache.kafka.tools.LeaderElectionCommand",
                "--bootstrap-server", broker.bootstrap(), "--election-type", "preferred",
                "--topic", topic, "--partition", "0");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "kafka-leader-election did not finish");
        System.out.println("[oxbow-compat] kafka-leader-election --election-type preferred\n" + out);
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("Valid replica already elected for partitions " + topic + "-0"), out);
    }

    // ---- alter configs -----------------------------------------------------------------------

    @Test
    void incrementalAlterConfigsSetAndDelete() throws Exception {
        String topic = "admin-alter";
        Kit.createTopic(admin, topic, 1, Map.of("retention.ms", "3600000", "segment.bytes", "1048576"));
        ConfigResource r = topicResource(topic);
        get(admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "2000000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("segment.bytes", null), AlterConfigOp.OpType.DELETE)))).all());
        Config c = describeTopicConfig(topic);
        assertDynamic(c, "retention.ms", "7200000");
        assertDynamic(c, "max.message.bytes", "2000000");
        assertNotTopicLevel(c, "segment.bytes");
        assertSegmentBytesDefault(c);

        // a bad value or an unknown key is rejected and changes nothing
        assertFailsWith(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "not-a-number"), AlterConfigOp.OpType.SET)))).all());
        assertFailsWith(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
        assertDynamic(describeTopicConfig(topic), "retention.ms", "7200000");

        // validateOnly changes nothing either
        get(admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "1000"), AlterConfigOp.OpType.SET))),
                new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(true)).all());
        assertDynamic(describeTopicConfig(topic), "retention.ms", "7200000");

        // DELETE of everything set returns the topic to defaults
        get(admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", null), AlterConfigOp.OpType.DELETE)))).all());
        Config after = describeTopicConfig(topic);
        assertNotTopicLevel(after, "retention.ms");
        assertNotTopicLevel(after, "max.message.bytes");
    }

    /**
     * Admin.alterConfigs was removed from the Java client in 4.0, so the legacy AlterConfigs
     * request (still served by Kafka 4 brokers) is sent with the client's own serializers.
     */
    @Test
    void legacyAlterConfigsReplacesTheWholeSet(OxbowBroker broker) throws Exception {
        String topic = "admin-legacy-alter";
        Kit.createTopic(admin, topic, 1, Map.of("retention.ms", "3600000", "max.message.bytes", "2000000"));
        ConfigResource r = topicResource(topic);
        try (RawKafkaClient raw = new RawKafkaClient("127.0.0.1", broker.port())) {
            short v = raw.negotiate(ApiKeys.ALTER_CONFIGS);
            AlterConfigsResponse resp = raw.send(new AlterConfigsRequest.Builder(
                    Map.of(r, new AlterConfigsRequest.Config(
                            List.of(new AlterConfigsRequest.ConfigEntry("retention.ms", "1800000")))),
                    false), v);
            ApiError err = resp.errors().get(r);
            assertNotNull(err, "AlterConfigs v" + v + " response lacks " + r + ": " + resp.data());
            assertEquals(Errors.NONE, err.error(), "AlterConfigs v" + v + " error: " + err.message());
        }
        Config c = describeTopicConfig(topic);
        assertDynamic(c, "retention.ms", "1800000");
        // legacy AlterConfigs is a full replacement: what is not in the request is removed
        assertNotTopicLevel(c, "max.message.bytes");
    }

    // ---- partitions, records, deletion ---------------------------------------------------------

    @Test
    void createPartitions(OxbowBroker broker) throws Exception {
        String topic = "admin-grow";
        Kit.createTopic(admin, topic, 4);
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(6))).all());
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(6, d.partitions().size(), "partition count after createPartitions");
        for (int p = 0; p < 6; p++) {
            assertEquals(p, d.partitions().get(p).partition());
            assertNotNull(d.partitions().get(p).leader(), "leader of new partition " + p);
        }
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            assertEquals(0L, get(producer.send(new ProducerRecord<>(topic, 5, utf8("k"), utf8("v")))).offset(),
                    "first offset in a new partition");
        }
        assertFailsWith(InvalidPartitionsException.class,
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all());
        assertFailsWith(InvalidPartitionsException.class,
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(6))).all());
        assertFailsWith(UnknownTopicOrPartitionException.class,
                admin.createPartitions(Map.of("admin-no-such-topic", NewPartitions.increaseTo(6))).all());
        assertEquals(6, get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().size());
    }

    @Test
    void deleteRecords(OxbowBroker broker) throws Exception {
        String topic = "admin-delete-records";
        Kit.createTopic(admin, topic, 1);
        TopicPartition tp = tp(topic, 0);
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            List<java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, 0, utf8("k" + i), utf8("v" + i))));
            }
            for (int i = 0; i < 100; i++) {
                assertEquals(i, get(fs.get(i)).offset(), "offset of record " + i);
            }
        }
        DeleteRecordsResult res = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(40)));
        assertEquals(40L, get(res.lowWatermarks().get(tp)).lowWatermark(), "low watermark after deleteRecords");

        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            assertEquals(40L, consumer.beginningOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp), "beginningOffsets");
            assertEquals(100L, consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp), "endOffsets");
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Kit.pollAtLeast(consumer, 60);
            assertEquals(60, got.size(), "records left after deleteRecords");
            for (int j = 0; j < 60; j++) {
                assertEquals(40L + j, got.get(j).offset());
                assertEquals("v" + (40 + j), Kit.str(got.get(j).value()));
            }
        }

        assertFailsWith(OffsetOutOfRangeException.class,
                admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(1_000))).all());
        // beforeOffset(-1) means "up to the high watermark"
        DeleteRecordsResult all = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(-1)));
        assertEquals(100L, get(all.lowWatermarks().get(tp)).lowWatermark(), "low watermark after delete-all");
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            assertEquals(100L, consumer.beginningOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp));
        }
    }

    @Test
    void deleteTopics(OxbowBroker broker) throws Exception {
        String topic = "admin-delete-me";
        CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)));
        get(created.all());
        Uuid oldId = get(created.topicId(topic));
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            get(producer.send(new ProducerRecord<>(topic, 0, utf8("k"), utf8("v"))));
        }
        get(admin.deleteTopics(List.of(topic)).all());
        awaitTopicGone(topic);
        assertFailsWith(UnknownTopicOrPartitionException.class,
                admin.describeTopics(List.of(topic)).allTopicNames());
        assertFailsWith(UnknownTopicOrPartitionException.class,
                admin.deleteTopics(List.of("admin-never-existed")).all());

        // same name again: a new topic with a new id and no old data
        CreateTopicsResult again = admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)));
        get(again.all());
        assertNotEquals(oldId, get(again.topicId(topic)), "a recreated topic gets a new id");
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            TopicPartition tp0 = tp(topic, 0);
            assertEquals(0L, consumer.endOffsets(List.of(tp0), Duration.ofSeconds(30)).get(tp0),
                    "a recreated topic starts empty");
        }
    }

    @Test
    void deleteTopicsById() throws Exception {
        String topic = "admin-delete-by-id";
        CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)));
        get(created.all());
        Uuid id = get(created.topicId(topic));
        get(admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all());
        awaitTopicGone(topic);
        assertFailsWith(org.apache.kafka.common.errors.UnknownTopicIdException.class,
                admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all());
    }

    @Test
    void autoCreatedTopicUsesNumPartitions(OxbowBroker broker) throws Exception {
        // Kafka's default auto.create.topics.enable=true; the suite starts brokers with num.partitions=4
        String topic = "admin-auto-created";
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            get(producer.send(new ProducerRecord<>(topic, utf8("k"), utf8("v"))));
        }
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(4, d.partitions().size(), "partitions of an auto-created topic (num.partitions=4)");
    }

    @Test
    void describeBrokerConfigs() throws Exception {
        Node node = onlyNode();
        ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node.id()));
        Config c = get(admin.describeConfigs(List.of(r)).all()).get(r);
        assertNotNull(c, "describeConfigs(BROKER " + node.id() + ")");
        ConfigEntry np = entry(c, "num.partitions");
        assertEquals("4", np.value(), "num.partitions from --override");
        assertEquals(ConfigSource.STATIC_BROKER_CONFIG, np.source(), "num.partitions source");
        ConfigEntry retention = entry(c, "log.retention.ms");
        assertNotNull(retention.source());
        ConfigEntry segment = entry(c, "log.segment.bytes");
        assertEquals(ConfigSource.DEFAULT_CONFIG, segment.source(), "log.segment.bytes source");
        assertEquals("1073741824", segment.value(), "log.segment.bytes default");
    }

    /** Topic deletion is eventually visible in metadata, also in Kafka; wait a bounded time. */
    private void awaitTopicGone(String topic) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        Set<String> names = listTopics();
        while (names.contains(topic) && System.nanoTime() < deadline) {
            Thread.sleep(100);
            names = listTopics();
        }
        if (names.contains(topic)) {
            fail("listTopics still returns " + topic + " 15 s after deleteTopics: " + names);
        }
    }

    @Test
    void listTopicsShowsCreatedTopics() throws Exception {
        List<String> mine = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            mine.add("admin-list-" + i);
        }
        get(admin.createTopics(mine.stream().map(t -> new NewTopic(t, 1, (short) 1)).toList()).all());
        Set<String> names = listTopics();
        assertTrue(names.containsAll(mine), "listTopics " + names + " lacks some of " + mine);
        for (var l : get(admin.listTopics().listings())) {
            if (mine.contains(l.name())) {
                assertFalse(l.isInternal(), l.name() + " is not internal");
                assertNotNull(l.topicId(), l.name() + " topicId");
            }
        }
    }
}
