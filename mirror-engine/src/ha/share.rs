//! Shared mirror work (`engine.share_work`): which member of the election group copies which
//! mirror partition in one generation, and the barrier a state change waits behind.
//!
//! Every generation the group leader hands out the generation's members in one sorted list; a
//! member's place in it is its index. Partition `p` of `topic` belongs to index
//! `(hash(topic) + p) mod members`, so a topic's partitions spread round-robin from a
//! topic-dependent start and every member computes the same owner without asking anyone.
//! A member copies its partitions only while its [`Share`]'s lease holds: the lease is extended
//! by heartbeats the coordinator acknowledges as healthy (never by a "rebalance in progress"
//! answer), and the member gives its share up before it rejoins. So once a later generation's
//! SyncGroup has been answered, no member of an earlier generation writes any more — the
//! barrier that pause, resume and stop (failover) wait behind. [`Part`] says which part of the
//! work an engine term does (everything, everything but copying, or one share). Who decides
//! the roster is `election`'s; what a member runs with its share is `auto`'s and `worker`'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::lease::Lease;

/// One member's part of the mirror work in one generation.
#[derive(Debug, Clone)]
pub struct Share {
    /// The group generation this share belongs to.
    pub generation: i32,
    /// This member's place in the generation's sorted member list.
    pub index: usize,
    /// How many members the generation has.
    pub count: usize,
    /// When this member last sent a JoinGroup carrying a requested change ([`Reassign`]):
    /// such a JoinGroup changes the member's metadata, so the coordinator forms a new
    /// generation only after it arrived; this generation was formed no earlier.
    pub join_sent: Instant,
    /// Writing this share's partitions is allowed only while it holds.
    pub lease: Lease,
    /// Who runs this share's partitions, and when they stopped (see [`Release`]).
    pub release: Arc<Release>,
}

impl Share {
    /// Whether partition `partition` of `topic` is this member's to copy.
    pub fn owns(&self, topic: &str, partition: i32) -> bool {
        owner_index(topic, partition, self.count) == Some(self.index)
    }
}

/// The hand-over of one share between the election (which gives it up before rejoining) and
/// whoever runs its partitions: a share given up before anyone took it up is never run; one
/// taken up is given up only once its partitions have stopped.
#[derive(Debug, Default)]
pub struct Release {
    state: std::sync::Mutex<Claim>,
    done: Notify,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Claim {
    #[default]
    Open,
    Running,
    Closed,
}

impl Release {
    fn state(&self) -> std::sync::MutexGuard<'_, Claim> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the share up: false if it was given up already (then nothing may run it).
    pub fn begin(&self) -> bool {
        let mut s = self.state();
        if *s == Claim::Open {
            *s = Claim::Running;
            return true;
        }
        false
    }

    /// The share's partitions have stopped.
    pub fn end(&self) {
        *self.state() = Claim::Closed;
        self.done.notify_waiters();
    }

    /// Gives the share up: at once if nobody took it up, else once its partitions stopped or
    /// `limit` passed (false).
    pub async fn close(&self, limit: Duration) -> bool {
        let ended = self.done.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        {
            let mut s = self.state();
            match *s {
                Claim::Open | Claim::Closed => {
                    *s = Claim::Closed;
                    return true;
                }
                Claim::Running => {}
            }
        }
        tokio::time::timeout(limit, ended).await.is_ok()
    }
}

/// The index of the member that copies partition `partition` of `topic` among `count` members
/// (`None` without members or for a negative partition).
pub fn owner_index(topic: &str, partition: i32, count: usize) -> Option<usize> {
    if count == 0 || partition < 0 {
        return None;
    }
    // FNV-1a: stable across builds and platforms, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let count = count as u64;
    Some(((h % count + partition as u64 % count) % count) as usize)
}

/// A request that the group form a new generation, from the active instance to its own
/// election: `pending` until a JoinGroup carries it (with changed member metadata, so the
/// coordinator rebalances even when this member is not the group leader).
#[derive(Debug, Default)]
pub struct Reassign {
    pending: AtomicBool,
    wake: Notify,
}

impl Reassign {
    /// Asks for a new generation.
    pub fn request(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Whether a request waits for a JoinGroup.
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Takes the waiting request (the JoinGroup about to be sent carries it).
    pub fn take(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    /// Resolves after a request (possibly one already taken).
    pub async fn requested(&self) {
        self.wake.notified().await;
    }
}

/// What a state change waits behind in `engine.share_work` mode: a generation this member
/// joined with a JoinGroup sent after the change was recorded. The coordinator formed it only
/// after that JoinGroup arrived, and every member loads the state only once it is formed, so
/// every member of it loaded the change; no member of an earlier one writes any more (each gave
/// up its share before rejoining, or was dropped after its lease ended).
#[derive(Clone)]
pub(crate) struct Barrier {
    /// The election's current share of this instance (`None` between generations).
    pub(crate) share: watch::Receiver<Option<Share>>,
    /// Makes this instance rejoin the group, which starts a new generation for everyone.
    pub(crate) rejoin: Arc<Reassign>,
}

impl Barrier {
    /// Waits (at most `limit`) until a generation this member joined after `recorded` is in
    /// place; false if none came in time. `recorded` must lie between the change's write and
    /// the [`Barrier::reassign`] it caused (see `StateStore::put_topic_recorded`).
    pub(crate) async fn pass(&self, recorded: Instant, limit: Duration) -> bool {
        let mut share = self.share.clone();
        let later = share.wait_for(|s| s.as_ref().is_some_and(|s| s.join_sent >= recorded));
        matches!(tokio::time::timeout(limit, later).await, Ok(Ok(_)))
    }

    /// Asks for a new generation without waiting for it (a state change workers must load).
    pub(crate) fn reassign(&self) {
        self.rejoin.request();
    }

    /// Asks for a new generation and waits (at most `limit`) until it is in place: for a state
    /// change recorded earlier whose barrier did not pass (a retried pause or stop).
    pub(crate) async fn again(&self, limit: Duration) -> bool {
        let asked = Instant::now();
        self.reassign();
        self.pass(asked, limit).await
    }
}

/// What one engine term does of the mirror work.
#[derive(Clone)]
pub enum Part {
    /// Everything, writing while the lease holds (the active instance without `share_work`).
    Whole(Lease),
    /// Everything but copying (the active instance with `share_work`): topic creation,
    /// management, sync loops, state; a state change the members must load starts a new
    /// generation, and pause or stop waits behind it (`share`).
    Manage(Lease, Barrier),
    /// Copying only the partitions of one generation's share (every instance with
    /// `share_work`), as the state topic recorded them when the generation began.
    Work(Share),
}

impl Part {
    pub(crate) fn lease(&self) -> Lease {
        match self {
            Part::Whole(l) | Part::Manage(l, _) => l.clone(),
            Part::Work(s) => s.lease.clone(),
        }
    }

    /// Whether this term copies partition `p` of `topic`.
    pub(crate) fn copies(&self, topic: &str, p: i32) -> bool {
        match self {
            Part::Whole(_) => true,
            Part::Manage(..) => false,
            Part::Work(s) => s.owns(topic, p),
        }
    }

    /// Whether this term only copies (no topic creation, management or sync).
    pub(crate) fn works_only(&self) -> bool {
        matches!(self, Part::Work(_))
    }

    /// The barrier state changes wait behind, when copying is shared.
    pub(crate) fn barrier(&self) -> Option<&Barrier> {
        match self {
            Part::Manage(_, b) => Some(b),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_has_exactly_one_owner_and_a_topic_spreads_evenly() {
        for count in 1..=5usize {
            for topic in ["orders", "payments", "a", "mirror.topic-7"] {
                let mut per_member = vec![0usize; count];
                for p in 0..(count as i32 * 4) {
                    let owner = owner_index(topic, p, count).expect("an owner");
                    assert!(owner < count, "owner {owner} out of {count}");
                    per_member[owner] += 1;
                    let owners = (0..count)
                        .filter(|&i| {
                            Share {
                                generation: 1,
                                index: i,
                                count,
                                join_sent: Instant::now(),
                                lease: Lease::forever(),
                                release: Arc::default(),
                            }
                            .owns(topic, p)
                        })
                        .count();
                    assert_eq!(owners, 1, "{topic}/{p} among {count} members has {owners} owners");
                }
                assert!(per_member.iter().all(|&n| n == 4), "{topic} over {count} members: {per_member:?}");
            }
        }
    }

    #[test]
    fn no_members_or_a_negative_partition_has_no_owner() {
        assert_eq!(owner_index("t", 0, 0), None);
        assert_eq!(owner_index("t", -1, 3), None);
    }

    #[test]
    fn owners_are_stable_across_builds() {
        // Every instance must compute the same owner: pinned values, not just self-consistency.
        assert_eq!(owner_index("orders", 0, 3), owner_index("orders", 3, 3));
        let pinned: Vec<usize> = (0..4).map(|p| owner_index("orders", p, 3).expect("owner")).collect();
        let h = {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in b"orders" {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            (h % 3) as usize
        };
        assert_eq!(pinned, vec![h, (h + 1) % 3, (h + 2) % 3, h]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_given_up_before_it_runs_never_runs_and_one_running_is_given_up_when_it_ends() {
        let unrun = Release::default();
        assert!(unrun.close(Duration::from_secs(5)).await, "nothing ran: given up at once");
        assert!(!unrun.begin(), "a share given up must not be taken up afterwards");

        let running = Arc::new(Release::default());
        assert!(running.begin(), "an open share is taken up");
        let closer = tokio::spawn({
            let r = running.clone();
            async move { r.close(Duration::from_secs(5)).await }
        });
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(!closer.is_finished(), "given up while its partitions still run");
        running.end();
        assert!(closer.await.expect("join"), "given up once its partitions stopped");

        let stuck = Release::default();
        assert!(stuck.begin());
        assert!(
            !stuck.close(Duration::from_secs(1)).await,
            "a share whose partitions never stop is given up at the limit"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_barrier_passes_only_behind_a_generation_joined_after_the_change() {
        let (tx, rx) = watch::channel(None);
        let barrier = Barrier {
            share: rx,
            rejoin: Arc::default(),
        };
        let share = |generation, join_sent| Share {
            generation,
            index: 0,
            count: 1,
            join_sent,
            lease: Lease::forever(),
            release: Arc::default(),
        };
        let before = Instant::now();
        tx.send_replace(Some(share(1, before)));
        tokio::time::advance(Duration::from_millis(10)).await;
        let since = Instant::now();
        // The generation in place predates the change: it is not enough.
        assert!(!barrier.pass(since, Duration::from_millis(100)).await, "passed on an older generation");
        // Handed out after the change, but formed from a JoinGroup sent before it: its members
        // may have loaded the state before the change.
        tx.send_replace(Some(share(2, before)));
        assert!(
            !barrier.pass(since, Duration::from_millis(100)).await,
            "passed on a generation joined before the change"
        );
        let waiter = tokio::spawn({
            let b = barrier.clone();
            async move { b.pass(since, Duration::from_secs(5)).await }
        });
        tokio::time::advance(Duration::from_millis(10)).await;
        tx.send_replace(Some(share(3, Instant::now())));
        assert!(waiter.await.expect("join"), "a later generation must let the change through");
    }
}
