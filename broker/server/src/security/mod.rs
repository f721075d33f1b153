//! Who a connection is and how it proved it: listener security at run time (TLS, SASL), the
//! [`Session`] every request is handled under, and principals.
//!
//! The session reaches every handler through `handlers::Ctx`; `handlers::dispatch` is the one
//! place where an authorizer checks it before a request runs.

pub mod authorizer;
pub mod dn;
pub mod principal;
pub mod sasl;
pub mod tls;

use std::sync::Arc;

pub use principal::Principal;

pub use crate::config::security::SecurityProtocol;
use crate::config::security::{ListenerSecurity, SaslSettings};

/// The identity requests of one connection run under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub principal: Principal,
    /// The listener the connection came in on (Metadata answers with its endpoints).
    pub listener: Arc<str>,
    pub protocol: SecurityProtocol,
}

/// A client listener's security, ready to serve connections.
#[derive(Debug)]
pub struct ListenerRuntime {
    pub name: Arc<str>,
    pub protocol: SecurityProtocol,
    pub tls: Option<tls::ServerTls>,
    pub sasl: Option<SaslSettings>,
}

impl ListenerRuntime {
    /// Loads the listener's certificates; the error names the key of what failed.
    pub fn new(name: &str, sec: &ListenerSecurity) -> Result<ListenerRuntime, String> {
        let tls = sec.tls.clone().map(tls::ServerTls::new).transpose()?;
        Ok(ListenerRuntime { name: name.into(), protocol: sec.protocol, tls, sasl: sec.sasl.clone() })
    }

    /// The session of a connection before (or without) SASL: ANONYMOUS, or the client
    /// certificate's principal on an SSL listener.
    pub fn session(&self, principal: Principal) -> Session {
        Session { principal, listener: self.name.clone(), protocol: self.protocol }
    }
}
