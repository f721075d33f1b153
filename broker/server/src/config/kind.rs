//! What a config key accepts ([`Kind`]): the check of a value, the words `--help` and
//! `docs/configuration.md` use for it, and Kafka's DescribeConfigs type.

use super::parse::{parse_host_ports, parse_listeners, parse_voters};

/// What a key accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// An integer in `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    Bool,
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
    /// A comma-separated list of `NAME://host:port` listeners.
    Listeners,
    /// A comma-separated list of paths.
    Paths,
    /// A decimal number in `[0, 1]`.
    Ratio,
    /// `ip:port` (an IP literal), or empty for "off".
    SocketAddr,
    /// `id@host:port,...` (controller.quorum.voters).
    Voters,
    /// `host:port,...` (controller.quorum.bootstrap.servers).
    HostPorts,
    /// A comma-separated list of names.
    Names,
    /// A non-empty word of ASCII letters, digits, '-' and '_' (cluster.id).
    Word,
    /// A label value (ASCII letters, digits, '-', '_', '.'), or empty for none (broker.rack:
    /// a zone or region name).
    Label,
    /// `*`, or a comma-separated list of `partition:broker` (possibly empty): the replicas a
    /// replication throttle applies to (`leader.replication.throttled.replicas`, ...).
    ThrottledReplicas,
    /// Any text (checked where it is used: security settings, file paths).
    Text,
    /// A password or key: any text, never shown (DescribeConfigs answers null, as Kafka).
    Password,
}

impl Kind {
    /// Never shown: DescribeConfigs answers null with `is_sensitive`, logs never print it.
    pub fn is_sensitive(&self) -> bool {
        matches!(self, Kind::Password)
    }

    pub fn accepted(&self) -> String {
        match self {
            Kind::Int { min, max } if *max == i64::MAX => format!("an integer >= {min}"),
            Kind::Int { min, max } if *max == i64::from(i32::MAX) => format!("an integer in [{min}, {max}] (2^31-1)"),
            Kind::Int { min, max } => format!("an integer in [{min}, {max}]"),
            Kind::Bool => "true or false".into(),
            Kind::Choice(c) => format!("one of: {}", c.join(", ")),
            Kind::Listeners => {
                "a comma-separated list of NAME://host:port (host may be empty or an IP literal; port 0..65535)".into()
            }
            Kind::Paths => "a comma-separated list of directories".into(),
            Kind::Ratio => "a decimal number in [0, 1]".into(),
            Kind::SocketAddr => "ip:port with an IP literal (e.g. 0.0.0.0:8080), or empty to disable".into(),
            Kind::Voters => "a comma-separated list of id@host:port (e.g. 1@127.0.1.1:9093,2@127.0.1.2:9093)".into(),
            Kind::HostPorts => "a comma-separated list of host:port (e.g. 127.0.1.1:9093,127.0.1.2:9093)".into(),
            Kind::Names => "a comma-separated list of listener names".into(),
            Kind::Word => "a non-empty string of ASCII letters, digits, '-' and '_'".into(),
            Kind::Label => "ASCII letters, digits, '-', '_' and '.', or empty for none".into(),
            Kind::Text => "text".into(),
            Kind::Password => "a password (text)".into(),
            Kind::ThrottledReplicas => "the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...".into(),
        }
    }

    /// Kafka's DescribeConfigs config type: BOOLEAN=1, STRING=2, INT=3, LONG=5, LIST=7.
    pub fn config_type(&self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Int { max, .. } if *max <= i64::from(i32::MAX) => 3,
            Kind::Int { .. } => 5,
            Kind::Choice(_) | Kind::SocketAddr | Kind::Word | Kind::Label | Kind::Text => 2,
            Kind::Password => 9,
            Kind::Listeners | Kind::Paths | Kind::Voters | Kind::HostPorts | Kind::Names | Kind::ThrottledReplicas => 7,
            Kind::Ratio => 6,
        }
    }

    pub fn check(&self, value: &str) -> bool {
        match self {
            Kind::Int { min, max } => value.trim().parse::<i64>().is_ok_and(|v| v >= *min && v <= *max),
            Kind::Bool => matches!(value.trim(), "true" | "false"),
            Kind::Choice(c) => c.contains(&value.trim()),
            Kind::Listeners => parse_listeners(value).is_ok(),
            Kind::Paths => value.split(',').all(|p| !p.trim().is_empty()),
            Kind::Ratio => value.trim().parse::<f64>().is_ok_and(|v| (0.0..=1.0).contains(&v)),
            Kind::SocketAddr => value.trim().is_empty() || value.trim().parse::<std::net::SocketAddr>().is_ok(),
            Kind::Voters => parse_voters(value).is_ok(),
            Kind::HostPorts => parse_host_ports(value).is_ok(),
            Kind::Names => value.split(',').all(|p| !p.trim().is_empty()),
            Kind::Word => {
                !value.trim().is_empty()
                    && value.trim().bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            }
            Kind::Label => value.trim().bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')),
            Kind::Text | Kind::Password => true,
            Kind::ThrottledReplicas => {
                let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
                value.trim() == "*"
                    || value
                        .split(',')
                        .map(str::trim)
                        .all(|e| e.is_empty() || e.split_once(':').is_some_and(|(p, b)| digits(p) && digits(b)))
            }
        }
    }
}
