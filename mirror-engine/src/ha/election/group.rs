//! The election's requests to the group coordinator (classic group protocol): finding it,
//! JoinGroup with this member's metadata, SyncGroup carrying the leader's choice, Heartbeat and
//! LeaveGroup, each bounded so an unanswering coordinator ends the session; and one stay with a
//! coordinator — join, sync, heartbeat, rejoin whenever the group rebalances.

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
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::choice::{Assignment, MemberMetadata, choose};
use super::{ELECTION_CLIENT_ID, ElectionSettings, Member, PROTOCOL_TYPE};
use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;

const PROTOCOL_NAME: &str = "active-standby-v1";
const JOIN_VERSION: i16 = 9;
const SYNC_VERSION: i16 = 5;
const HEARTBEAT_VERSION: i16 = 4;
const LEAVE_VERSION: i16 = 5;

const ILLEGAL_GENERATION: i16 = ResponseError::IllegalGeneration.code();
const UNKNOWN_MEMBER_ID: i16 = ResponseError::UnknownMemberId.code();
const REBALANCE_IN_PROGRESS: i16 = ResponseError::RebalanceInProgress.code();
const MEMBER_ID_REQUIRED: i16 = ResponseError::MemberIdRequired.code();

/// How much longer than the rebalance timeout a JoinGroup may stay unanswered.
const JOIN_MARGIN: Duration = Duration::from_secs(5);
/// How long a requested new generation waits for more requests (a mirror starting several
/// topics at once costs one rebalance, not one per topic).
const REASSIGN_DEBOUNCE: Duration = Duration::from_millis(300);

impl Member {
    /// One stay with a coordinator: join, sync, heartbeat, rejoin at once whenever the group
    /// rebalances — until the coordinator is lost (the error).
    pub(super) async fn session(&mut self) -> Result<std::convert::Infallible, MirrorError> {
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

    pub(super) async fn leave(&self) {
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
pub(super) enum JoinOutcome {
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

pub(super) struct Joined {
    pub(super) leader: bool,
    pub(super) members: Vec<(String, Option<MemberMetadata>)>,
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
mod coordinator_tests;
