//! Electing the one active engine among the instances of `engine.role = "auto"`: a Kafka group
//! on the destination (classic group protocol, as Kafka Connect uses it; protocol type
//! `kmp-mirror-engine`). Every instance joins; the group leader names one member active — the
//! one already active if it is still a member, so a joining instance never moves the work —
//! and every member learns the choice from SyncGroup. Heartbeats keep the active member's
//! [`Lease`] alive (see `lease`): it ends at the send time of the last acknowledged heartbeat
//! plus the session timeout minus a margin, so an active instance that cannot reach the
//! coordinator, or was frozen, stops writing before the coordinator drops it and elects
//! another. What the active instance runs is `auto`'s; this module only decides who.

use std::time::Duration;

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::client::Connection;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kmp_protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use kmp_protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kmp_protocol::kafka_protocol::messages::{GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::ha::share::Share;
use crate::lease::Lease;

mod choice;
use choice::{Assignment, MemberMetadata, choose};

/// The group's protocol type: only instances of this proxy meet in it.
pub const PROTOCOL_TYPE: &str = "kmp-mirror-engine";
const PROTOCOL_NAME: &str = "active-standby-v1";
const JOIN_VERSION: i16 = 9;
const SYNC_VERSION: i16 = 5;
const HEARTBEAT_VERSION: i16 = 4;
/// The client id of the election's connections to the group coordinator.
pub const ELECTION_CLIENT_ID: &str = "kafka-mirror-proxy-election";
const LEAVE_VERSION: i16 = 5;

const ILLEGAL_GENERATION: i16 = ResponseError::IllegalGeneration.code();
const UNKNOWN_MEMBER_ID: i16 = ResponseError::UnknownMemberId.code();
const REBALANCE_IN_PROGRESS: i16 = ResponseError::RebalanceInProgress.code();
const MEMBER_ID_REQUIRED: i16 = ResponseError::MemberIdRequired.code();

/// How much longer than the rebalance timeout a JoinGroup may stay unanswered.
const JOIN_MARGIN: Duration = Duration::from_secs(5);

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

/// How long a requested new generation waits for more requests (a mirror starting several
/// topics at once costs one rebalance, not one per topic).
const REASSIGN_DEBOUNCE: Duration = Duration::from_millis(300);

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
    /// One stay with a coordinator: join, sync, heartbeat, rejoin at once whenever the group
    /// rebalances — until the coordinator is lost (the error).
    async fn session(&mut self) -> Result<std::convert::Infallible, MirrorError> {
        let coordinator = self.coordinator().await?;
        let mut conn = self.destination.connect_to(&coordinator, ELECTION_CLIENT_ID).await?;
        let mut beats = self.destination.connect_to(&coordinator, ELECTION_CLIENT_ID).await?;
        loop {
            // Eager: the share of the generation that is ending stops before this member
            // rejoins, so the next generation's SyncGroup is a barrier (see `share`).
            self.give_up_share().await;
            let outcome = {
                let active = self.lease.is_some();
                if self.sharing.rejoin.take() {
                    // Changed metadata: the coordinator forms a new generation after this.
                    self.round += 1;
                    self.join_sent = Instant::now();
                }
                let join = join_group(&self.destination, &self.settings, &self.member_id, (active, self.round), &mut conn);
                tokio::pin!(join);
                // Keep the session (and an active lease) alive while the rebalance waits for
                // the other members.
                let mut tick = tokio::time::interval(self.settings.heartbeat_interval);
                tick.tick().await;
                loop {
                    tokio::select! {
                        r = &mut join => break r,
                        _ = tick.tick() => {
                            if let (Some(lease), true) = (&self.lease, self.generation >= 0) {
                                let sent = Instant::now();
                                let beat = heartbeat(&mut beats, &self.settings, &self.member_id, self.generation);
                                match tokio::time::timeout(self.settings.session_timeout, beat).await {
                                    Ok(Ok(code)) if code == 0 || code == REBALANCE_IN_PROGRESS => lease.extend_from(sent, self.settings.lease_for()),
                                    Ok(_) => {}
                                    // A coordinator that stopped answering: this session is over.
                                    Err(_) => break Err(unanswered("Heartbeat", self.settings.session_timeout)),
                                }
                            }
                        }
                    }
                }
            }?;
            let Some(joined) = self.joined(outcome) else { continue };
            let (assignment, sync_sent) = match self.sync(&mut conn, &joined).await? {
                Some(a) => a,
                None => continue,
            };
            self.apply(&assignment, sync_sent);
            // Heartbeats until the group needs a rebalance (or this member asks for one).
            loop {
                let rejoin = self.sharing.rejoin.clone();
                tokio::select! {
                    _ = tokio::time::sleep(self.settings.heartbeat_interval) => {}
                    _ = rejoin.requested() => {}
                }
                if self.sharing.rejoin.is_pending() {
                    // Changes that come together share one rebalance.
                    tokio::time::sleep(REASSIGN_DEBOUNCE).await;
                    debug!(generation = self.generation, "rejoining: the members must load a state change");
                    break;
                }
                self.demote_if_lapsed();
                let sent = Instant::now();
                let beat = heartbeat(&mut beats, &self.settings, &self.member_id, self.generation);
                let code = bounded(self.settings.session_timeout, "Heartbeat", beat).await?;
                match code {
                    0 => {
                        if let Some(lease) = &self.lease {
                            lease.extend_from(sent, self.settings.lease_for());
                        }
                        if let Some(share) = self.sharing.tx.borrow().as_ref() {
                            share.lease.extend_from(sent, self.settings.lease_for());
                        }
                    }
                    REBALANCE_IN_PROGRESS => {
                        if let Some(lease) = &self.lease {
                            lease.extend_from(sent, self.settings.lease_for());
                        }
                        break;
                    }
                    UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION => {
                        self.demote("the coordinator no longer counts this instance in the group");
                        if code == UNKNOWN_MEMBER_ID {
                            self.member_id.clear();
                        }
                        self.generation = -1;
                        break;
                    }
                    code => {
                        return Err(MirrorError::Broker {
                            side: "destination",
                            what: "Heartbeat".into(),
                            code,
                        });
                    }
                }
            }
        }
    }

    async fn coordinator(&self) -> Result<String, MirrorError> {
        let found = crate::cluster::groups::coordinators(&self.destination, std::slice::from_ref(&self.settings.group_id)).await?;
        match found.get(&self.settings.group_id) {
            Some(Ok(addr)) => Ok(addr.clone()),
            Some(Err(code)) => Err(MirrorError::Broker {
                side: "destination",
                what: "FindCoordinator".into(),
                code: *code,
            }),
            None => Err(MirrorError::Broker {
                side: "destination",
                what: "FindCoordinator".into(),
                code: ResponseError::CoordinatorNotAvailable.code(),
            }),
        }
    }

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

    /// SyncGroup: the leader hands out its choice; everyone gets it back.
    async fn sync(&mut self, conn: &mut Connection, joined: &Joined) -> Result<Option<(Assignment, Instant)>, MirrorError> {
        let mut req = SyncGroupRequest::default();
        req.group_id = GroupId(StrBytes::from_string(self.settings.group_id.clone()));
        req.generation_id = self.generation;
        req.member_id = StrBytes::from_string(self.member_id.clone());
        req.protocol_type = Some(StrBytes::from_static_str(PROTOCOL_TYPE));
        req.protocol_name = Some(StrBytes::from_static_str(PROTOCOL_NAME));
        if joined.leader {
            let choice = choose(&joined.members, self.sitting.as_deref());
            let blob = Bytes::from(serde_json::to_vec(&choice).map_err(|e| MirrorError::Unsupported(format!("election assignment: {e}")))?);
            req.assignments = joined
                .members
                .iter()
                .map(|(id, _)| {
                    let mut a = SyncGroupRequestAssignment::default();
                    a.member_id = StrBytes::from_string(id.clone());
                    a.assignment = blob.clone();
                    a
                })
                .collect();
        }
        let sent = Instant::now();
        let answer = async { conn.send(&req, SYNC_VERSION).await.map_err(|e| self.destination.wrap(e)) };
        let resp = bounded(self.settings.session_timeout, "SyncGroup", answer).await?;
        // Until an assignment arrives, this member does not know who is active.
        self.sitting = None;
        match resp.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => return Ok(None),
            UNKNOWN_MEMBER_ID => {
                self.demote("the coordinator no longer knows this member");
                self.member_id.clear();
                return Ok(None);
            }
            code => {
                return Err(MirrorError::Broker {
                    side: "destination",
                    what: "SyncGroup".into(),
                    code,
                });
            }
        }
        match serde_json::from_slice::<Assignment>(&resp.assignment) {
            Ok(a) => Ok(Some((a, sent))),
            Err(e) => {
                // Another program in our group, or a newer version: never act on it.
                warn!(error = %e, "engine election: unreadable assignment; rejoining");
                Ok(None)
            }
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

    async fn leave(&self) {
        if self.member_id.is_empty() {
            return;
        }
        let left = async {
            let coordinator = self.coordinator().await?;
            let mut conn = self.destination.connect_to(&coordinator, ELECTION_CLIENT_ID).await?;
            let mut who = MemberIdentity::default();
            who.member_id = StrBytes::from_string(self.member_id.clone());
            who.reason = Some(StrBytes::from_static_str("instance shutting down"));
            let mut req = LeaveGroupRequest::default();
            req.group_id = GroupId(StrBytes::from_string(self.settings.group_id.clone()));
            req.members = vec![who];
            conn.send(&req, LEAVE_VERSION).await.map_err(|e| self.destination.wrap(e))
        };
        match tokio::time::timeout(Duration::from_secs(5), left).await {
            Ok(Ok(_)) => info!(group = %self.settings.group_id, "left the engine election group"),
            Ok(Err(e)) => warn!(error = %e, "could not leave the engine election group; peers take over after the session timeout"),
            Err(_) => warn!("leaving the engine election group timed out; peers take over after the session timeout"),
        }
    }
}

/// What one JoinGroup came back with.
enum JoinOutcome {
    Joined {
        member_id: String,
        generation: i32,
        joined: Joined,
    },
    /// The coordinator assigned a member id: join again with it.
    MemberId(String),
    UnknownMember,
    Again,
}

/// One JoinGroup (it waits for the rebalance to complete).
async fn join_group(
    destination: &ClusterClient,
    settings: &ElectionSettings,
    member_id: &str,
    (active, round): (bool, u64),
    conn: &mut Connection,
) -> Result<JoinOutcome, MirrorError> {
    let metadata = serde_json::to_vec(&MemberMetadata {
        instance: settings.instance_id.clone(),
        active,
        round,
        share_work: settings.share_work,
    })
    .map_err(|e| MirrorError::Unsupported(format!("election metadata: {e}")))?;
    let mut proto = JoinGroupRequestProtocol::default();
    proto.name = StrBytes::from_static_str(PROTOCOL_NAME);
    proto.metadata = Bytes::from(metadata);
    let mut req = JoinGroupRequest::default();
    req.group_id = GroupId(StrBytes::from_string(settings.group_id.clone()));
    req.session_timeout_ms = millis(settings.session_timeout);
    req.rebalance_timeout_ms = millis(settings.session_timeout);
    req.member_id = StrBytes::from_string(member_id.to_owned());
    req.protocol_type = StrBytes::from_static_str(PROTOCOL_TYPE);
    req.protocols = vec![proto];
    req.reason = Some(StrBytes::from_static_str("kafka-mirror-proxy engine election"));
    // The coordinator holds a JoinGroup for up to the rebalance timeout; a margin more and it
    // has stopped answering.
    let answer = async { conn.send(&req, JOIN_VERSION).await.map_err(|e| destination.wrap(e)) };
    let resp = bounded(settings.session_timeout + JOIN_MARGIN, "JoinGroup", answer).await?;
    match resp.error_code {
        0 => {}
        MEMBER_ID_REQUIRED => return Ok(JoinOutcome::MemberId(resp.member_id.as_str().to_owned())),
        UNKNOWN_MEMBER_ID => return Ok(JoinOutcome::UnknownMember),
        REBALANCE_IN_PROGRESS => return Ok(JoinOutcome::Again),
        code => {
            return Err(MirrorError::Broker {
                side: "destination",
                what: "JoinGroup".into(),
                code,
            });
        }
    }
    let member_id = resp.member_id.as_str().to_owned();
    let leader = resp.leader.as_str() == member_id;
    let members = resp
        .members
        .iter()
        .map(|m| (m.member_id.as_str().to_owned(), serde_json::from_slice::<MemberMetadata>(&m.metadata).ok()))
        .collect();
    Ok(JoinOutcome::Joined {
        member_id,
        generation: resp.generation_id,
        joined: Joined { leader, members },
    })
}

struct Joined {
    leader: bool,
    members: Vec<(String, Option<MemberMetadata>)>,
}

async fn heartbeat(conn: &mut Connection, settings: &ElectionSettings, member_id: &str, generation: i32) -> Result<i16, MirrorError> {
    let mut req = HeartbeatRequest::default();
    req.group_id = GroupId(StrBytes::from_string(settings.group_id.clone()));
    req.generation_id = generation;
    req.member_id = StrBytes::from_string(member_id.to_owned());
    let resp = conn
        .send(&req, HEARTBEAT_VERSION)
        .await
        .map_err(|e: ProtocolError| MirrorError::Destination(e))?;
    Ok(resp.error_code)
}

/// `request` within `limit`; past it, an error saying the coordinator left `what` unanswered
/// (the session ends and the election starts over with a fresh coordinator lookup).
async fn bounded<T>(limit: Duration, what: &str, request: impl std::future::Future<Output = Result<T, MirrorError>>) -> Result<T, MirrorError> {
    match tokio::time::timeout(limit, request).await {
        Ok(r) => r,
        Err(_) => Err(unanswered(what, limit)),
    }
}

fn unanswered(what: &str, limit: Duration) -> MirrorError {
    MirrorError::aborted("destination", format!("{what} unanswered by the group coordinator within {limit:?}"))
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
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

#[cfg(test)]
mod coordinator_tests;
