package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.ResourceNotFoundException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Helpers of {@link AclTest}: clients logged in over the SASL_PLAINTEXT listener as PLAIN users,
 * ACLs created by admin and awaited through DescribeAcls, and the one-line rows each check
 * prints ({@code [acl] API | principal and its ACLs -> outcome}).
 */
final class AclKit {
    private AclKit() {}

    /** The broker's SASL_PLAINTEXT listener, where every client of the tests logs in. */
    static final int SASL_PORT = freePort();
    static final String CLUSTER = "kafka-cluster";
    static final AtomicInteger SEQ = new AtomicInteger();

    static int freePort() {
        try {
            return OxbowBroker.freePort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    // ---- clients ----------------------------------------------------------------------------

    /** Client settings for {@code user} over SASL_PLAINTEXT with PLAIN. */
    static Map<String, Object> sasl(String user) {
        Map<String, Object> c = new HashMap<>();
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:" + SASL_PORT);
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        c.put(SaslConfigs.SASL_MECHANISM, "PLAIN");
        c.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.plain.PlainLoginModule required"
                + " username=\"" + user + "\" password=\"" + user + "-secret\";");
        return c;
    }

    static Admin admin(String user) {
        Properties p = new Properties();
        p.putAll(sasl(user));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20_000);
        return Admin.create(p);
    }

    static KafkaProducer<byte[], byte[]> producer(OxbowBroker broker, String user, Map<String, Object> extra) {
        Map<String, Object> c = sasl(user);
        c.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20_000);
        c.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        c.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 20_000);
        c.putAll(extra);
        return broker.producer(c);
    }

    /** Plain acks=all producer without idempotence: only Produce itself is authorized. */
    static final Map<String, Object> NOT_IDEMPOTENT = Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);

    static KafkaConsumer<byte[], byte[]> consumer(OxbowBroker broker, String user, Map<String, Object> extra) {
        Map<String, Object> c = sasl(user);
        c.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20_000);
        c.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        c.putAll(extra);
        return broker.consumer(c);
    }

    // ---- ACLs -------------------------------------------------------------------------------

    static AclBinding acl(String principal, ResourceType type, String name, PatternType pattern,
            AclOperation op, AclPermissionType permission, String host) {
        return new AclBinding(new ResourcePattern(type, name, pattern),
                new AccessControlEntry(principal, host, op, permission));
    }

    /** ALLOW {@code op} on the LITERAL resource for User:{@code user} from any host. */
    static AclBinding allow(String user, ResourceType type, String name, AclOperation op) {
        return acl("User:" + user, type, name, PatternType.LITERAL, op, AclPermissionType.ALLOW, "*");
    }

    static AclBinding allowPrefixed(String user, ResourceType type, String prefix, AclOperation op) {
        return acl("User:" + user, type, prefix, PatternType.PREFIXED, op, AclPermissionType.ALLOW, "*");
    }

    static AclBinding deny(String user, ResourceType type, String name, PatternType pattern, AclOperation op) {
        return acl("User:" + user, type, name, pattern, op, AclPermissionType.DENY, "*");
    }

    static Set<AclBinding> describeAcls(Admin admin, AclBindingFilter filter) throws Exception {
        return new HashSet<>(get(admin.describeAcls(filter).values()));
    }

    /** Creates the ACLs as admin and waits (bounded) until DescribeAcls shows all of them. */
    static void grant(AclBinding... bindings) throws Exception {
        try (Admin admin = admin("admin")) {
            get(admin.createAcls(List.of(bindings)).all());
            awaitAcls(admin, "created ACLs", acls -> acls.containsAll(List.of(bindings)));
        }
    }

    static void awaitAcls(Admin admin, String what, Predicate<Set<AclBinding>> done) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        Set<AclBinding> acls = describeAcls(admin, AclBindingFilter.ANY);
        while (!done.test(acls)) {
            if (System.nanoTime() > deadline) {
                fail(what + ": DescribeAcls still shows " + acls + " after 30 s");
            }
            Thread.sleep(50);
            acls = describeAcls(admin, AclBindingFilter.ANY);
        }
    }

    // ---- rows -------------------------------------------------------------------------------

    interface Call {
        void run() throws Exception;
    }

    static void row(String api, String who, String outcome) {
        System.out.printf("[acl] %-34s | %-46s -> %s%n", api, who, outcome);
    }

    static String describe(Throwable t) {
        Errors error = Errors.forException(t);
        String msg = String.valueOf(t.getMessage());
        if (msg.length() > 140) {
            msg = msg.substring(0, 140) + "...";
        }
        return t.getClass().getSimpleName() + " [" + error.name() + "=" + error.code() + "] " + msg;
    }

    /** Runs {@code call}, which must fail with {@code expected} (unwrapped from ExecutionException). */
    static <E extends Throwable> E denied(String api, String who, Class<E> expected, Call call) {
        Throwable thrown = null;
        try {
            call.run();
        } catch (ExecutionException e) {
            thrown = e.getCause();
        } catch (Throwable t) {
            thrown = t;
        }
        row(api, who, thrown == null ? "SERVED (expected " + expected.getSimpleName() + ")" : describe(thrown));
        return assertInstanceOf(expected, thrown, api + " as " + who + ": got " + thrown);
    }

    /**
     * As {@link #denied}, for clients that may report the error wrapped: {@code expected} must be
     * the exception or one of its causes.
     */
    static <E extends Throwable> E deniedWithCause(String api, String who, Class<E> expected, Call call) {
        Throwable thrown = null;
        try {
            call.run();
        } catch (ExecutionException e) {
            thrown = e.getCause();
        } catch (Throwable t) {
            thrown = t;
        }
        Throwable cause = thrown;
        while (cause != null && !expected.isInstance(cause)) {
            cause = cause.getCause();
        }
        row(api, who, thrown == null ? "SERVED (expected " + expected.getSimpleName() + ")"
                : cause == thrown || cause == null ? describe(thrown)
                : thrown.getClass().getSimpleName() + " caused by " + describe(cause));
        return assertInstanceOf(expected, cause, api + " as " + who + ": got " + thrown);
    }

    static void served(String api, String who, Object what) {
        row(api, who, "ok: " + what);
    }

    static String name(String tag) {
        return "acl-" + tag + "-" + SEQ.incrementAndGet();
    }

    // ---- data (as admin) and waits ----------------------------------------------------------

    static void createTopics(String... names) throws Exception {
        try (Admin admin = admin("admin")) {
            get(admin.createTopics(Arrays.stream(names).map(n -> new NewTopic(n, 1, (short) 1))
                    .collect(Collectors.toList())).all());
        }
    }

    /** Produces {@code n} records v0.. to partition 0 as admin; returns their offsets. */
    static List<Long> produce(OxbowBroker broker, String topic, int n) throws Exception {
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = producer(broker, "admin", Map.of())) {
            for (int i = 0; i < n; i++) {
                offsets.add(get(p.send(new ProducerRecord<>(topic, 0, null, utf8("v" + i)))).offset());
            }
        }
        return offsets;
    }

    /** The values of partition 0, read to its end as admin. */
    static List<String> values(OxbowBroker broker, String topic, IsolationLevel isolation) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation.toString());
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(broker, "admin", c)) {
            TopicPartition tp = tp(topic, 0);
            consumer.assign(List.of(tp));
            return Kit.readToEnd(consumer, List.of(tp)).get(tp).stream()
                    .map(r -> str(r.value())).collect(Collectors.toList());
        }
    }

    static long offset(String topic, OffsetSpec spec) throws Exception {
        try (Admin admin = admin("admin")) {
            return get(admin.listOffsets(Map.of(tp(topic, 0), spec)).partitionResult(tp(topic, 0))).offset();
        }
    }

    static Map<String, Object> groupId(String group) {
        return Map.of(ConsumerConfig.GROUP_ID_CONFIG, group);
    }

    /** Admin ListOffsets "latest" of partition 0, as whoever {@code admin} logged in as. */
    static long latest(Admin admin, String topic) throws Exception {
        return get(admin.listOffsets(Map.of(tp(topic, 0), OffsetSpec.latest())).partitionResult(tp(topic, 0))).offset();
    }

    static Set<String> topicsAsAdmin() throws Exception {
        try (Admin admin = admin("admin")) {
            return get(admin.listTopics().names());
        }
    }

    record Polled(List<ConsumerRecord<byte[], byte[]>> records, RuntimeException error) {
        List<String> values() {
            return records.stream().map(r -> str(r.value())).collect(Collectors.toList());
        }
    }

    /** Polls until {@code want} records arrived, poll() threw, or 30 s passed. */
    static Polled poll(KafkaConsumer<byte[], byte[]> consumer, int want) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (got.size() < want && System.nanoTime() < deadline) {
            try {
                consumer.poll(Duration.ofMillis(200)).forEach(got::add);
            } catch (RuntimeException e) {
                return new Polled(got, e);
            }
        }
        return new Polled(got, null);
    }

    /** A poll that must throw {@code expected} before any record arrives. */
    static <E extends RuntimeException> void pollDenied(String api, String who, Class<E> expected,
            KafkaConsumer<byte[], byte[]> consumer) {
        Polled p = poll(consumer, 1);
        row(api, who, p.error() == null ? "SERVED " + p.values() : describe(p.error()));
        assertEquals(List.of(), p.values(), api + " as " + who + ": records despite the missing ACL");
        assertInstanceOf(expected, p.error(), api + " as " + who + ": poll threw " + p.error());
    }

    static Map<String, Object> group(String groupId, String protocol) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        return c;
    }

    static Map<TopicPartition, Long> committedOffsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, Long> out = new LinkedHashMap<>();
        get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())
                .forEach((tp, om) -> out.put(tp, om == null ? null : om.offset()));
        return out;
    }

    /** Bounded wait until DescribeConfigs shows the altered value (it reaches the broker through metadata). */
    static String awaitConfig(Admin admin, ConfigResource res, String key, String want) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            String v = get(admin.describeConfigs(List.of(res)).all()).get(res).get(key).value();
            if (want.equals(v) || System.nanoTime() > deadline) {
                assertEquals(want, v, key);
                return v;
            }
            Thread.sleep(100);
        }
    }

    static Set<String> groupIds(Admin admin) throws Exception {
        return get(admin.listGroups().all()).stream().map(GroupListing::groupId).collect(Collectors.toSet());
    }

    static Map<String, Object> txn(String id) {
        return Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
    }

    /** Bounded wait until the new credential is described (it reaches the broker through metadata). */
    static UserScramCredentialsDescription awaitScram(Admin admin, String user) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            try {
                return get(admin.describeUserScramCredentials(List.of(user)).description(user));
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof ResourceNotFoundException)
                        || System.nanoTime() > deadline) {
                    throw e;
                }
            }
            Thread.sleep(100);
        }
    }

    static void describeOk(Admin admin, String who, String topic) throws Exception {
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        served("DescribeTopics " + topic, who, d.partitions().size() + " partition");
    }

    static void describeDenied(Admin admin, String who, String topic) {
        denied("DescribeTopics " + topic, who, TopicAuthorizationException.class,
                () -> get(admin.describeTopics(List.of(topic)).allTopicNames()));
    }

    static AclBindingFilter resource(ResourceType type, String name, PatternType pattern) {
        return new AclBindingFilter(new ResourcePatternFilter(type, name, pattern), AccessControlEntryFilter.ANY);
    }

    static AclBindingFilter entry(AccessControlEntryFilter entry) {
        return new AclBindingFilter(ResourcePatternFilter.ANY, entry);
    }
}
