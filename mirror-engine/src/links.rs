//! Shared connections of one cluster client, one per broker and lane: every partition task of
//! an engine reaches a broker through the same few connections instead of opening its own.
//! Lanes keep requests that wait long (a Fetch long poll, an acks=all Produce) from holding up
//! short ones, since a broker answers a connection's requests one at a time.
//!
//! What is sent on a lane belongs to its users (`fetch_session`, `produce_mux`, `cluster`).

use std::collections::HashMap;
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

type Slot = Arc<AsyncMutex<Option<SharedConnection>>>;

/// Open shared connections by `(broker address, lane)`.
#[derive(Debug, Default)]
pub struct Links {
    slots: Mutex<HashMap<(String, Lane), Slot>>,
}

impl Links {
    /// The live connection for `(addr, lane)`, or a new one from `connect` (one caller connects;
    /// the others wait for it instead of opening their own).
    pub async fn get<F, Fut, E>(&self, addr: &str, lane: Lane, connect: F) -> Result<SharedConnection, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<SharedConnection, E>>,
    {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.entry((addr.to_owned(), lane)).or_default().clone()
        };
        let mut held = slot.lock().await;
        if let Some(c) = held.as_ref()
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        *held = None;
        let c = connect().await?;
        *held = Some(c.clone());
        Ok(c)
    }

    /// Forgets `(addr, lane)` if it still holds `conn` (after an error on it), so the next user
    /// connects anew.
    pub fn discard(&self, conn: &SharedConnection, lane: Lane) {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(conn.addr().to_owned(), lane))
            .cloned();
        if let Some(slot) = slot
            && let Ok(mut held) = slot.try_lock()
            && held.as_ref().is_some_and(|c| c.same(conn))
        {
            *held = None;
        }
    }

    /// Connections open now (for metrics and tests).
    pub fn open(&self) -> usize {
        let slots: Vec<Slot> = self.slots.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        slots
            .iter()
            .filter(|s| s.try_lock().map(|h| h.as_ref().is_some_and(|c| !c.is_closed())).unwrap_or(true))
            .count()
    }
}

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
