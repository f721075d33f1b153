//! Background jobs: retention and time-based rolling, flushing, checkpoints, the log cleaner.
//! Each runs on its own interval with `MissedTickBehavior::Skip` (never overlapping itself) and
//! stops when its token is cancelled.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::clock::now_ms;

async fn every(period_ms: u64, token: CancellationToken, mut job: impl FnMut() -> tokio::task::JoinHandle<()>) {
    let mut tick = tokio::time::interval(Duration::from_millis(period_ms.max(1)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {
                if let Err(e) = job().await {
                    tracing::error!(error = %e, "background job panicked");
                }
            }
        }
    }
}

/// Retention and `segment.ms` rolling for every partition.
pub fn retention_pass(broker: &Broker) {
    let now = now_ms();
    for p in broker.all_partitions() {
        let r = p.with_log(|l| -> Result<usize, oxbow_log::LogError> {
            l.roll_if_expired(now)?;
            l.expire_producers(now);
            l.apply_retention(now)
        });
        p.expire_verifications(now, broker.config.log.producer_id_expiration_ms);
        match r {
            Ok(Ok(n)) if n > 0 => {
                tracing::debug!(topic = %p.topic, partition = p.index, deleted = n, "retention deleted segments")
            }
            Ok(Err(e)) => tracing::error!(topic = %p.topic, partition = p.index, error = %e, "retention failed"),
            _ => {}
        }
    }
}

/// `flush.ms` flushes (and owed flushes whose sync failed), and background syncs of sealed
/// segments (outside the partition lock).
pub fn flush_pass(broker: &Broker) {
    let now = now_ms();
    // An owed flush older than one pass is one whose sync failed.
    let stale_ms = i64::try_from(broker.config.flush_scheduler_interval_ms).unwrap_or(i64::MAX);
    for p in broker.all_partitions() {
        if let Err(e) = p.flush_if_due(now, stale_ms) {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "flush failed");
        }
        if let Ok(Some(plan)) = p.with_log(|l| l.pending_flush()) {
            match plan.sync() {
                Ok(()) => {
                    let _ = p.with_log(|l| l.flushed(&plan, now));
                }
                Err(e) => tracing::error!(topic = %p.topic, partition = p.index, error = %e, "segment sync failed"),
            }
        }
    }
}

/// One log cleaner pass: every compacted partition hosted here that is dirty enough is
/// planned under its lock, cleaned outside it, and swapped in under the lock again.
pub fn cleaner_pass(broker: &Broker) {
    let now = now_ms();
    for p in broker.all_partitions() {
        let Ok(Some(plan)) = p.with_log(|l| l.plan_clean(now)) else { continue };
        let cleaned = match oxbow_log::cleaner::clean(&plan, now) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "log cleaning failed");
                continue;
            }
        };
        let stats = cleaned.stats;
        match p.with_log(|l| l.install_cleaned(cleaned)) {
            Ok(Ok(swapped)) => tracing::info!(
                topic = %p.topic,
                partition = p.index,
                dirty_from = plan.first_dirty,
                upto = plan.end,
                records_removed = stats.records_removed,
                bytes_before = stats.bytes_before,
                bytes_after = stats.bytes_after,
                segments = swapped,
                "compacted"
            ),
            Ok(Err(e)) => {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "installing cleaned segments failed")
            }
            Err(_) => {} // deleted meanwhile
        }
    }
}

pub fn spawn_all(set: &mut JoinSet<()>, broker: Arc<Broker>, token: CancellationToken) {
    let c = &broker.config;
    let (retention, flush, checkpoint, hw_checkpoint) = (
        c.retention_check_interval_ms,
        c.flush_scheduler_interval_ms,
        c.flush_checkpoint_interval_ms,
        c.hw_checkpoint_interval_ms,
    );
    let b = broker.clone();
    set.spawn(every(retention, token.child_token(), move || {
        let b = b.clone();
        tokio::task::spawn_blocking(move || retention_pass(&b))
    }));
    let b = broker.clone();
    set.spawn(every(flush, token.child_token(), move || {
        let b = b.clone();
        tokio::task::spawn_blocking(move || flush_pass(&b))
    }));
    if broker.config.cleaner_enable {
        let b = broker.clone();
        set.spawn(every(broker.config.cleaner_backoff_ms, token.child_token(), move || {
            let b = b.clone();
            tokio::task::spawn_blocking(move || cleaner_pass(&b))
        }));
    }
    let b = broker.clone();
    // Kafka checks for lagging followers every half of replica.lag.time.max.ms.
    let lag = u64::try_from(broker.config.replica_lag_time_max_ms / 2).unwrap_or(15_000).max(100);
    set.spawn(every(lag, token.child_token(), move || {
        let b = b.clone();
        tokio::spawn(async move { crate::replication::shrink_isr_pass(&b) })
    }));
    let b = broker.clone();
    set.spawn(every(checkpoint, token.child_token(), move || {
        let b = b.clone();
        tokio::task::spawn_blocking(move || b.write_checkpoints())
    }));
    let b = broker;
    set.spawn(every(hw_checkpoint, token.child_token(), move || {
        let b = b.clone();
        tokio::task::spawn_blocking(move || b.write_high_watermarks())
    }));
}
