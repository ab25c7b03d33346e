//! Process logging: one line per event on stderr, as text or as JSON (`--log-format`,
//! `KMP_LOG_FORMAT`), filtered by a tracing `EnvFilter` (`--log`, `RUST_LOG`) that the admin
//! endpoint can replace while the proxy runs (`GET` / `PUT /v1/log-level`, mapped to HTTP by
//! `rest`). [`init`] installs the subscriber once per process and keeps the filter's reload
//! handle in a process-wide cell, because the binary sets logging up before the server exists;
//! a proxy embedded without [`init`] (in-process tests) has no filter to show or change.
//! A filter is at most [`MAX_FILTER_LEN`] bytes and its field values (`[{field=value}]`) match
//! literally, never as regexes: regexes there are compiled into an unbounded DFA, so one short
//! `PUT` could take seconds of CPU and hundreds of MiB.

use std::sync::OnceLock;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// How each log event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (`message` and the
    /// event's fields), `span` (the innermost span with its fields) and `spans` (all of them).
    Json,
}

/// Why the log filter could not be shown or changed.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// The text is not a valid `EnvFilter` (tracing's directive syntax, e.g. `info,kmp=debug`).
    #[error("invalid log filter `{filter}`: {reason}")]
    InvalidFilter { filter: String, reason: String },
    /// Logging was not set up by [`init`] in this process.
    #[error("logging is not set up by this process (the proxy runs embedded), so there is no filter to change")]
    NotInstalled,
    /// A global subscriber was already installed, or the filter could not be swapped.
    #[error("cannot install or change the log subscriber: {0}")]
    Subscriber(String),
}

/// The installed filter's reload handle.
type FilterHandle = reload::Handle<EnvFilter, Registry>;

static FILTER: OnceLock<FilterHandle> = OnceLock::new();

/// Longest filter accepted (bytes).
pub const MAX_FILTER_LEN: usize = 4096;

/// Parses a filter in `EnvFilter` syntax; an empty text is refused (it would silence everything
/// but errors without saying so), and so is one longer than [`MAX_FILTER_LEN`]. Field values in
/// span directives (`[{field=value}]`) match literally (`with_regex(false)`).
pub fn parse_filter(filter: &str) -> Result<EnvFilter, LoggingError> {
    let invalid = |reason: String| LoggingError::InvalidFilter {
        filter: filter.to_owned(),
        reason,
    };
    if filter.trim().is_empty() {
        return Err(invalid("empty filter (give e.g. `info`)".to_owned()));
    }
    if filter.len() > MAX_FILTER_LEN {
        return Err(LoggingError::InvalidFilter {
            filter: format!("{}…", filter.chars().take(64).collect::<String>()),
            reason: format!("{} bytes, longer than the {MAX_FILTER_LEN} allowed", filter.len()),
        });
    }
    EnvFilter::builder().with_regex(false).parse(filter).map_err(|e| invalid(e.to_string()))
}

/// The subscriber writing to `writer` in `format`, and the handle that swaps its filter.
fn build<W>(format: LogFormat, filter: EnvFilter, ansi: bool, writer: W) -> (impl tracing::Subscriber + Send + Sync, FilterHandle)
where
    W: for<'w> MakeWriter<'w> + Clone + Send + Sync + 'static,
{
    let (filter, handle) = reload::Layer::new(filter);
    let text = (format == LogFormat::Text).then(|| tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(writer.clone()));
    let json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_ansi(false)
            .with_writer(writer)
    });
    (tracing_subscriber::registry().with(filter).with(text).with(json), handle)
}

/// Installs the process's subscriber: stderr in `format`, filtered by `RUST_LOG` when set and
/// valid, else by `default_filter` (`--log`). Call once, before anything logs.
pub fn init(format: LogFormat, default_filter: &str) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => parse_filter(&env).or_else(|_| parse_filter(default_filter))?,
        _ => parse_filter(default_filter)?,
    };
    let ansi = format == LogFormat::Text && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (subscriber, handle) = build(format, filter, ansi, std::io::stderr);
    subscriber.try_init().map_err(|e| LoggingError::Subscriber(e.to_string()))?;
    FILTER.set(handle).map_err(|_| LoggingError::Subscriber("logging initialised twice".to_owned()))
}

/// The filter in force, in `EnvFilter` syntax.
pub(crate) fn current() -> Result<String, LoggingError> {
    let handle = FILTER.get().ok_or(LoggingError::NotInstalled)?;
    handle.with_current(ToString::to_string).map_err(|e| LoggingError::Subscriber(e.to_string()))
}

/// Replaces the filter in force with `filter`; returns the new one as the subscriber reads it.
pub(crate) fn set(filter: &str) -> Result<String, LoggingError> {
    let handle = FILTER.get().ok_or(LoggingError::NotInstalled)?;
    swap(handle, filter)
}

fn swap(handle: &FilterHandle, filter: &str) -> Result<String, LoggingError> {
    let parsed = parse_filter(filter)?;
    let before = handle.with_current(ToString::to_string).unwrap_or_default();
    handle.reload(parsed).map_err(|e| LoggingError::Subscriber(e.to_string()))?;
    let now = handle.with_current(ToString::to_string).map_err(|e| LoggingError::Subscriber(e.to_string()))?;
    tracing::warn!(%before, %now, "log filter changed through the admin endpoint");
    Ok(now)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects everything written, for inspection.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Captured;
        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap().lines().map(str::to_owned).collect()
        }
    }

    #[test]
    fn json_lines_carry_level_target_fields_and_the_span() {
        let out = Captured::default();
        let (subscriber, _) = build(LogFormat::Json, parse_filter("info").unwrap(), true, out.clone());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("mirror", name = "dr");
            let _in = span.enter();
            tracing::info!(partition = 3, "copied");
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let v: serde_json::Value = serde_json::from_str(&lines[0]).expect("a JSON object per line");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "kafka_mirror_proxy::logging::tests");
        assert_eq!(v["fields"]["message"], "copied");
        assert_eq!(v["fields"]["partition"], 3);
        assert_eq!(v["span"]["name"], "mirror");
        assert_eq!(v["span"]["name"], v["spans"][0]["name"]);
        assert_eq!(v["span"]["name"], "mirror");
        assert!(v["timestamp"].is_string(), "{v}");
        assert!(!lines[0].contains('\u{1b}'), "no colour codes in JSON: {}", lines[0]);
    }

    #[test]
    fn a_reloaded_filter_lets_debug_events_through_and_back() {
        let out = Captured::default();
        let (subscriber, handle) = build(LogFormat::Text, parse_filter("info").unwrap(), false, out.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!("hidden-1");
            assert_eq!(swap(&handle, "info,kafka_mirror_proxy=debug").unwrap(), "kafka_mirror_proxy=debug,info");
            tracing::debug!("shown");
            swap(&handle, "info").unwrap();
            tracing::debug!("hidden-2");
        });
        let text = out.lines().join("\n");
        assert!(text.contains("shown"), "{text}");
        assert!(!text.contains("hidden-1") && !text.contains("hidden-2"), "{text}");
        assert!(text.contains("log filter changed"), "the change itself is logged: {text}");
    }

    #[test]
    fn an_invalid_or_empty_filter_is_refused_with_the_reason_and_the_old_one_stays() {
        let (_subscriber, handle) = build(LogFormat::Text, parse_filter("warn").unwrap(), false, Captured::default());
        for bad in ["kafka_mirror_engine=loud", "info,[{", " "] {
            let err = swap(&handle, bad).expect_err(bad).to_string();
            assert!(err.contains("invalid log filter"), "{bad}: {err}");
        }
        assert_eq!(handle.with_current(ToString::to_string).unwrap(), "warn");
    }

    #[test]
    fn a_field_value_that_would_be_an_exponential_regex_is_parsed_quickly_as_a_literal() {
        let filter = format!("info,[{{x=(a|b)*a{}}}]", "(a|b)".repeat(16));
        let started = std::time::Instant::now();
        let parsed = parse_filter(&filter);
        assert!(started.elapsed() < std::time::Duration::from_millis(500), "took {:?}", started.elapsed());
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn a_filter_longer_than_the_limit_is_refused_with_its_length() {
        let long = format!("info,{}", "a=debug,".repeat(MAX_FILTER_LEN / 8));
        let err = parse_filter(&long).expect_err("too long").to_string();
        assert!(err.contains("longer than the 4096 allowed"), "{err}");
        assert!(err.len() < 300, "the refusal does not echo the whole filter: {err}");
        assert!(parse_filter(&format!("info,{}", "a=debug,".repeat(100))).is_ok());
    }

    #[test]
    fn without_init_there_is_no_filter_to_change() {
        assert!(matches!(current(), Err(LoggingError::NotInstalled)));
        assert!(matches!(set("debug"), Err(LoggingError::NotInstalled)));
    }
}
