//! Waiting on a condition with a deadline, a seeded generator, and a watch for panics in the
//! proxy's tasks (tokio catches a connection task's panic and only that task ends).

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a test waits for anything that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `check` until it gives a value or `within` has passed (then fails, naming `what`).
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A small seeded generator (SplitMix64): the same seed gives the same bytes on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }

    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[(self.next_u64() % from.len() as u64) as usize]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Panics seen, by the name of the thread they happened on.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static HOOK: OnceLock<()> = OnceLock::new();

/// Watches for panics on the current thread from now on. A `#[tokio::test]` runs the proxy's
/// tasks on the test's own thread (current-thread runtime), so a panic in a connection task —
/// which tokio catches, ending only that task — is recorded under the test's thread name.
pub struct PanicWatch {
    thread: String,
    before: usize,
}

impl PanicWatch {
    pub fn start() -> Self {
        HOOK.get_or_init(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let thread = std::thread::current().name().unwrap_or("?").to_owned();
                PANICS.lock().unwrap_or_else(|e| e.into_inner()).push((thread, info.to_string()));
                previous(info);
            }));
        });
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        let before = Self::on(&thread).len();
        Self { thread, before }
    }

    fn on(thread: &str) -> Vec<String> {
        let all = PANICS.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter(|(t, _)| t == thread).map(|(_, m)| m.clone()).collect()
    }

    /// Fails if anything on this thread panicked since [`PanicWatch::start`].
    pub fn assert_none(&self, when: &str) {
        let seen = Self::on(&self.thread);
        assert!(seen.len() == self.before, "{when}: a task of the proxy panicked: {:?}", &seen[self.before..]);
    }
}
