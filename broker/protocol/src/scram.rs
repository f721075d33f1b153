//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84): the
//! credential a server stores, and both sides of the exchange, as pure functions of the
//! messages (no I/O). The broker runs [`ServerExchange`]; the broker's own client connections
//! and the tests run [`ClientExchange`].
//!
//! Kafka's extensions to the client-first message (`tokenauth=true` for delegation tokens) are
//! parsed and refused: delegation tokens are not served.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

use crate::secret::Secret;

/// Kafka's `ScramMechanism`: its wire id (DescribeUserScramCredentials), name and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

/// Kafka's bounds on a credential's iteration count.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// The id in Alter/DescribeUserScramCredentials (0 is UNKNOWN).
    pub fn id(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_id(id: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.id() == id)
    }

    fn hmac_alg(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2_alg(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest_alg(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        }
    }

    fn len(self) -> usize {
        self.digest_alg().output_len()
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac_alg(), key), data).as_ref().to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest_alg(), data).as_ref().to_vec()
    }

    /// `Hi(password, salt, i)`: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.len()];
        let n = std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2_alg(), n, salt, password, &mut out);
        out
    }
}

/// What a server keeps of a SCRAM password: never the password itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl Credential {
    /// The credential of a salted password (AlterUserScramCredentials sends the salted
    /// password, never the password).
    pub fn from_salted(mech: Mechanism, salted: &[u8], salt: Vec<u8>, iterations: u32) -> Credential {
        let client_key = mech.hmac(salted, b"Client Key");
        Credential {
            salt,
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(salted, b"Server Key"),
            iterations,
        }
    }

    /// A credential for `password` with a fresh random salt.
    pub fn new(mech: Mechanism, password: &Secret, iterations: u32) -> Result<Credential, ScramError> {
        let salt = random_bytes(32)?;
        let salted = mech.salted_password(password.expose().as_bytes(), &salt, iterations);
        Ok(Credential::from_salted(mech, &salted, salt, iterations))
    }
}

/// Why an exchange failed. The messages say what was wrong with the message, never anything
/// about the stored credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("SCRAM extensions are not supported: {0}")]
    Extension(String),
    #[error("invalid nonce")]
    Nonce,
    #[error("invalid proof")]
    Proof,
    #[error("invalid server signature")]
    ServerSignature,
    #[error("the server refused: {0}")]
    ServerError(String),
    #[error("no randomness available")]
    Random,
}

pub fn random_bytes(n: usize) -> Result<Vec<u8>, ScramError> {
    let mut b = vec![0u8; n];
    ring::rand::SystemRandom::new().fill(&mut b).map_err(|_| ScramError::Random)?;
    Ok(b)
}

/// A printable nonce (RFC 5802: any printable ASCII but ','): base64 of random bytes.
fn nonce() -> Result<String, ScramError> {
    Ok(B64.encode(random_bytes(24)?))
}

/// Equality whose time does not depend on where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `saslname` decoding: `=2C` is ',' and `=3D` is '='; any other '=' is malformed.
fn decode_name(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn encode_name(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// The `key=value` attributes of a message, in order.
fn attrs(msg: &str) -> Result<Vec<(char, &str)>, ScramError> {
    msg.split(',')
        .map(|a| {
            let mut chars = a.chars();
            match (chars.next(), chars.next()) {
                (Some(k), Some('=')) if k.is_ascii_alphabetic() => Ok((k, &a[2..])),
                _ => Err(ScramError::Malformed("attribute without key=value")),
            }
        })
        .collect()
}

/// The server side of one exchange.
pub struct ServerExchange {
    mech: Mechanism,
    state: ServerState,
}

enum ServerState {
    Start,
    /// Sent server-first; waiting for client-final.
    First {
        user: String,
        credential: Credential,
        nonce: String,
        gs2: String,
        auth_prefix: String,
    },
    Done,
}

/// What the server's first step needs from its caller: the user whose credential to look up.
pub struct ClientFirst {
    pub user: String,
    gs2: String,
    bare: String,
    client_nonce: String,
}

impl ServerExchange {
    pub fn new(mech: Mechanism) -> ServerExchange {
        ServerExchange { mech, state: ServerState::Start }
    }

    /// Parses the client-first message (`gs2-header client-first-bare`).
    pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, ScramError> {
        let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        // gs2-header: cbind-flag "," [authzid] ","
        let (flag, rest) = msg.split_once(',').ok_or(ScramError::Malformed("no GS2 header"))?;
        if flag != "n" && flag != "y" {
            return Err(ScramError::Malformed("channel binding is not supported"));
        }
        let (authzid, bare) = rest.split_once(',').ok_or(ScramError::Malformed("no GS2 header"))?;
        let gs2 = format!("{flag},{authzid},");
        let a = attrs(bare)?;
        let (user, client_nonce) = match a.as_slice() {
            [('n', u), ('r', r), ext @ ..] => {
                if let Some((k, v)) = ext.first() {
                    return Err(ScramError::Extension(format!("{k}={v}")));
                }
                (decode_name(u)?, r.to_string())
            }
            [('m', _), ..] => return Err(ScramError::Extension("m".into())),
            _ => return Err(ScramError::Malformed("client-first without n= and r=")),
        };
        if let Some(z) = authzid.strip_prefix("a=")
            && decode_name(z)? != user
        {
            return Err(ScramError::Malformed("authorization id differs from the user"));
        }
        if user.is_empty() || client_nonce.is_empty() {
            return Err(ScramError::Malformed("empty user or nonce"));
        }
        Ok(ClientFirst { user, gs2, bare: bare.to_string(), client_nonce })
    }

    /// Answers the client-first message with the user's credential: the server-first message.
    pub fn server_first(&mut self, first: ClientFirst, credential: Credential) -> Result<Vec<u8>, ScramError> {
        let nonce = format!("{}{}", first.client_nonce, nonce()?);
        let server_first = format!("r={nonce},s={},i={}", B64.encode(&credential.salt), credential.iterations);
        let auth_prefix = format!("{},{server_first}", first.bare);
        self.state = ServerState::First { user: first.user, credential, nonce, gs2: first.gs2, auth_prefix };
        Ok(server_first.into_bytes())
    }

    /// Checks the client-final message; on success the server-final message and the user.
    pub fn client_final(&mut self, msg: &[u8]) -> Result<(Vec<u8>, String), ScramError> {
        let ServerState::First { user, credential, nonce, gs2, auth_prefix } =
            std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(ScramError::Malformed("unexpected message"));
        };
        let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = msg.rsplit_once(",p=").ok_or(ScramError::Malformed("no proof"))?;
        let a = attrs(without_proof)?;
        let (cbind, r) = match a.as_slice() {
            [('c', c), ('r', r), ..] => (*c, *r),
            _ => return Err(ScramError::Malformed("client-final without c= and r=")),
        };
        if B64.decode(cbind).ok().as_deref() != Some(gs2.as_bytes()) {
            return Err(ScramError::Malformed("channel binding does not match the GS2 header"));
        }
        // Kafka accepts a nonce that ends with the server's (`endsWith` in its ScramSaslServer):
        // librdkafka before 2.1 sends its own nonce again in front of the server's.
        if !r.ends_with(nonce.as_str()) {
            return Err(ScramError::Nonce);
        }
        let proof = B64.decode(proof).map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let auth = format!("{auth_prefix},{without_proof}");
        let signature = self.mech.hmac(&credential.stored_key, auth.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::Proof);
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&self.mech.hash(&client_key), &credential.stored_key) {
            return Err(ScramError::Proof);
        }
        let server_sig = self.mech.hmac(&credential.server_key, auth.as_bytes());
        Ok((format!("v={}", B64.encode(server_sig)).into_bytes(), user))
    }
}

/// The client side of one exchange.
pub struct ClientExchange {
    mech: Mechanism,
    password: Secret,
    bare: String,
    client_nonce: String,
    server_signature: Option<Vec<u8>>,
}

impl ClientExchange {
    pub fn new(mech: Mechanism, user: &str, password: Secret) -> Result<ClientExchange, ScramError> {
        let client_nonce = nonce()?;
        Ok(ClientExchange::with_nonce(mech, user, password, client_nonce))
    }

    fn with_nonce(mech: Mechanism, user: &str, password: Secret, client_nonce: String) -> ClientExchange {
        let bare = format!("n={},r={client_nonce}", encode_name(user));
        ClientExchange { mech, password, bare, client_nonce, server_signature: None }
    }

    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.bare).into_bytes()
    }

    /// Answers server-first with client-final.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let sf = std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let a = attrs(sf)?;
        let (nonce, salt, iterations) = match a.as_slice() {
            [('e', e), ..] => return Err(ScramError::ServerError(e.to_string())),
            [('r', r), ('s', s), ('i', i), ..] => (*r, *s, *i),
            _ => return Err(ScramError::Malformed("server-first without r=, s= and i=")),
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramError::Nonce);
        }
        let salt = B64.decode(salt).map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u32 = iterations.parse().map_err(|_| ScramError::Malformed("bad iteration count"))?;
        if !(1..=MAX_ITERATIONS * 64).contains(&iterations) {
            return Err(ScramError::Malformed("iteration count out of bounds"));
        }
        let salted = self.mech.salted_password(self.password.expose().as_bytes(), &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{sf},{without_proof}", self.bare);
        let client_key = self.mech.hmac(&salted, b"Client Key");
        let stored_key = self.mech.hash(&client_key);
        let signature = self.mech.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        let server_key = self.mech.hmac(&salted, b"Server Key");
        self.server_signature = Some(self.mech.hmac(&server_key, auth.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks server-final: the server proved it knows the credential.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let sf = std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(e) = sf.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.to_string()));
        }
        let v = sf.strip_prefix("v=").ok_or(ScramError::Malformed("server-final without v="))?;
        let v = B64.decode(v.split(',').next().unwrap_or_default()).map_err(|_| ScramError::ServerSignature)?;
        match &self.server_signature {
            Some(expected) if constant_time_eq(expected, &v) => Ok(()),
            _ => Err(ScramError::ServerSignature),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example.
    #[test]
    fn rfc7677_example() {
        let mech = Mechanism::Sha256;
        let mut c = ClientExchange::with_nonce(mech, "user", Secret::new("pencil"), "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let sf = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let cf = c.client_final(sf).unwrap();
        assert_eq!(
            std::str::from_utf8(&cf).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert!(c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").is_ok());
        assert!(c.verify_server_final(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").is_err());
    }

    /// librdkafka 2.0 (Debian's kcat) repeats its nonce in front of the server's in the final
    /// message, and signs what it sent: Kafka accepts it, and so must we.
    #[test]
    fn a_final_nonce_that_ends_with_the_servers_is_accepted_as_kafka_does() {
        let mech = Mechanism::Sha512;
        let password = "pw";
        let credential = Credential::new(mech, &Secret::new(password), 4096).unwrap();
        let cnonce = "m7^;p<.ZQ}hCF\\tMDU/4=xuV_;p@JHOX";
        let first = format!("n,,n=u,r={cnonce}");
        let mut server = ServerExchange::new(mech);
        let parsed = ServerExchange::parse_client_first(first.as_bytes()).unwrap();
        let sf = String::from_utf8(server.server_first(parsed, credential.clone()).unwrap()).unwrap();
        let snonce = sf.strip_prefix("r=").and_then(|r| r.split(',').next()).unwrap().to_string();
        let sign = |without_proof: &str| {
            let salted = mech.salted_password(password.as_bytes(), &credential.salt, 4096);
            let client_key = mech.hmac(&salted, b"Client Key");
            let auth = format!("n=u,r={cnonce},{sf},{without_proof}");
            let sig = mech.hmac(&mech.hash(&client_key), auth.as_bytes());
            let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(k, s)| k ^ s).collect();
            format!("{without_proof},p={}", B64.encode(proof))
        };
        let doubled = format!("c=biws,r={cnonce}{snonce}");
        assert_eq!(server.client_final(sign(&doubled).as_bytes()).map(|(_, u)| u), Ok("u".to_string()));
        // Anything that does not end with the server's nonce is still refused.
        let mut server = ServerExchange::new(mech);
        let parsed = ServerExchange::parse_client_first(first.as_bytes()).unwrap();
        let _ = server.server_first(parsed, credential.clone()).unwrap();
        let wrong = format!("c=biws,r={cnonce}x");
        assert_eq!(server.client_final(sign(&wrong).as_bytes()), Err(ScramError::Nonce));
    }

    fn exchange(mech: Mechanism, stored: &Secret, tried: &Secret) -> Result<String, ScramError> {
        let credential = Credential::new(mech, stored, 4096).unwrap();
        let mut client = ClientExchange::new(mech, "al,i=ce", tried.clone()).unwrap();
        let first = ServerExchange::parse_client_first(&client.client_first())?;
        assert_eq!(first.user, "al,i=ce");
        let mut server = ServerExchange::new(mech);
        let sf = server.server_first(first, credential)?;
        let cf = client.client_final(&sf)?;
        let (sfinal, user) = server.client_final(&cf)?;
        client.verify_server_final(&sfinal)?;
        Ok(user)
    }

    #[test]
    fn both_sides_agree_and_a_wrong_password_fails() {
        for mech in Mechanism::ALL {
            let pw = Secret::new("alice-secret");
            assert_eq!(exchange(mech, &pw, &pw).unwrap(), "al,i=ce");
            assert_eq!(exchange(mech, &pw, &Secret::new("wrong")), Err(ScramError::Proof));
        }
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for m in [&b""[..], b"n", b"n,,", b"n,,n=", b"p=x,,n=a,r=b", b"n,,n=a=,r=b", b"n,,r=b,n=a", b"\xff\xfe"] {
            assert!(ServerExchange::parse_client_first(m).is_err(), "{m:?}");
        }
        assert!(matches!(
            ServerExchange::parse_client_first(b"n,,n=a,r=b,tokenauth=true"),
            Err(ScramError::Malformed(_)) | Err(ScramError::Extension(_))
        ));
        let mut s = ServerExchange::new(Mechanism::Sha256);
        assert!(s.client_final(b"c=biws,r=x,p=AAAA").is_err());
        let cred = Credential::new(Mechanism::Sha256, &Secret::new("p"), 4096).unwrap();
        let first = ServerExchange::parse_client_first(b"n,,n=a,r=abc").unwrap();
        s.server_first(first, cred).unwrap();
        for m in [&b"c=biws,r=abc"[..], b",p=", b"c=xx,r=abc,p=AAAA"] {
            let mut again = ServerExchange::new(Mechanism::Sha256);
            assert!(again.client_final(m).is_err());
        }
        assert_eq!(s.client_final(b"c=biws,r=abc,p=AAAA"), Err(ScramError::Nonce));
    }
}
