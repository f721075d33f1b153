//! Status conditions, shared by every resource the operator manages.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition of `type_`, keeping its `lastTransitionTime` from `old` while the status holds.
pub fn condition(
    old: &[Condition],
    type_: &str,
    on: bool,
    reason: &str,
    message: String,
    generation: i64,
) -> Condition {
    let status = if on { "True" } else { "False" }.to_string();
    let last_transition_time = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(jiff::Timestamp::now()));
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
        observed_generation: Some(generation),
        last_transition_time,
    }
}
