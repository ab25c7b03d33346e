//! Electing the one active engine among the instances of `engine.role = "auto"`: a Kafka group
//! on the destination (classic group protocol, as Kafka Connect uses it; protocol type
//! `kmp-mirror-engine`). Every instance joins; the group leader names one member active — the
//! one already active if it is still a member, so a joining instance never moves the work —
//! and every member learns the choice from SyncGroup. Heartbeats keep the active member's
//! [`Lease`] alive (see `lease`): it ends at the send time of the last acknowledged heartbeat
//! plus the session timeout minus a margin, so an active instance that cannot reach the
//! coordinator, or was frozen, stops writing before the coordinator drops it and elects
//! another. What the active instance runs is `auto`'s; this module only decides who.
//!
//! This file owns the decisions: taking part until the instance leaves, what a JoinGroup's
//! outcome and an assignment mean for this instance (active, standby, its share), and ending an
//! active term or a share. Who is chosen is `choice`'s; the requests to the group coordinator
//! (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and the heartbeat loop of one
//! stay with a coordinator are `group`'s.

use std::time::Duration;

use kmp_protocol::kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::ha::share::Share;
use crate::lease::Lease;
use kmp_protocol::Backoff;

mod choice;
mod group;
use choice::Assignment;
use group::{JoinOutcome, Joined};

/// The group's protocol type: only instances of this proxy meet in it.
pub const PROTOCOL_TYPE: &str = "kmp-mirror-engine";
/// The client id of the election's connections to the group coordinator.
pub const ELECTION_CLIENT_ID: &str = "kafka-mirror-proxy-election";

/// How an instance takes part in the election (from `[engine]`).
#[derive(Debug, Clone)]
pub struct ElectionSettings {
    pub group_id: String,
    pub instance_id: String,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// `engine.share_work`: a member waits for its share's partitions to stop before it
    /// rejoins (see `share`).
    pub share_work: bool,
}

impl ElectionSettings {
    /// How long an acknowledged heartbeat lets the active instance write: the session timeout
    /// less a tenth of it (at least 200 ms), so it stops before the coordinator gives up on it.
    fn lease_for(&self) -> Duration {
        let margin = (self.session_timeout / 10).max(Duration::from_millis(200));
        self.session_timeout.saturating_sub(margin)
    }
}

/// What the election decided for this instance.
#[derive(Debug, Clone)]
pub enum Role {
    /// Not (or no longer) the active engine.
    Standby { generation: i32, active_instance: String },
    /// The active engine of `generation`, writing while `lease` holds.
    Active { generation: i32, lease: Lease },
}

/// Takes part in the election until `leave` turns true, then leaves the group (so a peer takes
/// over at once instead of after the session timeout). Decisions go to `role`.
/// Why taking part fails, while it does, goes to `problem` (cleared by the next decision).
pub(crate) async fn run(
    destination: ClusterClient,
    settings: ElectionSettings,
    role: watch::Sender<Role>,
    problem: watch::Sender<Option<String>>,
    sharing: Sharing,
    mut leave: watch::Receiver<bool>,
) {
    let mut member = Member {
        destination,
        settings,
        member_id: String::new(),
        generation: -1,
        sitting: None,
        lease: None,
        role,
        problem,
        decided: false,
        sharing,
        round: 0,
        join_sent: Instant::now(),
    };
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let session = tokio::select! {
            r = member.session() => r,
            _ = leave.changed() => break,
        };
        // Whatever ended the session, an active term whose lease is over ends now, and this
        // generation's share is given up.
        member.demote_if_lapsed();
        member.give_up_share().await;
        let Err(e) = session;
        // A session that reached a decision was healthy: its loss is retried promptly.
        if std::mem::take(&mut member.decided) {
            backoff.reset();
        }
        // Coordinator moving or still loading: expected around broker restarts.
        let moving = [
            ResponseError::CoordinatorLoadInProgress,
            ResponseError::CoordinatorNotAvailable,
            ResponseError::NotCoordinator,
        ];
        if matches!(e, MirrorError::Broker { code, .. } if moving.iter().any(|c| c.code() == code)) {
            debug!(error = %e, backoff = ?backoff.peek(), "engine election: coordinator not ready; retrying");
        } else {
            warn!(error = %e, group = %member.settings.group_id, backoff = ?backoff.peek(), "engine election: lost the group coordinator; rejoining");
            member.problem.send_replace(Some(e.to_string()));
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_pause()) => {}
            _ = leave.changed() => break,
        }
    }
    member.demote("leaving the group");
    member.give_up_share().await;
    member.leave().await;
}

/// This member's part of the shared mirror work (see `share`).
pub(crate) struct Sharing {
    /// The share of the current generation (`None` between generations).
    pub(crate) tx: watch::Sender<Option<Share>>,
    /// Makes this member rejoin with changed metadata (a state change the members must load).
    pub(crate) rejoin: std::sync::Arc<crate::ha::share::Reassign>,
}

impl Sharing {
    /// A member whose shares nobody reads.
    #[cfg(test)]
    pub(crate) fn unread() -> Self {
        Self {
            tx: watch::channel(None).0,
            rejoin: std::sync::Arc::default(),
        }
    }
}

struct Member {
    destination: ClusterClient,
    settings: ElectionSettings,
    member_id: String,
    generation: i32,
    /// The active member of the last assignment this member received (`None`: not known, as
    /// after a SyncGroup that failed). As the group leader it keeps that member active while it
    /// is still a member, whatever the others claim (see `choice`).
    sitting: Option<String>,
    /// The lease of the current active term, if this instance is active.
    lease: Option<Lease>,
    role: watch::Sender<Role>,
    problem: watch::Sender<Option<String>>,
    /// A decision was applied since the last session ended.
    decided: bool,
    sharing: Sharing,
    /// Times this member asked for a new generation (see `MemberMetadata::round`).
    round: u64,
    /// When the last JoinGroup carrying a requested change was sent (see `Share::join_sent`).
    join_sent: Instant,
}

impl Member {
    /// Takes in what a JoinGroup answered; `None` when it must simply be sent again.
    fn joined(&mut self, outcome: JoinOutcome) -> Option<Joined> {
        match outcome {
            JoinOutcome::Joined { member_id, generation, joined } => {
                self.member_id = member_id;
                self.generation = generation;
                debug!(
                    generation,
                    leader = joined.leader,
                    members = joined.members.len(),
                    "joined the engine election group"
                );
                Some(joined)
            }
            JoinOutcome::MemberId(id) => {
                self.member_id = id;
                None
            }
            JoinOutcome::UnknownMember => {
                self.demote("the coordinator no longer knows this member");
                self.member_id.clear();
                None
            }
            JoinOutcome::Again => None,
        }
    }

    /// Becomes (or stays) active or standby as `a` says.
    fn apply(&mut self, a: &Assignment, sync_sent: Instant) {
        self.problem.send_replace(None);
        self.sitting = (!a.active_member.is_empty()).then(|| a.active_member.clone());
        self.decided = true;
        if let Some(index) = a.members.iter().position(|m| *m == self.member_id) {
            let lease = Lease::expired();
            lease.extend_from(sync_sent, self.settings.lease_for());
            self.sharing.tx.send_replace(Some(Share {
                generation: self.generation,
                index,
                count: a.members.len(),
                join_sent: self.join_sent,
                lease,
                release: std::sync::Arc::default(),
            }));
        }
        if a.active_member == self.member_id {
            let lease = self.lease.get_or_insert_with(|| {
                info!(instance = %self.settings.instance_id, generation = self.generation, "elected the active mirror engine");
                Lease::expired()
            });
            lease.extend_from(sync_sent, self.settings.lease_for());
            let lease = lease.clone();
            self.role.send_replace(Role::Active {
                generation: self.generation,
                lease,
            });
        } else {
            self.demote("another instance is the active engine");
            self.role.send_replace(Role::Standby {
                generation: self.generation,
                active_instance: a.active_instance.clone(),
            });
        }
    }

    /// Ends an active term whose lease ran out (no acknowledged heartbeat for too long).
    fn demote_if_lapsed(&mut self) {
        if self.lease.as_ref().is_some_and(|l| !l.holds()) {
            self.demote("no heartbeat acknowledged within the session timeout");
        }
    }

    /// Ends the active term, if any.
    fn demote(&mut self, why: &str) {
        if let Some(lease) = self.lease.take() {
            lease.revoke();
            warn!(instance = %self.settings.instance_id, why, "no longer the active mirror engine");
            self.role.send_replace(Role::Standby {
                generation: self.generation,
                active_instance: String::new(),
            });
        }
    }

    /// Gives up this generation's share, if any: with `share_work`, waits (while its lease
    /// still holds) for its partitions to stop, then ends the lease for good.
    async fn give_up_share(&mut self) {
        let Some(share) = self.sharing.tx.send_replace(None) else { return };
        if self.settings.share_work {
            let left = share.lease.remaining().min(self.settings.session_timeout);
            if !share.release.close(left).await {
                warn!(
                    generation = share.generation,
                    "the share's partitions did not stop before its lease ended; its writes are fenced"
                );
            }
        }
        share.lease.revoke();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_ends_before_the_coordinator_gives_up() {
        let s = |ms| ElectionSettings {
            group_id: "g".into(),
            instance_id: "i".into(),
            session_timeout: Duration::from_millis(ms),
            heartbeat_interval: Duration::from_millis(ms / 6),
            share_work: false,
        };
        assert_eq!(s(6_000).lease_for(), Duration::from_millis(5_400));
        assert_eq!(s(1_000).lease_for(), Duration::from_millis(800));
    }
}
