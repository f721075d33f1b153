//! `oxbow-broker [--config server.properties] [--override key=value]...`
//! `oxbow-broker format [...]` (see `oxbow_server::format`)

use std::path::PathBuf;
use std::process::ExitCode;

use oxbow_server::config::BrokerConfig;
use oxbow_server::docs::{config_docs, help_text};
use oxbow_server::format::{
    FormatOptions, InitialControllers, USAGE as FORMAT_USAGE, parse_add_scram, parse_initial_controllers,
};
use tracing_subscriber::EnvFilter;

struct Args {
    config: Option<PathBuf>,
    overrides: Vec<String>,
    /// `format` subcommand and its options.
    format: Option<FormatOptions>,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = std::env::args().skip(1).peekable();
    let mut out = Args { config: None, overrides: Vec::new(), format: None };
    if args.peek().map(String::as_str) == Some("format") {
        args.next();
        out.format = Some(FormatOptions::default());
    }
    while let Some(a) = args.next() {
        if let Some(f) = out.format.as_mut() {
            let mut initial = |i: InitialControllers| match f.initial {
                Some(_) => {
                    Err("give only one of --standalone, --initial-controllers, --no-initial-controllers".to_string())
                }
                None => {
                    f.initial = Some(i);
                    Ok(())
                }
            };
            match a.as_str() {
                "-h" | "--help" => {
                    print!("{FORMAT_USAGE}");
                    return Ok(None);
                }
                "-s" | "--standalone" => {
                    initial(InitialControllers::Standalone)?;
                    continue;
                }
                "-N" | "--no-initial-controllers" => {
                    initial(InitialControllers::NoInitial)?;
                    continue;
                }
                "-I" | "--initial-controllers" => {
                    let list = args.next().ok_or("--initial-controllers needs ID@HOST:PORT,...")?;
                    let list = parse_initial_controllers(&list).map_err(|e| format!("--initial-controllers: {e}"))?;
                    initial(InitialControllers::List(list))?;
                    continue;
                }
                "-t" | "--cluster-id" => {
                    f.cluster_id = Some(args.next().ok_or("--cluster-id needs an id")?);
                    continue;
                }
                "-g" | "--ignore-formatted" => {
                    f.ignore_formatted = true;
                    continue;
                }
                "-S" | "--add-scram" => {
                    let v = args.next().ok_or("--add-scram needs MECHANISM=[name=...,password=...]")?;
                    f.scram.push(parse_add_scram(&v).map_err(|e| format!("--add-scram: {e}"))?);
                    continue;
                }
                _ => {}
            }
        }
        match a.as_str() {
            "-h" | "--help" => {
                print!("{}", help_text());
                return Ok(None);
            }
            "--print-config-docs" => {
                print!("{}", config_docs());
                return Ok(None);
            }
            "--config" => out.config = Some(args.next().ok_or("--config needs a file")?.into()),
            "--override" => out.overrides.push(args.next().ok_or("--override needs key=value")?),
            s if s.starts_with("--override=") => out.overrides.push(s["--override=".len()..].to_string()),
            s if s.starts_with("--config=") => out.config = Some(s["--config=".len()..].into()),
            // Like kafka-server-start.sh: a bare argument is the properties file.
            s if !s.starts_with('-') && out.config.is_none() => out.config = Some(s.into()),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(Some(out))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!("SIGTERM received"),
                _ = i.recv() => tracing::info!("SIGINT received"),
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// mimalloc, not glibc's malloc (docs/benchmarks.md, "The allocator"); a build with
/// `--no-default-features` keeps glibc's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator's settings, applied among the executable's constructors: before `main` and
/// before Rust's runtime makes its first allocation, which reserves mimalloc's first arena
/// (see `oxbow_server::malloc`).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static TUNE_ALLOCATOR: extern "C" fn() = oxbow_server::malloc::tune;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn")))
        .with_writer(std::io::stderr)
        // Colours only on a terminal: container runtimes and files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxbow-broker: {e}");
            return ExitCode::from(2);
        }
    };
    let config = match BrokerConfig::load(args.config.as_deref(), &args.overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("oxbow-broker: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    for k in &config.unknown {
        tracing::warn!(key = %k, "unknown configuration key ignored");
    }
    if let Some(opts) = &args.format {
        return match oxbow_server::format::format(&config, opts) {
            Ok(done) => {
                println!("{done}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("oxbow-broker format: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some((before, after)) = oxbow_server::fd_limit::raise() {
        tracing::info!(before, after, "open-files limit (RLIMIT_NOFILE) raised to its hard limit");
    }
    // Metric export (OTLP/HTTP) starts before the runtime: its client blocks, on its own thread.
    let exporter = match oxbow_server::telemetry::Exporter::from_env(config.node_id) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("oxbow-broker: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oxbow-broker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let metrics = exporter.as_ref();
    let result = rt.block_on(async move {
        if !config.broker_role {
            let node = oxbow_server::ControllerNode::bind(config).await?;
            if let Some(e) = metrics {
                e.observe_controller(node.quorum());
            }
            tracing::info!(cluster_id = %node.cluster_id, node_id = node.quorum().node_id(), health = ?node.health_addr(), "oxbow controller started (process.roles=controller)");
            return node.run(shutdown_signal()).await;
        }
        let server = oxbow_server::Server::bind(config).await?;
        if let Some(e) = metrics {
            e.observe(server.broker());
        }
        let addr = server.local_addr()?;
        let adv: Vec<String> = server
            .broker()
            .advertised()
            .iter()
            .map(|l| format!("{}://{}:{}", l.name, l.host, l.port))
            .collect();
        tracing::info!(listen = %addr, advertised = %adv.join(","), cluster_id = %server.broker().cluster_id, node_id = server.broker().node_id(), health = ?server.health_addr(), "oxbow-broker started");
        server.run(shutdown_signal()).await
    });
    drop(rt);
    if let Some(e) = exporter {
        e.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxbow-broker: {e:#}");
            ExitCode::FAILURE
        }
    }
}
