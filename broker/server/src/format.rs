//! `oxbow-broker format`: prepares a node's storage before its first start, as Kafka's
//! `kafka-storage format` does. Optional for a static quorum (`controller.quorum.voters`) and a
//! single node, which initialise their storage on first start; needed once for the first
//! controllers of a dynamic quorum (`controller.quorum.bootstrap.servers`, KIP-853), whose
//! voters are not in any config file:
//!
//! - `--standalone`: this controller is the quorum's only voter (others join later through
//!   AddRaftVoter or `controller.quorum.auto.join.enable`);
//! - `--initial-controllers id@host:port,...`: these controllers are the first voters (run the
//!   same command on each of them);
//! - `--no-initial-controllers`: this controller joins an existing quorum later.
//!
//! It writes `meta.properties` (cluster id, node id) in every log dir and, for the first two,
//! the initial voters beside the metadata log.
//!
//! `--add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]'` (kafka-storage's syntax; or
//! `iterations`, `salt` and `saltedpassword` in base64 instead of `password`) leaves SCRAM
//! credentials beside the metadata log; the node commits them through the quorum once it has
//! joined (a user that already has a credential of that mechanism keeps it) and removes the file
//! (see [`apply_bootstrap_scram`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use oxbow_meta::records::ScramCredential;
use oxbow_protocol::scram::{self, Mechanism};
use oxbow_protocol::secret::Secret;

use crate::config::BrokerConfig;
use crate::metadata::init_log_dirs;

/// Where `--add-scram` leaves its credentials, beside the metadata log.
pub const BOOTSTRAP_SCRAM_FILE: &str = "bootstrap-scram.json";

pub const USAGE: &str = "\
oxbow-broker format: prepare this node's storage (Kafka's kafka-storage format)

USAGE:
    oxbow-broker format [--config FILE] [--override KEY=VALUE]... [--cluster-id ID]
                        [--standalone | --initial-controllers ID@HOST:PORT,... | --no-initial-controllers]
                        [--ignore-formatted] [--add-scram MECH=[name=N,password=P]]...

    -t, --cluster-id ID              the cluster's id (default: cluster.id from the config)
    -s, --standalone                 a dynamic quorum whose only first voter is this controller
    -I, --initial-controllers LIST   a dynamic quorum's first voters (ID@HOST:PORT[:DIRECTORY_ID],...)
    -N, --no-initial-controllers     a controller that joins an existing dynamic quorum later
    -g, --ignore-formatted           succeed without change if the storage is already formatted
    -S, --add-scram MECH=[name=N,password=P]
                                     a SCRAM credential (SCRAM-SHA-256 or SCRAM-SHA-512) to create
                                     when this node first joins; or [name=N,iterations=I,salt=B64,
                                     saltedpassword=B64]; repeatable
";

/// Who the first voters of a dynamic quorum are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialControllers {
    Standalone,
    List(BTreeMap<i32, String>),
    NoInitial,
}

#[derive(Debug, Default)]
pub struct FormatOptions {
    pub cluster_id: Option<String>,
    pub initial: Option<InitialControllers>,
    pub ignore_formatted: bool,
    /// `--add-scram`: credentials to create.
    pub scram: Vec<ScramCredential>,
}

/// Parses one `--add-scram` value: `MECHANISM=[key=value,...]` with `name` and either
/// `password` (and optional `iterations`) or `iterations`, `salt` and `saltedpassword` (base64).
pub fn parse_add_scram(text: &str) -> Result<ScramCredential, String> {
    let (mech, rest) = text.split_once('=').ok_or("expected MECHANISM=[name=...,password=...]")?;
    let mech = Mechanism::from_name(mech.trim())
        .ok_or_else(|| format!("{mech}: unknown SCRAM mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)"))?;
    let body = rest.trim().strip_prefix('[').and_then(|r| r.strip_suffix(']')).ok_or("expected [key=value,...]")?;
    let mut kv = BTreeMap::new();
    // Split on commas outside double quotes (a quoted password may hold commas).
    let mut parts = vec![String::new()];
    let mut quoted = false;
    for c in body.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                parts.last_mut().into_iter().for_each(|p| p.push(c));
            }
            ',' if !quoted => parts.push(String::new()),
            c => parts.last_mut().into_iter().for_each(|p| p.push(c)),
        }
    }
    for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("{part}: expected key=value"))?;
        let v = v.trim();
        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
        kv.insert(k.trim().to_ascii_lowercase(), v.to_string());
    }
    let name = kv.remove("name").filter(|n| !n.is_empty()).ok_or("name=... is required")?;
    let iterations: u32 = match kv.remove("iterations") {
        Some(i) => i.parse().map_err(|_| format!("iterations={i}: not a number"))?,
        None => scram::MIN_ITERATIONS,
    };
    if !(scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&iterations) {
        return Err(format!(
            "iterations={iterations}: must be in [{}, {}]",
            scram::MIN_ITERATIONS,
            scram::MAX_ITERATIONS
        ));
    }
    let c = match (kv.remove("password"), kv.remove("salt"), kv.remove("saltedpassword")) {
        (Some(p), None, None) => {
            scram::Credential::new(mech, &Secret::new(p), iterations).map_err(|e| e.to_string())?
        }
        (None, Some(salt), Some(salted)) => {
            let salt = B64.decode(salt).map_err(|_| "salt: not base64".to_string())?;
            let salted = B64.decode(salted).map_err(|_| "saltedpassword: not base64".to_string())?;
            scram::Credential::from_salted(mech, &salted, salt, iterations)
        }
        _ => return Err("give password=..., or salt=... and saltedpassword=...".into()),
    };
    if let Some(k) = kv.keys().next() {
        return Err(format!("{k}: unknown key (name, password, iterations, salt, saltedpassword)"));
    }
    Ok(ScramCredential {
        user: name,
        mechanism: mech.id(),
        salt: c.salt,
        stored_key: c.stored_key,
        server_key: c.server_key,
        iterations: c.iterations,
    })
}

/// Commits the credentials `--add-scram` left (if any) through the quorum, then removes the
/// file. Retries until the quorum answers or `stop` is cancelled.
pub async fn apply_bootstrap_scram(
    dir: &std::path::Path,
    quorum: &oxbow_meta::Quorum,
    stop: tokio_util::sync::CancellationToken,
) {
    let path = dir.join(BOOTSTRAP_SCRAM_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else { return };
    let upserts: Vec<ScramCredential> = match serde_json::from_str(&text) {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(file = %path.display(), error = %e, "unreadable bootstrap SCRAM credentials; not applied");
            return;
        }
    };
    let cmd = oxbow_meta::Command::AlterScramCredentials { upserts, deletions: Vec::new(), only_new: true };
    loop {
        match quorum.execute(cmd.clone(), std::time::Duration::from_secs(10)).await {
            Ok(_) => {
                let _ = std::fs::remove_file(&path);
                tracing::info!("bootstrap SCRAM credentials (format --add-scram) committed");
                return;
            }
            Err(e) => tracing::debug!(error = %e, "bootstrap SCRAM credentials not committed yet; retrying"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}

/// Parses `--initial-controllers`: `id@host:port` entries, each optionally followed by Kafka's
/// `:directory-id` (accepted and not used: Oxbow keeps no directory ids).
pub fn parse_initial_controllers(s: &str) -> Result<BTreeMap<i32, String>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('@').ok_or_else(|| format!("{part}: expected ID@HOST:PORT"))?;
        let id: i32 = id.parse().map_err(|_| format!("{part}: bad node id"))?;
        let addr = match addr.rsplit_once(':') {
            Some((hp, tail)) if tail.parse::<u16>().is_err() && hp.rsplit_once(':').is_some() => hp,
            _ => addr,
        };
        match addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return Err(format!("{part}: expected ID@HOST:PORT")),
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("node id {id} is listed twice"));
        }
    }
    if out.is_empty() {
        return Err("no controller listed".into());
    }
    Ok(out)
}

/// Formats the storage `config` describes; returns what was done, for the operator.
pub fn format(config: &BrokerConfig, opts: &FormatOptions) -> Result<String, String> {
    let mut dirs: Vec<PathBuf> = config.log_dirs.clone();
    if !dirs.contains(&config.metadata_log_dir) {
        dirs.push(config.metadata_log_dir.clone());
    }
    if let Some(d) = dirs.iter().find(|d| d.join("meta.properties").exists()) {
        if opts.ignore_formatted {
            return Ok(format!("{} is already formatted; nothing changed (--ignore-formatted)", d.display()));
        }
        return Err(format!(
            "log directory {} is already formatted (use --ignore-formatted to accept formatted storage)",
            d.display()
        ));
    }
    let cluster_id = match (&opts.cluster_id, &config.cluster_id) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!("--cluster-id {a} differs from cluster.id={b} in the configuration"));
        }
        (Some(id), _) | (None, Some(id)) => id.clone(),
        (None, None) => {
            return Err("a cluster id is needed: --cluster-id ID, or cluster.id in the configuration".into());
        }
    };
    let dynamic = !config.quorum_bootstrap.is_empty();
    let voters = match &opts.initial {
        Some(InitialControllers::Standalone | InitialControllers::List(_)) if !config.controller_role => {
            return Err("--standalone and --initial-controllers are for controllers (process.roles)".into());
        }
        Some(InitialControllers::Standalone | InitialControllers::List(_)) if !dynamic => {
            return Err("--standalone and --initial-controllers are for a dynamic quorum (controller.quorum.bootstrap.servers); with controller.quorum.voters the voters are in the configuration".into());
        }
        Some(InitialControllers::Standalone) => {
            let addr = config.controller_advertised.clone().ok_or("this controller has no address to advertise")?;
            Some([(config.node_id, addr)].into_iter().collect())
        }
        Some(InitialControllers::List(l)) => Some(l.clone()),
        Some(InitialControllers::NoInitial) => None,
        None if dynamic && config.controller_role => {
            return Err("controller.quorum.voters is not set on this controller: give one of --standalone, --initial-controllers or --no-initial-controllers".into());
        }
        None => None,
    };
    init_log_dirs(&dirs, config.node_id, Some(&cluster_id), false).map_err(|e| e.to_string())?;
    let mut done = format!("formatted {} with cluster id {cluster_id}", list(&dirs));
    if !opts.scram.is_empty() {
        let path = config.metadata_log_dir.join(BOOTSTRAP_SCRAM_FILE);
        let json = serde_json::to_vec(&opts.scram).map_err(|e| e.to_string())?;
        std::fs::write(&path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let users: Vec<&str> = opts.scram.iter().map(|c| c.user.as_str()).collect();
        done.push_str(&format!("; SCRAM credentials for {}", users.join(", ")));
    }
    if let Some(v) = voters {
        oxbow_meta::write_initial_voters(&config.metadata_log_dir, &v)
            .map_err(|e| format!("cannot write the initial voters in {}: {e}", config.metadata_log_dir.display()))?;
        let v: Vec<String> = v.iter().map(|(id, a)| format!("{id}@{a}")).collect();
        done.push_str(&format!("; initial voters {}", v.join(",")));
    }
    Ok(done)
}

fn list(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, extra: &[(&str, &str)]) -> BrokerConfig {
        let mut m: BTreeMap<String, String> = [
            ("node.id", "1"),
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://127.0.1.1:9093"),
            ("controller.quorum.bootstrap.servers", "127.0.1.1:9093"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        m.insert("log.dirs".into(), dir.display().to_string());
        for (k, v) in extra {
            m.insert(k.to_string(), v.to_string());
        }
        BrokerConfig::from_map(m).expect("config")
    }

    #[test]
    fn initial_controllers_accept_kafkas_directory_ids() {
        let l = parse_initial_controllers("1@a:9093:Vb0ZkGy-T4qkIm5eCmULeg,2@b:9093").expect("parse");
        assert_eq!(l, [(1, "a:9093".to_string()), (2, "b:9093".to_string())].into_iter().collect());
        assert!(parse_initial_controllers("1@a").is_err());
        assert!(parse_initial_controllers("1@a:1,1@b:2").is_err());
    }

    #[test]
    fn standalone_writes_identity_and_voters_once() {
        let d = tempfile::tempdir().expect("tmp");
        let c = config(d.path(), &[]);
        let opts = |initial| FormatOptions {
            cluster_id: Some("c-1".into()),
            initial,
            ignore_formatted: false,
            scram: vec![parse_add_scram("SCRAM-SHA-512=[name=alice,password=\"a,b\"]").expect("scram")],
        };
        let e = format(&c, &opts(None)).expect_err("a dynamic controller must say who the voters are");
        assert!(e.contains("--standalone"), "{e}");
        let done = format(&c, &opts(Some(InitialControllers::Standalone))).expect("format");
        assert!(done.contains("c-1") && done.contains("1@127.0.1.1:9093"), "{done}");
        let props = std::fs::read_to_string(d.path().join("meta.properties")).expect("meta.properties");
        assert!(props.contains("cluster.id=c-1") && props.contains("node.id=1"), "{props}");
        assert!(d.path().join(oxbow_meta::quorum::INITIAL_VOTERS_FILE).exists());
        assert!(d.path().join(BOOTSTRAP_SCRAM_FILE).exists());
        let again = format(&c, &opts(Some(InitialControllers::Standalone))).expect_err("formatted twice");
        assert!(again.contains("already formatted"), "{again}");
        let ignored = FormatOptions { ignore_formatted: true, ..opts(Some(InitialControllers::Standalone)) };
        assert!(format(&c, &ignored).is_ok());
    }

    #[test]
    fn add_scram_takes_kafka_storage_syntax() {
        let c = parse_add_scram("SCRAM-SHA-256=[name=alice,iterations=8192,salt=\"MWtf\",saltedpassword=\"mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE=\"]").expect("salted");
        assert_eq!((c.user.as_str(), c.mechanism, c.iterations, c.salt.as_slice()), ("alice", 1, 8192, &b"1k_"[..]));
        let p = parse_add_scram("SCRAM-SHA-512=[name=bob,password=pw]").expect("password");
        assert_eq!((p.mechanism, p.iterations), (2, 4096));
        for bad in [
            "SCRAM-SHA-1=[name=a,password=b]",
            "SCRAM-SHA-256=[password=b]",
            "SCRAM-SHA-256=[name=a]",
            "SCRAM-SHA-256=[name=a,password=b,iterations=10]",
            "SCRAM-SHA-256=name=a",
            "SCRAM-SHA-256=[name=a,pasword=b]",
        ] {
            assert!(parse_add_scram(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let d = tempfile::tempdir().expect("tmp");
        let c = config(d.path(), &[("cluster.id", "a")]);
        let o = FormatOptions { cluster_id: Some("b".into()), ..Default::default() };
        assert!(format(&c, &o).expect_err("mismatch").contains("differs"));
        let c = config(d.path(), &[]);
        let o = FormatOptions { initial: Some(InitialControllers::NoInitial), ..Default::default() };
        assert!(format(&c, &o).expect_err("no id").contains("cluster id"));
        let broker = config(
            d.path(),
            &[("process.roles", "broker"), ("listeners", "PLAINTEXT://127.0.1.1:9092"), ("node.id", "4")],
        );
        let o = FormatOptions {
            cluster_id: Some("a".into()),
            initial: Some(InitialControllers::Standalone),
            ..Default::default()
        };
        assert!(format(&broker, &o).expect_err("broker").contains("for controllers"));
    }
}
