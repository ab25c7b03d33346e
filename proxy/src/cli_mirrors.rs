//! `kafka-mirror-proxy mirrors`: the KIP-1279 `kafka-cluster-mirrors.sh` flags, speaking the
//! mirror RPCs (`kmp_protocol::mirror_api`) to a proxy's bootstrap address. Human tables by
//! default, `--output json` for scripts. What the RPCs do is the proxy's.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use kmp_protocol::client::Connection;
use kmp_protocol::mirror_api::{
    self as api, CreateRequest, DeleteRequest, DescribeRequest, DescribeResponse, ListResponse, SimpleResponse, TopicsRequest, TopicsResponse, errors,
};
use kmp_protocol::security::ClientSecurity;
use serde_json::json;

/// Flags of `mirrors` (one action).
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["list", "describe", "stop", "pause", "resume", "create", "start", "delete"])))]
pub struct MirrorsArgs {
    /// The proxy's bootstrap address (host:port).
    #[arg(long)]
    bootstrap_server: String,
    /// The mirror (required for stop/pause/resume; optional for list/describe).
    #[arg(long)]
    mirror: Option<String>,
    /// Comma-separated topic names or regexes (matched against the mirror's topics).
    #[arg(long)]
    topics: Option<String>,
    #[arg(long)]
    list: bool,
    #[arg(long)]
    describe: bool,
    /// Failover: stop mirroring the topics and make them writable.
    #[arg(long)]
    stop: bool,
    #[arg(long)]
    pause: bool,
    #[arg(long)]
    resume: bool,
    /// Create a mirror from --mirror-config (properties: bootstrap.servers, mirror.topics.include, …).
    #[arg(long)]
    create: bool,
    /// Start mirroring --topics (names; anything else is an include pattern kept for auto-discovery).
    #[arg(long)]
    start: bool,
    /// Delete a mirror whose topics are all stopped.
    #[arg(long)]
    delete: bool,
    /// Properties file of the mirror (with --create).
    #[arg(long)]
    mirror_config: Option<std::path::PathBuf>,
    /// Comma-separated exclude patterns (with --start).
    #[arg(long)]
    exclude: Option<String>,
    /// With --stop: first wait (at most this many ms) until every partition has zero lag.
    #[arg(long)]
    graceful_timeout_ms: Option<u64>,
    /// With --describe: only FAILED partitions.
    #[arg(long)]
    failed: bool,
    /// `table` (default) or `json`.
    #[arg(long, default_value = "table")]
    output: String,
    /// Properties file of the connection to the proxy, Kafka client names (`security.protocol`,
    /// `ssl.truststore.location`, `ssl.keystore.location`, `sasl.mechanism`, `sasl.jaas.config` or
    /// `sasl.username`/`sasl.password`; secrets also as `file:`/`env:` references).
    #[arg(long)]
    command_config: Option<std::path::PathBuf>,
}

struct Client {
    conn: Connection,
    next: i32,
}

impl Client {
    async fn call(&mut self, key: i16, body: api::W) -> anyhow::Result<bytes::Bytes> {
        self.next += 1;
        let frame = api::request_frame(key, self.next, "kafka-mirror-proxy-cli", body);
        let resp = self.conn.round_trip_raw(&frame).await.context("no answer from the proxy")?;
        Ok(resp)
    }

    async fn list(&mut self) -> anyhow::Result<ListResponse> {
        let mut w = api::W::default();
        w.bool(true).tags();
        let f = self.call(api::LIST_CLUSTER_MIRRORS, w).await?;
        let (_, mut r) = api::read_response(&f)?;
        Ok(ListResponse::decode(&mut r)?)
    }

    async fn describe(&mut self, names: Vec<String>) -> anyhow::Result<DescribeResponse> {
        let f = self
            .call(
                api::DESCRIBE_CLUSTER_MIRRORS,
                DescribeRequest {
                    mirror_names: names,
                    include_authorized_operations: false,
                }
                .encode(),
            )
            .await?;
        let (_, mut r) = api::read_response(&f)?;
        Ok(DescribeResponse::decode(&mut r)?)
    }
}

/// Runs one `mirrors` action; exit 0 when every topic/mirror succeeded, 1 otherwise, 2 on usage.
#[allow(clippy::print_stdout, clippy::print_stderr, reason = "CLI output")]
pub async fn run(a: MirrorsArgs) -> anyhow::Result<ExitCode> {
    let json_out = match a.output.as_str() {
        "json" => true,
        "table" => false,
        other => bail!("--output must be table or json, not {other}"),
    };
    let security = match &a.command_config {
        None => ClientSecurity::plaintext(),
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read --command-config {}", path.display()))?;
            let props = kmp_config::ClientProperties(properties(&text).into_iter().map(|(k, v)| (k, v.unwrap_or_default())).collect());
            let parsed = props
                .parse(kmp_config::PropsOrigin::ConfigFile)
                .map_err(|e| anyhow::anyhow!("--command-config: {}", e.join("; ")))?;
            ClientSecurity::build(&parsed).map_err(|e| anyhow::anyhow!("--command-config: {e}"))?
        }
    };
    let conn = Connection::connect_with(&a.bootstrap_server, Duration::from_secs(10), "kafka-mirror-proxy-cli", &security).await?;
    let mut c = Client { conn, next: 0 };
    if a.list {
        let l = c.list().await?;
        if json_out {
            let v: Vec<_> = l
                .mirrors
                .iter()
                .map(|m| json!({"mirror": m.mirror_name, "topics": m.topic_names, "topic_count": m.topic_count, "source_bootstrap": m.source_bootstrap}))
                .collect();
            println!("{}", json!({ "mirrors": v }));
        } else {
            println!("{:<20} {:>6}  {:<20} SOURCE-BOOTSTRAP-SERVER", "MIRROR", "TOPICS", "SOURCE-CLUSTER-ID");
            for m in &l.mirrors {
                println!(
                    "{:<20} {:>6}  {:<20} {}",
                    m.mirror_name,
                    m.topic_count,
                    if m.source_cluster_id.is_empty() { "-" } else { &m.source_cluster_id },
                    m.source_bootstrap
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.describe {
        let d = c.describe(a.mirror.iter().cloned().collect()).await?;
        let mut ok = true;
        let mut rows = Vec::new();
        for m in &d.mirrors {
            if m.error_code != 0 {
                ok = false;
                eprintln!("{}: {}", m.mirror_name, errors::name(m.error_code));
            }
            for (topic, parts) in &m.topics {
                for p in parts.iter().filter(|p| !a.failed || p.state_value == "FAILED") {
                    rows.push((m.mirror_name.clone(), topic.clone(), p.clone()));
                }
            }
        }
        if json_out {
            let v: Vec<_> = rows
                .iter()
                .map(|(m, t, p)| json!({"mirror": m, "topic": t, "partition": p.partition_index, "source_offset": p.source_offset,
                    "destination_offset": p.destination_offset, "lag": p.lag, "state": p.state_value, "retry_attempt": p.retry_attempt, "error": p.error_message}))
                .collect();
            let sync: serde_json::Map<String, serde_json::Value> = d
                .mirrors
                .iter()
                .map(|m| {
                    let kinds: serde_json::Map<String, serde_json::Value> = m
                        .sync
                        .iter()
                        .map(|e| {
                            let v = json!({"interval_ms": e.interval_ms, "runs": e.runs, "last_run_ms": e.last_run_ms, "last_success_ms": e.last_success_ms,
                                "synced": e.synced, "skipped_active_groups": e.skipped_active, "applied_total": e.applied_total, "errors_total": e.errors_total, "last_error": e.last_error});
                            (e.kind.clone(), v)
                        })
                        .collect();
                    (m.mirror_name.clone(), serde_json::Value::Object(kinds))
                })
                .collect();
            println!("{}", json!({ "partitions": v, "sync": sync }));
        } else {
            println!(
                "{:<16} {:<32} {:>9} {:>13} {:>18} {:>8} STATE",
                "MIRROR", "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG"
            );
            for (m, t, p) in &rows {
                let extra = p.error_message.as_deref().map(|e| format!("  {e}")).unwrap_or_default();
                println!(
                    "{:<16} {:<32} {:>9} {:>13} {:>18} {:>8} {}{extra}",
                    m, t, p.partition_index, p.source_offset, p.destination_offset, p.lag, p.state_value
                );
            }
            print_sync(&d.mirrors);
        }
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if a.create || a.delete {
        let Some(mirror) = a.mirror.clone() else {
            eprintln!("--create and --delete need --mirror");
            return Ok(ExitCode::from(2));
        };
        let (key, body) = if a.create {
            let Some(path) = &a.mirror_config else {
                eprintln!("--create needs --mirror-config <properties file>");
                return Ok(ExitCode::from(2));
            };
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let configs = properties(&text);
            (api::CREATE_CLUSTER_MIRROR, CreateRequest { mirror_name: mirror, configs }.encode())
        } else {
            (
                api::DELETE_CLUSTER_MIRROR,
                DeleteRequest {
                    mirror_name: mirror,
                    state_validation_offset: -1,
                }
                .encode(),
            )
        };
        let f = c.call(key, body).await?;
        let (_, mut r) = api::read_response(&f)?;
        let resp = SimpleResponse::decode(&mut r)?;
        if json_out {
            println!(
                "{}",
                json!({"error_code": resp.error_code, "error": errors::name(resp.error_code), "message": resp.error_message})
            );
        } else {
            println!(
                "{}{}",
                errors::name(resp.error_code),
                resp.error_message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            );
        }
        return Ok(if resp.error_code == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let (Some(mirror), Some(patterns)) = (a.mirror.clone(), a.topics.clone()) else {
        eprintln!("--start, --stop, --pause and --resume need --mirror and --topics");
        return Ok(ExitCode::from(2));
    };
    // --start and --stop send patterns to the proxy (saved for discovery / matched there);
    // --pause and --resume expand them here.
    let (topics, include) = if a.start || (a.stop && a.graceful_timeout_ms.is_none()) {
        split_names(&patterns)
    } else {
        (match_topics(&mut c, &mirror, &patterns).await?, Vec::new())
    };
    if let (true, Some(ms)) = (a.stop, a.graceful_timeout_ms) {
        wait_caught_up(&mut c, &mirror, &topics, Duration::from_millis(ms)).await?;
    }
    let key = if a.start {
        api::START_MIRROR_TOPICS
    } else if a.stop {
        api::STOP_MIRROR_TOPICS
    } else if a.pause {
        api::PAUSE_MIRROR_TOPICS
    } else {
        api::RESUME_MIRROR_TOPICS
    };
    let exclude: Vec<String> = a
        .exclude
        .as_deref()
        .map(|e| e.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    let req = TopicsRequest {
        mirror_name: mirror,
        topics,
        patterns: include,
        exclude_patterns: exclude,
        state_validation_offset: -1,
    };
    let f = c.call(key, req.encode(key)).await?;
    let (_, mut r) = api::read_response(&f)?;
    let resp = TopicsResponse::decode(&mut r)?;
    let ok = resp.error_code == 0 && resp.topics.iter().all(|t| t.error_code == 0);
    if json_out {
        let v: Vec<_> = resp
            .topics
            .iter()
            .map(|t| json!({"topic": t.name, "error_code": t.error_code, "error": errors::name(t.error_code), "message": t.error_message}))
            .collect();
        println!("{}", json!({ "error_code": resp.error_code, "results": v }));
    } else {
        for t in &resp.topics {
            println!(
                "{:<32} {}{}",
                t.name,
                errors::name(t.error_code),
                t.error_message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            );
        }
        if resp.topics.is_empty() && resp.error_code != 0 {
            println!("{}: {}", errors::name(resp.error_code), resp.error_message.unwrap_or_default());
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Splits `--topics` of --start into plain topic names and include patterns (anything with a
/// character a topic name cannot have).
fn split_names(csv: &str) -> (Vec<String>, Vec<String>) {
    let legal = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || "_-".contains(c));
    let items: Vec<&str> = csv.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    (
        items.iter().filter(|s| legal(s)).map(|s| (*s).to_owned()).collect(),
        items.iter().filter(|s| !legal(s)).map(|s| (*s).to_owned()).collect(),
    )
}

/// `key=value` lines of a Java properties file (`#`/`!` comments, blank lines skipped).
fn properties(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once(['=', ':']).map(|(k, v)| (k.trim().to_owned(), Some(v.trim().to_owned()))))
        .collect()
}

/// Topic names of `mirror` matching any of the comma-separated names or regexes (whole name);
/// a plain name that matches nothing is passed through so the proxy reports it.
async fn match_topics(c: &mut Client, mirror: &str, patterns: &str) -> anyhow::Result<Vec<String>> {
    let l = c.list().await?;
    let known: Vec<String> = l
        .mirrors
        .into_iter()
        .find(|m| m.mirror_name == mirror)
        .map(|m| m.topic_names)
        .unwrap_or_default();
    let mut out = Vec::new();
    for p in patterns.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let re = kmp_config::topic_pattern(p).with_context(|| format!("`{p}` is not a valid regular expression"))?;
        let hits: Vec<&String> = known.iter().filter(|t| re.is_match(t)).collect();
        if hits.is_empty() {
            out.push(p.to_owned());
        }
        for h in hits {
            if !out.contains(h) {
                out.push(h.clone());
            }
        }
    }
    Ok(out)
}

async fn wait_caught_up(c: &mut Client, mirror: &str, topics: &[String], limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let d = c.describe(vec![mirror.to_owned()]).await?;
        let lagging = d
            .mirrors
            .iter()
            .flat_map(|m| m.topics.iter())
            .filter(|(t, _)| topics.contains(t))
            .flat_map(|(_, parts)| parts.iter())
            .any(|p| p.lag != 0 || p.state_value != "MIRRORING");
        if !lagging {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the topics still lag after {limit:?}; not stopped (run without --graceful-timeout-ms to fail over anyway)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The metadata sync table under `--describe` (one row per mirror and sync kind).
#[allow(clippy::print_stdout, reason = "CLI output")]
fn print_sync(mirrors: &[api::DescribedMirror]) {
    if mirrors.iter().all(|m| m.sync.is_empty()) {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let ago = |ms: i64| {
        if ms <= 0 {
            "never".to_owned()
        } else {
            format!("{:.1}s ago", (now - ms) as f64 / 1000.0)
        }
    };
    println!();
    println!(
        "{:<16} {:<14} {:>11} {:>12} {:>12} {:>7} {:>14} {:>8} {:>6} LAST-ERROR",
        "MIRROR", "SYNC", "INTERVAL-MS", "LAST-RUN", "LAST-SUCCESS", "SYNCED", "SKIPPED-ACTIVE", "APPLIED", "ERRORS"
    );
    for m in mirrors {
        for e in &m.sync {
            println!(
                "{:<16} {:<14} {:>11} {:>12} {:>12} {:>7} {:>14} {:>8} {:>6} {}",
                m.mirror_name,
                e.kind,
                e.interval_ms,
                ago(e.last_run_ms),
                ago(e.last_success_ms),
                e.synced,
                e.skipped_active,
                e.applied_total,
                e.errors_total,
                e.last_error.as_deref().unwrap_or("-")
            );
        }
    }
}
