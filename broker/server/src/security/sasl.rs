//! The server side of SASL on one connection: SaslHandshake (v1, or v0 with raw tokens after
//! it), SaslAuthenticate with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and KIP-368
//! re-authentication on the same connection.
//!
//! Before a connection has authenticated only ApiVersions, SaslHandshake and SaslAuthenticate
//! are served; anything else closes it, as Kafka. A failed login is answered with
//! SASL_AUTHENTICATION_FAILED and a message that does not say whether the user exists, then the
//! connection closes (`connection.failed.authentication.delay.ms` later: the network layer waits).

use bytes::{BufMut, Bytes, BytesMut};
use oxbow_protocol::codec::{AnyRequest, decode_any, encode_response};
use oxbow_protocol::frame::peek_header;
use oxbow_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use oxbow_protocol::scram::{self, Credential, ServerExchange};
use oxbow_protocol::{ApiKey, StrBytes};

use super::Principal;
use crate::broker::Broker;
use crate::config::security::{SaslMechanism, SaslSettings};
use crate::errors::BrokerError;

/// What the connection does with a frame the authenticator handled.
#[derive(Debug)]
pub enum Step {
    /// Write this answer (a whole frame) and go on.
    Reply(BytesMut),
    /// Not for the authenticator (ApiVersions before authentication): serve it as usual.
    Dispatch,
    /// Authenticated, first time or again: write the answer, then serve as `principal`.
    Authenticated { reply: BytesMut, principal: Principal },
    /// Close the connection after writing `reply`, if any; `failed_login`: a failed login,
    /// answered only after the failed-authentication delay.
    Close { reply: Option<BytesMut>, reason: String, failed_login: bool },
}

enum State {
    /// No mechanism chosen.
    Idle,
    /// SaslHandshake chose this mechanism.
    Chosen(SaslMechanism),
    /// SCRAM sent server-first; waits for client-final.
    Scram(scram::Mechanism, ServerExchange),
}

/// One connection's authentication state.
pub struct Authenticator {
    state: State,
    /// The principal of the last successful authentication.
    principal: Option<Principal>,
    /// After a v0 SaslHandshake, tokens come as raw size-prefixed frames.
    raw: bool,
    /// SaslAuthenticate's `session_lifetime_ms` (`connections.max.reauth.ms`; 0: none).
    lifetime_ms: i64,
}

/// The outcome of one SASL token.
enum Token {
    Continue(Vec<u8>),
    Done(Vec<u8>, Principal),
}

const API_SASL_HANDSHAKE: i16 = ApiKey::SaslHandshake as i16;
const API_SASL_AUTHENTICATE: i16 = ApiKey::SaslAuthenticate as i16;

impl Authenticator {
    pub fn new(lifetime_ms: i64) -> Authenticator {
        Authenticator { state: State::Idle, principal: None, raw: false, lifetime_ms }
    }

    pub fn authenticated(&self) -> bool {
        self.principal.is_some()
    }

    /// Whether `frame` is the authenticator's: everything before authentication, and later the
    /// SASL requests of a re-authentication.
    pub fn wants(&self, frame: &[u8]) -> bool {
        if self.raw || self.principal.is_none() {
            return true;
        }
        peek_header(frame).is_ok_and(|h| h.api_key == API_SASL_HANDSHAKE || h.api_key == API_SASL_AUTHENTICATE)
    }

    pub fn step(&mut self, broker: &Broker, sasl: &SaslSettings, frame: Bytes) -> Step {
        if self.raw {
            return self.raw_token(broker, sasl, &frame);
        }
        let close = |reason: String| Step::Close { reply: None, reason, failed_login: false };
        let Ok(peek) = peek_header(&frame) else {
            return close("malformed request header during SASL authentication".into());
        };
        match ApiKey::try_from(peek.api_key) {
            Ok(ApiKey::ApiVersions) if matches!(self.state, State::Idle) => return Step::Dispatch,
            Ok(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) => {}
            _ => {
                return close(format!("unexpected request (API key {}) during SASL authentication", peek.api_key));
            }
        }
        let (v, corr) = (peek.api_version, peek.correlation_id);
        let req = match decode_any(frame) {
            Ok((_, r)) => r,
            Err(e) => return close(format!("SASL request: {e}")),
        };
        match req {
            AnyRequest::SaslHandshake(r) => {
                let mut resp = SaslHandshakeResponse::default();
                resp.mechanisms = sasl.mechanisms.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
                let encode = |resp: &SaslHandshakeResponse| encode_response(ApiKey::SaslHandshake, v, corr, resp).ok();
                if !matches!(self.state, State::Idle) {
                    resp.error_code = BrokerError::IllegalSaslState(String::new()).code();
                    return Step::Close {
                        reply: encode(&resp),
                        reason: "SaslHandshake in the middle of an authentication".into(),
                        failed_login: false,
                    };
                }
                let Some(&mech) = sasl.mechanisms.iter().find(|m| m.name() == r.mechanism.as_str()) else {
                    resp.error_code = BrokerError::UnsupportedSaslMechanism(String::new()).code();
                    return Step::Close {
                        reply: encode(&resp),
                        reason: format!("SASL mechanism {} is not enabled", r.mechanism.as_str()),
                        failed_login: false,
                    };
                };
                self.state = State::Chosen(mech);
                self.raw = v == 0;
                match encode(&resp) {
                    Some(b) => Step::Reply(b),
                    None => close("cannot encode SaslHandshake".into()),
                }
            }
            AnyRequest::SaslAuthenticate(r) => {
                let encode =
                    |resp: &SaslAuthenticateResponse| encode_response(ApiKey::SaslAuthenticate, v, corr, resp).ok();
                let mut resp = SaslAuthenticateResponse::default();
                if matches!(self.state, State::Idle) {
                    resp.error_code = BrokerError::IllegalSaslState(String::new()).code();
                    resp.error_message = Some(StrBytes::from_static_str("SaslAuthenticate before SaslHandshake"));
                    return Step::Close {
                        reply: encode(&resp),
                        reason: "SaslAuthenticate before SaslHandshake".into(),
                        failed_login: false,
                    };
                }
                match self.token(broker, sasl, &r.auth_bytes) {
                    Ok(Token::Continue(out)) => {
                        resp.auth_bytes = out.into();
                        encode(&resp).map_or_else(|| close("cannot encode SaslAuthenticate".into()), Step::Reply)
                    }
                    Ok(Token::Done(out, principal)) => {
                        resp.auth_bytes = out.into();
                        resp.session_lifetime_ms = self.lifetime_ms.max(0);
                        match encode(&resp) {
                            Some(reply) => Step::Authenticated { reply, principal },
                            None => close("cannot encode SaslAuthenticate".into()),
                        }
                    }
                    Err(e) => {
                        resp.error_code = e.code();
                        resp.error_message = Some(StrBytes::from_string(e.message()));
                        Step::Close { reply: encode(&resp), reason: e.message(), failed_login: true }
                    }
                }
            }
            _ => close("unexpected request during SASL authentication".into()),
        }
    }

    /// A raw token after a v0 handshake (no Kafka header around it, no error channel).
    fn raw_token(&mut self, broker: &Broker, sasl: &SaslSettings, token: &[u8]) -> Step {
        let frame = |out: &[u8]| {
            let mut b = BytesMut::with_capacity(4 + out.len());
            b.put_u32(out.len() as u32);
            b.put_slice(out);
            b
        };
        match self.token(broker, sasl, token) {
            Ok(Token::Continue(out)) => Step::Reply(frame(&out)),
            Ok(Token::Done(out, principal)) => {
                self.raw = false;
                Step::Authenticated { reply: frame(&out), principal }
            }
            Err(e) => Step::Close { reply: None, reason: e.message(), failed_login: true },
        }
    }

    fn token(&mut self, broker: &Broker, sasl: &SaslSettings, token: &[u8]) -> Result<Token, BrokerError> {
        let state = std::mem::replace(&mut self.state, State::Idle);
        let out = match state {
            State::Idle => return Err(BrokerError::IllegalSaslState("no SASL mechanism chosen".into())),
            State::Chosen(SaslMechanism::Plain) => {
                let principal = plain(sasl, token)?;
                Token::Done(Vec::new(), principal)
            }
            State::Chosen(SaslMechanism::Scram(mech)) => {
                let failed = || scram_failed(mech);
                let first = ServerExchange::parse_client_first(token).map_err(|e| {
                    tracing::debug!(error = %e, "SCRAM client-first refused");
                    failed()
                })?;
                let credential = broker
                    .image()
                    .scram
                    .get(&first.user)
                    .and_then(|m| m.get(&mech.id()))
                    .map(|c| Credential {
                        salt: c.salt.clone(),
                        stored_key: c.stored_key.clone(),
                        server_key: c.server_key.clone(),
                        iterations: c.iterations,
                    })
                    .ok_or_else(failed)?;
                let mut exchange = ServerExchange::new(mech);
                let out = exchange.server_first(first, credential).map_err(|_| failed())?;
                self.state = State::Scram(mech, exchange);
                Token::Continue(out)
            }
            State::Scram(mech, mut exchange) => {
                let (out, user) = exchange.client_final(token).map_err(|e| {
                    tracing::debug!(error = %e, "SCRAM client-final refused");
                    scram_failed(mech)
                })?;
                Token::Done(out, Principal::user(user))
            }
        };
        if let Token::Done(_, principal) = &out {
            if let Some(before) = &self.principal
                && before != principal
            {
                return Err(BrokerError::SaslAuthenticationFailed(format!(
                    "Cannot change principals during re-authentication from {before}: {principal}"
                )));
            }
            self.principal = Some(principal.clone());
        }
        Ok(out)
    }
}

fn scram_failed(mech: scram::Mechanism) -> BrokerError {
    BrokerError::SaslAuthenticationFailed(format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        mech.name()
    ))
}

/// PLAIN (RFC 4616): `authzid NUL authcid NUL password`.
fn plain(sasl: &SaslSettings, token: &[u8]) -> Result<Principal, BrokerError> {
    let invalid =
        || BrokerError::SaslAuthenticationFailed("Authentication failed: Invalid username or password".into());
    let parts: Vec<&[u8]> = token.split(|b| *b == 0).collect();
    let [authzid, user, password] = parts.as_slice() else {
        return Err(BrokerError::SaslAuthenticationFailed(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            parts.len()
        )));
    };
    let user = std::str::from_utf8(user).map_err(|_| invalid())?;
    if user.is_empty() {
        return Err(BrokerError::SaslAuthenticationFailed("Authentication failed: username not specified".into()));
    }
    if !authzid.is_empty() && *authzid != user.as_bytes() {
        return Err(BrokerError::SaslAuthenticationFailed(
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    match sasl.plain_users.get(user) {
        Some(expected) if scram::constant_time_eq(expected.expose().as_bytes(), password) => Ok(Principal::user(user)),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use oxbow_protocol::secret::Secret;

    use super::*;

    #[test]
    fn plain_checks_user_password_and_authzid() {
        let sasl = SaslSettings {
            mechanisms: vec![SaslMechanism::Plain],
            plain_users: BTreeMap::from([("alice".to_string(), Secret::new("pw"))]),
        };
        assert_eq!(plain(&sasl, b"\0alice\0pw").unwrap(), Principal::user("alice"));
        assert_eq!(plain(&sasl, b"alice\0alice\0pw").unwrap(), Principal::user("alice"));
        for bad in
            [&b"\0alice\0px"[..], b"\0bob\0pw", b"bob\0alice\0pw", b"\0alice", b"", b"\0\0pw", b"\0al\xffice\0pw"]
        {
            assert!(matches!(plain(&sasl, bad), Err(BrokerError::SaslAuthenticationFailed(_))), "{bad:?}");
        }
    }
}
