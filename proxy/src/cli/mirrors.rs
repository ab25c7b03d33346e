//! `kafka-mirror-proxy mirrors`: the KIP-1279 `kafka-cluster-mirrors.sh` flags, speaking the
//! mirror RPCs (`kmp_protocol::mirror_api`) to a proxy's bootstrap address. Human tables by
//! default, `--output json` for scripts. This file owns the flags, the connection and each action;
//! what `--describe` prints is [`describe`]'s (its partition rows are the REST view), table layout
//! [`table`]'s, copy progress (remaining, rate, ETA, the wait's progress line) [`progress`]'s.
//! What the RPCs do is the proxy's.

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

use super::table::table;
use super::{describe, progress};

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
    /// List the mirrors: name, topic count, source cluster id and bootstrap servers.
    #[arg(long)]
    list: bool,
    /// Show every partition of the mirror's topics (offsets, lag, state), each topic's copy
    /// progress (records and ≈bytes remaining, rate, ETA) and the metadata syncs.
    #[arg(long)]
    describe: bool,
    /// Failover: stop mirroring the topics and make them writable.
    #[arg(long)]
    stop: bool,
    /// Pause mirroring --topics (the topics stay read-only; resume continues where it stopped).
    #[arg(long)]
    pause: bool,
    /// Resume mirroring paused --topics.
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
    /// Properties file of the mirror (with --create): bootstrap.servers, mirror.topics.include, ….
    #[arg(long)]
    mirror_config: Option<std::path::PathBuf>,
    /// Comma-separated exclude patterns (with --start).
    #[arg(long)]
    exclude: Option<String>,
    /// With --stop: first wait (at most this many ms) until every partition has zero lag,
    /// showing the remaining records and ETA on stderr (redrawn on a terminal).
    #[arg(long)]
    graceful_timeout_ms: Option<u64>,
    /// With --describe: only FAILED partitions (state failed or retrying).
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
    addr: String,
    next: i32,
}

impl Client {
    async fn call(&mut self, key: i16, body: api::W) -> anyhow::Result<bytes::Bytes> {
        self.next += 1;
        let frame = api::request_frame(key, self.next, "kafka-mirror-proxy-cli", body);
        let resp = self
            .conn
            .round_trip_raw(&frame)
            .await
            .with_context(|| format!("{} gave no answer to the mirror request", self.addr))?;
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
                    ..Default::default()
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
    let mut conn = Connection::connect_with(&a.bootstrap_server, Duration::from_secs(10), "kafka-mirror-proxy-cli", &security)
        .await
        .with_context(|| format!("cannot connect to {}", a.bootstrap_server))?;
    // A plain Kafka broker closes the connection on a mirror request: ask first what it answers.
    let announced = tokio::time::timeout(Duration::from_secs(10), conn.api_versions())
        .await
        .map_err(|_| anyhow::anyhow!("{} did not answer a Kafka ApiVersions request within 10 s", a.bootstrap_server))?
        .with_context(|| {
            format!(
                "{} accepted the connection but did not answer a Kafka ApiVersions request (a kafka-mirror-proxy closes \
                 client connections while it cannot reach its destination cluster: see the proxy's log and /readyz)",
                a.bootstrap_server
            )
        })?;
    if let Some(why) = not_a_mirror_proxy(&a.bootstrap_server, &announced) {
        eprintln!("{why}");
        return Ok(ExitCode::FAILURE);
    }
    let mut c = Client {
        conn,
        addr: a.bootstrap_server.clone(),
        next: 0,
    };
    if a.list {
        let l = c.list().await?;
        if l.error_code != 0 {
            eprintln!("cannot list mirrors: {}", outcome(l.error_code, l.error_message.as_deref()));
            return Ok(ExitCode::FAILURE);
        }
        if json_out {
            let v: Vec<_> = l
                .mirrors
                .iter()
                .map(|m| json!({"mirror": m.mirror_name, "topics": m.topic_names, "topic_count": m.topic_count, "source_bootstrap": m.source_bootstrap}))
                .collect();
            println!("{}", json!({ "mirrors": v }));
        } else {
            let rows: Vec<Vec<String>> = l
                .mirrors
                .iter()
                .map(|m| {
                    vec![
                        m.mirror_name.clone(),
                        m.topic_count.to_string(),
                        if m.source_cluster_id.is_empty() {
                            "-".to_owned()
                        } else {
                            m.source_cluster_id.clone()
                        },
                        m.source_bootstrap.clone(),
                    ]
                })
                .collect();
            print!("{}", table(&["MIRROR", "TOPICS", "SOURCE-CLUSTER-ID", "SOURCE-BOOTSTRAP-SERVER"], &[1], &rows));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.describe {
        let d = c.describe(a.mirror.iter().cloned().collect()).await?;
        if d.error_code != 0 {
            eprintln!("cannot describe mirrors: {}", outcome(d.error_code, d.error_message.as_deref()));
            return Ok(ExitCode::FAILURE);
        }
        let ok = describe::print(&d, json_out, a.failed);
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
            let verb = if a.create { "created" } else { "deleted" };
            let mirror = a.mirror.as_deref().unwrap_or_default();
            if resp.error_code == 0 {
                println!("mirror {mirror}: {verb}");
            } else {
                eprintln!("mirror {mirror}: not {verb}: {}", outcome(resp.error_code, resp.error_message.as_deref()));
            }
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
    let verb = if a.start {
        "started"
    } else if a.stop {
        "stopped"
    } else if a.pause {
        "paused"
    } else {
        "resumed"
    };
    let patterns_kept = include.clone();
    let req = TopicsRequest {
        mirror_name: mirror.clone(),
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
        let results: Vec<(String, i16, Option<String>)> = resp.topics.iter().map(|t| (t.name.clone(), t.error_code, t.error_message.clone())).collect();
        let whole = (resp.error_code != 0).then(|| outcome(resp.error_code, resp.error_message.as_deref()));
        for line in topics_summary(&mirror, verb, &results, whole.as_deref(), &patterns_kept) {
            match line {
                Line::Done(l) => println!("{l}"),
                Line::Refused(l) => eprintln!("{l}"),
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Why `addr` is not a kafka-mirror-proxy, judged by the APIs it announced (`None`: it is one).
fn not_a_mirror_proxy(addr: &str, announced: &[(i16, i16, i16)]) -> Option<String> {
    let has = |key| announced.iter().any(|&(k, _, _)| k == key);
    if api::ANSWERED.iter().all(|&(k, _, _)| has(k)) {
        return None;
    }
    Some(format!(
        "{addr} answered as a Kafka broker but does not support the cluster mirror API: it is not a kafka-mirror-proxy \
         (point --bootstrap-server at the proxy's bootstrap listener)"
    ))
}

/// An error code with its message: `UNKNOWN_CLUSTER_MIRROR: no mirror m`.
fn outcome(code: i16, message: Option<&str>) -> String {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("{}: {m}", errors::name(code)),
        None => errors::name(code).to_owned(),
    }
}

/// A line of a start/stop/pause/resume: what was done goes to stdout, a refusal to stderr.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Done(String),
    Refused(String),
}

/// The lines a start/stop/pause/resume prints: one for the topics it applied to, one per
/// topic it did not (with the reason), and the request's own error if any.
fn topics_summary(mirror: &str, verb: &str, results: &[(String, i16, Option<String>)], whole: Option<&str>, patterns: &[String]) -> Vec<Line> {
    let mut out = Vec::new();
    if let Some(why) = whole {
        out.push(Line::Refused(format!("mirror {mirror}: nothing {verb}: {why}")));
    }
    let done: Vec<&str> = results.iter().filter(|(_, code, _)| *code == 0).map(|(t, _, _)| t.as_str()).collect();
    if !done.is_empty() {
        out.push(Line::Done(format!("mirror {mirror}: {verb} topics {}", done.join(", "))));
    }
    for (t, code, message) in results.iter().filter(|(_, code, _)| *code != 0) {
        out.push(Line::Refused(format!(
            "mirror {mirror}: topic {t} not {verb}: {}",
            outcome(*code, message.as_deref())
        )));
    }
    if whole.is_none() && !patterns.is_empty() {
        out.push(Line::Done(format!(
            "mirror {mirror}: include patterns {} kept; matching topics are {verb} as they appear",
            patterns.join(", ")
        )));
    }
    if out.is_empty() {
        out.push(Line::Done(format!("mirror {mirror}: no topics {verb}")));
    }
    out
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

/// Waits until every partition of `topics` is MIRRORING with zero lag, showing the progress.
async fn wait_caught_up(c: &mut Client, mirror: &str, topics: &[String], limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    let mut shown = progress::WaitProgress::new();
    loop {
        let d = c.describe(vec![mirror.to_owned()]).await?;
        let parts = || {
            d.mirrors
                .iter()
                .flat_map(|m| m.topics.iter())
                .filter(|(t, _)| topics.contains(t))
                .flat_map(|(_, parts)| parts.iter())
        };
        let not_mirroring = parts().filter(|p| p.state_value != "MIRRORING").count();
        if not_mirroring == 0 && parts().all(|p| p.lag == 0) {
            shown.finish(&format!("mirror {mirror}: caught up"));
            return Ok(());
        }
        let line = progress::wait_line(mirror, &progress::per_topic(&d.mirrors, |t| topics.iter().any(|x| x == t)), not_mirroring);
        if Instant::now() >= deadline {
            shown.finish(&line);
            bail!("the topics still lag after {limit:?}; not stopped (run without --graceful-timeout-ms to fail over anyway)");
        }
        shown.show(&line);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successful_mutation_says_what_happened_never_none() {
        let ok = vec![("a".to_owned(), 0, None), ("b".to_owned(), 0, None)];
        let done = |s: &str| Line::Done(s.to_owned());
        let refused = |s: &str| Line::Refused(s.to_owned());
        assert_eq!(topics_summary("m", "paused", &ok, None, &[]), [done("mirror m: paused topics a, b")]);
        let mixed = vec![
            ("a".to_owned(), 0, None),
            ("c".to_owned(), errors::MIRROR_TOPIC_NOT_PAUSED, Some("c is not paused".to_owned())),
        ];
        assert_eq!(
            topics_summary("m", "resumed", &mixed, None, &[]),
            [
                done("mirror m: resumed topics a"),
                refused("mirror m: topic c not resumed: MIRROR_TOPIC_NOT_PAUSED: c is not paused")
            ]
        );
        assert_eq!(
            topics_summary("m", "started", &[], None, &["t.*".to_owned()]),
            [done("mirror m: include patterns t.* kept; matching topics are started as they appear")]
        );
        let whole = outcome(errors::UNKNOWN_CLUSTER_MIRROR, Some("no mirror m"));
        assert_eq!(
            topics_summary("m", "paused", &[], Some(&whole), &[]),
            [refused("mirror m: nothing paused: UNKNOWN_CLUSTER_MIRROR: no mirror m")]
        );
        for line in topics_summary("m", "paused", &ok, None, &[]) {
            assert!(!format!("{line:?}").contains("NONE"), "{line:?}");
        }
    }

    #[test]
    fn a_plain_broker_is_told_apart_from_a_proxy() {
        let broker = vec![(0, 0, 11), (3, 0, 12), (18, 0, 4)];
        let why = not_a_mirror_proxy("localhost:9092", &broker).expect("a broker is not a proxy");
        assert!(
            why.contains("localhost:9092") && why.contains("not a kafka-mirror-proxy") && why.contains("mirror API"),
            "{why}"
        );
        let mut proxy = broker.clone();
        proxy.extend_from_slice(api::ANSWERED);
        assert_eq!(not_a_mirror_proxy("localhost:9192", &proxy), None);
    }
}
