//! Writes to the Kubernetes API, shared by the controllers: server-side apply of objects and of
//! status under one field manager, and Events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::cluster::desired::Settings;
use crate::telemetry::Metrics;

/// The field manager of every write the operator makes.
pub const MANAGER: &str = "oxbow-operator";

/// What every reconcile needs.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub reporter: Reporter,
    pub metrics: Metrics,
    pub backoff: Backoff,
}

/// Per-object exponential back-off of failed reconciles: 5 s after the first failure, doubling
/// up to 5 minutes; a success starts over.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<ObjectRef<DynamicObject>, u32>>,
}

impl Backoff {
    pub const FIRST: Duration = Duration::from_secs(5);
    pub const MAX: Duration = Duration::from_secs(300);

    /// Counts a failure of `obj`; how long to wait before the next try.
    pub fn failed(&self, obj: &ObjectRef<DynamicObject>) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(obj.clone()).or_default();
        *n = n.saturating_add(1);
        Self::FIRST.saturating_mul(1 << (*n - 1).min(10)).min(Self::MAX)
    }

    /// Failures of `obj` since its last success.
    pub fn failures(&self, obj: &ObjectRef<DynamicObject>) -> u32 {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).get(obj).copied().unwrap_or(0)
    }

    pub fn succeeded(&self, obj: &ObjectRef<DynamicObject>) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(obj);
    }
}

impl Context {
    /// Records a Normal Event on `obj`; a failure to record is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, action: &str, note: String) {
        self.publish(obj, EventType::Normal, reason, action, note).await;
    }

    /// Records a Warning Event on `obj`: something the user has to look at.
    pub async fn warn<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, action: &str, note: String) {
        self.publish(obj, EventType::Warning, reason, action, note).await;
    }

    async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.metrics.event(&K::kind(&()), type_ == EventType::Warning, reason);
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        // The API server refuses a note over 1 kB.
        let note = if note.len() > 1000 { format!("{}...", note.chars().take(990).collect::<String>()) } else { note };
        let ev = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
        if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, "could not publish an event");
        }
    }
}

/// Server-side apply of a whole object (k8s-openapi types serialize their apiVersion and kind).
pub async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj.meta().name.clone().unwrap_or_default();
    Ok(api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(obj)).await?)
}

/// Server-side apply of a custom resource's status.
pub async fn apply_status<K>(client: &Client, ns: &str, name: &str, status: &impl Serialize) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({ "apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status });
    api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_five_minutes_and_a_success_starts_over() {
        let b = Backoff::default();
        let a = ObjectRef::<DynamicObject>::new_with(
            "a",
            kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        let secs: Vec<u64> = (0..9).map(|_| b.failed(&a).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        b.succeeded(&a);
        assert_eq!(b.failed(&a).as_secs(), 5);
    }
}
