package io.oxbow.compat;

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
}
