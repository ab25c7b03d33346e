//! The election against a coordinator that accepts a connection, reads what it is sent and never
//! answers: every request the election sends is bounded, so the session ends with an error (and
//! the election starts over) instead of hanging with a stale role.

use std::time::Duration;

use kmp_protocol::client::Connection;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::*;
use crate::ha::election::{Role, Sharing};

/// A listener that takes every connection and reads it forever without writing a byte.
async fn silent_coordinator() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// `waited` is `limit` (the paused clock's timers fire on the millisecond after it).
fn assert_bounded(waited: Duration, limit: Duration) {
    assert!(
        waited >= limit && waited <= limit + Duration::from_millis(5),
        "gave up after {waited:?}, not at its bound {limit:?}"
    );
}

fn settings() -> ElectionSettings {
    ElectionSettings {
        group_id: "g".into(),
        instance_id: "i".into(),
        session_timeout: Duration::from_secs(6),
        heartbeat_interval: Duration::from_secs(1),
        share_work: false,
    }
}

fn member(destination: ClusterClient) -> Member {
    Member {
        destination,
        settings: settings(),
        member_id: "m-1".into(),
        generation: 3,
        sitting: None,
        lease: None,
        role: watch::channel(Role::Standby {
            generation: -1,
            active_instance: String::new(),
        })
        .0,
        problem: watch::channel(None).0,
        decided: false,
        sharing: Sharing::unread(),
        round: 0,
        join_sent: tokio::time::Instant::now(),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_join_group_the_coordinator_never_answers_ends_after_the_rebalance_timeout_and_a_margin() {
    let addr = silent_coordinator().await;
    let destination = ClusterClient::new("destination", vec![addr.clone()], Duration::from_secs(5));
    let mut conn = Connection::connect(&addr, Duration::from_secs(5), "t").await.expect("connect");
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let outcome = join_group(&destination, &settings(), "", (false, 0), &mut conn).await;
    let waited = started.elapsed();
    let Err(e) = outcome else {
        panic!("a JoinGroup nobody answers must fail, not decide anything")
    };
    assert!(e.to_string().contains("JoinGroup unanswered"), "the error names the request: {e}");
    assert_bounded(waited, settings().session_timeout + JOIN_MARGIN);
}

#[tokio::test(flavor = "current_thread")]
async fn a_sync_group_the_coordinator_never_answers_ends_after_the_session_timeout() {
    let addr = silent_coordinator().await;
    let destination = ClusterClient::new("destination", vec![addr.clone()], Duration::from_secs(5));
    let mut conn = Connection::connect(&addr, Duration::from_secs(5), "t").await.expect("connect");
    let mut m = member(destination);
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let joined = Joined {
        leader: true,
        members: vec![("m-1".into(), None)],
    };
    let Err(e) = m.sync(&mut conn, &joined).await else {
        panic!("a SyncGroup nobody answers must fail")
    };
    assert!(e.to_string().contains("SyncGroup unanswered"), "the error names the request: {e}");
    assert_bounded(started.elapsed(), settings().session_timeout);
}
