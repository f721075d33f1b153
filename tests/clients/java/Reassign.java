// Partition reassignment through Kafka's Java Admin client (KIP-455), for test_reassignment.py:
//   java -cp <kafka-clients classpath> Reassign.java BOOTSTRAP move TOPIC P=B,B,.. [P=B,..]...
//       (then lists the moves in flight at once: {"moved": {...}, "listed": {...}})
//   java -cp ... Reassign.java BOOTSTRAP cancel TOPIC P [P]...
//   java -cp ... Reassign.java BOOTSTRAP list
//   java -cp ... Reassign.java BOOTSTRAP throttle RATE BROKER...     (per-broker rates; -1 deletes)
//   java -cp ... Reassign.java BOOTSTRAP topic-throttle TOPIC LEADERS FOLLOWERS   (- deletes)
//   java -cp ... Reassign.java BOOTSTRAP configs BROKER              (its throttle configs)
//   java -cp ... Reassign.java BOOTSTRAP errors TOPIC                (every refusal case)
//   java -cp ... Reassign.java BOOTSTRAP unregister BROKER
//   java -cp ... Reassign.java BOOTSTRAP brokers                     (fenced ones too: {"1": true, ...})
// Prints one JSON value on its last line.
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.stream.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

public class Reassign {
    static final List<String> RATES = List.of("leader.replication.throttled.rate", "follower.replication.throttled.rate");

    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    /** {"error": exception class, "message": ...} for a failed future, or {"error": null}. */
    static String outcome(org.apache.kafka.common.KafkaFuture<?> f) throws InterruptedException {
        try {
            f.get();
            return "{\"error\":null}";
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            return "{\"error\":" + q(c.getClass().getSimpleName()) + ",\"message\":" + q(c.getMessage()) + "}";
        }
    }

    static String ints(Collection<Integer> xs) {
        return "[" + xs.stream().map(String::valueOf).collect(Collectors.joining(",")) + "]";
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "90000");
        try (Admin admin = Admin.create(p)) {
            switch (args[1]) {
                case "move" -> {
                    Map<TopicPartition, Optional<NewPartitionReassignment>> m = new LinkedHashMap<>();
                    for (int i = 3; i < args.length; i++) {
                        String[] kv = args[i].split("=");
                        List<Integer> to = Arrays.stream(kv[1].split(",")).map(Integer::valueOf).toList();
                        m.put(new TopicPartition(args[2], Integer.parseInt(kv[0])), Optional.of(new NewPartitionReassignment(to)));
                    }
                    var moved = admin.alterPartitionReassignments(m).values();
                    String outcomes = outcomes(moved);
                    System.out.println("{\"moved\":" + outcomes + ",\"listed\":" + listed(admin) + "}");
                }
                case "cancel" -> {
                    Map<TopicPartition, Optional<NewPartitionReassignment>> m = new LinkedHashMap<>();
                    for (int i = 3; i < args.length; i++) m.put(new TopicPartition(args[2], Integer.parseInt(args[i])), Optional.empty());
                    print(admin.alterPartitionReassignments(m).values());
                }
                case "list" -> System.out.println(listed(admin));
                case "throttle" -> {
                    long rate = Long.parseLong(args[2]);
                    Map<ConfigResource, Collection<AlterConfigOp>> ops = new LinkedHashMap<>();
                    for (int i = 3; i < args.length; i++) {
                        List<AlterConfigOp> list = RATES.stream().map(k -> rate < 0
                                ? new AlterConfigOp(new ConfigEntry(k, ""), AlterConfigOp.OpType.DELETE)
                                : new AlterConfigOp(new ConfigEntry(k, String.valueOf(rate)), AlterConfigOp.OpType.SET)).toList();
                        ops.put(new ConfigResource(ConfigResource.Type.BROKER, args[i]), list);
                    }
                    admin.incrementalAlterConfigs(ops).all().get();
                    System.out.println("{\"error\":null}");
                }
                case "topic-throttle" -> {
                    List<AlterConfigOp> list = new ArrayList<>();
                    String[] keys = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"};
                    for (int i = 0; i < 2; i++) {
                        String v = args[3 + i];
                        list.add(v.equals("-") ? new AlterConfigOp(new ConfigEntry(keys[i], ""), AlterConfigOp.OpType.DELETE)
                                : new AlterConfigOp(new ConfigEntry(keys[i], v), AlterConfigOp.OpType.SET));
                    }
                    admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.TOPIC, args[2]), list)).all().get();
                    System.out.println("{\"error\":null}");
                }
                case "configs" -> {
                    ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, args[2]);
                    Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
                    System.out.println("{" + RATES.stream().map(k -> {
                        ConfigEntry e = c.get(k);
                        return q(k) + ":" + (e == null ? "null" : "{\"value\":" + q(e.value()) + ",\"source\":" + q(e.source().name()) + "}");
                    }).collect(Collectors.joining(",")) + "}");
                }
                case "errors" -> errors(admin, args[2]);
                case "unregister" -> System.out.println(outcome(admin.unregisterBroker(Integer.parseInt(args[2])).all()));
                case "brokers" -> System.out.println("{" + admin.describeCluster(new DescribeClusterOptions().includeFencedBrokers(true))
                        .nodes().get().stream().sorted(Comparator.comparingInt(n -> n.id()))
                        .map(n -> q(String.valueOf(n.id())) + ":" + n.isFenced()).collect(Collectors.joining(",")) + "}");
                default -> throw new IllegalArgumentException("unknown command " + args[1]);
            }
        }
    }

    static String outcomes(Map<TopicPartition, org.apache.kafka.common.KafkaFuture<Void>> results) throws InterruptedException {
        List<String> out = new ArrayList<>();
        for (var e : results.entrySet()) out.add(q(e.getKey().toString()) + ":" + outcome(e.getValue()));
        return "{" + String.join(",", out) + "}";
    }

    static void print(Map<TopicPartition, org.apache.kafka.common.KafkaFuture<Void>> results) throws InterruptedException {
        System.out.println(outcomes(results));
    }

    /** The moves in flight, as listPartitionReassignments() reports them. */
    static String listed(Admin admin) throws Exception {
        Map<TopicPartition, PartitionReassignment> r = admin.listPartitionReassignments().reassignments().get();
        return "{" + r.entrySet().stream().sorted(Comparator.comparing(e -> e.getKey().toString()))
                .map(e -> q(e.getKey().toString()) + ":{\"replicas\":" + ints(e.getValue().replicas())
                        + ",\"adding\":" + ints(e.getValue().addingReplicas())
                        + ",\"removing\":" + ints(e.getValue().removingReplicas()) + "}")
                .collect(Collectors.joining(",")) + "}";
    }

    /** Each refusal of AlterPartitionReassignments (and UnregisterBroker), one request per case.
     *  (An empty replica list never leaves the Java client: NewPartitionReassignment refuses it.) */
    static void errors(Admin admin, String topic) throws Exception {
        Map<String, org.apache.kafka.common.KafkaFuture<?>> cases = new LinkedHashMap<>();
        TopicPartition p0 = new TopicPartition(topic, 0);
        cases.put("unknown broker", admin.alterPartitionReassignments(
                Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(2, 99))))).all());
        cases.put("duplicate replica", admin.alterPartitionReassignments(
                Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(3, 3))))).all());
        cases.put("unknown topic", admin.alterPartitionReassignments(
                Map.of(new TopicPartition("no-such-topic", 0), Optional.of(new NewPartitionReassignment(List.of(2, 3))))).all());
        cases.put("unknown partition", admin.alterPartitionReassignments(
                Map.of(new TopicPartition(topic, 999), Optional.of(new NewPartitionReassignment(List.of(2, 3))))).all());
        cases.put("cancel with nothing in flight", admin.alterPartitionReassignments(Map.of(p0, Optional.empty())).all());
        cases.put("replication factor change refused (KIP-860)", admin.alterPartitionReassignments(
                Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(2, 3, 4)))),
                new AlterPartitionReassignmentsOptions().allowReplicationFactorChange(false)).all());
        cases.put("unregister an unknown broker", admin.unregisterBroker(99).all());
        List<String> out = new ArrayList<>();
        for (var e : cases.entrySet()) out.add(q(e.getKey()) + ":" + outcome(e.getValue()));
        System.out.println("{" + String.join(",", out) + "}");
    }
}
