//! The catalog's ownership, read-only and filler answers.

use super::*;

#[test]
fn registered_topics_are_read_only_by_name_and_by_id() {
    let r = Catalog::default();
    assert!(r.is_empty());
    r.register("orders", "dr", [0; 16]);
    assert_eq!(r.read_only("orders").as_deref(), Some("dr"));
    assert_eq!(r.read_only_id(&[7; 16]), None, "id not known yet");
    r.register("orders", "dr", [7; 16]);
    assert_eq!(r.read_only_id(&[7; 16]), Some(("orders".into(), "dr".into())));
    assert_eq!(r.read_only("payments"), None);
    assert!(r.is_read_only("orders") && r.is_read_only_id(&[7; 16]), "the allocation-free forms agree");
    assert!(!r.is_read_only("payments") && !r.is_read_only_id(&[8; 16]));
    r.set_writable("orders", true);
    assert!(!r.is_read_only("orders") && !r.is_read_only_id(&[7; 16]), "a stopped topic is writable");
}

#[test]
fn ids_learned_later_reach_the_read_only_and_filler_checks() {
    let r = Catalog::default();
    r.register("orders", "dr", [0; 16]);
    r.mark_filler_topic("old", [0; 16]);
    assert_eq!(r.topics_without_id(), vec!["old".to_owned(), "orders".to_owned()]);
    r.learn_topic_id("orders", [7; 16]);
    r.learn_topic_id("old", [9; 16]);
    r.learn_topic_id("unknown", [5; 16]);
    assert!(r.topics_without_id().is_empty());
    assert!(r.is_read_only_id(&[7; 16]) && r.may_hold_fillers_id(&[7; 16]));
    assert!(!r.is_read_only_id(&[9; 16]) && r.may_hold_fillers_id(&[9; 16]));
    assert!(!r.may_hold_fillers_id(&[5; 16]) && !r.is_mirror_topic("unknown"), "only known topics learn ids");
}

#[test]
fn ids_are_pending_while_a_mirror_topic_the_destination_has_is_not_known_by_id() {
    let r = Catalog::default();
    assert!(!r.ids_pending(), "nothing registered");
    r.register("orders", "dr", [0; 16]);
    r.register("payments", "dr", [0; 16]);
    assert!(r.ids_pending(), "restarted: ids not learned yet");
    r.learn_topic_id("orders", [7; 16]);
    assert!(r.ids_pending(), "payments is still unknown");
    r.mark_absent("orders");
    r.mark_absent("payments");
    assert!(!r.ids_pending(), "the destination has no payments topic: no id to protect");
    r.learn_topic_id("payments", [8; 16]);
    assert!(!r.ids_pending() && r.is_read_only_id(&[8; 16]), "created later: learned, protected");
    r.register("refunds", "dr", [0; 16]);
    assert!(r.ids_pending(), "a new topic without id");
    r.mark_absent("refunds");
    r.remove("refunds");
    r.forget_filler_topic("refunds");
    assert!(!r.ids_pending(), "a forgotten absent topic leaves the counts even");
    r.mark_filler_topic("old", [0; 16]);
    assert!(r.ids_pending(), "a former mirror topic may still hold fillers under an unknown id");
}

#[test]
fn an_id_learned_for_filler_masking_protects_the_mirror_topic_too() {
    // Boot registers stored mirror topics by name; the filler-id lookup learns their ids.
    let r = Catalog::default();
    r.register("orders", "dr", [0; 16]);
    r.mark_filler_topic("orders", [7; 16]);
    assert!(!r.ids_pending());
    assert!(r.is_read_only_id(&[7; 16]), "the id that ended the pending state is checked");
}

#[test]
fn only_topics_that_are_or_were_mirror_topics_may_hold_fillers() {
    let r = Catalog::default();
    assert!(!r.has_filler_topics());
    r.register("orders", "dr", [0; 16]);
    assert!(
        r.may_hold_fillers_id(&[8; 16]),
        "while a mirror topic's id is unknown, every id may hold fillers"
    );
    r.register("orders", "dr", [7; 16]);
    r.remove("orders");
    assert_eq!(r.read_only("orders"), None, "a deleted mirror's topic is writable");
    assert!(r.may_hold_fillers("orders") && r.may_hold_fillers_id(&[7; 16]), "its fillers are still masked");
    assert!(!r.may_hold_fillers("payments") && !r.may_hold_fillers_id(&[8; 16]));
    r.mark_filler_topic("old", [9; 16]);
    assert!(
        r.may_hold_fillers_id(&[9; 16]) && r.read_only("old").is_none(),
        "a former mirror topic from the state topic"
    );
    r.mark_filler_topic("gone", [0; 16]);
    assert!(r.may_hold_fillers_id(&[8; 16]));
    r.forget_filler_topic("gone");
    assert!(
        !r.may_hold_fillers_id(&[8; 16]) && !r.may_hold_fillers("gone"),
        "a topic deleted on the destination is forgotten"
    );
}

#[test]
fn a_mirror_topic_the_destination_lacks_does_not_mask_other_topics_read_by_id() {
    let r = Catalog::default();
    r.register("orders", "dr", [7; 16]);
    r.register("not-created-yet", "dr", [0; 16]);
    assert!(r.may_hold_fillers_id(&[8; 16]), "its id may be any id until the destination answered");
    r.mark_absent("not-created-yet");
    assert!(r.wants_ids(), "still looked for");
    assert!(
        !r.may_hold_fillers_id(&[8; 16]),
        "a plain topic read by id is not masked because a mirror topic does not exist yet"
    );
    assert!(r.may_hold_fillers_id(&[7; 16]), "the existing mirror topic is still masked");
    r.learn_topic_id("not-created-yet", [9; 16]);
    assert!(r.may_hold_fillers_id(&[9; 16]) && !r.wants_ids(), "once created and learned, masked");
}

#[test]
fn a_claimed_topic_is_owned_but_not_read_only_until_registered() {
    let c = Catalog::default();
    assert!(c.claim("orders", "m1"), "a free topic is claimed");
    assert_eq!(c.owner("orders").as_deref(), Some("m1"));
    assert_eq!(c.topics_of("m1"), vec!["orders".to_owned()]);
    assert!(!c.claim("orders", "m2"), "another mirror cannot take a claimed topic");
    assert!(c.claim("orders", "m1"), "its own mirror may claim it again (a new term)");
    assert!(
        !c.is_read_only("orders") && !c.is_mirror_topic("orders") && !c.may_hold_fillers("orders"),
        "preparing may still refuse the topic: clients' writes are not refused yet"
    );
    c.register("orders", "m1", [7; 16]);
    assert!(c.is_read_only("orders") && c.is_read_only_id(&[7; 16]), "registered: read-only");
    assert!(!c.claim("orders", "m2"), "nor a registered one");
}

#[test]
fn a_new_term_drops_the_claims_an_ended_one_left_but_keeps_mirror_topics() {
    let c = Catalog::default();
    assert!(c.claim("half-prepared", "m1"));
    c.register("orders", "m1", [0; 16]);
    c.drop_claims();
    assert_eq!(c.owner("half-prepared"), None, "an unfinished claim is gone");
    assert_eq!(c.topics_of("m1"), vec!["orders".to_owned()]);
    assert!(c.claim("half-prepared", "m2"), "and the topic is free again");
}

#[test]
fn every_change_of_ownership_or_writability_is_published_and_no_op_changes_are_not() {
    let c = Catalog::default();
    let mut rx = c.changes();
    let mut seen = |what: &str, expected: bool| {
        assert_eq!(rx.has_changed().expect("the catalog holds the sender"), expected, "{what}");
        rx.borrow_and_update();
    };
    assert!(c.claim("orders", "m1"));
    seen("a claim", true);
    assert!(c.claim("orders", "m1"));
    seen("claiming an own topic again", false);
    c.register("orders", "m1", [0; 16]);
    seen("registering", true);
    c.register("orders", "m1", [0; 16]);
    seen("registering again", false);
    c.set_writable("orders", true);
    seen("a stop making it writable", true);
    c.set_writable("orders", true);
    seen("writable again", false);
    c.remove("orders");
    seen("a delete", true);
    c.remove("orders");
    seen("deleting a forgotten topic", false);
}

#[test]
fn a_boot_forgets_what_the_loaded_state_no_longer_records_and_keeps_its_fillers_masked() {
    let c = Catalog::default();
    c.register("orders", "m1", [7; 16]);
    c.register("deleted-meanwhile", "m1", [8; 16]);
    assert!(c.claim("half-prepared", "m2"));
    c.reconcile(&["orders"].into_iter().collect());
    assert_eq!(c.topics_of("m1"), vec!["orders".to_owned()]);
    assert_eq!(c.owner("half-prepared"), None);
    assert!(!c.is_read_only("deleted-meanwhile") && !c.is_read_only_id(&[8; 16]), "an ordinary topic again");
    assert!(c.may_hold_fillers_id(&[8; 16]), "its fillers stay masked");
    assert!(c.claim("deleted-meanwhile", "m2"), "and any mirror may take it");
}

#[test]
fn a_topic_registered_for_another_mirror_or_from_a_claim_starts_read_only() {
    let c = Catalog::default();
    c.register("orders", "m1", [0; 16]);
    c.set_writable("orders", true);
    c.register("orders", "m1", [0; 16]);
    assert!(!c.is_read_only("orders"), "the same mirror's stopped topic stays writable");
    c.register("orders", "m2", [0; 16]);
    assert!(c.is_read_only("orders"), "another mirror's standing does not carry over");
    c.set_writable("claimed", true);
    assert!(c.claim("claimed", "m1"));
    c.set_writable("claimed", true);
    c.register("claimed", "m1", [0; 16]);
    assert!(c.is_read_only("claimed"), "a claim has no standing to carry over");
}

#[test]
fn a_guarded_claim_refuses_client_writes_by_name_and_holds_unknown_ids_back_until_registered() {
    let c = Catalog::default();
    assert!(c.claim("orders", "m1"));
    assert!(!c.ids_pending(), "a claim alone holds nothing back");
    assert!(c.guard("orders", "m1"), "its own mirror guards it before creating the topic");
    assert!(c.is_read_only("orders"), "no client write lands while the topic is created");
    assert_eq!(c.read_only("orders").as_deref(), Some("m1"), "the refusal names the mirror");
    assert!(c.ids_pending(), "its id is not known yet: requests by unknown ids wait");
    assert!(!c.is_mirror_topic("orders") && !c.may_hold_fillers("orders"), "not a mirror topic yet");
    c.register("orders", "m1", [7; 16]);
    assert!(c.is_read_only("orders") && c.is_read_only_id(&[7; 16]), "registered: read-only by name and id");
    assert!(!c.ids_pending(), "the guard ended with the registration, and the id is known");
}

#[test]
fn only_its_own_mirror_guards_a_claim_and_a_registered_topic_keeps_its_standing() {
    let c = Catalog::default();
    assert!(!c.guard("unclaimed", "m1"), "nothing to guard");
    assert!(!c.is_read_only("unclaimed"));
    assert!(c.claim("orders", "m1"));
    assert!(!c.guard("orders", "m2"), "another mirror's claim");
    assert!(!c.is_read_only("orders") && !c.ids_pending(), "and nothing changed");
    c.register("stopped", "m1", [8; 16]);
    c.set_writable("stopped", true);
    assert!(c.guard("stopped", "m1"), "its own registered topic");
    assert!(!c.is_read_only("stopped"), "a stopped topic stays writable");
    assert!(!c.ids_pending());
}

#[test]
fn a_lifted_or_dropped_guard_lets_writes_through_again_and_stops_holding_ids_back() {
    let c = Catalog::default();
    assert!(c.claim("foreign", "m1") && c.guard("foreign", "m1"));
    assert!(c.guard("foreign", "m1"), "guarding twice counts once");
    c.unguard("foreign", "m1");
    assert!(!c.is_read_only("foreign"), "a topic found not to be the mirror's keeps its writers");
    assert!(!c.ids_pending(), "lifted once for both guards");
    assert_eq!(c.owner("foreign").as_deref(), Some("m1"), "the claim stays");

    assert!(c.claim("half-created", "m1") && c.guard("half-created", "m1"));
    c.drop_claims();
    assert!(!c.is_read_only("half-created") && !c.ids_pending(), "an ended term's guard goes with its claim");

    assert!(c.claim("deleted", "m1") && c.guard("deleted", "m1"));
    c.remove("deleted");
    assert!(!c.ids_pending(), "a forgotten topic's guard is gone");

    assert!(c.claim("reloaded", "m1") && c.guard("reloaded", "m1"));
    c.reconcile(&std::collections::HashSet::new());
    assert!(!c.is_read_only("reloaded") && !c.ids_pending(), "a boot drops guarded claims like any claim");
}

#[test]
fn guarding_and_lifting_a_guard_are_published() {
    let c = Catalog::default();
    assert!(c.claim("orders", "m1"));
    let mut rx = c.changes();
    assert!(c.guard("orders", "m1"));
    assert!(rx.has_changed().expect("the catalog holds the sender"), "a guard");
    rx.borrow_and_update();
    assert!(c.guard("orders", "m1"));
    assert!(!rx.has_changed().expect("the catalog holds the sender"), "guarding again changes nothing");
    c.unguard("orders", "m1");
    assert!(rx.has_changed().expect("the catalog holds the sender"), "lifting it");
}

#[test]
fn a_client_write_let_through_to_a_claim_just_before_its_guard_delays_the_topic_s_creation() {
    let c = Catalog::default();
    assert!(c.claim("quiet", "m1") && c.guard("quiet", "m1"));
    assert_eq!(c.drain_before_create("quiet"), None, "nobody wrote to the name: created at once");

    assert!(c.claim("orders", "m1"));
    assert!(!c.is_read_only("orders"), "a claim not guarded yet lets the write through");
    assert!(c.guard("orders", "m1"));
    assert!(c.is_read_only("orders"), "guarded: refused (and not noted)");
    let wait = c.drain_before_create("orders").expect("a write went through just before the guard");
    assert!(
        wait > Duration::ZERO && wait <= super::ADMITTED_DRAIN,
        "waits out what may still be on its way: {wait:?}"
    );
    assert_eq!(c.drain_before_create("orders"), None, "waited once: a retried creation does not wait again");

    assert!(c.claim("admin", "m1"));
    assert_eq!(c.read_only("admin"), None, "an admin request naming the claim is let through too");
    c.drop_claims();
    assert_eq!(c.drain_before_create("admin"), None, "an ended term's notes go with its claims");
}
