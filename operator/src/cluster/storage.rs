//! Growing broker volumes online. A StatefulSet's claim template cannot change, so a larger
//! `spec.storage.size` resizes the brokers' PersistentVolumeClaims themselves (where the
//! StorageClass allows expansion, the volume grows under the running pod) and the template
//! keeps the size the StatefulSet was created with; a broker added later starts with that size
//! and its claim is resized like the others. A smaller size is refused: volumes do not shrink.
//!
//! [`plan`] is pure: from the size asked for and the claims as they are, which claims to resize,
//! which are still resizing, and whether the spec asks for a shrink.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// The claim template's name ([`super::desired`]): broker N's claim is `data-<sts>-N`.
pub const CLAIM: &str = "data";

/// A quantity in whole bytes, rounded up as Kubernetes does (`10Gi`, `500M`, `1.5Gi`,
/// `1073741824`, `1e9`, and the millis the API server writes a fractional byte count in:
/// `1395864371200m`); None when it is not one.
pub fn bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (num, unit) = q.split_at(split);
    // value = mantissa / 10^decimals * binary * 10^power
    let (binary, power): (u128, i32) = match unit {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        e if e.starts_with(['e', 'E']) => (1, e[1..].parse::<i32>().ok().filter(|p| p.abs() <= 30)?),
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.len() > 30 || int.len() > 30 {
        return None;
    }
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().ok()?;
    let scaled = mantissa.checked_mul(binary)?;
    let exp = power - frac.len() as i32;
    if exp >= 0 {
        scaled.checked_mul(10u128.checked_pow(exp as u32)?)
    } else {
        Some(scaled.div_ceil(10u128.checked_pow(exp.unsigned_abs())?))
    }
}

/// One broker's claim as Kubernetes has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub name: String,
    /// `spec.resources.requests.storage`.
    pub requested: String,
    /// `status.capacity.storage` (what the volume has now).
    pub capacity: Option<String>,
    /// The resize conditions that are True (`Resizing`, `FileSystemResizePending`, ...), with
    /// their messages.
    pub conditions: Vec<String>,
    /// Bound to a volume: only a bound claim can be resized.
    pub bound: bool,
}

impl Claim {
    pub fn of(pvc: &PersistentVolumeClaim) -> Claim {
        let requested = pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_default();
        let status = pvc.status.as_ref();
        Claim {
            name: pvc.metadata.name.clone().unwrap_or_default(),
            bound: status.and_then(|s| s.phase.as_deref()) == Some("Bound"),
            requested,
            capacity: status.and_then(|s| s.capacity.as_ref()?.get("storage")).map(|q| q.0.clone()),
            conditions: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.status == "True")
                .map(|c| match c.message.as_deref().filter(|m| !m.is_empty()) {
                    Some(m) => format!("{}: {m}", c.type_),
                    None => c.type_.clone(),
                })
                .collect(),
        }
    }
}

/// What to do about the brokers' volumes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Claims whose request is below the spec's size: raise it.
    pub grow: Vec<String>,
    /// Claims asked for the size whose volume does not have it yet, and what they wait for.
    pub resizing: Vec<String>,
    /// The spec asks for less than a claim already has.
    pub shrink: Option<String>,
}

impl Plan {
    /// The progress line for the status: None once every volume has the spec's size.
    pub fn progress(&self, size: &str, claims: usize) -> Option<String> {
        if self.grow.is_empty() && self.resizing.is_empty() {
            return None;
        }
        let done = claims.saturating_sub(self.resizing.len());
        Some(format!("{done} of {claims} broker volume(s) at {size}; resizing: {}", self.resizing.join("; ")))
    }
}

/// The plan from the spec's size and the brokers' claims (only this Cluster's, any order).
pub fn plan(size: &str, claims: &[Claim]) -> Plan {
    let Some(want) = bytes(size) else { return Plan::default() };
    let mut out = Plan::default();
    let largest = claims.iter().filter_map(|c| Some((bytes(&c.requested)?, c))).max_by_key(|(b, _)| *b);
    if let Some((have, c)) = largest
        && have > want
    {
        out.shrink = Some(format!(
            "storage.size {size} is smaller than {} of claim {}: volumes cannot shrink; set it back to {} or more",
            c.requested, c.name, c.requested
        ));
        return out;
    }
    for c in claims {
        let has = c.capacity.as_deref().and_then(bytes);
        if !c.bound {
            // A new broker's claim (the template's size): resized once its volume exists.
            if bytes(&c.requested).is_some_and(|b| b < want) {
                out.resizing.push(format!("{} waits to be bound", c.name));
            }
            continue;
        }
        if bytes(&c.requested).is_some_and(|b| b < want) {
            out.grow.push(c.name.clone());
        }
        if has.is_none_or(|b| b < want) {
            let at = c.capacity.as_deref().unwrap_or("no capacity yet");
            let why = if c.conditions.is_empty() { String::new() } else { format!(", {}", c.conditions.join(", ")) };
            out.resizing.push(format!("{} at {at}{why}", c.name));
        }
    }
    out
}

/// What [`resize`] did and found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Claims asked for the new size in this pass.
    pub grown: Vec<String>,
    /// Progress while a volume does not have the spec's size yet.
    pub progress: Option<String>,
    /// Why the volumes cannot have the spec's size: a shrink, or Kubernetes' refusal to resize
    /// (a StorageClass without `allowVolumeExpansion`), with the condition reason.
    pub refused: Option<(&'static str, String)>,
}

/// Resizes the claims of StatefulSet `sts` in `ns` (its pods' `selector`) to `size` where they
/// are smaller, for ordinals below `brokers`: a claim a scale-down left behind is not resized
/// (no pod mounts it) until a scale-up uses it again.
pub async fn resize(
    client: &kube::Client,
    ns: &str,
    sts: &str,
    selector: &str,
    brokers: i32,
    size: &str,
) -> Result<Outcome, crate::Error> {
    use kube::api::{Api, ListParams, Patch, PatchParams};
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claims: Vec<Claim> = api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .filter(|c| c.metadata.name.as_deref().and_then(|n| broker_ordinal(n, sts)).is_some_and(|o| o < brokers))
        .map(Claim::of)
        .collect();
    let plan = plan(size, &claims);
    let mut out = Outcome { refused: plan.shrink.clone().map(|m| ("StorageShrinkRefused", m)), ..Default::default() };
    for name in &plan.grow {
        let patch = serde_json::json!({ "spec": { "resources": { "requests": { "storage": size } } } });
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => out.grown.push(name.clone()),
            // The API server's refusal (no expansion in the StorageClass, a quota) is the
            // user's to act on: the rest of the reconcile goes on.
            Err(kube::Error::Api(resp)) if matches!(resp.code, 403 | 422) => {
                out.refused =
                    Some(("StorageResizeRefused", format!("resizing claim {name} to {size}: {}", resp.message)));
                break;
            }
            // Anything else (the claim changed or went meanwhile, throttling, a hiccup): the
            // claim stays in the progress line and the next pass tries again.
            Err(e) => tracing::debug!(claim = %name, error = %e, "could not resize a claim; retrying"),
        }
    }
    out.progress = plan.progress(size, claims.len());
    Ok(out)
}

/// The claim template's storage request of `sts`.
fn template_size(sts: &StatefulSet) -> Option<String> {
    let claims = sts.spec.as_ref()?.volume_claim_templates.as_ref()?;
    let c = claims.iter().find(|c| c.metadata.name.as_deref() == Some(CLAIM))?;
    Some(c.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage")?.0.clone())
}

/// Keeps the existing StatefulSet's claim template size in `desired` (it cannot change; the
/// claims are resized instead).
pub fn keep_template_size(desired: &mut StatefulSet, existing: &StatefulSet) {
    let Some(size) = template_size(existing) else { return };
    let claims = desired.spec.as_mut().and_then(|s| s.volume_claim_templates.as_mut());
    for c in claims.into_iter().flatten().filter(|c| c.metadata.name.as_deref() == Some(CLAIM)) {
        if let Some(requests) = c.spec.as_mut().and_then(|s| s.resources.as_mut()).and_then(|r| r.requests.as_mut()) {
            requests.insert("storage".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.clone()));
        }
    }
}

/// The ordinal of `pvc` when it is a broker claim of StatefulSet `sts` (`data-<sts>-<ordinal>`).
pub fn broker_ordinal(pvc: &str, sts: &str) -> Option<i32> {
    let n = pvc.strip_prefix(CLAIM)?.strip_prefix('-')?.strip_prefix(sts)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, requested: &str, capacity: Option<&str>, conditions: &[&str]) -> Claim {
        Claim {
            name: name.into(),
            requested: requested.into(),
            capacity: capacity.map(str::to_string),
            conditions: conditions.iter().map(|s| s.to_string()).collect(),
            bound: true,
        }
    }

    #[test]
    fn quantities_in_bytes() {
        assert_eq!(bytes("10Gi"), Some(10 << 30));
        assert_eq!(bytes("1.5Gi"), Some(3 << 29));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("1073741824"), Some(1 << 30));
        assert_eq!(bytes("1k"), Some(1000));
        assert_eq!(bytes("0.1"), Some(1));
        assert!(bytes("1Gi") < bytes("1.1G"));
        // What the API server stores for a fractional byte count, and exponents.
        assert_eq!(bytes("1395864371200m"), Some(1_395_864_372));
        assert_eq!(bytes("1.3Gi"), Some(1_395_864_372));
        assert_eq!(bytes("1e9"), Some(1_000_000_000));
        assert_eq!(bytes("1.5E3"), Some(1500));
        assert_eq!(bytes("500m"), Some(1));
        for bad in ["", "Gi", "1.2.3Gi", "10gi", "x", "1 Gi", ".", "1e", "1e999", "1Zi"] {
            assert_eq!(bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn growth_raises_every_smaller_claim_and_reports_the_ones_still_resizing() {
        let claims = [
            claim("data-e-broker-0", "2Gi", Some("2Gi"), &[]),
            claim("data-e-broker-1", "2Gi", Some("1Gi"), &["FileSystemResizePending"]),
            claim("data-e-broker-2", "1Gi", Some("1Gi"), &[]),
        ];
        let p = plan("2Gi", &claims);
        assert_eq!(p.grow, ["data-e-broker-2"]);
        assert_eq!(p.resizing, ["data-e-broker-1 at 1Gi, FileSystemResizePending", "data-e-broker-2 at 1Gi"]);
        assert_eq!(p.shrink, None);
        assert_eq!(
            p.progress("2Gi", 3).as_deref(),
            Some(
                "1 of 3 broker volume(s) at 2Gi; resizing: data-e-broker-1 at 1Gi, FileSystemResizePending; data-e-broker-2 at 1Gi"
            )
        );
        // Same size written another way: nothing to do.
        let done = [claim("data-e-broker-0", "2048Mi", Some("2Gi"), &[])];
        assert_eq!(plan("2Gi", &done), Plan::default());
        assert_eq!(plan("2Gi", &done).progress("2Gi", 1), None);
    }

    #[test]
    fn a_claim_not_bound_yet_waits_and_is_not_patched() {
        let mut pending = claim("data-e-broker-3", "1Gi", None, &[]);
        pending.bound = false;
        let claims = [claim("data-e-broker-0", "2Gi", Some("2Gi"), &[]), pending];
        let p = plan("2Gi", &claims);
        assert_eq!(p.grow, Vec::<String>::new());
        assert_eq!(p.resizing, ["data-e-broker-3 waits to be bound"]);
        assert_eq!(p.shrink, None);
    }

    #[test]
    fn a_smaller_size_is_refused_and_nothing_is_resized() {
        let claims = [claim("data-e-broker-0", "1Gi", Some("1Gi"), &[]), claim("data-e-broker-1", "4Gi", None, &[])];
        let p = plan("2Gi", &claims);
        assert_eq!(p.grow, Vec::<String>::new());
        let msg = p.shrink.unwrap_or_default();
        assert!(msg.contains("4Gi of claim data-e-broker-1") && msg.contains("cannot shrink"), "{msg}");
    }

    #[test]
    fn broker_claims_are_told_apart_from_other_clusters() {
        assert_eq!(broker_ordinal("data-events-broker-0", "events-broker"), Some(0));
        assert_eq!(broker_ordinal("data-events-broker-12", "events-broker"), Some(12));
        assert_eq!(broker_ordinal("data-events-broker-x", "events-broker"), None);
        assert_eq!(broker_ordinal("data-events-broker-", "events-broker"), None);
        assert_eq!(broker_ordinal("data-events-broker-0", "ev-broker"), None);
        assert_eq!(broker_ordinal("data-events-2-broker-0", "events-broker"), None);
    }
}
