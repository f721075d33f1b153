//! SCRAM users: DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), with the
//! checks and per-user answers of Kafka's controller. Credentials live in the metadata log, so
//! every broker sees a change once it has applied it; no answer ever carries a salt or key.
//! On listeners without SASL, SaslHandshake and SaslAuthenticate get ILLEGAL_SASL_STATE.

use std::collections::{BTreeMap, BTreeSet};

use oxbow_meta::Command;
use oxbow_meta::records::ScramCredential;
use oxbow_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use oxbow_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use oxbow_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use oxbow_protocol::scram::{self, Mechanism};

use super::Ctx;
use super::util::s;
use crate::errors::BrokerError;

pub async fn sasl_handshake(_ctx: &Ctx<'_>, _req: SaslHandshakeRequest) -> SaslHandshakeResponse {
    let mut resp = SaslHandshakeResponse::default();
    resp.error_code = BrokerError::IllegalSaslState(String::new()).code();
    resp
}

pub async fn sasl_authenticate(_ctx: &Ctx<'_>, _req: SaslAuthenticateRequest) -> SaslAuthenticateResponse {
    let mut resp = SaslAuthenticateResponse::default();
    let e = BrokerError::IllegalSaslState("SASL is not enabled on this listener".into());
    resp.error_code = e.code();
    resp.error_message = Some(s(e.message()));
    resp
}

pub async fn describe(ctx: &Ctx<'_>, req: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse {
    let image = ctx.broker.image();
    let mut resp = DescribeUserScramCredentialsResponse::default();
    if let Err(e) = ctx.check_cluster(oxbow_meta::acl::Operation::Describe) {
        resp.error_code = e.code();
        resp.error_message = Some(s(e.message()));
        return resp;
    }
    let result = |user: &str| {
        let mut r = DescribeUserScramCredentialsResult::default();
        r.user = s(user);
        r
    };
    let infos = |creds: &BTreeMap<i8, ScramCredential>| {
        creds
            .values()
            .map(|c| {
                let mut i = CredentialInfo::default();
                i.mechanism = c.mechanism;
                i.iterations = c.iterations as i32;
                i
            })
            .collect()
    };
    match req.users.filter(|u| !u.is_empty()) {
        None => {
            for (user, creds) in &image.scram {
                let mut r = result(user);
                r.credential_infos = infos(creds);
                resp.results.push(r);
            }
        }
        Some(users) => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for u in &users {
                *counts.entry(u.name.as_str()).or_default() += 1;
            }
            let mut seen = BTreeSet::new();
            for u in &users {
                let name = u.name.as_str();
                if !seen.insert(name) {
                    continue;
                }
                let mut r = result(name);
                let e = if counts[name] > 1 {
                    Some(BrokerError::DuplicateResource(format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
                    )))
                } else {
                    match image.scram.get(name) {
                        Some(creds) => {
                            r.credential_infos = infos(creds);
                            None
                        }
                        None => Some(BrokerError::ResourceNotFound(format!(
                            "Attempt to describe a user credential that does not exist: {name}"
                        ))),
                    }
                };
                if let Some(e) = e {
                    r.error_code = e.code();
                    r.error_message = Some(s(e.message()));
                }
                resp.results.push(r);
            }
        }
    }
    resp
}

pub async fn alter(ctx: &Ctx<'_>, req: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse {
    let image = ctx.broker.image();
    // Every user named, in request order, with the first error found for it.
    let mut users: Vec<String> = Vec::new();
    let mut errors: BTreeMap<String, BrokerError> = BTreeMap::new();
    let mut seen: BTreeSet<(String, i8)> = BTreeSet::new();
    let refuse = |user: &str, e: BrokerError, errors: &mut BTreeMap<String, BrokerError>| {
        errors.entry(user.to_string()).or_insert(e);
    };
    let mut upserts = Vec::new();
    let mut deletions = Vec::new();
    let note = |user: &str, users: &mut Vec<String>| {
        if !users.iter().any(|u| u == user) {
            users.push(user.to_string());
        }
    };
    let denied = ctx.check_cluster(oxbow_meta::acl::Operation::Alter).err();
    for d in &req.deletions {
        let user = d.name.as_str();
        note(user, &mut users);
        if let Some(e) = &denied {
            refuse(user, e.clone(), &mut errors);
            continue;
        }
        if let Some(e) = check(user, d.mechanism, &mut seen) {
            refuse(user, e, &mut errors);
        } else if !image.scram.get(user).is_some_and(|c| c.contains_key(&d.mechanism)) {
            refuse(
                user,
                BrokerError::ResourceNotFound(format!(
                    "Attempt to delete a user credential that does not exist: {user}"
                )),
                &mut errors,
            );
        } else {
            deletions.push((user.to_string(), d.mechanism));
        }
    }
    for u in &req.upsertions {
        let user = u.name.as_str();
        note(user, &mut users);
        if let Some(e) = &denied {
            refuse(user, e.clone(), &mut errors);
            continue;
        }
        if let Some(e) = check(user, u.mechanism, &mut seen) {
            refuse(user, e, &mut errors);
            continue;
        }
        let unacceptable = |m: &str| BrokerError::UnacceptableCredential(m.to_string());
        let e = if u.iterations < scram::MIN_ITERATIONS as i32 {
            Some(unacceptable("Too few iterations"))
        } else if u.iterations > scram::MAX_ITERATIONS as i32 {
            Some(unacceptable("Too many iterations"))
        } else if u.salt.is_empty() || u.salted_password.is_empty() {
            Some(unacceptable("A credential needs a salt and a salted password"))
        } else {
            None
        };
        match (e, Mechanism::from_id(u.mechanism)) {
            (Some(e), _) => refuse(user, e, &mut errors),
            (None, Some(mech)) => {
                let c = scram::Credential::from_salted(mech, &u.salted_password, u.salt.to_vec(), u.iterations as u32);
                upserts.push(ScramCredential {
                    user: user.to_string(),
                    mechanism: u.mechanism,
                    salt: c.salt,
                    stored_key: c.stored_key,
                    server_key: c.server_key,
                    iterations: c.iterations,
                });
            }
            (None, None) => {}
        }
    }
    // A user with any refused alteration keeps all of its credentials as they were.
    upserts.retain(|c| !errors.contains_key(&c.user));
    deletions.retain(|(u, _)| !errors.contains_key(u));
    let accepted: BTreeSet<String> =
        upserts.iter().map(|c| c.user.clone()).chain(deletions.iter().map(|(u, _)| u.clone())).collect();
    if !accepted.is_empty()
        && let Err(e) =
            ctx.broker.controller.execute(Command::AlterScramCredentials { upserts, deletions, only_new: false }).await
    {
        for u in accepted {
            errors.insert(u, e.clone());
        }
    }
    let mut resp = AlterUserScramCredentialsResponse::default();
    for user in users {
        let mut r = AlterUserScramCredentialsResult::default();
        r.user = s(user.clone());
        if let Some(e) = errors.get(&user) {
            r.error_code = e.code();
            r.error_message = Some(s(e.message()));
        }
        resp.results.push(r);
    }
    resp
}

/// The checks every alteration shares: a user name, a known mechanism, once per request.
fn check(user: &str, mechanism: i8, seen: &mut BTreeSet<(String, i8)>) -> Option<BrokerError> {
    if user.is_empty() {
        return Some(BrokerError::UnacceptableCredential("Username must not be empty".into()));
    }
    if Mechanism::from_id(mechanism).is_none() {
        return Some(BrokerError::UnsupportedSaslMechanism("Unknown SCRAM mechanism".into()));
    }
    if !seen.insert((user.to_string(), mechanism)) {
        return Some(BrokerError::DuplicateResource(
            "A user credential cannot be altered twice in the same request".into(),
        ));
    }
    None
}
