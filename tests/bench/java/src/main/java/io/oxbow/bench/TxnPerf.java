package io.oxbow.bench;

import java.time.Duration;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactional load, two modes.
 *
 * <p>{@code produce bootstrap topic records txnSize}: one transactional producer sends `records`
 * records of 1 KiB (random uppercase letters, as ProducerPerformance) as fast as it can, committing
 * every `txnSize` records, and prints
 * {@code RESULT records=N seconds=S records_per_sec=X mb_per_sec=Y transactions=T}.
 *
 * <p>{@code open bootstrap topic ids}: for each of `ids` transactional ids, initTransactions, one
 * record in a new transaction, then a forced close, which leaves the transaction open at the
 * broker (the coordinator aborts it after transaction.timeout.ms, set to 10 minutes here). Prints
 * {@code RESULT opened=N seconds=S}.
 */
public final class TxnPerf {
    private static Properties props(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("transactional.id", txnId);
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("batch.size", "65536");
        return p;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: TxnPerf produce bootstrap topic records txnSize | open bootstrap topic ids");
            System.exit(2);
        }
        String mode = args[0], bootstrap = args[1], topic = args[2];
        if (mode.equals("produce")) {
            produce(bootstrap, topic, Long.parseLong(args[3]), Integer.parseInt(args[4]));
        } else if (mode.equals("open")) {
            open(bootstrap, topic, Integer.parseInt(args[3]));
        } else {
            System.err.println("unknown mode " + mode);
            System.exit(2);
        }
    }

    private static void produce(String bootstrap, String topic, long records, int txnSize) throws Exception {
        byte[] payload = new byte[1024];
        Random r = new Random(0);
        for (int i = 0; i < payload.length; i++) {
            payload[i] = (byte) ('A' + r.nextInt(26));
        }
        long txns = 0;
        String step = "initTransactions";
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props(bootstrap, "bench-txn-" + System.nanoTime()))) {
            p.initTransactions();
            long start = System.nanoTime();
            long sent = 0;
            while (sent < records) {
                step = "transaction " + (txns + 1) + ": beginTransaction";
                p.beginTransaction();
                long n = Math.min(txnSize, records - sent);
                step = "transaction " + (txns + 1) + ": send";
                for (long i = 0; i < n; i++) {
                    p.send(new ProducerRecord<>(topic, payload));
                }
                step = "transaction " + (txns + 1) + ": commitTransaction";
                p.commitTransaction();
                sent += n;
                txns++;
            }
            double secs = (System.nanoTime() - start) / 1e9;
            System.out.printf("RESULT records=%d seconds=%.3f records_per_sec=%.1f mb_per_sec=%.2f transactions=%d%n",
                    sent, secs, sent / secs, sent * 1024.0 / (1 << 20) / secs, txns);
        } catch (RuntimeException e) {
            // Which call failed, and the whole cause chain: the broker's side is in its log.
            System.err.println("TxnPerf failed in " + step);
            throw e;
        }
    }

    private static void open(String bootstrap, String topic, int ids) throws Exception {
        long start = System.nanoTime();
        String prefix = "bench-open-" + System.nanoTime() + "-";
        int opened = 0;
        for (int i = 0; i < ids; i++) {
            Properties pr = props(bootstrap, prefix + i);
            pr.put("transaction.timeout.ms", "600000");
            KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pr);
            try {
                p.initTransactions();
                p.beginTransaction();
                Future<RecordMetadata> f = p.send(new ProducerRecord<>(topic, ("open " + i).getBytes()));
                p.flush();
                f.get();
                opened++;
            } finally {
                // Forced: a graceful close would abort the transaction.
                p.close(Duration.ZERO);
            }
        }
        double secs = (System.nanoTime() - start) / 1e9;
        System.out.printf("RESULT opened=%d seconds=%.3f%n", opened, secs);
    }
}
