package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.LongStream;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * TLS and SASL with the Java client, on one broker with four listeners: PLAINTEXT (the harness
 * port: topics, SCRAM users), SASL_SSL (PLAIN users from the listener's JAAS line, SCRAM-SHA-256
 * and -512 users created with Admin.alterUserScramCredentials), SSL with
 * {@code ssl.client.auth=required}, and SASL_PLAINTEXT. Certificates come fresh from
 * {@code tests/clients/security_certs.py} (a test CA, the broker's PEM keystore, a client key
 * pair, a client key pair from a foreign CA); clients read PEM trust and key stores directly.
 *
 * <p>Records produced over each secured listener are read back exactly, metadata on each
 * listener must advertise that listener, and refusals must surface as the Java client's own
 * exception classes: SaslAuthenticationException for bad credentials, SslAuthenticationException
 * when the SSL listener rejects the client certificate (or its absence).
 */
class SecurityTest {
    static final String PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required"
            + " user_admin=\"admin-secret\" user_alice=\"alice-secret\";";
    static final String SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;";
    static final int PARTITIONS = 3;
    static final int RECORDS = 200;

    static final Path CERTS = generateCerts();
    static final int SASL_SSL_PORT = port();
    static final int SSL_PORT = port();
    static final int SASL_PLAINTEXT_PORT = port();

    @RegisterExtension
    static final OxbowBrokerExtension BROKER = new OxbowBrokerExtension(SecurityTest::brokerOverrides);

    /** Kafka's keys; 4.1.1 will not start without a JAAS line per SASL listener and mechanism. */
    static List<String> brokerOverrides(int plaintextPort) {
        List<String> o = new ArrayList<>(List.of(
                "listeners=PLAINTEXT://127.0.0.1:" + plaintextPort
                        + ",SASL_SSL://127.0.0.1:" + SASL_SSL_PORT
                        + ",SSL://127.0.0.1:" + SSL_PORT
                        + ",SASL_PLAINTEXT://127.0.0.1:" + SASL_PLAINTEXT_PORT,
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
                        + "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                "ssl.keystore.type=PEM",
                "ssl.keystore.location=" + CERTS.resolve("server.keystore.pem"),
                "ssl.truststore.type=PEM",
                "ssl.truststore.location=" + CERTS.resolve("ca.pem"),
                "listener.name.ssl.ssl.client.auth=required",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"));
        for (String listener : List.of("sasl_ssl", "sasl_plaintext")) {
            o.add("listener.name." + listener + ".plain.sasl.jaas.config=" + PLAIN_JAAS);
            o.add("listener.name." + listener + ".scram-sha-256.sasl.jaas.config=" + SCRAM_JAAS);
            o.add("listener.name." + listener + ".scram-sha-512.sasl.jaas.config=" + SCRAM_JAAS);
        }
        return o;
    }

    // ---- setup helpers ----------------------------------------------------------------------

    /** Runs tests/clients/security_certs.py into a fresh temp dir (the one PKI recipe of both suites). */
    static Path generateCerts() {
        try {
            Path dir = Files.createTempDirectory("oxbow-java-certs-");
            Path script = Paths.get(System.getProperty("basedir", System.getProperty("user.dir")))
                    .resolve("../clients/security_certs.py").normalize();
            Process p = new ProcessBuilder("python3", script.toString(), dir.toString())
                    .redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
                throw new IllegalStateException("security_certs.py failed: " + out);
            }
            dir.toFile().deleteOnExit();
            return dir;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    static int port() {
        try {
            return OxbowBroker.freePort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static Map<String, Object> trust() {
        Map<String, Object> c = new HashMap<>();
        c.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        c.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, CERTS.resolve("ca.pem").toString());
        c.put(SslConfigs.SSL_ENDPOINT_IDENTIFICATION_ALGORITHM_CONFIG, "https");
        return c;
    }

    static Map<String, Object> saslSsl(String mechanism, String user, String password) {
        Map<String, Object> c = trust();
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:" + SASL_SSL_PORT);
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        c.put(SaslConfigs.SASL_MECHANISM, mechanism);
        String module = mechanism.equals("PLAIN")
                ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
        c.put(SaslConfigs.SASL_JAAS_CONFIG,
                module + " required username=\"" + user + "\" password=\"" + password + "\";");
        return c;
    }

    /** The SSL listener presenting {@code keyPair}.keystore.pem (client, foreign-client) or nothing. */
    static Map<String, Object> mtls(String keyPair) {
        Map<String, Object> c = trust();
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:" + SSL_PORT);
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SSL");
        if (keyPair != null) {
            c.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
            c.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, CERTS.resolve(keyPair + ".keystore.pem").toString());
        }
        return c;
    }

    static Admin admin(Map<String, Object> security) {
        Properties p = new Properties();
        p.putAll(security);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 15_000);
        return Admin.create(p);
    }

    static void upsertScram(OxbowBroker broker, String user, ScramMechanism mechanism, int iterations,
            String password) throws Exception {
        try (Admin admin = broker.admin()) {
            get(admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                    user, new ScramCredentialInfo(mechanism, iterations), password))).all());
            UserScramCredentialsDescription d =
                    get(admin.describeUserScramCredentials(List.of(user)).description(user));
            System.out.println("[security] " + user + ": " + d.credentialInfos());
            assertEquals(List.of(new ScramCredentialInfo(mechanism, iterations)), d.credentialInfos());
        }
    }

    /** Bounded retry until {@code security} can describe the cluster (a new SCRAM credential
     * reaches the listener through the metadata log). */
    static void awaitLogin(Map<String, Object> security, String what) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        Throwable last = null;
        while (System.nanoTime() < deadline) {
            try (Admin admin = admin(security)) {
                get(admin.describeCluster().nodes());
                return;
            } catch (ExecutionException e) {
                last = e.getCause();
                if (!(last instanceof SaslAuthenticationException)) {
                    throw e;
                }
            }
            Thread.sleep(500);
        }
        fail(what + ": no login within 30 s, last " + last);
    }

    // ---- round trips ------------------------------------------------------------------------

    /**
     * RECORDS keyed records produced and read back through {@code security}; the metadata the
     * client gets must name {@code listenerPort} as every partition's leader's port.
     */
    static void roundTrip(OxbowBroker broker, Map<String, Object> security, int listenerPort, String tag)
            throws Exception {
        String topic = "sec-" + tag + "-" + System.nanoTime();
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, PARTITIONS);
        }
        Map<TopicPartition, Map<Long, String>> sent = new TreeMap<>(
                (a, b) -> Integer.compare(a.partition(), b.partition()));
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(security)) {
            List<PartitionInfo> parts = producer.partitionsFor(topic);
            assertEquals(PARTITIONS, parts.size());
            for (PartitionInfo pi : parts) {
                assertEquals(listenerPort, pi.leader().port(), tag + ": leader advertised as " + pi.leader());
            }
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, utf8("k" + i), utf8(tag + "-v" + i))));
            }
            for (int i = 0; i < RECORDS; i++) {
                RecordMetadata md = get(acks.get(i));
                sent.computeIfAbsent(new TopicPartition(topic, md.partition()), k -> new TreeMap<>())
                        .put(md.offset(), "k" + i + "=" + tag + "-v" + i);
            }
        }
        for (Map<Long, String> offsets : sent.values()) {
            assertEquals(LongStream.range(0, offsets.size()).boxed().collect(Collectors.toList()),
                    List.copyOf(offsets.keySet()), tag + ": offsets");
        }
        Map<TopicPartition, Map<Long, String>> read = new TreeMap<>(
                (a, b) -> Integer.compare(a.partition(), b.partition()));
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(security)) {
            List<TopicPartition> tps = IntStream.range(0, PARTITIONS)
                    .mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toList());
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            for (ConsumerRecord<byte[], byte[]> r : Kit.pollAtLeast(consumer, RECORDS)) {
                read.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new TreeMap<>())
                        .put(r.offset(), str(r.key()) + "=" + str(r.value()));
            }
        }
        assertEquals(sent, read, tag + ": records read back over the secured listener");
        System.out.println("[security] " + tag + ": " + RECORDS + " records over 127.0.0.1:" + listenerPort);
    }

    @Test
    void saslSslScramSha512RoundTrip(OxbowBroker broker) throws Exception {
        upsertScram(broker, "carol", ScramMechanism.SCRAM_SHA_512, 8192, "carol-scram-secret");
        Map<String, Object> c = saslSsl("SCRAM-SHA-512", "carol", "carol-scram-secret");
        awaitLogin(c, "carol");
        roundTrip(broker, c, SASL_SSL_PORT, "scram-sha-512");
    }

    @Test
    void saslSslScramSha256RoundTrip(OxbowBroker broker) throws Exception {
        upsertScram(broker, "bob", ScramMechanism.SCRAM_SHA_256, 4096, "bob-scram-secret");
        Map<String, Object> c = saslSsl("SCRAM-SHA-256", "bob", "bob-scram-secret");
        awaitLogin(c, "bob");
        roundTrip(broker, c, SASL_SSL_PORT, "scram-sha-256");
    }

    @Test
    void saslSslPlainRoundTrip(OxbowBroker broker) throws Exception {
        roundTrip(broker, saslSsl("PLAIN", "alice", "alice-secret"), SASL_SSL_PORT, "plain");
    }

    @Test
    void mtlsRoundTrip(OxbowBroker broker) throws Exception {
        roundTrip(broker, mtls("client"), SSL_PORT, "mtls");
    }

    // ---- refusals ---------------------------------------------------------------------------

    /**
     * A client with {@code security} is refused: the admin call fails with {@code expected}, and
     * a consumer assigned to a topic holding records throws {@code expected} from poll() without
     * returning a record. Returns the admin's exception (its message is printed).
     */
    static <E extends AuthenticationException> E refused(OxbowBroker broker, Map<String, Object> security,
            Class<E> expected, String what) throws Exception {
        String topic = "refused-" + System.nanoTime();
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1);
        }
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            get(producer.send(new ProducerRecord<>(topic, utf8("secret"))));
        }
        E adminError;
        try (Admin admin = admin(security)) {
            adminError = Kit.assertFailsWith(expected, admin.describeCluster().nodes());
        }
        System.out.println("[security] " + what + ": admin -> " + adminError.getClass().getName() + ": "
                + adminError.getMessage() + (adminError.getCause() == null ? "" : " / cause " + adminError.getCause()));
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(security)) {
            consumer.assign(List.of(new TopicPartition(topic, 0)));
            List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
            Throwable thrown = null;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (thrown == null && System.nanoTime() < deadline) {
                try {
                    consumer.poll(Duration.ofMillis(500)).forEach(got::add);
                } catch (RuntimeException e) {
                    thrown = e;
                }
            }
            assertEquals(List.of(), got, what + ": a refused consumer got records");
            assertInstanceOf(expected, thrown, what + ": consumer.poll threw " + thrown);
            System.out.println("[security] " + what + ": consumer.poll -> " + thrown);
        }
        return adminError;
    }

    @Test
    void wrongPasswordPlain(OxbowBroker broker) throws Exception {
        SaslAuthenticationException e = refused(broker, saslSsl("PLAIN", "alice", "wrong-secret"),
                SaslAuthenticationException.class, "PLAIN wrong password");
        assertTrue(e.getMessage().contains("Authentication failed"), e.getMessage());
    }

    @Test
    void wrongPasswordScram(OxbowBroker broker) throws Exception {
        upsertScram(broker, "dave", ScramMechanism.SCRAM_SHA_512, 4096, "dave-scram-secret");
        awaitLogin(saslSsl("SCRAM-SHA-512", "dave", "dave-scram-secret"), "dave");
        SaslAuthenticationException e = refused(broker, saslSsl("SCRAM-SHA-512", "dave", "wrong-secret"),
                SaslAuthenticationException.class, "SCRAM-SHA-512 wrong password");
        assertTrue(e.getMessage().contains("Authentication failed"), e.getMessage());
    }

    @Test
    void unknownUserScram(OxbowBroker broker) throws Exception {
        refused(broker, saslSsl("SCRAM-SHA-512", "mallory", "x"), SaslAuthenticationException.class,
                "SCRAM-SHA-512 unknown user");
    }

    @Test
    void foreignCaClientCertificateRefused(OxbowBroker broker) throws Exception {
        refused(broker, mtls("foreign-client"), SslAuthenticationException.class, "foreign CA client certificate");
    }

    @Test
    void missingClientCertificateRefused(OxbowBroker broker) throws Exception {
        refused(broker, mtls(null), SslAuthenticationException.class, "no client certificate");
    }

    @Test
    void untrustedBrokerRefusedByClient(OxbowBroker broker) throws Exception {
        Map<String, Object> c = saslSsl("PLAIN", "alice", "alice-secret");
        c.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, CERTS.resolve("foreign-ca.pem").toString());
        refused(broker, c, SslAuthenticationException.class, "client trusting only the foreign CA");
    }
}
