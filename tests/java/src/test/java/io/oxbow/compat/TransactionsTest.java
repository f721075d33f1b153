package io.oxbow.compat;

import static io.oxbow.compat.Kit.get;
import static io.oxbow.compat.Kit.latestOffset;
import static io.oxbow.compat.Kit.str;
import static io.oxbow.compat.Kit.tp;
import static io.oxbow.compat.Kit.utf8;
import static org.apache.kafka.common.IsolationLevel.READ_COMMITTED;
import static org.apache.kafka.common.IsolationLevel.READ_UNCOMMITTED;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Transactions with the real Java client: commit and abort across many partitions, the last
 * stable offset held back by an open transaction, zombie fencing, coordinator-driven abort on
 * timeout, consume-transform-produce with offsets committed in the transaction, the admin
 * transaction APIs (list, describe, and the hanging-transaction abort of
 * {@code kafka-transactions.sh --abort}), and many small transactions across producer instances.
 */
@ExtendWith(OxbowBrokerExtension.class)
@BrokerOverrides({
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.state.log.num.partitions=5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "transaction.max.timeout.ms=120000",
    "group.initial.rebalance.delay.ms=0",
})
class TransactionsTest {

    // ---- helpers ----------------------------------------------------------------------------

    static KafkaProducer<byte[], byte[]> txProducer(OxbowBroker broker, String txnId, Map<String, Object> extra) {
        Map<String, Object> cfg = new HashMap<>(extra);
        cfg.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        return broker.producer(cfg);
    }

    static KafkaConsumer<byte[], byte[]> consumer(OxbowBroker broker, IsolationLevel isolation) {
        return broker.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG,
                isolation.toString().toLowerCase(java.util.Locale.ROOT)));
    }

    /** Every record of {@code tps} from the beginning up to the consumer's end offsets. */
    static Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> readAll(
            OxbowBroker broker, IsolationLevel isolation, Collection<TopicPartition> tps) {
        try (KafkaConsumer<byte[], byte[]> c = consumer(broker, isolation)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> got = Kit.readToEnd(c, tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(Kit.TIMEOUT_S));
            for (TopicPartition tp : tps) {
                assertEquals(end.get(tp), c.position(tp), isolation + " consumer position at the end of " + tp);
            }
            return got;
        }
    }

    /** "offset:key=value" of each record, in order. */
    static List<String> describe(List<ConsumerRecord<byte[], byte[]>> rs) {
        return rs.stream().map(r -> r.offset() + ":" + str(r.key()) + "=" + str(r.value())).collect(Collectors.toList());
    }

    static List<ProducerState> producers(Admin admin, TopicPartition tp) throws Exception {
        return new ArrayList<>(get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers());
    }

    static ProducerState onlyProducer(Admin admin, TopicPartition tp) throws Exception {
        List<ProducerState> ps = producers(admin, tp);
        assertEquals(1, ps.size(), "active producers on " + tp + ": " + ps);
        return ps.get(0);
    }

    static TransactionDescription describeTxn(Admin admin, String txnId) throws Exception {
        return get(admin.describeTransactions(List.of(txnId)).description(txnId));
    }

    static Map<String, TransactionListing> listTxns(Admin admin, ListTransactionsOptions opts) throws Exception {
        return get(admin.listTransactions(opts).all()).stream()
                .collect(Collectors.toMap(TransactionListing::transactionalId, l -> l));
    }

    /** Polls admin ListOffsets(latest, READ_COMMITTED) until it reaches {@code want} (at most 60 s); returns the last value. */
    static long awaitLso(Admin admin, TopicPartition tp, long want) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        long lso = latestOffset(admin, tp, READ_COMMITTED);
        while (lso < want && System.nanoTime() < deadline) {
            Thread.sleep(100);
            lso = latestOffset(admin, tp, READ_COMMITTED);
        }
        return lso;
    }

    /**
     * Polls describeTransactions until {@code txnId} is in {@code state} (at most 60 s); returns
     * the last description. commitTransaction()/abortTransaction() return once the coordinator
     * has logged its decision (PrepareCommit/PrepareAbort); the markers follow, and the state
     * becomes CompleteCommit/CompleteAbort when every marker is written.
     */
    static TransactionDescription awaitTxnState(Admin admin, String txnId, TransactionState state) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        TransactionDescription d = describeTxn(admin, txnId);
        while (d.state() != state && System.nanoTime() < deadline) {
            Thread.sleep(50);
            d = describeTxn(admin, txnId);
        }
        return d;
    }

    /** The cluster's finalized {@code transaction.version} (2: KIP-890 part 2, the epoch is bumped by every commit/abort). */
    static int transactionVersion(Admin admin) throws Exception {
        var v = get(admin.describeFeatures().featureMetadata()).finalizedFeatures().get("transaction.version");
        return v == null ? 0 : v.maxVersionLevel();
    }

    static void send(KafkaProducer<byte[], byte[]> p, TopicPartition tp, String key, String value,
            List<Future<RecordMetadata>> into) {
        into.add(p.send(new ProducerRecord<>(tp.topic(), tp.partition(), utf8(key), utf8(value))));
    }

    static List<Long> offsets(List<Future<RecordMetadata>> fs) throws Exception {
        List<Long> out = new ArrayList<>();
        for (Future<RecordMetadata> f : fs) {
            out.add(get(f).offset());
        }
        return out;
    }

    // ---- 1. commit and abort across partitions -------------------------------------------------

    /** One planned transaction: records per partition, committed or aborted. */
    record Txn(boolean commit, Map<TopicPartition, Integer> counts) {}

    /**
     * One producer runs 8 transactions over 3 topics (10 partitions), alternately committed and
     * aborted, some with hundreds of records in one partition (several batches), some in every
     * partition. The expected log of each partition is modelled exactly: a transaction's records
     * at consecutive offsets, then one offset for its marker. read_committed must see exactly the
     * committed records, read_uncommitted all of them, each at its modelled offset.
     */
    @Test
    void commitAndAbortAcrossTenPartitions(OxbowBroker broker) throws Exception {
        List<TopicPartition> all = new ArrayList<>();
        try (Admin admin = broker.admin()) {
            int[] parts = {4, 3, 3};
            for (int t = 0; t < 3; t++) {
                String topic = "txn-multi-" + (char) ('a' + t);
                Kit.createTopic(admin, topic, parts[t]);
                for (int p = 0; p < parts[t]; p++) {
                    all.add(tp(topic, p));
                }
            }
        }
        TopicPartition a0 = tp("txn-multi-a", 0);
        TopicPartition a3 = tp("txn-multi-a", 3);
        TopicPartition b0 = tp("txn-multi-b", 0);
        TopicPartition b1 = tp("txn-multi-b", 1);
        TopicPartition c0 = tp("txn-multi-c", 0);
        TopicPartition c2 = tp("txn-multi-c", 2);
        List<Txn> plan = new ArrayList<>();
        plan.add(new Txn(true, everywhere(all, 1)));
        plan.add(new Txn(false, everywhere(all, 2)));
        plan.add(new Txn(true, ordered(a0, 300, b1, 200, c2, 1)));   // many records: several batches each
        plan.add(new Txn(false, ordered(a0, 250, c2, 150, b0, 1)));
        plan.add(new Txn(true, ordered(a0, 3, b0, 3, c0, 3)));
        plan.add(new Txn(false, everywhere(all, 5)));
        plan.add(new Txn(true, ordered(a3, 2, c0, 120)));
        plan.add(new Txn(true, everywhere(all, 3)));

        // What the log of each partition must hold: each transaction's records at consecutive
        // offsets, then one offset for its control marker (COMMIT or ABORT).
        Map<TopicPartition, Long> next = new HashMap<>();
        Map<TopicPartition, Integer> markers = new HashMap<>();
        Map<TopicPartition, List<String>> wantCommitted = new HashMap<>();
        Map<TopicPartition, List<String>> wantAll = new HashMap<>();
        for (TopicPartition tp : all) {
            next.put(tp, 0L);
            markers.put(tp, 0);
            wantCommitted.put(tp, new ArrayList<>());
            wantAll.put(tp, new ArrayList<>());
        }

        try (KafkaProducer<byte[], byte[]> p = txProducer(broker, "txn-multi",
                Map.of(ProducerConfig.BATCH_SIZE_CONFIG, 1024, ProducerConfig.LINGER_MS_CONFIG, 5))) {
            p.initTransactions();
            for (int t = 0; t < plan.size(); t++) {
                Txn txn = plan.get(t);
                p.beginTransaction();
                Map<TopicPartition, List<Future<RecordMetadata>>> fs = new LinkedHashMap<>();
                for (Map.Entry<TopicPartition, Integer> e : txn.counts().entrySet()) {
                    TopicPartition tp = e.getKey();
                    List<Future<RecordMetadata>> f = fs.computeIfAbsent(tp, k -> new ArrayList<>());
                    for (int i = 0; i < e.getValue(); i++) {
                        String key = "k" + t + "-" + i;
                        String value = "v" + t + "-" + tp + "-" + i + (txn.commit() ? "-commit" : "-abort");
                        send(p, tp, key, value, f);
                        long off = next.get(tp);
                        next.put(tp, off + 1);
                        String rec = off + ":" + key + "=" + value;
                        wantAll.get(tp).add(rec);
                        if (txn.commit()) {
                            wantCommitted.get(tp).add(rec);
                        }
                    }
                }
                // abortTransaction() drops batches not yet sent: flush so that every record of an
                // aborted transaction is in the log too (visible to read_uncommitted).
                p.flush();
                for (TopicPartition tp : fs.keySet()) {
                    long first = next.get(tp) - txn.counts().get(tp);
                    List<Long> want = new ArrayList<>();
                    for (long o = first; o < next.get(tp); o++) {
                        want.add(o);
                    }
                    assertEquals(want, offsets(fs.get(tp)), "offsets of transaction " + t + " in " + tp);
                }
                if (txn.commit()) {
                    p.commitTransaction();
                } else {
                    p.abortTransaction();
                }
                for (TopicPartition tp : txn.counts().keySet()) {
                    next.put(tp, next.get(tp) + 1); // the control marker
                    markers.put(tp, markers.get(tp) + 1);
                }
            }
        }

        try (Admin admin = broker.admin()) {
            TransactionDescription d = awaitTxnState(admin, "txn-multi", TransactionState.COMPLETE_COMMIT);
            assertEquals(TransactionState.COMPLETE_COMMIT, d.state(), "after the last commit: " + d);
            assertEquals(Set.of(), d.topicPartitions(), "a completed transaction has no partitions: " + d);
            for (TopicPartition tp : all) {
                long records = wantAll.get(tp).size();
                assertEquals(records + markers.get(tp), (long) next.get(tp), "model of " + tp);
                assertEquals((long) next.get(tp), latestOffset(admin, tp, READ_UNCOMMITTED),
                        "high watermark of " + tp + " = " + records + " records + " + markers.get(tp) + " markers");
                assertEquals((long) next.get(tp), latestOffset(admin, tp, READ_COMMITTED),
                        "last stable offset of " + tp + " with no open transaction");
            }
        }
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> committed = readAll(broker, READ_COMMITTED, all);
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> uncommitted = readAll(broker, READ_UNCOMMITTED, all);
        for (TopicPartition tp : all) {
            assertEquals(wantCommitted.get(tp), describe(committed.get(tp)), "read_committed records of " + tp);
            assertEquals(wantAll.get(tp), describe(uncommitted.get(tp)), "read_uncommitted records of " + tp);
        }
        int total = wantCommitted.values().stream().mapToInt(List::size).sum();
        System.out.printf("[oxbow-compat] transactions: %d committed records of %d in %d partitions%n",
                total, wantAll.values().stream().mapToInt(List::size).sum(), all.size());
    }

    static Map<TopicPartition, Integer> everywhere(List<TopicPartition> tps, int n) {
        Map<TopicPartition, Integer> m = new LinkedHashMap<>();
        for (TopicPartition tp : tps) {
            m.put(tp, n);
        }
        return m;
    }

    static Map<TopicPartition, Integer> ordered(Object... kv) {
        Map<TopicPartition, Integer> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((TopicPartition) kv[i], (Integer) kv[i + 1]);
        }
        return m;
    }

    // ---- 2. last stable offset ---------------------------------------------------------------

    /**
     * An open transaction holds the last stable offset at its first offset: admin ListOffsets
     * (READ_COMMITTED), a read_committed consumer's endOffsets and position, and describeProducers'
     * currentTransactionStartOffset all show it; after the commit everything moves on.
     */
    @Test
    void openTransactionHoldsBackTheLastStableOffset(OxbowBroker broker) throws Exception {
        String topic = "txn-lso";
        TopicPartition tp = tp(topic, 0);
        try (Admin admin = broker.admin();
                KafkaProducer<byte[], byte[]> p = txProducer(broker, "txn-lso", Map.of());
                KafkaConsumer<byte[], byte[]> rc = consumer(broker, READ_COMMITTED)) {
            Kit.createTopic(admin, topic, 1);
            p.initTransactions();
            p.beginTransaction();
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                send(p, tp, "k" + i, "committed-" + i, fs);
            }
            p.commitTransaction();
            assertEquals(List.of(0L, 1L, 2L, 3L, 4L), offsets(fs));
            // offsets 0..4 records, 5 the COMMIT marker; the open transaction starts at 6
            p.beginTransaction();
            fs.clear();
            for (int i = 0; i < 7; i++) {
                send(p, tp, "k" + (5 + i), "open-" + i, fs);
            }
            p.flush();
            assertEquals(List.of(6L, 7L, 8L, 9L, 10L, 11L, 12L), offsets(fs));

            assertEquals(6L, latestOffset(admin, tp, READ_COMMITTED), "LSO = first offset of the open transaction");
            assertEquals(13L, latestOffset(admin, tp, READ_UNCOMMITTED), "high watermark");
            ProducerState open = onlyProducer(admin, tp);
            assertEquals(6L, open.currentTransactionStartOffset().orElse(-1),
                    "describeProducers currentTransactionStartOffset: " + open);

            rc.assign(List.of(tp));
            rc.seekToBeginning(List.of(tp));
            assertEquals(Map.of(tp, 6L), rc.endOffsets(List.of(tp), Duration.ofSeconds(30)),
                    "read_committed endOffsets = LSO");
            List<String> got = new ArrayList<>(describe(Kit.readToEnd(rc, List.of(tp)).get(tp)));
            assertEquals(List.of("0:k0=committed-0", "1:k1=committed-1", "2:k2=committed-2", "3:k3=committed-3",
                    "4:k4=committed-4"), got, "read_committed before the commit");
            assertEquals(6L, rc.position(tp), "read_committed position stops at the LSO");
            // More polls return nothing of the open transaction and do not move the position.
            for (int i = 0; i < 5; i++) {
                ConsumerRecords<byte[], byte[]> more = rc.poll(Duration.ofMillis(200));
                assertEquals(0, more.count(), "read_committed got records of an open transaction");
            }
            assertEquals(6L, rc.position(tp), "read_committed position still at the LSO");
            // read_uncommitted sees the open records
            List<String> uncommitted = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                uncommitted.add(i + ":k" + i + "=committed-" + i);
            }
            for (int i = 0; i < 7; i++) {
                uncommitted.add((6 + i) + ":k" + (5 + i) + "=open-" + i);
            }
            assertEquals(uncommitted, describe(readAll(broker, READ_UNCOMMITTED, List.of(tp)).get(tp)),
                    "read_uncommitted sees committed and open records");

            p.commitTransaction();
            // commitTransaction() returns once the coordinator logged PrepareCommit; the COMMIT
            // marker (offset 13) follows, and with it the LSO moves to the high watermark.
            assertEquals(14L, awaitLso(admin, tp, 14), "LSO after the commit (marker at 13)");
            assertEquals(14L, latestOffset(admin, tp, READ_UNCOMMITTED), "high watermark after the commit");
            assertEquals(Map.of(tp, 14L), rc.endOffsets(List.of(tp), Duration.ofSeconds(30)));
            got.addAll(describe(Kit.readToEnd(rc, List.of(tp)).get(tp)));
            assertEquals(14L, rc.position(tp), "read_committed position after the commit marker");
            assertEquals(uncommitted, got, "read_committed after the commit: the same records");
            ProducerState done = onlyProducer(admin, tp);
            assertEquals(open.producerId(), done.producerId());
            assertFalse(done.currentTransactionStartOffset().isPresent(), "no open transaction: " + done);
        }
    }

    // ---- 3. zombie fencing ---------------------------------------------------------------------

    /**
     * A second producer with the same transactional.id fences the first: its initTransactions
     * bumps the epoch and aborts the first one's open transaction. Kafka 4.1.1 (transaction
     * version 2) answers the zombie's next Produce with INVALID_PRODUCER_EPOCH
     * (InvalidProducerEpochException, which commitTransaction() then rethrows), and a zombie that
     * goes straight to commitTransaction() gets PRODUCER_FENCED (ProducerFencedException).
     */
    @Test
    void secondInstanceFencesTheFirstAndAbortsItsTransaction(OxbowBroker broker) throws Exception {
        String topic = "txn-fence";
        TopicPartition sendTp = tp(topic, 0);
        TopicPartition commitTp = tp(topic, 1);
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 2);
        }
        // zombie 1 sends after being fenced; zombie 2 only tries to commit
        for (TopicPartition tp : List.of(sendTp, commitTp)) {
            boolean sendsFirst = tp.equals(sendTp);
            String txnId = "txn-fence-" + tp.partition();
            KafkaProducer<byte[], byte[]> zombie = txProducer(broker, txnId, Map.of());
            try (Admin admin = broker.admin();
                    KafkaProducer<byte[], byte[]> successor = txProducer(broker, txnId, Map.of())) {
                zombie.initTransactions();
                zombie.beginTransaction();
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < 3; i++) {
                    send(zombie, tp, "z" + i, "zombie-" + i, fs);
                }
                zombie.flush();
                assertEquals(List.of(0L, 1L, 2L), offsets(fs));
                ProducerState zombieState = onlyProducer(admin, tp);
                assertEquals(0L, zombieState.currentTransactionStartOffset().orElse(-1), "zombie's open transaction");

                successor.initTransactions(); // fences the zombie and aborts its transaction
                assertEquals(4L, awaitLso(admin, tp, 4), tp + ": LSO past the ABORT marker at 3");
                assertEquals(4L, latestOffset(admin, tp, READ_UNCOMMITTED), tp + ": high watermark");
                TransactionDescription fenced = describeTxn(admin, txnId);
                assertEquals(zombieState.producerId(), fenced.producerId(), "same producer id after fencing: " + fenced);
                assertTrue(fenced.producerEpoch() > zombieState.producerEpoch(), "epoch bumped: " + fenced);

                if (sendsFirst) {
                    ExecutionException e = assertThrows(ExecutionException.class,
                            () -> get(zombie.send(new ProducerRecord<>(topic, tp.partition(), utf8("z3"), utf8("zombie-3")))),
                            "a fenced producer's send must fail");
                    assertInstanceOf(InvalidProducerEpochException.class, e.getCause(), "zombie send: " + e);
                    Exception c = assertThrows(Exception.class, zombie::commitTransaction, "zombie commit");
                    assertInstanceOf(InvalidProducerEpochException.class, c, "zombie commit after the failed send: " + c);
                } else {
                    Exception c = assertThrows(Exception.class, zombie::commitTransaction, "zombie commit");
                    assertInstanceOf(ProducerFencedException.class, c, "zombie commit: " + c);
                }

                successor.beginTransaction();
                fs.clear();
                for (int i = 0; i < 4; i++) {
                    send(successor, tp, "s" + i, "successor-" + i, fs);
                }
                successor.commitTransaction();
                assertEquals(List.of(4L, 5L, 6L, 7L), offsets(fs), tp + ": successor's offsets");
                TransactionDescription d = awaitTxnState(admin, txnId, TransactionState.COMPLETE_COMMIT);
                assertEquals(TransactionState.COMPLETE_COMMIT, d.state(), d.toString());
                assertEquals(9L, latestOffset(admin, tp, READ_UNCOMMITTED), tp + ": high watermark (COMMIT marker at 8)");
                assertEquals(9L, latestOffset(admin, tp, READ_COMMITTED), tp + ": LSO");
                ProducerState after = onlyProducer(admin, tp);
                assertEquals(zombieState.producerId(), after.producerId(), tp + ": " + after);
                assertEquals(d.producerEpoch(), after.producerEpoch(), tp + ": partition epoch = coordinator epoch: " + after);
                assertFalse(after.currentTransactionStartOffset().isPresent(), tp + ": " + after);
            } finally {
                zombie.close(Duration.ZERO);
            }
            assertEquals(List.of("4:s0=successor-0", "5:s1=successor-1", "6:s2=successor-2", "7:s3=successor-3"),
                    describe(readAll(broker, READ_COMMITTED, List.of(tp)).get(tp)), tp + ": read_committed");
            assertEquals(List.of("0:z0=zombie-0", "1:z1=zombie-1", "2:z2=zombie-2",
                    "4:s0=successor-0", "5:s1=successor-1", "6:s2=successor-2", "7:s3=successor-3"),
                    describe(readAll(broker, READ_UNCOMMITTED, List.of(tp)).get(tp)), tp + ": read_uncommitted");
        }
    }

    // ---- 4. coordinator abort on timeout --------------------------------------------------------

    /**
     * A transaction left open past transaction.timeout.ms is aborted by the coordinator: it bumps
     * the epoch (fencing the silent producer), writes ABORT markers and ends in CompleteAbort,
     * where it stays until the next InitProducerId for the id (then Empty).
     */
    @Test
    void coordinatorAbortsATimedOutTransaction(OxbowBroker broker) throws Exception {
        String topic = "txn-timeout";
        String txnId = "txn-timeout";
        TopicPartition tp = tp(topic, 0);
        KafkaProducer<byte[], byte[]> p = txProducer(broker, txnId,
                Map.of(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 3000));
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1);
            p.initTransactions();
            p.beginTransaction();
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                send(p, tp, "k" + i, "abandoned-" + i, fs);
            }
            p.flush();
            assertEquals(List.of(0L, 1L, 2L, 3L), offsets(fs));
            TransactionDescription ongoing = describeTxn(admin, txnId);
            assertEquals(TransactionState.ONGOING, ongoing.state(), ongoing.toString());
            assertEquals(Set.of(tp), ongoing.topicPartitions(), ongoing.toString());
            assertEquals(3000L, ongoing.transactionTimeoutMs(), ongoing.toString());
            assertEquals(0L, latestOffset(admin, tp, READ_COMMITTED), "LSO held by the open transaction");
            assertEquals(4L, latestOffset(admin, tp, READ_UNCOMMITTED), "high watermark");

            // The producer is simply not used any more; the coordinator's timeout does the rest.
            assertEquals(5L, awaitLso(admin, tp, 5), "LSO after the coordinator's ABORT marker at 4");
            assertEquals(5L, latestOffset(admin, tp, READ_UNCOMMITTED), "high watermark = records + ABORT marker");
            TransactionDescription aborted = awaitTxnState(admin, txnId, TransactionState.COMPLETE_ABORT);
            assertEquals(TransactionState.COMPLETE_ABORT, aborted.state(), aborted.toString());
            assertEquals(ongoing.producerId(), aborted.producerId(), aborted.toString());
            assertEquals(ongoing.producerEpoch() + 1, aborted.producerEpoch(), "the timeout abort bumps the epoch: " + aborted);
            assertEquals(Set.of(), aborted.topicPartitions(), aborted.toString());
            Map<String, TransactionListing> completeAbort = listTxns(admin,
                    new ListTransactionsOptions().filterStates(List.of(TransactionState.COMPLETE_ABORT)));
            assertEquals(new TransactionListing(txnId, ongoing.producerId(), TransactionState.COMPLETE_ABORT),
                    completeAbort.get(txnId), "listTransactions(CompleteAbort): " + completeAbort);
            assertFalse(listTxns(admin, new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING)))
                    .containsKey(txnId), "no longer listed as Ongoing");
            ProducerState ps = onlyProducer(admin, tp);
            assertEquals(aborted.producerId(), ps.producerId(), ps.toString());
            assertEquals(aborted.producerEpoch(), ps.producerEpoch(), "the marker carries the bumped epoch: " + ps);
            assertFalse(ps.currentTransactionStartOffset().isPresent(), ps.toString());
            assertEquals(List.of(), describe(readAll(broker, READ_COMMITTED, List.of(tp)).get(tp)),
                    "read_committed sees none of the aborted records");
            assertEquals(4, readAll(broker, READ_UNCOMMITTED, List.of(tp)).get(tp).size(), "read_uncommitted sees them");

            // A new instance of the id: InitProducerId moves CompleteAbort to Empty, same producer id.
            try (KafkaProducer<byte[], byte[]> next = txProducer(broker, txnId, Map.of())) {
                next.initTransactions();
                TransactionDescription empty = describeTxn(admin, txnId);
                assertEquals(TransactionState.EMPTY, empty.state(), empty.toString());
                assertEquals(aborted.producerId(), empty.producerId(), empty.toString());
                assertEquals(aborted.producerEpoch() + 1, empty.producerEpoch(), "InitProducerId bumps the epoch: " + empty);
                assertEquals(Set.of(), empty.topicPartitions(), empty.toString());
            }
        } finally {
            p.close(Duration.ZERO);
        }
    }

    // ---- 5. consume-transform-produce -----------------------------------------------------------

    /**
     * Consume-transform-produce: copies 300 input records in transactions of up to 50 with the
     * consumed offsets sent to the transaction (sendOffsetsToTransaction with the consumer's group
     * metadata). The 4th transaction is aborted and the consumer rewound to the committed offsets.
     * The output must hold every input record exactly once and the group's offsets must be exactly
     * those of the committed transactions at every step, ending at the input end offsets.
     */
    @Test
    void consumeTransformProduceCommitsOffsetsInTheTransaction(OxbowBroker broker) throws Exception {
        String in = "ctp-in";
        String out = "ctp-out";
        String group = "ctp-group";
        int perPartition = 150;
        List<TopicPartition> inTps = List.of(tp(in, 0), tp(in, 1));
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, in, 2);
            Kit.createTopic(admin, out, 2);
        }
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < perPartition; i++) {
                for (TopicPartition tp : inTps) {
                    send(p, tp, "k" + i, "in-" + tp.partition() + "-" + i, fs);
                }
            }
            offsets(fs);
        }
        Map<TopicPartition, Long> inEnd = Map.of(tp(in, 0), (long) perPartition, tp(in, 1), (long) perPartition);
        int abortAt = 3;
        Map<TopicPartition, OffsetAndMetadata> lastCommitted = Map.of();
        int transactions = 0;
        int abortedRecords = 0;
        int copied = 0;
        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of(
                        ConsumerConfig.GROUP_ID_CONFIG, group,
                        ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                        ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 50));
                KafkaProducer<byte[], byte[]> p = txProducer(broker, "ctp", Map.of());
                Admin admin = broker.admin()) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (copied < 2 * perPartition && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> batch = c.poll(Duration.ofMillis(200));
                if (batch.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                if (transactions == abortAt) {
                    p.flush();
                    p.abortTransaction();
                    abortedRecords = batch.count();
                    TransactionDescription d = awaitTxnState(admin, "ctp", TransactionState.COMPLETE_ABORT);
                    assertEquals(TransactionState.COMPLETE_ABORT, d.state(), d.toString());
                    Map<TopicPartition, OffsetAndMetadata> stored =
                            get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
                    assertEquals(offsetsOf(lastCommitted), offsetsOf(stored),
                            "group offsets after an aborted transaction (aborted: " + offsets + ")");
                    assertFalse(lastCommitted.isEmpty(), "offsets were committed before the abort");
                    // Rewind to the committed offsets, as an application does after an abort.
                    Map<TopicPartition, OffsetAndMetadata> committed = c.committed(c.assignment());
                    for (TopicPartition tp : c.assignment()) {
                        OffsetAndMetadata om = committed.get(tp);
                        if (om == null) {
                            c.seekToBeginning(List.of(tp));
                        } else {
                            c.seek(tp, om);
                        }
                    }
                } else {
                    p.commitTransaction();
                    copied += batch.count();
                    Map<TopicPartition, OffsetAndMetadata> merged = new HashMap<>(lastCommitted);
                    merged.putAll(offsets);
                    lastCommitted = merged;
                    // the offsets become the group's committed offsets with the COMMIT markers
                    TransactionDescription d = awaitTxnState(admin, "ctp", TransactionState.COMPLETE_COMMIT);
                    assertEquals(TransactionState.COMPLETE_COMMIT, d.state(), d.toString());
                    assertEquals(offsetsOf(lastCommitted),
                            offsetsOf(get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())),
                            "group offsets after committed transaction " + transactions);
                }
                transactions++;
            }
            assertEquals(2 * perPartition, copied, "records copied in committed transactions");
            assertTrue(transactions > abortAt, "the aborted transaction happened");
            TransactionDescription d = awaitTxnState(admin, "ctp", TransactionState.COMPLETE_COMMIT);
            assertEquals(TransactionState.COMPLETE_COMMIT, d.state(), d.toString());
            Map<TopicPartition, OffsetAndMetadata> stored =
                    get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            assertEquals(inEnd, offsetsOf(stored), "group offsets = input end offsets");
        }
        List<TopicPartition> outTps = List.of(tp(out, 0), tp(out, 1));
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> rc = readAll(broker, READ_COMMITTED, outTps);
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> ru = readAll(broker, READ_UNCOMMITTED, outTps);
        for (int part = 0; part < 2; part++) {
            List<String> want = new ArrayList<>();
            for (int i = 0; i < perPartition; i++) {
                want.add("k" + i + "=in-" + part + "-" + i);
            }
            List<String> got = rc.get(tp(out, part)).stream().map(r -> str(r.key()) + "=" + str(r.value()))
                    .collect(Collectors.toList());
            assertEquals(want, got, "read_committed output partition " + part + ": each input record once, in order");
        }
        int ruCount = ru.values().stream().mapToInt(List::size).sum();
        assertEquals(2 * perPartition + abortedRecords, ruCount, "read_uncommitted also sees the aborted copies");
        System.out.printf("[oxbow-compat] consume-transform-produce: %d transactions, one aborted (%d records)%n",
                transactions, abortedRecords);
    }

    static Map<TopicPartition, Long> offsetsOf(Map<TopicPartition, OffsetAndMetadata> m) {
        return m.entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
    }

    // ---- 6. admin ------------------------------------------------------------------------------

    /**
     * listTransactions (all, by state, by producer id), describeTransactions of an ongoing and a
     * completed transaction, and abortTransaction: the hanging-transaction abort of
     * {@code kafka-transactions.sh --abort}, which writes an ABORT marker into one partition
     * (producer id, epoch and coordinator epoch from describeProducers) without the coordinator.
     */
    @Test
    void adminListsDescribesAndAbortsTransactions(OxbowBroker broker) throws Exception {
        String topic = "txn-admin";
        String other = "txn-admin-other";
        TopicPartition p0 = tp(topic, 0);
        TopicPartition p1 = tp(topic, 1);
        try (Admin admin = broker.admin();
                KafkaProducer<byte[], byte[]> open = txProducer(broker, "txn-admin-open",
                        Map.of(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 45_000));
                KafkaProducer<byte[], byte[]> done = txProducer(broker, "txn-admin-done", Map.of())) {
            Kit.createTopic(admin, topic, 2);
            Kit.createTopic(admin, other, 1);
            done.initTransactions();
            done.beginTransaction();
            done.send(new ProducerRecord<>(other, 0, utf8("d"), utf8("done")));
            done.commitTransaction();
            TransactionDescription doneDesc = awaitTxnState(admin, "txn-admin-done", TransactionState.COMPLETE_COMMIT);
            assertEquals(TransactionState.COMPLETE_COMMIT, doneDesc.state(), doneDesc.toString());
            assertEquals(Set.of(), doneDesc.topicPartitions(), doneDesc.toString());

            open.initTransactions();
            open.beginTransaction();
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                send(open, p0, "k" + i, "open-p0-" + i, fs);
            }
            for (int i = 0; i < 2; i++) {
                send(open, p1, "k" + i, "open-p1-" + i, fs);
            }
            open.flush();
            assertEquals(List.of(0L, 1L, 2L, 0L, 1L), offsets(fs));

            // describeTransactions of the ongoing transaction
            TransactionDescription d = describeTxn(admin, "txn-admin-open");
            assertEquals(TransactionState.ONGOING, d.state(), d.toString());
            assertEquals(Set.of(p0, p1), d.topicPartitions(), d.toString());
            assertEquals(45_000L, d.transactionTimeoutMs(), d.toString());
            assertTrue(d.transactionStartTimeMs().isPresent(), "an ongoing transaction has a start time: " + d);
            int nodeId = get(admin.describeCluster().nodes()).iterator().next().id();
            assertEquals(nodeId, d.coordinatorId(), "the only broker is the coordinator: " + d);
            assertEquals(d.coordinatorId(), doneDesc.coordinatorId());
            long openPid = d.producerId();
            long donePid = doneDesc.producerId();
            assertTrue(openPid >= 0 && donePid >= 0 && openPid != donePid, d + " / " + doneDesc);

            // listTransactions: all, by state, by producer id
            Map<String, TransactionListing> listed = listTxns(admin, new ListTransactionsOptions());
            assertEquals(new TransactionListing("txn-admin-open", openPid, TransactionState.ONGOING),
                    listed.get("txn-admin-open"), "listTransactions(): " + listed);
            assertEquals(new TransactionListing("txn-admin-done", donePid, TransactionState.COMPLETE_COMMIT),
                    listed.get("txn-admin-done"), "listTransactions(): " + listed);
            Map<String, TransactionListing> ongoing = listTxns(admin,
                    new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING)));
            assertTrue(ongoing.containsKey("txn-admin-open"), "Ongoing: " + ongoing);
            assertFalse(ongoing.containsKey("txn-admin-done"), "Ongoing: " + ongoing);
            assertTrue(ongoing.values().stream().allMatch(l -> l.state() == TransactionState.ONGOING), "Ongoing: " + ongoing);
            Map<String, TransactionListing> committed = listTxns(admin,
                    new ListTransactionsOptions().filterStates(List.of(TransactionState.COMPLETE_COMMIT)));
            assertTrue(committed.containsKey("txn-admin-done"), "CompleteCommit: " + committed);
            assertFalse(committed.containsKey("txn-admin-open"), "CompleteCommit: " + committed);
            assertEquals(Map.of("txn-admin-done", listed.get("txn-admin-done")),
                    listTxns(admin, new ListTransactionsOptions().filterProducerIds(List.of(donePid))), "by producer id");
            assertEquals(Map.of("txn-admin-open", listed.get("txn-admin-open")),
                    listTxns(admin, new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING))
                            .filterProducerIds(List.of(openPid, donePid))), "by state and producer id");

            // The partition side, as kafka-transactions.sh --abort finds it.
            ProducerState ps = onlyProducer(admin, p0);
            assertEquals(openPid, ps.producerId(), ps.toString());
            assertEquals(d.producerEpoch(), ps.producerEpoch(), ps.toString());
            assertEquals(0L, ps.currentTransactionStartOffset().orElse(-1), ps.toString());
            assertEquals(0L, latestOffset(admin, p0, READ_COMMITTED));
            assertEquals(0L, latestOffset(admin, p1, READ_COMMITTED));

            get(admin.abortTransaction(new AbortTransactionSpec(p0, ps.producerId(), (short) ps.producerEpoch(),
                    ps.coordinatorEpoch().orElse(0))).all());
            // The ABORT marker went to p0 only (offset 3); p1 is still held by the open transaction.
            assertEquals(4L, latestOffset(admin, p0, READ_UNCOMMITTED), "p0 high watermark: 3 records + ABORT marker");
            assertEquals(4L, latestOffset(admin, p0, READ_COMMITTED), "p0 LSO moved past the aborted transaction");
            assertEquals(2L, latestOffset(admin, p1, READ_UNCOMMITTED), "p1 high watermark");
            assertEquals(0L, latestOffset(admin, p1, READ_COMMITTED), "p1 LSO still held");
            ProducerState afterAbort = onlyProducer(admin, p0);
            assertFalse(afterAbort.currentTransactionStartOffset().isPresent(), afterAbort.toString());
            assertEquals(ps.producerEpoch(), afterAbort.producerEpoch(), afterAbort.toString());
            assertEquals(0, afterAbort.coordinatorEpoch().orElse(-1), "coordinator epoch of the marker: " + afterAbort);
            assertEquals(List.of(), describe(readAll(broker, READ_COMMITTED, List.of(p0)).get(p0)), "p0 read_committed");
            // The coordinator was not involved: it still has the transaction open on both partitions.
            TransactionDescription still = describeTxn(admin, "txn-admin-open");
            assertEquals(TransactionState.ONGOING, still.state(), still.toString());
            assertEquals(Set.of(p0, p1), still.topicPartitions(), still.toString());

            // The producer aborts its own transaction: p1 is released too.
            open.abortTransaction();
            TransactionDescription end = awaitTxnState(admin, "txn-admin-open", TransactionState.COMPLETE_ABORT);
            assertEquals(TransactionState.COMPLETE_ABORT, end.state(), end.toString());
            assertEquals(Set.of(), end.topicPartitions(), end.toString());
            // The coordinator writes its ABORT marker to every partition of the transaction, p0
            // included although its transaction there was already aborted: a second marker at 4.
            assertEquals(5L, latestOffset(admin, p0, READ_UNCOMMITTED), "p0: 3 records + 2 ABORT markers");
            assertEquals(5L, latestOffset(admin, p0, READ_COMMITTED), "p0 LSO");
            ProducerState p0End = onlyProducer(admin, p0);
            assertEquals(end.producerEpoch(), p0End.producerEpoch(), "p0: the coordinator's marker epoch: " + p0End);
            assertEquals(3L, latestOffset(admin, p1, READ_UNCOMMITTED), "p1: 2 records + ABORT marker");
            assertEquals(3L, latestOffset(admin, p1, READ_COMMITTED), "p1 LSO");
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> rc = readAll(broker, READ_COMMITTED, List.of(p0, p1));
            assertEquals(List.of(), describe(rc.get(p0)), "p0 read_committed");
            assertEquals(List.of(), describe(rc.get(p1)), "p1 read_committed");
            assertEquals(5, readAll(broker, READ_UNCOMMITTED, List.of(p0, p1)).values().stream().mapToInt(List::size).sum(),
                    "read_uncommitted sees the 5 aborted records");
        }
    }

    // ---- 7. many small transactions, then a new instance -------------------------------------

    /**
     * 200 transactions of one record each (every record followed by its COMMIT marker, so record
     * i is at offset 2i), then a new producer instance with the same transactional.id resumes:
     * same producer id, a higher epoch, and its commits continue the log.
     */
    @Test
    void manySingleRecordTransactionsThenANewInstanceResumes(OxbowBroker broker) throws Exception {
        String topic = "txn-many";
        String txnId = "txn-many";
        TopicPartition tp = tp(topic, 0);
        int n = 200;
        int more = 5;
        try (Admin admin = broker.admin()) {
            Kit.createTopic(admin, topic, 1);
            // transaction version 2 (KIP-890) bumps the epoch at every commit; version 1 does not
            int bumpPerCommit = transactionVersion(admin) >= 2 ? 1 : 0;
            TransactionDescription afterFirst;
            try (KafkaProducer<byte[], byte[]> p = txProducer(broker, txnId, Map.of())) {
                p.initTransactions();
                TransactionDescription init = describeTxn(admin, txnId);
                assertEquals(TransactionState.EMPTY, init.state(), init.toString());
                for (int i = 0; i < n; i++) {
                    p.beginTransaction();
                    Future<RecordMetadata> f = p.send(new ProducerRecord<>(topic, 0, utf8("k" + i), utf8("v" + i)));
                    p.commitTransaction();
                    assertEquals(2L * i, get(f).offset(), "offset of the record of transaction " + i);
                }
                afterFirst = awaitTxnState(admin, txnId, TransactionState.COMPLETE_COMMIT);
                assertEquals(TransactionState.COMPLETE_COMMIT, afterFirst.state(), afterFirst.toString());
                assertEquals(init.producerId(), afterFirst.producerId(), afterFirst.toString());
                assertEquals(init.producerEpoch() + n * bumpPerCommit, afterFirst.producerEpoch(), afterFirst.toString());
                ProducerState ps = onlyProducer(admin, tp);
                assertEquals(afterFirst.producerId(), ps.producerId(), ps.toString());
                assertEquals(afterFirst.producerEpoch(), ps.producerEpoch(), ps.toString());
                assertEquals(2L * n, latestOffset(admin, tp, READ_COMMITTED), "LSO after " + n + " commits");
            }
            // close() leaves the coordinator's state as it was
            assertEquals(afterFirst, describeTxn(admin, txnId), "after close()");
            try (KafkaProducer<byte[], byte[]> p = txProducer(broker, txnId, Map.of())) {
                p.initTransactions();
                TransactionDescription init = describeTxn(admin, txnId);
                assertEquals(TransactionState.EMPTY, init.state(), init.toString());
                assertEquals(afterFirst.producerId(), init.producerId(), "same producer id for the new instance: " + init);
                assertEquals(afterFirst.producerEpoch() + 1, init.producerEpoch(), "InitProducerId bumps the epoch: " + init);
                for (int i = n; i < n + more; i++) {
                    p.beginTransaction();
                    Future<RecordMetadata> f = p.send(new ProducerRecord<>(topic, 0, utf8("k" + i), utf8("v" + i)));
                    p.commitTransaction();
                    assertEquals(2L * i, get(f).offset(), "offset of the record of transaction " + i);
                }
                TransactionDescription d = awaitTxnState(admin, txnId, TransactionState.COMPLETE_COMMIT);
                assertEquals(TransactionState.COMPLETE_COMMIT, d.state(), d.toString());
                assertEquals(init.producerId(), d.producerId(), d.toString());
                assertEquals(init.producerEpoch() + more * bumpPerCommit, d.producerEpoch(), d.toString());
            }
            assertEquals(2L * (n + more), latestOffset(admin, tp, READ_COMMITTED));
            assertEquals(2L * (n + more), latestOffset(admin, tp, READ_UNCOMMITTED));
        }
        List<String> want = new ArrayList<>();
        for (int i = 0; i < n + more; i++) {
            want.add(2 * i + ":k" + i + "=v" + i);
        }
        assertEquals(want, describe(readAll(broker, READ_COMMITTED, List.of(tp)).get(tp)));
    }
}
