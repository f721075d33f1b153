//! Writes to the Kubernetes API, shared by the controllers: server-side apply of objects and of
//! status under one field manager, and Events.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
}

impl Context {
    /// Records a Normal Event on `obj`; a failure to record is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, action: &str, note: String) {
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let ev = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
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
