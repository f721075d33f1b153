//! Leader election through a `coordination.k8s.io/v1` Lease, so several operator replicas can run
//! and exactly one reconciles.
//!
//! [`decide`] is the pure rule; [`LeaderElector`] carries it out. Lease writes use `create` and
//! `replace` with the observed `resourceVersion` (optimistic concurrency) rather than server-side
//! apply: two candidates racing for an expired lease must not both succeed, and only a
//! conditional write guarantees that. A leader that cannot renew before its lease would expire
//! stops the process: Kubernetes restarts it as a follower, and no two replicas ever reconcile at
//! once.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// What a candidate should do with the lease it observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No lease yet: create one naming us.
    Create,
    /// We hold it: renew it.
    Renew,
    /// It expired (or was released): take it over.
    TakeOver,
    /// Someone else holds it: try again later.
    Follow { holder: String },
}

/// The rule: hold, take over an expired or released lease, otherwise follow.
pub fn decide(lease: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Step {
    let Some(spec) = lease else { return Step::Create };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    if holder.is_empty() {
        return Step::TakeOver;
    }
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let renewed = spec.renew_time.as_ref().map(|t| t.0).or(spec.acquire_time.as_ref().map(|t| t.0));
    match renewed {
        Some(t) if t.as_second() + duration > now.as_second() => Step::Follow { holder },
        _ => Step::TakeOver,
    }
}

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, duration: Duration) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    fn spec(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let keep = previous.filter(|p| p.holder_identity.as_deref() == Some(&self.identity));
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs() as i32),
            acquire_time: keep.and_then(|p| p.acquire_time.clone()).or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(
                previous.and_then(|p| p.lease_transitions).unwrap_or(0)
                    + i32::from(keep.is_none() && previous.is_some()),
            ),
            ..Default::default()
        }
    }

    /// One attempt: Ok(true) if we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.name).await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        match decide(spec, &self.identity, now) {
            Step::Follow { .. } => Ok(false),
            Step::Create => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                    spec: Some(self.spec(None, now)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Step::Renew | Step::TakeOver => {
                let Some(mut lease) = current.clone() else { return Ok(false) };
                lease.spec = Some(self.spec(spec, now));
                // `replace` carries the resourceVersion we read: a concurrent writer makes it fail.
                match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut announced = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return;
                }
                Ok(false) if !announced => {
                    tracing::info!(lease = %self.name, "another replica leads; waiting");
                    announced = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election: cannot read or write the lease"),
            }
            tokio::time::sleep(self.duration / 5).await;
        }
    }

    /// Renews every duration/3; returns when the lease is lost or cannot be renewed in time.
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.name, "lost the lease to another replica");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renew the lease");
                    if last_renewal.elapsed() >= self.duration * 2 / 3 {
                        tracing::error!(lease = %self.name, "lease about to expire without renewal");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up (on shutdown), so another replica need not wait for it to expire.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(self.identity.as_str())
        {
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
            }
            let _ = self.api.replace(&self.name, &PostParams::default(), &lease).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(duration),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap_or(Timestamp::UNIX_EPOCH))),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn no_lease_is_created() {
        assert_eq!(decide(None, "a", at(100)), Step::Create);
    }

    #[test]
    fn the_holder_renews_even_after_expiry() {
        assert_eq!(decide(Some(&lease(Some("a"), 100, 15)), "a", at(105)), Step::Renew);
        assert_eq!(decide(Some(&lease(Some("a"), 100, 15)), "a", at(500)), Step::Renew);
    }

    #[test]
    fn others_follow_a_live_lease_and_take_over_an_expired_or_released_one() {
        assert_eq!(decide(Some(&lease(Some("a"), 100, 15)), "b", at(114)), Step::Follow { holder: "a".into() });
        assert_eq!(decide(Some(&lease(Some("a"), 100, 15)), "b", at(115)), Step::TakeOver);
        assert_eq!(decide(Some(&lease(None, 100, 15)), "b", at(101)), Step::TakeOver);
    }
}
