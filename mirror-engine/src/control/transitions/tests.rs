//! Which term takes a topic up, and the waits of the state changes: they wake on the catalog's,
//! the runtimes' and the board's changes, not on a timer (the tests run on a paused clock, so a
//! polling wait would show as elapsed time).

use std::sync::Arc;

use kmp_config::MirrorConfig;
use tokio::sync::watch;

use super::super::{TermParts, TopicRuntime, term_for_tests};
use super::*;
use crate::state::catalog::Catalog;
use crate::state::status::StatusBoard;
use crate::state::store::StateStore;

fn term(catalog: &Catalog) -> TermControl {
    let parts = TermParts {
        store: Some(Arc::new(StateStore::empty_for_tests())),
        ..TermParts::none(Vec::new())
    };
    let control = term_for_tests(StatusBoard::default(), catalog.clone(), parts);
    control.add_mirror(MirrorConfig::new("m1", vec!["source:9092".into()]));
    control.mark_booted();
    control
}

fn runtime(mirror: &str, partitions: usize) -> TopicRuntime {
    TopicRuntime {
        mirror: mirror.to_owned(),
        partitions,
        desired: watch::channel(Desired::Mirroring).0,
        spawn: Arc::new(|_| {}),
    }
}

#[test]
fn a_term_takes_each_topic_up_once_and_the_next_term_takes_the_stored_ones_up_again() {
    let catalog = Catalog::default();
    // Boot registers what the state topic records as m1's.
    catalog.register("orders", "m1", [0; 16]);
    let first = term(&catalog);
    assert!(!first.claim_topic("orders", "m2"), "another mirror cannot take a stored topic");
    assert!(first.claim_topic("orders", "m1"), "its own mirror takes it up");
    assert!(!first.claim_topic("orders", "m1"), "and only once per term");
    let second = term(&catalog);
    assert!(second.claim_topic("orders", "m1"), "the next term takes it up again");
    assert_eq!(second.claimed_by("orders").as_deref(), Some("m1"), "one owner, the catalog's");
    second.forget_topic("orders");
    assert_eq!(first.claimed_by("orders"), None, "a deleted mirror's topic is gone for every term");
    assert!(!catalog.is_read_only("orders"), "and writable");
    assert!(second.claim_topic("orders", "m2"), "free for any mirror");
}

#[tokio::test(start_paused = true)]
async fn a_check_waits_for_the_topic_being_prepared_and_wakes_when_it_runs() {
    let catalog = Catalog::default();
    let control = term(&catalog);
    assert!(control.claim_topic("orders", "m1"), "the discovery loop claims it and prepares it");
    let start = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let control = control.clone();
        async move { control.check("m1", "orders").await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "still being prepared");
    control.add_topic("orders", runtime("m1", 3));
    let (desired, partitions) = waiting.await.expect("the check ran").expect("the topic runs now");
    assert_eq!((desired, partitions), (Desired::Mirroring, 3));
    assert_eq!(start.elapsed(), Duration::ZERO, "woken by the change, not by a timer");
}

#[tokio::test(start_paused = true)]
async fn a_check_ends_at_once_when_the_topic_it_waits_for_is_released() {
    let catalog = Catalog::default();
    let control = term(&catalog);
    assert!(control.claim_topic("orders", "m1"));
    let start = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let control = control.clone();
        async move { control.check("m1", "orders").await }
    });
    tokio::task::yield_now().await;
    control.forget_topic("orders");
    let refused = waiting.await.expect("the check ran").expect_err("the topic is no longer m1's");
    assert_eq!(refused.error_code, codes::TOPIC_NOT_IN_CLUSTER_MIRROR);
    assert_eq!(start.elapsed(), Duration::ZERO, "answered on the change, not after a timeout");
    let never = control.check("m1", "other").await.expect_err("never m1's");
    assert_eq!(never.error_code, codes::TOPIC_NOT_IN_CLUSTER_MIRROR);
}

#[tokio::test(start_paused = true)]
async fn a_check_of_a_topic_that_never_finishes_preparing_gives_up_after_the_boot_wait() {
    let catalog = Catalog::default();
    let control = term(&catalog);
    assert!(control.claim_topic("orders", "m1"));
    let start = tokio::time::Instant::now();
    let refused = control.check("m1", "orders").await.expect_err("never prepared");
    assert_eq!(refused.error_code, codes::TOPIC_NOT_IN_CLUSTER_MIRROR);
    assert_eq!(start.elapsed(), BOOT_WAIT);
}

#[tokio::test(start_paused = true)]
async fn waiting_for_every_partition_wakes_on_their_states_and_times_out_otherwise() {
    let catalog = Catalog::default();
    let control = term(&catalog);
    let key = |p: i32| ("m1".to_owned(), "orders".to_owned(), p);
    let start = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let control = control.clone();
        async move { control.wait_all("m1", "orders", 2, PartitionState::Paused).await }
    });
    tokio::task::yield_now().await;
    let board = control.status_board().clone();
    board.update(&key(0), |s| s.state = PartitionState::Paused);
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "partition 1 is still copying");
    board.update(&key(1), |s| s.destination_next_offset = 10);
    board.update(&key(1), |s| s.state = PartitionState::Paused);
    assert_eq!(waiting.await.expect("the wait ran"), Halt::Reached, "both paused");
    assert_eq!(start.elapsed(), Duration::ZERO, "woken by the state changes, not by a timer");

    let start = tokio::time::Instant::now();
    assert_eq!(
        control.wait_all("m1", "orders", 3, PartitionState::Paused).await,
        Halt::TimedOut,
        "partition 2 never pauses"
    );
    assert_eq!(start.elapsed(), HALT_TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_the_partitions_ends_when_its_term_ends_not_after_the_halt_timeout() {
    // Seed 127 of the differential test: a pause arrived as the term lost its lease; the
    // term's partition tasks never reported again (the next term has a board of its own),
    // and the answer came after 60 s as REQUEST_TIMED_OUT though the topic was paused.
    let (stop, ended) = watch::channel(false);
    let parts = TermParts {
        store: Some(Arc::new(StateStore::empty_for_tests())),
        ended: Some(ended),
        ..TermParts::none(Vec::new())
    };
    let control = term_for_tests(StatusBoard::default(), Catalog::default(), parts);
    let start = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let control = control.clone();
        async move { control.wait_all("m1", "orders", 2, PartitionState::Paused).await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "the term still runs and no partition paused");
    stop.send_replace(true);
    assert_eq!(waiting.await.expect("the wait ran"), Halt::TermEnded);
    assert_eq!(start.elapsed(), Duration::ZERO, "answered when the term ended, not after a timeout");
    assert_eq!(
        control.wait_all("m1", "orders", 2, PartitionState::Paused).await,
        Halt::TermEnded,
        "an ended term waits for nothing"
    );

    let (stop, ended) = watch::channel(false);
    let parts = TermParts {
        ended: Some(ended),
        ..TermParts::none(Vec::new())
    };
    let control = term_for_tests(StatusBoard::default(), Catalog::default(), parts);
    let waiting = tokio::spawn({
        let control = control.clone();
        async move { control.wait_all("m1", "orders", 1, PartitionState::Stopped).await }
    });
    tokio::task::yield_now().await;
    drop(stop);
    assert_eq!(waiting.await.expect("the wait ran"), Halt::TermEnded, "a term whose engine is gone has ended");
    assert_eq!(start.elapsed(), Duration::ZERO);
}
