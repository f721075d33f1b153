package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real Kafka Streams application with {@code processing.guarantee=exactly_once_v2} against the
 * broker: word count over a 4-partition input topic, with a repartition topic (groupBy word) and
 * a RocksDB count store with its changelog topic. The input is generated from a fixed seed, so
 * the exact count of every word is known. Everything is checked on what the broker serves:
 *
 * <ul>
 *   <li>the output topic read with read_committed: the last count of every word equals the
 *       expected count, no count ever exceeds it (an over-count means some input was processed
 *       twice), and the counts of a word only increase (its committed outputs are one history);
 *   <li>the application's committed offsets (TxnOffsetCommit) equal the input end offsets;
 *   <li>the changelog read with read_committed holds the exact counts (what a restore reads).
 * </ul>
 *
 * and no stream thread dies (against Kafka none does in any scenario: every error a broker
 * restart or a fencing causes is handled inside the thread). Scenarios: one run; the application
 * closed and restarted with its state dir, then with the state dir wiped (restored from the
 * changelog); the broker SIGKILLed and restarted while a stream thread is held inside an open
 * transaction, released at once; the same with the thread held until the coordinator aborts its
 * transaction on timeout. Waits are bounded (until the expected counts appear, a thread dies or a
 * deadline passes); assertions are on counts, offsets and transaction states, never on timing.
 */
@ExtendWith(OxbowBrokerExtension.class)
@BrokerOverrides({
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.state.log.num.partitions=5",
    "offsets.topic.replication.factor=1",
    "group.initial.rebalance.delay.ms=0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
})
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class StreamsEosTest {
    static final int PARTITIONS = 4;
    static final long WAIT_S = 120;
    static final String STORE = "counts";
    static final String[] VOCABULARY = {
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
        "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
        "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "oxbow", "river", "delta-bend", "lake",
    };

    // ---- input ----------------------------------------------------------------------------------

    /** {@code n} lines of 1..8 words from the vocabulary (skewed towards its start), from {@code seed}. */
    static List<String> lines(long seed, int n) {
        Random r = new Random(seed);
        List<String> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            int words = 1 + r.nextInt(8);
            StringBuilder sb = new StringBuilder();
            for (int w = 0; w < words; w++) {
                int idx = Math.min(r.nextInt(VOCABULARY.length), r.nextInt(VOCABULARY.length));
                if (w > 0) {
                    sb.append(' ');
                }
                sb.append(VOCABULARY[idx]);
            }
            out.add(sb.toString());
        }
        return out;
    }

    static void addCounts(Map<String, Long> into, List<String> lines) {
        for (String line : lines) {
            for (String w : line.split(" ")) {
                into.merge(w, 1L, Long::sum);
            }
        }
    }

    /**
     * Produces {@code lines} (idempotent, acks=all) as records {@code first..}, record i keyed
     * "line-i" to partition i % 4, and waits for every acknowledgement.
     *
     * <p>One request in flight: with five, a first batch rejected with NOT_LEADER_OR_FOLLOWER (a
     * topic just created, a broker just restarted) can be overtaken by the next one, which Kafka
     * 4.1.1 accepts as the start of the new producer's sequence; the retried first batch then
     * fails with OutOfOrderSequence forever.
     */
    static void produce(OxbowBroker broker, String topic, List<String> lines, int first) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = broker.producer(
                Map.of(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 1))) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < lines.size(); i++) {
                int n = first + i;
                fs.add(p.send(new ProducerRecord<>(topic, n % PARTITIONS, utf8("line-" + n), utf8(lines.get(i)))));
            }
            for (Future<RecordMetadata> f : fs) {
                get(f);
            }
        }
    }

    static void createTopics(OxbowBroker broker, String... topics) throws Exception {
        try (Admin admin = broker.admin()) {
            for (String t : topics) {
                Kit.createTopic(admin, t, PARTITIONS);
            }
            for (String t : topics) {
                endOffsets(admin, t); // returns once the broker leads every partition
            }
        }
    }

    static List<TopicPartition> partitions(String topic) {
        return IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toList());
    }

    // ---- the application ----------------------------------------------------------------------

    /** One KafkaStreams instance of the word count, with its errors, states and restored-record count. */
    static final class App implements AutoCloseable {
        final KafkaStreams streams;
        final List<Throwable> errors = new CopyOnWriteArrayList<>();
        final List<KafkaStreams.State> states = new CopyOnWriteArrayList<>();
        final AtomicLong restored = new AtomicLong();
        private boolean closed;

        /**
         * Starts the topology input -> flatMapValues(split) -> groupBy(word) [repartition topic
         * "words"] -> count() [RocksDB store "counts" with its changelog] -> toStream -> output,
         * with {@code stall} (may be null) watching lines and words. A stream thread that dies is
         * replaced (so a broker crash cannot end the run) and its exception kept in {@link #errors}.
         */
        App(OxbowBroker broker, String appId, Path stateDir, String input, String output, Stall stall,
                Map<String, Object> extra) {
            StreamsBuilder b = new StreamsBuilder();
            b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                    .flatMapValues(line -> {
                        List<String> words = Arrays.asList(line.split(" "));
                        if (stall != null) {
                            stall.onLine(words.size());
                        }
                        return words;
                    })
                    .groupBy((k, word) -> {
                        if (stall != null) {
                            stall.onWord();
                        }
                        return word;
                    }, Grouped.with("words", Serdes.String(), Serdes.String()))
                    .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(STORE)
                            .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                    .toStream()
                    .to(output, Produced.with(Serdes.String(), Serdes.Long()));

            Properties p = new Properties();
            p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
            p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
            p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
            p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
            p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
            // Streams' consumers do not leave the group on close (not even with leaveGroup(true):
            // that only removes static members), nor when a fenced thread rejoins with a new
            // member id: the next rebalance waits for the old member's session to expire. 6 s is
            // the broker's default group.min.session.timeout.ms (the client default is 45 s).
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6_000);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1_500);
            p.putAll(extra);
            streams = new KafkaStreams(b.build(), p);
            streams.setUncaughtExceptionHandler(e -> {
                errors.add(e);
                return StreamThreadExceptionResponse.REPLACE_THREAD;
            });
            streams.setStateListener((now, before) -> states.add(now));
            streams.setGlobalStateRestoreListener(new StateRestoreListener() {
                @Override
                public void onRestoreStart(TopicPartition tp, String store, long start, long end) {}

                @Override
                public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
                    restored.addAndGet(n);
                }

                @Override
                public void onRestoreEnd(TopicPartition tp, String store, long total) {}
            });
            streams.start();
        }

        boolean failed() {
            return EnumSet.of(KafkaStreams.State.ERROR, KafkaStreams.State.PENDING_ERROR,
                    KafkaStreams.State.NOT_RUNNING, KafkaStreams.State.PENDING_SHUTDOWN).contains(streams.state());
        }

        /** The state, its transitions, and how many stream threads died of what (first cause chain of each kind). */
        String describe() {
            StringBuilder sb = new StringBuilder("streams state " + streams.state() + ", transitions " + states);
            if (!errors.isEmpty()) {
                sb.append(", ").append(errors.size()).append(" stream thread(s) died");
                Map<String, Integer> kinds = new java.util.LinkedHashMap<>();
                for (Throwable t : errors) {
                    StringBuilder chain = new StringBuilder(t.getClass().getName());
                    for (Throwable c = t.getCause(); c != null; c = c.getCause()) {
                        chain.append("\n    caused by: ").append(c);
                    }
                    kinds.merge(chain.toString(), 1, Integer::sum);
                }
                kinds.forEach((chain, n) -> sb.append("\n  ").append(n).append("x ").append(chain));
                sb.append("\n  first: ").append(errors.get(0));
            }
            return sb.toString();
        }

        /** No stream thread has died so far (Kafka kills none in any of these scenarios). */
        void assertNoThreadDied(String what) {
            assertTrue(errors.isEmpty(), what + ": " + describe());
        }

        /** Closes (asking to leave the group, which Streams 4.1 does for static members only); true if clean. */
        boolean closeAndLeave() {
            closed = true;
            return streams.close(new KafkaStreams.CloseOptions().leaveGroup(true).timeout(Duration.ofSeconds(60)));
        }

        @Override
        public void close() {
            if (!closed) {
                closeAndLeave();
            }
        }
    }

    /**
     * Stops one stream thread, once, in the middle of a line: at the first line numbered
     * {@code atLine} or later that has two or more words, after its first word went to the
     * repartition sink and before its second does. The thread's transaction is then open and
     * holds a record (the DSL forwards each word depth-first to the sink: flatMapValues emits word
     * 1, groupBy's key selector runs for it, the sink sends it, then word 2's key selector runs).
     * The thread waits until {@link #resume()} (or {@link #WAIT_S}).
     */
    static final class Stall {
        final long atLine;
        final AtomicLong lines = new AtomicLong();
        private final AtomicBoolean fired = new AtomicBoolean();
        private final ThreadLocal<Integer> wordsSeen = new ThreadLocal<>();
        private final CountDownLatch stopped = new CountDownLatch(1);
        private final CountDownLatch resume = new CountDownLatch(1);
        private volatile String threadName;

        Stall(long atLine) {
            this.atLine = atLine;
        }

        void onLine(int words) {
            if (lines.incrementAndGet() >= atLine && words >= 2 && !fired.getAndSet(true)) {
                wordsSeen.set(0);
            }
        }

        void onWord() {
            Integer seen = wordsSeen.get();
            if (seen == null) {
                return;
            }
            if (seen == 0) {
                wordsSeen.set(1);
                return;
            }
            wordsSeen.remove();
            threadName = Thread.currentThread().getName();
            stopped.countDown();
            try {
                resume.await(WAIT_S, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        void awaitStopped(App app) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (!stopped.await(100, TimeUnit.MILLISECONDS) && System.nanoTime() < deadline) {
                app.assertNoThreadDied("before the stall at line " + atLine + " (saw " + lines.get() + ")");
            }
            assertTrue(stopped.getCount() == 0,
                    "a stream thread reached line " + atLine + " (saw " + lines.get() + "): " + app.describe());
        }

        /** exactly_once_v2: the stopped thread's producer has transactional id {@code <client id>-<thread index>}. */
        String transactionalId() {
            return threadName.replace("-StreamThread-", "-");
        }

        void resume() {
            resume.countDown();
        }
    }

    /** Polls describeTransactions until {@code txnId} is in {@code state} (at most {@link #WAIT_S}); returns the last description. */
    static TransactionDescription awaitTxnState(Admin admin, String txnId, TransactionState state) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        TransactionDescription d = get(admin.describeTransactions(List.of(txnId)).description(txnId));
        while (d.state() != state && System.nanoTime() < deadline) {
            Thread.sleep(100);
            d = get(admin.describeTransactions(List.of(txnId)).description(txnId));
        }
        return d;
    }

    /** SIGKILLs the broker while {@code stall} holds a stream thread in its open transaction. */
    static TransactionDescription killMidTransaction(OxbowBroker broker, App app, Stall stall, String appId,
            String input, int inputLines) throws Exception {
        stall.awaitStopped(app);
        TransactionDescription open;
        try (Admin admin = broker.admin()) {
            long committed = committed(admin, appId, input).values().stream().mapToLong(Long::longValue).sum();
            assertTrue(committed < inputLines,
                    "the kill comes before all input is committed: " + committed + " of " + inputLines);
            open = awaitTxnState(admin, stall.transactionalId(), TransactionState.ONGOING);
            assertEquals(TransactionState.ONGOING, open.state(), "the stopped thread's transaction: " + open);
            assertTrue(open.topicPartitions().stream().anyMatch(tp -> tp.topic().equals(appId + "-words-repartition")),
                    "the stopped thread's transaction holds a repartition partition: " + open);
        }
        Process p = broker.process();
        p.destroyForcibly(); // SIGKILL
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), "broker process exits after SIGKILL");
        return open;
    }

    // ---- reading counts back ------------------------------------------------------------------

    /**
     * A read_committed consumer over every partition of a word -> count (String -> Long) topic,
     * from the beginning, keeping every count of every word in offset order.
     */
    static final class CountLog implements AutoCloseable {
        final String topic;
        final List<TopicPartition> tps;
        final KafkaConsumer<byte[], byte[]> consumer;
        final Map<String, List<Long>> history = new TreeMap<>();
        final Map<String, Long> last = new TreeMap<>();
        final List<String> malformed = new ArrayList<>();
        long records;

        CountLog(OxbowBroker broker, String topic) {
            this.topic = topic;
            this.tps = partitions(topic);
            this.consumer = broker.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
        }

        void pollOnce() {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                records++;
                String word = str(r.key());
                if (word == null || r.value() == null || r.value().length != 8) {
                    malformed.add(r.topic() + "-" + r.partition() + "@" + r.offset() + " key=" + word
                            + " value=" + (r.value() == null ? "null" : r.value().length + " bytes"));
                    continue;
                }
                long count = ByteBuffer.wrap(r.value()).getLong();
                history.computeIfAbsent(word, k -> new ArrayList<>()).add(count);
                last.put(word, count);
            }
        }

        boolean overCounted(Map<String, Long> want) {
            return last.entrySet().stream().anyMatch(e -> e.getValue() > want.getOrDefault(e.getKey(), 0L));
        }

        /**
         * Polls until the last counts equal {@code want}, a count exceeds it, the app failed or
         * lost a stream thread, or the deadline.
         */
        void awaitCounts(Map<String, Long> want, App app) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (!last.equals(want) && !overCounted(want) && !app.failed() && app.errors.isEmpty()
                    && System.nanoTime() < deadline) {
                pollOnce();
            }
        }

        /** Polls until the position in every partition reached the read_committed end offset (LSO), bounded. */
        void drainToEnd() {
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(Kit.TIMEOUT_S));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (System.nanoTime() < deadline
                    && tps.stream().anyMatch(tp -> consumer.position(tp, Duration.ofSeconds(Kit.TIMEOUT_S)) < end.get(tp))) {
                pollOnce();
            }
            for (TopicPartition tp : tps) {
                assertEquals(end.get(tp), consumer.position(tp), "read_committed position at the end of " + tp);
            }
        }

        /**
         * The last count of every word is {@code want}'s; no count exceeds it; each word's counts
         * strictly increase.
         */
        void assertExact(Map<String, Long> want, String what, App app) {
            assertEquals(List.of(), malformed, what + ": records that are not word -> 8-byte count");
            List<String> over = new ArrayList<>();
            List<String> notIncreasing = new ArrayList<>();
            for (Map.Entry<String, List<Long>> e : history.entrySet()) {
                long max = want.getOrDefault(e.getKey(), 0L);
                List<Long> h = e.getValue();
                for (int i = 0; i < h.size(); i++) {
                    if (h.get(i) > max) {
                        over.add(e.getKey() + ": emitted " + h.get(i) + " > expected " + max);
                        break;
                    }
                }
                for (int i = 1; i < h.size(); i++) {
                    if (h.get(i) <= h.get(i - 1)) {
                        notIncreasing.add(e.getKey() + ": " + h.get(i - 1) + " then " + h.get(i) + " (at "
                                + i + " of " + h.size() + ")");
                        break;
                    }
                }
            }
            String ctx = " [" + records + " records read from " + topic + "; " + app.describe() + "]";
            assertEquals(List.of(), over, what + ": counts above the expected final count (input processed twice)" + ctx);
            assertEquals(List.of(), notIncreasing, what + ": a word's committed counts must only increase" + ctx);
            assertEquals(diffable(want), diffable(last), what + ": the last count of every word" + ctx);
        }

        @Override
        public void close() {
            consumer.close(Duration.ofSeconds(10));
        }
    }

    /** "word=count" lines, so that a failed comparison shows which words differ. */
    static String diffable(Map<String, Long> m) {
        return new TreeMap<>(m).entrySet().stream().map(e -> e.getKey() + "=" + e.getValue())
                .collect(Collectors.joining("\n"));
    }

    // ---- offsets ------------------------------------------------------------------------------

    /** A map of partitions printed in topic/partition order. */
    static TreeMap<TopicPartition, Long> tpMap() {
        return new TreeMap<>(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition));
    }

    static Map<TopicPartition, Long> endOffsets(Admin admin, String topic) throws Exception {
        Map<TopicPartition, OffsetSpec> req = partitions(topic).stream()
                .collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest()));
        return get(admin.listOffsets(req).all()).entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset(), (a, b) -> a, StreamsEosTest::tpMap));
    }

    static Map<TopicPartition, Long> committed(Admin admin, String group, String topic) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> all =
                get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        Map<TopicPartition, Long> out = tpMap();
        all.forEach((tp, om) -> {
            if (tp.topic().equals(topic) && om != null) {
                out.put(tp, om.offset());
            }
        });
        return out;
    }

    /** The group's committed offsets of {@code input} reach its end offsets (bounded wait), asserted. */
    static void assertCommittedAtEnd(OxbowBroker broker, String appId, String input, String what, App app)
            throws Exception {
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, Long> end = endOffsets(admin, input);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            Map<TopicPartition, Long> got = committed(admin, appId, input);
            while (!got.equals(end) && !app.failed() && System.nanoTime() < deadline) {
                Thread.sleep(100);
                got = committed(admin, appId, input);
            }
            assertEquals(end, got, what + ": committed offsets of group " + appId + " = input end offsets ["
                    + app.describe() + "]");
        }
    }

    static void assertNoThreadDied(App app, String what) {
        app.assertNoThreadDied(what);
        assertEquals(KafkaStreams.State.RUNNING, app.streams.state(), what + ": " + app.describe());
    }

    /**
     * Waits for the counts, the commits and the end of the output, then asserts all three. Fails
     * at once (without the remaining waits) when a stream thread died or the counts did not come.
     */
    static void assertPhase(OxbowBroker broker, App app, CountLog out, String appId, String input,
            Map<String, Long> want, String what) throws Exception {
        out.awaitCounts(want, app);
        if (!app.errors.isEmpty()) {
            long exact = want.entrySet().stream().filter(e -> e.getValue().equals(out.last.get(e.getKey()))).count();
            fail(what + ": a stream thread died (" + exact + " of " + want.size() + " words at their expected count, "
                    + out.records + " output records read): " + app.describe());
        }
        assertFalse(app.failed(), what + ": " + app.describe());
        if (!out.last.equals(want)) {
            out.assertExact(want, what, app); // fails, showing which counts are missing or wrong
        }
        assertCommittedAtEnd(broker, appId, input, what, app);
        // every input record is processed and committed: nothing more may appear in the output
        out.drainToEnd();
        out.assertExact(want, what, app);
    }

    /** The changelog, read with read_committed, ends with the exact count of every word. */
    static void assertChangelog(OxbowBroker broker, String appId, Map<String, Long> want, String what) {
        try (CountLog changelog = new CountLog(broker, appId + "-" + STORE + "-changelog")) {
            changelog.drainToEnd();
            assertEquals(List.of(), changelog.malformed, what + ": changelog records");
            assertEquals(diffable(want), diffable(changelog.last), what + ": last value of every word in the changelog");
        }
    }

    static void wipe(Path dir) throws Exception {
        if (Files.exists(dir)) {
            try (Stream<Path> paths = Files.walk(dir)) {
                for (Path p : paths.sorted(Comparator.reverseOrder()).collect(Collectors.toList())) {
                    Files.delete(p);
                }
            }
        }
        assertFalse(Files.exists(dir), "state dir wiped: " + dir);
    }

    // ---- tests --------------------------------------------------------------------------------

    /**
     * 5,000 lines processed by one instance: exact counts in the output and the changelog, input
     * offsets committed to the end, and the stream threads' producers are transactional (their
     * transactional ids are listed by the coordinator).
     */
    @Test
    @Order(1)
    void wordCountIsExact(OxbowBroker broker, @TempDir Path tmp) throws Exception {
        String appId = "eos-wordcount";
        String input = appId + "-in";
        String output = appId + "-out";
        createTopics(broker, input, output);
        List<String> in = lines(1, 5_000);
        Map<String, Long> want = new TreeMap<>();
        addCounts(want, in);
        produce(broker, input, in, 0);

        try (App app = new App(broker, appId, tmp.resolve("state"), input, output, null, Map.of());
                CountLog out = new CountLog(broker, output)) {
            assertPhase(broker, app, out, appId, input, want, "5,000 lines");
            assertNoThreadDied(app, "after 5,000 lines");
            assertChangelog(broker, appId, want, "5,000 lines");
            try (Admin admin = broker.admin()) {
                List<String> ids = get(admin.listTransactions().all()).stream()
                        .map(TransactionListing::transactionalId).filter(id -> id.startsWith(appId + "-"))
                        .sorted().collect(Collectors.toList());
                assertEquals(2, ids.size(), "one transactional id per stream thread (exactly_once_v2): " + ids);
            }
            assertTrue(app.closeAndLeave(), "clean close");
        }
    }

    /**
     * One application id through three instances: the second keeps the first's state dir, the
     * third starts from a wiped state dir and must restore the store from the changelog. Each
     * instance processes new input; the counts stay exact across all three.
     */
    @Test
    @Order(2)
    void restartsWithKeptAndWipedStateStayExact(OxbowBroker broker, @TempDir Path tmp) throws Exception {
        String appId = "eos-restart";
        String input = appId + "-in";
        String output = appId + "-out";
        Path state = tmp.resolve("state");
        createTopics(broker, input, output);
        Map<String, Long> want = new TreeMap<>();
        int produced = 0;
        try (CountLog out = new CountLog(broker, output)) {
            List<String> a = lines(2, 2_000);
            addCounts(want, a);
            produce(broker, input, a, produced);
            produced += a.size();
            try (App app = new App(broker, appId, state, input, output, null, Map.of())) {
                assertPhase(broker, app, out, appId, input, want, "first instance");
                assertNoThreadDied(app, "first instance");
                assertTrue(app.closeAndLeave(), "first instance: clean close");
            }

            try (App app = new App(broker, appId, state, input, output, null, Map.of())) {
                List<String> b = lines(3, 2_000);
                addCounts(want, b);
                produce(broker, input, b, produced);
                produced += b.size();
                assertPhase(broker, app, out, appId, input, want, "second instance (same state dir)");
                assertNoThreadDied(app, "second instance");
                assertTrue(app.closeAndLeave(), "second instance: clean close");
            }

            assertChangelog(broker, appId, want, "after the second instance");
            wipe(state);
            try (App app = new App(broker, appId, state, input, output, null, Map.of())) {
                List<String> c = lines(4, 2_000);
                addCounts(want, c);
                produce(broker, input, c, produced);
                assertPhase(broker, app, out, appId, input, want, "third instance (state dir wiped)");
                assertNoThreadDied(app, "third instance");
                assertTrue(app.restored.get() > 0,
                        "third instance restored its store from the changelog: " + app.restored.get() + " records");
                assertTrue(app.closeAndLeave(), "third instance: clean close");
            }
            assertChangelog(broker, appId, want, "after the third instance");
        }
    }

    /**
     * The broker is SIGKILLed while a stream thread is stopped in the middle of a line (its
     * transaction open with a record in the repartition topic, the line's offset not committed),
     * the thread resumes at once, and the broker is started again on the same port and data dir;
     * the application keeps running. More input follows the restart. transaction.timeout.ms is
     * 60 s and the session 30 s, so nothing expires while the broker is down: Kafka reloads the
     * open transaction and the thread completes it (0 lines redone). The counts must come out
     * exact either way: the open transaction is completed or aborted and redone, never both.
     */
    @Test
    @Order(3)
    void brokerKilledMidTransactionCountsStayExact(OxbowBroker broker, @TempDir Path tmp) throws Exception {
        String appId = "eos-crash";
        String input = appId + "-in";
        String output = appId + "-out";
        createTopics(broker, input, output);
        List<String> a = lines(5, 5_000);
        Map<String, Long> want = new TreeMap<>();
        addCounts(want, a);
        produce(broker, input, a, 0);

        Stall stall = new Stall(1_500);
        // Long enough that neither the transaction nor the group members expire while the broker
        // is down (Kafka takes ~10 s to restart here); with 6 s sessions the members are dropped,
        // their tasks lost, and the work redone: also exact, but another path.
        Map<String, Object> patient = Map.of(
                StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 60_000,
                StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 30_000);
        try (App app = new App(broker, appId, tmp.resolve("state"), input, output, stall, patient);
                CountLog out = new CountLog(broker, output)) {
            try {
                killMidTransaction(broker, app, stall, appId, input, a.size());
            } finally {
                stall.resume(); // the stream thread carries on while the broker is down
            }
            broker.restart(true); // the process is already gone: starts it again, same port and data dir

            List<String> b = lines(6, 2_000);
            addCounts(want, b);
            produce(broker, input, b, a.size());
            assertPhase(broker, app, out, appId, input, want, "after the broker was SIGKILLed mid-transaction");
            assertTrue(stall.lines.get() >= a.size() + b.size(), "every line went through the topology: " + stall.lines);
            assertChangelog(broker, appId, want, "after the broker crash");
            // informational: Kafka 4.1.1 completes the open transaction after the restart (0 lines redone)
            System.out.printf("[oxbow-compat] streams eos crash: %d of %d lines processed again after an abort; %s%n",
                    stall.lines.get() - a.size() - b.size(), a.size() + b.size(), app.describe());
            // the errors a broker restart causes are all retriable: no stream thread dies of them
            assertNoThreadDied(app, "after the broker was SIGKILLed mid-transaction");
            assertTrue(app.closeAndLeave(), "clean close");
        }
    }

    /**
     * As above, but the stopped thread stays stopped across the restart until the coordinator has
     * aborted its transaction for exceeding transaction.timeout.ms (5 s here). When it resumes,
     * its producer is fenced; Streams drops the thread's tasks and redoes the aborted lines from
     * the committed offsets and the changelog. The redone lines must be counted once.
     */
    @Test
    @Order(4)
    void threadStalledPastTransactionTimeoutAcrossACrashIsFencedAndRedone(OxbowBroker broker, @TempDir Path tmp)
            throws Exception {
        String appId = "eos-zombie";
        String input = appId + "-in";
        String output = appId + "-out";
        createTopics(broker, input, output);
        List<String> a = lines(7, 4_000);
        Map<String, Long> want = new TreeMap<>();
        addCounts(want, a);
        produce(broker, input, a, 0);

        Stall stall = new Stall(1_000);
        Map<String, Object> txnTimeout = Map.of(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 5_000);
        try (App app = new App(broker, appId, tmp.resolve("state"), input, output, stall, txnTimeout);
                CountLog out = new CountLog(broker, output)) {
            TransactionDescription open;
            TransactionDescription aborted;
            try {
                open = killMidTransaction(broker, app, stall, appId, input, a.size());
                broker.restart(true);
                try (Admin admin = broker.admin()) {
                    aborted = awaitTxnState(admin, stall.transactionalId(), TransactionState.COMPLETE_ABORT);
                }
            } finally {
                stall.resume();
            }
            assertEquals(TransactionState.COMPLETE_ABORT, aborted.state(),
                    "the coordinator aborts the stopped thread's transaction after its timeout: " + aborted);
            assertEquals(open.producerId(), aborted.producerId(), aborted.toString());
            assertTrue(aborted.producerEpoch() > open.producerEpoch(),
                    "the timeout abort bumps the epoch (fencing the stopped thread): " + open + " then " + aborted);

            List<String> b = lines(8, 1_000);
            addCounts(want, b);
            produce(broker, input, b, a.size());
            assertPhase(broker, app, out, appId, input, want, "after a stalled thread's transaction was aborted");
            assertTrue(stall.lines.get() > a.size() + b.size(),
                    "the lines of the aborted transaction were processed again: " + stall.lines + " for "
                            + (a.size() + b.size()) + " lines");
            assertChangelog(broker, appId, want, "after the aborted transaction");
            System.out.printf("[oxbow-compat] streams eos zombie: %d of %d lines processed again after the abort; %s%n",
                    stall.lines.get() - a.size() - b.size(), a.size() + b.size(), app.describe());
            // being fenced is a TaskMigratedException, handled inside the thread: no thread dies of it
            assertNoThreadDied(app, "after the stalled thread was fenced");
            assertTrue(app.closeAndLeave(), "clean close");
        }
    }
}
