// Drives the metadata quorum through Kafka's Java AdminClient (KIP-853 APIs):
//   java -cp <kafka-clients classpath> RaftVoters.java BOOTSTRAP describe
//   java -cp ... RaftVoters.java BOOTSTRAP add ID HOST PORT
//   java -cp ... RaftVoters.java BOOTSTRAP remove ID
// Prints one JSON object: the quorum as describeMetadataQuorum() reports it after the command.
import java.util.*;
import java.util.stream.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.Uuid;

public class RaftVoters {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "90000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "120000");
        try (Admin admin = Admin.create(p)) {
            switch (args[1]) {
                case "describe" -> {}
                case "add" -> admin.addRaftVoter(Integer.parseInt(args[2]), Uuid.randomUuid(),
                        Set.of(new RaftVoterEndpoint("CONTROLLER", args[3], Integer.parseInt(args[4])))).all().get();
                case "remove" -> admin.removeRaftVoter(Integer.parseInt(args[2]), Uuid.ZERO_UUID).all().get();
                default -> throw new IllegalArgumentException("unknown command " + args[1]);
            }
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
            String voters = q.voters().stream().map(v -> "{\"id\":" + v.replicaId() + ",\"leo\":" + v.logEndOffset() + "}")
                    .collect(Collectors.joining(","));
            String observers = q.observers().stream().map(v -> String.valueOf(v.replicaId())).collect(Collectors.joining(","));
            String nodes = q.nodes().values().stream()
                    .map(n -> "\"" + n.nodeId() + "\":\"" + n.endpoints().stream().map(e -> e.host() + ":" + e.port()).collect(Collectors.joining(",")) + "\"")
                    .collect(Collectors.joining(","));
            System.out.println("{\"leader\":" + q.leaderId() + ",\"epoch\":" + q.leaderEpoch() + ",\"hw\":" + q.highWatermark()
                    + ",\"voters\":[" + voters + "],\"observers\":[" + observers + "],\"nodes\":{" + nodes + "}}");
        }
    }
}
