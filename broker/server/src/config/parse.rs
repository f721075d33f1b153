//! The value syntaxes of `server.properties`: the file itself, listeners, voters, host lists.

use std::collections::BTreeMap;

/// A listener: `NAME://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

pub fn parse_listeners(s: &str) -> Result<Vec<Listener>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, rest) = part.split_once("://").ok_or_else(|| format!("{part}: missing NAME://"))?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| format!("{part}: missing :port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().map_err(|_| format!("{part}: bad port"))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{part}: bad listener name"));
        }
        out.push(Listener { name: name.to_string(), host: host.to_string(), port });
    }
    if out.is_empty() {
        return Err("no listener".into());
    }
    Ok(out)
}

/// Parses `controller.quorum.voters`: `id@host:port,...`.
pub fn parse_voters(s: &str) -> Result<BTreeMap<i32, String>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('@').ok_or_else(|| format!("{part}: expected id@host:port"))?;
        let id: i32 = id.parse().map_err(|_| format!("{part}: bad node id"))?;
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("{part}: missing :port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{part}: expected id@host:port"));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("node id {id} is listed twice"));
        }
    }
    if out.is_empty() {
        return Err("no voter".into());
    }
    Ok(out)
}

/// Parses `controller.quorum.bootstrap.servers`: `host:port,...`.
pub fn parse_host_ports(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => out.push(part.to_string()),
            _ => return Err(format!("{part}: expected host:port")),
        }
    }
    if out.is_empty() {
        return Err("no server".into());
    }
    Ok(out)
}

/// Parses `server.properties` text (Java properties: `key=value` or `key: value`, `#`/`!`
/// comments, trailing `\` continues a line).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']);
        let (k, v) = match split {
            Some(i) => (&entry[..i], &entry[i + 1..]),
            None => (entry.as_str(), ""),
        };
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    out
}
