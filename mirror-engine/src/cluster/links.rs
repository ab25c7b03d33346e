//! Shared connections of one cluster client, one per broker and lane: every partition task of
//! an engine reaches a broker through the same few connections instead of opening its own.
//! Lanes keep requests that wait long (a Fetch long poll, an acks=all Produce) from holding up
//! short ones, since a broker answers a connection's requests one at a time.
//!
//! `Slots`, the single-flight keyed cache behind the connections, also holds the client's topic
//! layouts. What is sent on a lane belongs to its users (`copy::fetch::session`, `copy::produce::mux`,
//! `cluster`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use kmp_protocol::shared_client::SharedConnection;
use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::mpsc;

/// What a connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Metadata, ListOffsets, OffsetForLeaderEpoch, InitProducerId, DeleteRecords.
    Control,
    /// One of the source fetch sessions of a broker (long polls).
    Fetch(u8),
    /// One of the produce lanes of a destination broker (multi-partition Produce requests).
    Produce(u8),
}

/// Values filled once per key by one caller while the others wait for it (single flight), and
/// filled again when `fresh` says the held one is stale: the engine's shared connections (stale
/// once closed) and its topic layouts (stale after a while).
pub struct Slots<K, V> {
    slots: Mutex<HashMap<K, Arc<AsyncMutex<Option<V>>>>>,
}

impl<K, V> Default for Slots<K, V> {
    fn default() -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K, V> std::fmt::Debug for Slots<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots").finish_non_exhaustive()
    }
}

/// Keys kept before the ones nobody is waiting on are dropped.
const MAX_SLOTS: usize = 10_000;

impl<K: Eq + Hash, V: Clone> Slots<K, V> {
    /// The value held for `key` if `fresh` accepts it, else a new one from `fill` (kept for the
    /// next caller).
    pub async fn get<F, Fut, E>(&self, key: K, fresh: impl Fn(&V) -> bool, fill: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<V, E>>,
    {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            if slots.len() > MAX_SLOTS {
                slots.retain(|_, s| Arc::strong_count(s) > 1);
            }
            slots.entry(key).or_default().clone()
        };
        let mut held = slot.lock().await;
        if let Some(v) = held.as_ref()
            && fresh(v)
        {
            return Ok(v.clone());
        }
        *held = None;
        let v = fill().await?;
        *held = Some(v.clone());
        Ok(v)
    }
}

/// Open shared connections by `(broker address, lane)`; a closed one is replaced on next use.
pub type Links = Slots<(String, Lane), SharedConnection>;

/// The task per `(broker address, index)` that serves a lane (a fetch session, a produce lane),
/// started on first use and again after it ended.
pub struct Tasks<T> {
    senders: Mutex<HashMap<(String, u8), mpsc::UnboundedSender<T>>>,
}

impl<T> Default for Tasks<T> {
    fn default() -> Self {
        Self {
            senders: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Tasks<T> {
    /// Hands `item` to the task of `(addr, index)`, starting it with `start` (which spawns the
    /// task and returns its sender) if there is none or it ended. Gives the item back if even a
    /// fresh task would not take it.
    pub fn send(&self, addr: &str, index: u8, mut item: T, start: impl Fn() -> mpsc::UnboundedSender<T>) -> Result<(), T> {
        let key = (addr.to_owned(), index);
        for _ in 0..2 {
            let sender = {
                let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
                match senders.get(&key) {
                    Some(s) if !s.is_closed() => s.clone(),
                    _ => {
                        let s = start();
                        senders.insert(key.clone(), s.clone());
                        s
                    }
                }
            };
            match sender.send(item) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(back)) => {
                    item = back;
                    self.senders.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                }
            }
        }
        Err(item)
    }
}
