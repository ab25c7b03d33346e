//! What the mirror engine's, the state follower's and the engine election's families on
//! `/metrics` are made of: prometheus-client collectors on the proxy's registry (registered by
//! `admin`), so `/metrics` is one encode of that registry. Each collector reads its numbers at scrape time (the engine
//! owns them) and hands them to the encoder, which writes the text and escapes label values
//! (mirror names come from a config file). What each family is lives beside its subject:
//! `mirror_metrics`, `follower_status`, `election_status`. Names there get the registry's `kmp_`
//! prefix, and help texts the closing period the registry gives its own metrics.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::TypedMetric;

/// Writes one scrape's families of a `T` read at scrape time.
type Encode<T> = fn(&T, &mut DescriptorEncoder<'_>) -> fmt::Result;

/// A collector of the families of `T`: at each scrape `read` says what there is (nothing, e.g.
/// no election on this instance) and `encode` writes it.
pub(crate) struct Scraped<T> {
    what: &'static str,
    read: Box<dyn Fn() -> Option<T> + Send + Sync>,
    encode: Encode<T>,
}

impl<T> Scraped<T> {
    pub(crate) fn new(what: &'static str, read: impl Fn() -> Option<T> + Send + Sync + 'static, encode: Encode<T>) -> Self {
        Self {
            what,
            read: Box::new(read),
            encode,
        }
    }
}

impl<T> fmt::Debug for Scraped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scraped").field("what", &self.what).finish_non_exhaustive()
    }
}

impl<T: 'static> Collector for Scraped<T> {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        match (self.read)() {
            Some(value) => (self.encode)(&value, &mut encoder),
            None => Ok(()),
        }
    }
}

/// One metric without labels, e.g. `single(e, "mirror_buffer_bytes", "…", ConstGauge::new(n))`.
pub(crate) fn single<M: EncodeMetric + TypedMetric>(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, metric: M) -> fmt::Result {
    metric.encode(encoder.encode_descriptor(name, &format!("{help}."), None, M::TYPE)?)
}

/// One family: its help and type, then a sample per `(labels, metric)` row (none: the family is
/// listed without samples).
pub(crate) fn family<L: EncodeLabelSet, M: EncodeMetric + TypedMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, &format!("{help}."), None, M::TYPE)?;
    for (labels, metric) in rows {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The text `encode` writes for `value` on a `kmp_` registry of its own (tests of each family).
#[cfg(test)]
pub(crate) fn text_of<T: Clone + Send + Sync + 'static>(value: &T, encode: Encode<T>) -> String {
    let mut registry = prometheus_client::registry::Registry::with_prefix("kmp");
    let value = value.clone();
    registry.register_collector(Box::new(Scraped::new("test", move || Some(value.clone()), encode)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode_registry(&mut out, &registry).expect("encoding to a String");
    out
}

#[cfg(test)]
mod tests;
