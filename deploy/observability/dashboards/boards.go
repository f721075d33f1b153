package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The broker filter every per-broker query carries (instance: the broker's node id through the
// collector, host:port when Prometheus scrapes /metrics itself).
const inst = `instance=~"$instance"`

func instanceVar() cog.Builder[dashboard.VariableModel] {
	return labelVar("instance", "instance", "oxbow_broker_connections")
}

func boards() []Board {
	return []Board{cluster(), topics(), groups(), quorum(), operator()}
}

func cluster() Board {
	return Board{
		UID:   "oxbow-cluster",
		Title: "Oxbow / Cluster",
		Help:  "Health, throughput and load of every broker of an Oxbow cluster",
		Vars:  []cog.Builder[dashboard.VariableModel]{instanceVar()},
		Rows: []Row{
			{"Health", []cog.Builder[dashboard.Panel]{
				Stat("Brokers reporting", "Brokers whose metrics arrive", "none", Info,
					q(`count(oxbow_broker_connections)`, "")),
				Stat("Active controllers", "Exactly 1 in a healthy cluster (a stopped controller counts until its series expire)", "none", ExactlyOne,
					q(`sum(oxbow_controller_active)`, "")),
				Stat("Offline partitions", "Partitions without a leader: nobody can write or read them", "none", Bad,
					q(`max(oxbow_controller_partitions_offline)`, "")),
				Stat("Under min ISR", "Partitions whose ISR is below min.insync.replicas: acks=all writes fail", "none", Bad,
					q(`sum(oxbow_broker_partitions_under_min_isr)`, "")),
				Stat("Under-replicated", "Partitions whose ISR is smaller than their replica set", "none", Bad,
					q(`sum(oxbow_broker_partitions_under_replicated)`, "")),
				Stat("Partitions", "Partitions in the cluster (counted at their leaders)", "none", Info,
					q(`sum(oxbow_broker_partitions{role="leader"})`, "")),
			}},
			{"Throughput", []cog.Builder[dashboard.Panel]{
				Graph("Bytes in", "Record batch bytes appended by producers, per broker", "Bps", 8,
					q(`sum by (instance) (rate(oxbow_broker_produced_bytes_total{`+inst+`}[$__rate_interval]))`, "broker {{instance}}")),
				Graph("Bytes out", "Record bytes served to consumers and followers, per broker", "Bps", 8,
					q(`sum by (instance) (rate(oxbow_broker_fetched_bytes_total{`+inst+`}[$__rate_interval]))`, "broker {{instance}}")),
				Graph("Records in", "Records appended by producers, per broker", "rps", 8,
					q(`sum by (instance) (rate(oxbow_broker_produced_records_total{`+inst+`}[$__rate_interval]))`, "broker {{instance}}")),
				Graph("Requests by API", "Kafka requests received, by API", "reqps", 12,
					q(`sum by (api) (rate(oxbow_broker_requests_total{`+inst+`}[$__rate_interval]))`, "{{api}}")),
				Graph("Request latency p99 by API", "99th percentile of the time from a request's arrival to its response, over the selected brokers: acks=all replication waits and fetch long polls (fetch.max.wait.ms) included", "s", 12,
					q(`histogram_quantile(0.99, sum by (api, le) (rate(oxbow_broker_request_duration_seconds_bucket{`+inst+`}[$__rate_interval])))`, "{{api}}")),
			}},
			{"Brokers", []cog.Builder[dashboard.Panel]{
				Graph("Client connections", "Open client connections per broker", "none", 6,
					q(`sum by (instance) (oxbow_broker_connections{`+inst+`})`, "broker {{instance}}")),
				Graph("Requests waiting", "Requests parked per broker (Kafka's purgatory sizes): acks=all produce requests waiting for the in-sync replicas, fetches waiting for data or fetch.max.wait.ms", "none", 6,
					q(`sum by (instance, purgatory) (oxbow_broker_purgatory_size{`+inst+`})`, "broker {{instance}} {{purgatory}}")),
				Graph("Partitions by role", "Partitions each broker leads and follows", "none", 6,
					q(`sum by (instance, role) (oxbow_broker_partitions{`+inst+`})`, "broker {{instance}} {{role}}")),
				Graph("Log size", "Bytes of log segments each broker holds", "bytes", 6,
					q(`sum by (instance) (oxbow_broker_log_size_bytes{`+inst+`})`, "broker {{instance}}")),
			}},
			{"Replication", []cog.Builder[dashboard.Panel]{
				Graph("ISR shrinks and expands", "ISR changes of the partitions each broker leads, as the controller accepted them: shrinks when followers fall behind replica.lag.time.max.ms, expands when they catch up again", "cpm", 12,
					q(`sum by (instance) (rate(oxbow_broker_isr_shrinks_total{`+inst+`}[$__rate_interval])) * 60`, "broker {{instance}} shrinks"),
					q(`sum by (instance) (rate(oxbow_broker_isr_expands_total{`+inst+`}[$__rate_interval])) * 60`, "broker {{instance}} expands")),
				Graph("Producer ids", "Idempotent and transactional producers with state in the partitions each broker leads, summed over them", "none", 12,
					q(`sum by (instance) (oxbow_broker_producer_ids{`+inst+`})`, "broker {{instance}}")),
			}},
			{"Disk", []cog.Builder[dashboard.Panel]{
				Graph("Log flushes", "fsyncs of partition logs per second, per broker: flush.messages and flush.ms flushes, and sealed segments synced in the background", "ops", 12,
					q(`sum by (instance) (rate(oxbow_log_flushes_total{`+inst+`}[$__rate_interval]))`, "broker {{instance}}")),
				Graph("Flush latency", "Mean time of a log flush, per broker (empty while nothing is flushed)", "ms", 12,
					q(`sum by (instance) (rate(oxbow_log_flush_time_milliseconds_total{`+inst+`}[$__rate_interval])) / sum by (instance) (rate(oxbow_log_flushes_total{`+inst+`}[$__rate_interval]))`, "broker {{instance}}")),
			}},
		},
	}
}

func topics() Board {
	const t = `topic=~"$topic"`
	return Board{
		UID:   "oxbow-topics",
		Title: "Oxbow / Topics",
		Help:  "Traffic and size of each topic, summed over the brokers",
		Vars:  []cog.Builder[dashboard.VariableModel]{labelVar("topic", "topic", "oxbow_topic_log_size_bytes")},
		Rows: []Row{
			{"Traffic", []cog.Builder[dashboard.Panel]{
				Graph("Bytes in", "Record batch bytes appended by producers", "Bps", 8,
					q(`sum by (topic) (rate(oxbow_topic_produced_bytes_total{`+t+`}[$__rate_interval]))`, "{{topic}}")),
				Graph("Records in", "Records appended by producers", "rps", 8,
					q(`sum by (topic) (rate(oxbow_topic_produced_records_total{`+t+`}[$__rate_interval]))`, "{{topic}}")),
				Graph("Bytes out (consumers and followers)", "Record bytes served to consumers and to followers replicating the topic", "Bps", 8,
					q(`sum by (topic) (rate(oxbow_topic_fetched_bytes_total{`+t+`}[$__rate_interval]))`, "{{topic}}")),
			}},
			{"Size", []cog.Builder[dashboard.Panel]{
				Graph("Log size (all replicas)", "Bytes of log segments over every replica of the topic", "bytes", 12,
					q(`sum by (topic) (oxbow_topic_log_size_bytes{`+t+`})`, "{{topic}}")),
				Graph("Log size by broker", "Bytes of the topic's log segments each broker holds", "bytes", 12,
					q(`sum by (topic, instance) (oxbow_topic_log_size_bytes{`+t+`})`, "{{topic}} on {{instance}}")),
			}},
		},
	}
}

func groups() Board {
	const g = `group=~"$group"`
	return Board{
		UID:   "oxbow-consumer-groups",
		Title: "Oxbow / Consumer groups",
		Help:  "Consumer lag (computed by each group's coordinator) and group states",
		Vars:  []cog.Builder[dashboard.VariableModel]{labelVar("group", "group", "oxbow_consumer_group_lag")},
		Rows: []Row{
			{"Lag", []cog.Builder[dashboard.Panel]{
				Graph("Lag by group and topic", "Records a group has yet to consume: high watermark - committed offset, summed over the topic's partitions", "none", 12,
					q(`max by (group, topic) (oxbow_consumer_group_lag{`+g+`})`, "{{group}} / {{topic}}")),
				Graph("Lag change over 5 minutes", "Growing lag (above 0) means the group consumes slower than producers write", "none", 12,
					q(`sum by (group) (max by (group, topic) (delta(oxbow_consumer_group_lag{`+g+`}[5m])))`, "{{group}}")),
			}},
			{"Groups", []cog.Builder[dashboard.Panel]{
				Graph("Groups by state", "Groups coordinated in the cluster, by protocol type and state", "none", 12,
					q(`sum by (type, state) (oxbow_coordinator_groups)`, "{{type}} {{state}}")),
				Graph("Groups by coordinator", "Groups each broker coordinates", "none", 12,
					q(`sum by (instance) (oxbow_coordinator_groups)`, "broker {{instance}}")),
			}},
			{"Rebalances", []cog.Builder[dashboard.Panel]{
				Graph("Rebalances", "Rebalances completed per minute, by group type: classic groups made Stable by their leader's assignment, consumer groups (KIP-848) whose members all reconciled", "cpm", 12,
					q(`sum by (type) (rate(oxbow_coordinator_rebalances_total[$__rate_interval])) * 60`, "{{type}}")),
				Graph("Rebalance duration", "Mean time from the change that started a rebalance (a member joining, leaving, changing its subscription) to its end, by group type (empty while none completes)", "ms", 12,
					q(`sum by (type) (rate(oxbow_coordinator_rebalance_time_milliseconds_total[$__rate_interval])) / sum by (type) (rate(oxbow_coordinator_rebalances_total[$__rate_interval]))`, "{{type}}")),
			}},
		},
	}
}

func quorum() Board {
	return Board{
		UID:   "oxbow-quorum",
		Title: "Oxbow / Controller quorum",
		Help:  "The Raft metadata quorum: which node is the active controller, terms (elections) and offline partitions",
		Rows: []Row{
			{"Controller", []cog.Builder[dashboard.Panel]{
				Stat("Active controllers", "Exactly 1 in a healthy cluster", "none", ExactlyOne,
					q(`sum(oxbow_controller_active)`, "")),
				Stat("Elections in range", "Raft term changes seen by the quorum in the time range", "none", Info,
					q(`max(changes(oxbow_quorum_term[$__range]))`, "")),
				Stat("Offline partitions", "Partitions without a leader", "none", Bad,
					q(`max(oxbow_controller_partitions_offline)`, "")),
				Graph("Active controller", "1 on the node that is the active controller", "none", 12,
					q(`max by (instance) (oxbow_controller_active)`, "node {{instance}}")),
				Graph("Raft term", "The quorum's term as each node sees it: a step is an election", "none", 12,
					q(`max by (instance) (oxbow_quorum_term)`, "node {{instance}}")),
			}},
			{"Metadata log", []cog.Builder[dashboard.Panel]{
				Graph("Commit latency", "Mean time of the active controller's metadata writes, from proposal to commit and apply (empty while nothing is written)", "ms", 8,
					q(`sum(rate(oxbow_quorum_commit_time_milliseconds_total[$__rate_interval])) / sum(rate(oxbow_quorum_commits_total[$__rate_interval]))`, "commit latency")),
				Graph("Commits", "Metadata writes the active controller committed per minute", "cpm", 8,
					q(`sum(rate(oxbow_quorum_commits_total[$__rate_interval])) * 60`, "commits")),
				Graph("Follower lag", "Metadata log entries each voter lacks, as the active controller sees it: a voter that stays behind is down or cut off", "none", 8,
					q(`max by (node) (oxbow_quorum_follower_lag)`, "voter {{node}}")),
			}},
		},
	}
}

// operator reads the operator's own metrics (job oxbow-operator; instance: the operator pod, from
// the service.instance.id the Helm chart sets). tests/k8s/helm_e2e.py runs these queries, where
// an operator runs; tests/observability runs the brokers' boards.
func operator() Board {
	const c = `controller=~"$controller"`
	return Board{
		UID:   "oxbow-operator",
		Title: "Oxbow / Operator",
		Help:  "The Kubernetes operator: reconcile passes, their errors and duration, and the Events it recorded (restarts, moves, problems)",
		Vars:  []cog.Builder[dashboard.VariableModel]{labelVar("controller", "controller", "oxbow_operator_reconciles_total")},
		Rows: []Row{
			{"Operator", []cog.Builder[dashboard.Panel]{
				Stat("Replicas reconciling", "Operator replicas holding the leader Lease: exactly 1 (standbys report 0)", "none", ExactlyOne,
					q(`sum(oxbow_operator_leader)`, "")),
				Stat("Failed reconciles in range", "Reconcile passes that ended in an error in the time range (they are retried with backoff)", "none", Bad,
					q(`sum(increase(oxbow_operator_reconciles_total{result="error"}[$__range])) or vector(0)`, "")),
				Stat("Broker restarts in range", "Brokers the operator restarted (rolling restarts) in the time range", "none", Info,
					q(`sum(increase(oxbow_operator_events_total{reason="RestartingBroker"}[$__range])) or vector(0)`, "")),
			}},
			{"Reconciles", []cog.Builder[dashboard.Panel]{
				Graph("Reconciles per minute", "Reconcile passes by controller and result", "cpm", 12,
					q(`sum by (controller, result) (rate(oxbow_operator_reconciles_total{`+c+`}[$__rate_interval])) * 60`, "{{controller}} {{result}}")),
				Graph("Reconcile duration", "Time of one pass by controller: median and 99th percentile", "s", 12,
					q(`histogram_quantile(0.5, sum by (controller, le) (rate(oxbow_operator_reconcile_duration_seconds_bucket{`+c+`}[$__rate_interval])))`, "{{controller}} p50"),
					q(`histogram_quantile(0.99, sum by (controller, le) (rate(oxbow_operator_reconcile_duration_seconds_bucket{`+c+`}[$__rate_interval])))`, "{{controller}} p99")),
			}},
			{"Events", []cog.Builder[dashboard.Panel]{
				Graph("Events per minute", "Kubernetes Events the operator recorded, by object kind, type and reason: restarts (RestartingBroker), partition moves (Rebalancing, Rebalanced), refusals and pod problems (Warning)", "cpm", 24,
					q(`sum by (kind, type, reason) (rate(oxbow_operator_events_total[$__rate_interval])) * 60`, "{{kind}} {{type}} {{reason}}")),
			}},
		},
	}
}
