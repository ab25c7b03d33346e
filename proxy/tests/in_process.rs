//! In-process checks of the server entry point: `serve` takes a bound listener (port 0) and a
//! shutdown future. Behind it is the scripted single-broker stand-in of `support` (ApiVersions
//! and Metadata only), enough to check address rewriting, listener creation and shutdown without
//! a JVM; everything else is covered against real Kafka in tests/integration. The mirror engine
//! is off (it would create its state topic through the stand-in).

mod support;

use std::time::Duration;

use kmp_protocol::client::Connection;
use kmp_protocol::kafka_protocol::messages::MetadataRequest;
use support::{BROKER_ID, Proxy};

#[tokio::test]
async fn serve_rewrites_brokers_to_node_listeners_clamps_versions_and_stops_on_shutdown() {
    let proxy = Proxy::start(|c| c.listener.advertised_host = Some("proxy.test".into())).await;
    let base = proxy.node_port_base;

    let mut conn = Connection::connect(&proxy.kafka.to_string(), Duration::from_secs(5), "t")
        .await
        .expect("connect");
    let versions = conn.api_versions().await.expect("api versions");
    assert!(
        versions.contains(&(3, 0, 13)),
        "Metadata v99 from the broker is clamped to the audited 13: {versions:?}"
    );
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    let md = conn.send(&req, 12).await.expect("metadata");
    let brokers: Vec<_> = md.brokers.iter().map(|b| (b.node_id.0, b.host.as_str().to_owned(), b.port)).collect();
    assert_eq!(
        brokers,
        vec![(BROKER_ID, "proxy.test".to_owned(), i32::from(base) + BROKER_ID)],
        "broker address points at the proxy"
    );

    let mut via_node = Connection::connect(&format!("127.0.0.1:{}", i32::from(base) + BROKER_ID), Duration::from_secs(5), "t")
        .await
        .expect("the node listener exists before the client sees its address");
    assert!(via_node.send(&req, 12).await.is_ok(), "the node listener forwards to the broker");

    proxy.stop().await;
    drop(via_node);
    drop(conn);
}
