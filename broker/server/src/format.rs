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

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::BrokerConfig;
use crate::metadata::init_log_dirs;

pub const USAGE: &str = "\
oxbow-broker format: prepare this node's storage (Kafka's kafka-storage format)

USAGE:
    oxbow-broker format [--config FILE] [--override KEY=VALUE]... [--cluster-id ID]
                        [--standalone | --initial-controllers ID@HOST:PORT,... | --no-initial-controllers]
                        [--ignore-formatted]

    -t, --cluster-id ID              the cluster's id (default: cluster.id from the config)
    -s, --standalone                 a dynamic quorum whose only first voter is this controller
    -I, --initial-controllers LIST   a dynamic quorum's first voters (ID@HOST:PORT[:DIRECTORY_ID],...)
    -N, --no-initial-controllers     a controller that joins an existing dynamic quorum later
    -g, --ignore-formatted           succeed without change if the storage is already formatted
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
        let opts = |initial| FormatOptions { cluster_id: Some("c-1".into()), initial, ignore_formatted: false };
        let e = format(&c, &opts(None)).expect_err("a dynamic controller must say who the voters are");
        assert!(e.contains("--standalone"), "{e}");
        let done = format(&c, &opts(Some(InitialControllers::Standalone))).expect("format");
        assert!(done.contains("c-1") && done.contains("1@127.0.1.1:9093"), "{done}");
        let props = std::fs::read_to_string(d.path().join("meta.properties")).expect("meta.properties");
        assert!(props.contains("cluster.id=c-1") && props.contains("node.id=1"), "{props}");
        assert!(d.path().join(oxbow_meta::quorum::INITIAL_VOTERS_FILE).exists());
        let again = format(&c, &opts(Some(InitialControllers::Standalone))).expect_err("formatted twice");
        assert!(again.contains("already formatted"), "{again}");
        let ignored = FormatOptions { ignore_formatted: true, ..opts(Some(InitialControllers::Standalone)) };
        assert!(format(&c, &ignored).is_ok());
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let d = tempfile::tempdir().expect("tmp");
        let c = config(d.path(), &[("cluster.id", "a")]);
        let o = FormatOptions { cluster_id: Some("b".into()), initial: None, ignore_formatted: false };
        assert!(format(&c, &o).expect_err("mismatch").contains("differs"));
        let c = config(d.path(), &[]);
        let o =
            FormatOptions { cluster_id: None, initial: Some(InitialControllers::NoInitial), ignore_formatted: false };
        assert!(format(&c, &o).expect_err("no id").contains("cluster id"));
        let broker = config(
            d.path(),
            &[("process.roles", "broker"), ("listeners", "PLAINTEXT://127.0.1.1:9092"), ("node.id", "4")],
        );
        let o = FormatOptions {
            cluster_id: Some("a".into()),
            initial: Some(InitialControllers::Standalone),
            ignore_formatted: false,
        };
        assert!(format(&broker, &o).expect_err("broker").contains("for controllers"));
    }
}
