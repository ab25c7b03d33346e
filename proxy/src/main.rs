//! The `kafka-mirror-proxy` binary: command-line parsing, installing logging (`logging`),
//! binding the configured listeners and running the server until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kmp_config::{Overrides, ProcessEnv};
use tokio::net::TcpListener;

mod cli;

#[derive(Parser)]
#[command(name = "kafka-mirror-proxy", version, about = "Kafka protocol proxy with KIP-1279 cluster mirroring")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Run {
        /// TOML config file (optional: flags and KMP_* variables suffice).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Destination cluster bootstrap servers, comma-separated host:port.
        #[arg(long)]
        upstream: Option<String>,
        /// Bootstrap listener host:port for clients.
        #[arg(long)]
        listen: Option<String>,
        /// Host written into broker addresses handed to clients.
        #[arg(long)]
        advertised_host: Option<String>,
        /// First per-broker port: broker N is exposed on node_port_base + N.
        #[arg(long)]
        node_port_base: Option<u16>,
        /// Admin HTTP endpoint host:port (/healthz, /readyz, /metrics).
        #[arg(long)]
        admin_listen: Option<String>,
        /// Log filter (tracing EnvFilter syntax), also read from RUST_LOG; changeable while
        /// running through `PUT /v1/log-level` on the admin endpoint.
        #[arg(long, default_value = "info")]
        log: String,
        /// Log line format: `text` or `json` (one JSON object per line).
        #[arg(long, value_enum, env = "KMP_LOG_FORMAT", default_value = "text")]
        log_format: kafka_mirror_proxy::logging::LogFormat,
    },
    /// Print the audited API version table; with --check-upstream, compare it with a broker's
    /// ApiVersions and exit 1 if the broker announces anything unaudited.
    Versions {
        /// A broker's host:port to compare the audited table with.
        #[arg(long)]
        check_upstream: Option<String>,
    },
    /// Manage cluster mirrors through a proxy (KIP-1279 `kafka-cluster-mirrors.sh` flags).
    Mirrors(cli::mirrors::MirrorsArgs),
    /// Print a `[[user]]` entry for `listener.auth.credentials_file` (salted SCRAM credentials;
    /// the password is read from an environment variable or a file, never from the command line).
    ScramCredential {
        /// User name clients log in with.
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN logins are checked against either).
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// Environment variable holding the password.
        #[arg(long, conflicts_with = "password_file")]
        password_env: Option<String>,
        /// File holding the password (one trailing newline is ignored).
        #[arg(long)]
        password_file: Option<PathBuf>,
        /// PBKDF2 iterations (4096..=16384, Kafka's bounds).
        #[arg(long, default_value_t = kmp_protocol::security::scram::DEFAULT_ITERATIONS)]
        iterations: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", said_once(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes joined by ": ", each said once: a cause whose text the message
/// already holds (an I/O error wrapped by one that quotes it) is left out, and a cause that
/// repeats the message and adds to it (a context "cannot connect to X" over the client's
/// "cannot connect to X: refused") stands in its place.
fn said_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if out.contains(&cause) {
            continue;
        }
        if cause.starts_with(&out) {
            out = cause;
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&cause);
    }
    out
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run {
            config,
            upstream,
            listen,
            advertised_host,
            node_port_base,
            admin_listen,
            log,
            log_format,
        } => {
            if let Err(e) = kafka_mirror_proxy::logging::init(log_format, &log) {
                eprintln!("{e}");
                return Ok(ExitCode::from(2));
            }
            let flags = Overrides {
                upstream,
                listen,
                advertised_host,
                node_port_base,
                admin_listen,
            };
            let config = match kmp_config::load(config.as_deref(), &ProcessEnv, &flags) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(ExitCode::from(2));
                }
            };
            if config.limits.raise_fd_limit {
                log_fd_limit(raise_fd_limit());
            }
            let mut bootstrap = Vec::new();
            for l in config.client_listeners() {
                bootstrap.push(
                    kafka_mirror_proxy::net::listen::bind(&l.listen, config.listener.listen_backlog)
                        .with_context(|| format!("cannot bind the bootstrap listener {} (listener {})", l.listen, l.name))?,
                );
            }
            let admin = match &config.admin.listen {
                Some(a) => Some(TcpListener::bind(a).await.with_context(|| format!("cannot bind the admin listener {a}"))?),
                None => None,
            };
            kafka_mirror_proxy::serve(config, kafka_mirror_proxy::Listeners { bootstrap, admin }, shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Versions { check_upstream } => cli::versions::run(check_upstream).await,
        Command::Mirrors(args) => cli::mirrors::run(args).await,
        Command::ScramCredential {
            user,
            mechanism,
            password_env,
            password_file,
            iterations,
        } => scram_credential(&user, &mechanism, password_env, password_file, iterations),
    }
}

#[allow(clippy::print_stdout, reason = "CLI output")]
fn scram_credential(user: &str, mechanism: &str, env: Option<String>, file: Option<PathBuf>, iterations: u32) -> anyhow::Result<ExitCode> {
    let secret = match (env, file) {
        (Some(e), None) => kmp_config::SecretRef::Env(e),
        (None, Some(f)) => kmp_config::SecretRef::File(f),
        _ => anyhow::bail!("give the password with --password-env NAME or --password-file PATH"),
    };
    let password = secret.resolve().map_err(anyhow::Error::msg)?;
    let mechanism = kmp_config::SaslMechanism::parse(mechanism).ok_or_else(|| anyhow::anyhow!("unknown mechanism `{mechanism}`"))?;
    let entry = kmp_protocol::security::credentials::entry(user, mechanism, &password, iterations).map_err(anyhow::Error::msg)?;
    print!("{entry}");
    Ok(ExitCode::SUCCESS)
}

/// What raising the soft open-file limit did.
#[derive(Debug, PartialEq, Eq)]
enum FdLimit {
    /// Raised from the first value to the second.
    Raised(u64, u64),
    /// Already as high as allowed (the value; `None` = unlimited).
    Unchanged(Option<u64>),
    /// The hard limit is higher but no raise was accepted: (soft, hard, last error).
    Failed(u64, Option<u64>, String),
}

/// Raises the soft open-file limit (RLIMIT_NOFILE) to the hard limit (`limits.raise_fd_limit`):
/// every client connection holds two descriptors (client and broker), and the usual soft limit
/// of 1024 would cap the proxy near 500 clients. Where the hard limit is unlimited or above what
/// the kernel accepts (macOS caps at `OPEN_MAX`), smaller steps are tried.
#[cfg(unix)]
fn raise_fd_limit() -> FdLimit {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let Some(soft) = current else { return FdLimit::Unchanged(None) };
    if maximum.is_some_and(|hard| soft >= hard) {
        return FdLimit::Unchanged(Some(soft));
    }
    let mut last_error = None;
    let candidates = [maximum, Some(1 << 20), Some(65_536), Some(10_240)];
    for want in candidates.into_iter().flatten() {
        if want <= soft || maximum.is_some_and(|hard| want > hard) {
            continue;
        }
        match setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum }) {
            Ok(()) => return FdLimit::Raised(soft, want),
            Err(e) => last_error = Some(e.to_string()),
        }
    }
    match last_error {
        Some(e) => FdLimit::Failed(soft, maximum, e),
        // Unlimited hard limit and the soft one already past every step.
        None => FdLimit::Unchanged(Some(soft)),
    }
}

#[cfg(not(unix))]
fn raise_fd_limit() -> FdLimit {
    FdLimit::Unchanged(None)
}

fn log_fd_limit(outcome: FdLimit) {
    match outcome {
        FdLimit::Raised(from, to) => tracing::info!(from, to, "raised the soft open-file limit"),
        FdLimit::Unchanged(Some(limit)) => tracing::info!(limit, "open-file limit already at the hard limit"),
        FdLimit::Unchanged(None) => tracing::info!("open-file limit is unlimited"),
        FdLimit::Failed(soft, hard, error) => {
            tracing::warn!(soft, ?hard, %error, "cannot raise the soft open-file limit; each client connection needs two descriptors")
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_says_each_cause_once() {
        let io = std::io::Error::other("broker closed the connection");
        let wrapped = anyhow::Error::new(io)
            .context("i/o error: broker closed the connection")
            .context("X did not answer");
        assert_eq!(said_once(&wrapped), "X did not answer: i/o error: broker closed the connection");
        let repeated = anyhow::anyhow!("cannot connect to X: refused").context("cannot connect to X");
        assert_eq!(said_once(&repeated), "cannot connect to X: refused");
        let plain = anyhow::anyhow!("no cause").context("outer");
        assert_eq!(said_once(&plain), "outer: no cause");
    }

    #[cfg(unix)]
    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{Resource, getrlimit};
        let outcome = raise_fd_limit();
        let after = getrlimit(Resource::Nofile);
        match outcome {
            FdLimit::Raised(from, to) => {
                assert!(to > from);
                assert_eq!(after.current, Some(to));
            }
            FdLimit::Unchanged(limit) => assert_eq!(after.current, limit),
            FdLimit::Failed(..) => panic!("raising up to the hard limit is always allowed: {outcome:?}"),
        }
        if let Some(hard) = after.maximum {
            assert!(hard > 1 << 20 || after.current == Some(hard), "soft {:?} below hard {hard}", after.current);
        }
        assert_eq!(raise_fd_limit(), FdLimit::Unchanged(after.current), "a second call changes nothing");
    }
}
