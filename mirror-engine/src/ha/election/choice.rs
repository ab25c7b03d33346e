//! What the members of the engine election announce and what the group leader hands them:
//! which member is active (the sitting one — the active member of the last assignment the
//! leader received — while it is still a member; else one that says it is active; else the
//! lowest id) and, with shared work, the generation's roster (see `share`). A member's own claim
//! (`active` in its metadata) never wins over the sitting active member: whoever can join the
//! group could claim it. Pure data and decisions, no I/O; sending them is the parent module's.

use serde::{Deserialize, Serialize};
use tracing::warn;

/// What a member announces when it joins.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct MemberMetadata {
    pub(super) instance: String,
    /// Whether it is the active engine right now (the leader keeps it so).
    pub(super) active: bool,
    /// How often this member asked for a new generation: a JoinGroup of a member that is not
    /// the group leader starts a rebalance only when its metadata changed.
    #[serde(default)]
    pub(super) round: u64,
    /// Whether it runs with `engine.share_work`: when the active member does, the leader hands
    /// shares to the members that do (see `roster`).
    #[serde(default)]
    pub(super) share_work: bool,
}

/// What the leader hands every member.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Assignment {
    pub(super) active_member: String,
    pub(super) active_instance: String,
    /// The generation's members (ids), sorted: a member's place in it is its share's index.
    /// Absent from leaders of earlier versions: then nobody has a share.
    #[serde(default)]
    pub(super) members: Vec<String>,
}

/// The leader's choice: `sitting` (the member the last assignment named active, as far as the
/// leader knows one) while it is still a member, whatever the others claim; else the member
/// that says it is active (the lowest member id if several do: a split that healed); else the
/// member with the lowest id. Members whose metadata cannot be read are never chosen.
pub(super) fn choose(members: &[(String, Option<MemberMetadata>)], sitting: Option<&str>) -> Assignment {
    let readable = members.iter().filter_map(|(id, m)| m.as_ref().map(|m| (id, m)));
    let pick = readable
        .clone()
        .find(|(id, _)| Some(id.as_str()) == sitting)
        .or_else(|| readable.clone().filter(|(_, m)| m.active).min_by(|a, b| a.0.cmp(b.0)))
        .or_else(|| readable.min_by(|a, b| a.0.cmp(b.0)));
    match pick {
        Some((id, m)) => Assignment {
            active_member: id.clone(),
            active_instance: m.instance.clone(),
            members: roster(members, m.share_work),
        },
        None => Assignment {
            active_member: String::new(),
            active_instance: String::new(),
            members: Vec::new(),
        },
    }
}

/// The members that share the copying, sorted: those running with `engine.share_work`, when
/// the chosen active one does (it then copies only its own share); none when it does not (it
/// then copies everything alone). Either way no partition has two copies: a member without
/// `share_work` copies only while it is the active one. A mixed group (a rolling change of the
/// setting) is logged: its members without `share_work` copy nothing meanwhile.
fn roster(members: &[(String, Option<MemberMetadata>)], active_shares: bool) -> Vec<String> {
    let readable: Vec<(&String, &MemberMetadata)> = members.iter().filter_map(|(id, m)| m.as_ref().map(|m| (id, m))).collect();
    let sharing: Vec<&String> = readable.iter().filter(|(_, m)| m.share_work).map(|(id, _)| *id).collect();
    if !sharing.is_empty() && sharing.len() < readable.len() {
        warn!(
            sharing = sharing.len(),
            members = readable.len(),
            active_shares,
            "the engine group mixes instances with and without engine.share_work; make them agree"
        );
    }
    if !active_shares {
        return Vec::new();
    }
    let mut ids: Vec<String> = sharing.into_iter().cloned().collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, instance: &str, active: bool) -> (String, Option<MemberMetadata>) {
        (
            id.to_owned(),
            Some(MemberMetadata {
                instance: instance.to_owned(),
                active,
                round: 0,
                share_work: true,
            }),
        )
    }

    /// A leader that knows of no sitting active member (its first generation).
    fn choose_new(members: &[(String, Option<MemberMetadata>)]) -> Assignment {
        choose(members, None)
    }

    #[test]
    fn a_members_own_claim_to_be_active_never_wins_over_the_sitting_active_member() {
        let a = choose(&[m("a", "intruder", true), m("b", "i2", false), m("c", "i3", false)], Some("c"));
        assert_eq!(
            (a.active_member.as_str(), a.active_instance.as_str()),
            ("c", "i3"),
            "a member claiming to be active took over from the sitting active member c"
        );
        let a = choose(&[m("a", "intruder", true), m("c", "i3", true)], Some("c"));
        assert_eq!(a.active_member, "c", "two claims: the sitting active member keeps it, not the lowest id");
        let a = choose(&[m("a", "i1", false), m("b", "i2", true)], Some("gone"));
        assert_eq!(
            a.active_member, "b",
            "the sitting member left: a member that says it is active (a split that healed) keeps it"
        );
        let a = choose(&[("c".to_owned(), None), m("d", "i4", false)], Some("c"));
        assert_eq!(a.active_member, "d", "a sitting member whose metadata cannot be read is not chosen");
    }

    #[test]
    fn the_active_member_stays_active_when_others_join_and_the_lowest_id_wins_otherwise() {
        let a = choose_new(&[m("c", "i3", false), m("b", "i2", true), m("a", "i1", false)]);
        assert_eq!((a.active_member.as_str(), a.active_instance.as_str()), ("b", "i2"), "sticky");
        let a = choose_new(&[m("c", "i3", false), m("b", "i2", false)]);
        assert_eq!(a.active_member, "b", "nobody active: the lowest member id");
        let a = choose_new(&[m("c", "i3", true), m("b", "i2", true)]);
        assert_eq!(a.active_member, "b", "two claims (a split that healed): one of them, deterministically");
        let a = choose_new(&[("x".to_owned(), None), m("y", "i2", false)]);
        assert_eq!(a.active_member, "y", "an unreadable member is never chosen");
    }

    #[test]
    fn the_roster_lists_every_readable_member_once_sorted_so_every_member_finds_the_same_place() {
        let a = choose_new(&[m("c", "i3", false), ("x".to_owned(), None), m("a", "i1", true), m("b", "i2", false)]);
        assert_eq!(a.members, vec!["a", "b", "c"], "sorted, the unreadable member left out");
        let blob = serde_json::to_vec(&a).expect("encode");
        let back: Assignment = serde_json::from_slice(&blob).expect("decode");
        assert_eq!(back.members, a.members);
        // A leader of an earlier version sends no roster: nobody gets a share.
        let old: Assignment = serde_json::from_slice(br#"{"active_member":"a","active_instance":"i1"}"#).expect("decode old");
        assert!(old.members.is_empty(), "no roster from an older leader");
    }

    #[test]
    fn shares_go_to_the_sharing_members_only_when_the_active_one_shares() {
        let lone = |id: &str| {
            (
                id.to_owned(),
                Some(MemberMetadata {
                    instance: id.to_owned(),
                    active: false,
                    round: 0,
                    share_work: false,
                }),
            )
        };
        assert!(choose_new(&[lone("a"), lone("b")]).members.is_empty(), "nobody shares: no roster");
        // A mixed group (a rolling change of the setting): the active one decides.
        let sharing_active = choose_new(&[m("b", "i2", true), lone("a"), m("c", "i3", false)]);
        assert_eq!(sharing_active.active_member, "b");
        assert_eq!(sharing_active.members, vec!["b", "c"], "the sharing members share; the other copies nothing");
        let lone_active = choose_new(&[
            m("b", "i2", false),
            (
                lone("a").0,
                lone("a").1.map(|mut x| {
                    x.active = true;
                    x
                }),
            ),
        ]);
        assert_eq!(lone_active.active_member, "a");
        assert!(
            lone_active.members.is_empty(),
            "an active member without share_work copies alone: nobody else holds a share"
        );
        // A member of an earlier version announces no share_work: it counts as not sharing.
        let old: MemberMetadata = serde_json::from_slice(br#"{"instance":"i9","active":false}"#).expect("decode old metadata");
        assert!(!old.share_work && old.round == 0, "defaults for an older member");
    }
}
