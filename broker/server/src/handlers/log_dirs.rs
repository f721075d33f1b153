//! DescribeLogDirs (v1-4): the partitions in each of this broker's log dirs and their sizes, as
//! `kafka-log-dirs.sh` and the operator (bytes left to move in a rebalance) read them. This
//! broker never has future replicas (no moves between its own log dirs).

use oxbow_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use oxbow_protocol::messages::*;

use super::Ctx;
use super::util::{entry, s, topic_name};

pub async fn handle(ctx: &Ctx<'_>, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let b = ctx.broker;
    // DESCRIBE on the cluster, as Kafka (CLUSTER_AUTHORIZATION_FAILED, no directory listed).
    if let Err(e) = ctx.check_cluster(oxbow_meta::acl::Operation::Describe) {
        let mut resp = DescribeLogDirsResponse::default();
        resp.error_code = e.code();
        return resp;
    }
    let wanted = |topic: &str, p: i32| match &req.topics {
        None => true,
        Some(ts) => ts.iter().any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&p)),
    };
    let mut results: Vec<DescribeLogDirsResult> = b
        .config
        .log_dirs
        .iter()
        .map(|d| {
            let mut r = DescribeLogDirsResult::default();
            r.log_dir = s(d.display().to_string());
            // Unknown (Kafka's -1): no statvfs here.
            r.total_bytes = -1;
            r.usable_bytes = -1;
            r
        })
        .collect();
    for p in b.all_partitions() {
        if !wanted(&p.topic, p.index) {
            continue;
        }
        let Ok(size) = p.with_log(|l| l.size_bytes()) else { continue };
        let Some(dir) = results.get_mut(p.root) else { continue };
        let mut part = DescribeLogDirsPartition::default();
        part.partition_index = p.index;
        part.partition_size = i64::try_from(size).unwrap_or(i64::MAX);
        part.offset_lag = 0;
        part.is_future_key = false;
        let new = || {
            let mut t = DescribeLogDirsTopic::default();
            t.name = topic_name(&p.topic);
            t
        };
        entry(&mut dir.topics, |t| t.name.0.as_str() == &*p.topic, new).partitions.push(part);
    }
    for r in &mut results {
        r.topics.sort_by(|a, b| a.name.0.cmp(&b.name.0));
        for t in &mut r.topics {
            t.partitions.sort_by_key(|p| p.partition_index);
        }
    }
    let mut resp = DescribeLogDirsResponse::default();
    resp.results = results;
    resp
}
