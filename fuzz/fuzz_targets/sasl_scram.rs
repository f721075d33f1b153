//! SCRAM server messages from an unauthenticated client: any bytes as client-first, and as
//! client-final after a real server-first, must give an answer or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxbow_protocol::scram::{Credential, Mechanism, ServerExchange};
use oxbow_protocol::secret::Secret;

fuzz_target!(|data: &[u8]| {
    let _ = ServerExchange::parse_client_first(data);
    let mech = if data.first().is_some_and(|b| b & 1 == 1) { Mechanism::Sha512 } else { Mechanism::Sha256 };
    let Ok(credential) = Credential::new(mech, &Secret::new("pw"), 4096) else { return };
    let Ok(first) = ServerExchange::parse_client_first(b"n,,n=user,r=abc") else { return };
    let mut server = ServerExchange::new(mech);
    if server.server_first(first, credential).is_ok() {
        let _ = server.client_final(data);
    }
});
