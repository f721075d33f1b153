//! A certificate's subject as the RFC 2253 string Java's `X500Principal.getName()` gives, which
//! is what Kafka's `ssl.principal.mapping.rules` match: attributes of the last RDN first, the
//! keywords CN, C, L, ST, O, OU, STREET, DC and UID, any other type as `oid=#hex`.
//!
//! A minimal DER reader (certificates were already verified by rustls): every length is checked
//! against what is left, so a malformed certificate gives `None`, never a panic.

/// One DER element: tag, content, and what follows it.
fn tlv(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = data.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The subject of a DER certificate in RFC 2253 form.
pub fn subject(cert: &[u8]) -> Option<String> {
    let (0x30, cert, _) = tlv(cert)? else { return None };
    let (0x30, mut tbs, _) = tlv(cert)? else { return None };
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, rest) = tlv(tbs)?;
    if tag == 0xa0 {
        tbs = rest;
        let (_, _, rest) = tlv(tbs)?;
        tbs = rest;
    } else {
        tbs = rest;
    }
    for _ in 0..3 {
        let (_, _, rest) = tlv(tbs)?;
        tbs = rest;
    }
    let (0x30, mut name, _) = tlv(tbs)? else { return None };
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (0x31, mut set, rest) = tlv(name)? else { return None };
        name = rest;
        let mut atvs = Vec::new();
        while !set.is_empty() {
            let (0x30, atv, rest) = tlv(set)? else { return None };
            set = rest;
            let (0x06, oid, value) = tlv(atv)? else { return None };
            let (vtag, vcontent, _) = tlv(value)?;
            let oid = oid_string(oid)?;
            atvs.push(match (keyword(&oid), text(vtag, vcontent)) {
                (Some(k), Some(t)) => format!("{k}={}", escape(&t)),
                _ => format!("{oid}=#{}", hex(&value[..value.len() - tlv(value)?.2.len()])),
            });
        }
        rdns.push(atvs.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn oid_string(der: &[u8]) -> Option<String> {
    let (&first, rest) = der.split_first()?;
    let mut parts = vec![u64::from(first / 40).min(2), 0];
    parts[1] = u64::from(first) - parts[0] * 40;
    let mut acc: u64 = 0;
    for &b in rest {
        acc = acc.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            parts.push(acc);
            acc = 0;
        }
    }
    Some(parts.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
}

fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// The text of a directory string (UTF8String, PrintableString, IA5String, T61String taken as
/// Latin-1, BMPString).
fn text(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(content.to_vec()).ok(),
        0x14 => Some(content.iter().map(|&b| char::from(b)).collect()),
        0x1e if content.len().is_multiple_of(2) => {
            let units: Vec<u16> = content.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253 escaping.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(atvs: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let mut inner = Vec::new();
        for (oid, tag, v) in atvs {
            let mut atv = vec![0x06, oid.len() as u8];
            atv.extend_from_slice(oid);
            atv.extend_from_slice(&[*tag, v.len() as u8]);
            atv.extend_from_slice(v);
            inner.extend_from_slice(&[0x30, atv.len() as u8]);
            inner.extend(atv);
        }
        let mut out = vec![0x31, inner.len() as u8];
        out.extend(inner);
        out
    }

    fn wrap(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 128 {
            out.push(content.len() as u8);
        } else {
            out.extend_from_slice(&[0x82, (content.len() >> 8) as u8, content.len() as u8]);
        }
        out.extend_from_slice(content);
        out
    }

    #[test]
    fn subject_in_rfc2253_order_with_escapes_and_unknown_types() {
        const CN: &[u8] = &[0x55, 0x04, 0x03];
        const O: &[u8] = &[0x55, 0x04, 0x0a];
        const C: &[u8] = &[0x55, 0x04, 0x06];
        const EMAIL: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];
        let mut name = Vec::new();
        name.extend(set(&[(C, 0x13, b"US")]));
        name.extend(set(&[(O, 0x0c, b"Oxbow, Inc.")]));
        name.extend(set(&[(CN, 0x0c, b"alice"), (EMAIL, 0x16, b"a@x")]));
        let name = wrap(0x30, &name);
        let mut tbs = Vec::new();
        tbs.extend(wrap(0xa0, &[0x02, 0x01, 0x02]));
        tbs.extend(wrap(0x02, &[0x01]));
        tbs.extend(wrap(0x30, &[]));
        tbs.extend(wrap(0x30, &[]));
        tbs.extend(wrap(0x30, &[]));
        tbs.extend(name);
        let cert = wrap(0x30, &wrap(0x30, &tbs));
        assert_eq!(subject(&cert).as_deref(), Some("CN=alice+1.2.840.113549.1.9.1=#1603614078,O=Oxbow\\, Inc.,C=US"));
        for cut in 0..cert.len() {
            let _ = subject(&cert[..cut]);
        }
    }
}
