//! In-process checks of the server entry point: `serve` takes a bound listener (port 0) and a
//! shutdown future. The upstream here is a scripted single-broker stand-in that answers
//! ApiVersions and Metadata, enough to check address rewriting, listener creation and shutdown
//! without a JVM; everything else is covered against real Kafka in tests/integration. The mirror
//! engine is off (it would create its state topic through the stand-in), and the stand-in closes
//! a connection that sends any other request rather than misreading it.

use std::time::Duration;

use bytes::Bytes;
use kafka_mirror_proxy::{Listeners, serve};
use kmp_config::Config;
use kmp_protocol::client::Connection;
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::frame::FrameReader;
use kmp_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use kmp_protocol::kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kmp_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::{Side, peek};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// A broker stand-in: node 7 at its own address; answers ApiVersions (announcing a Metadata
/// version newer than the proxy knows) and Metadata by API key, and closes the connection on any
/// other request.
async fn scripted_broker() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut frames = FrameReader::new(r, 1 << 20, Side::Client);
                while let Ok(Some(frame)) = frames.next().await {
                    let Ok(p) = peek::request(&frame) else { return };
                    let Some(reply) = answer(&frame, p.api_key, p.api_version, p.correlation_id, addr.port()) else {
                        return; // not ApiVersions or Metadata: this stand-in has no answer
                    };
                    if w.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr.to_string()
}

fn answer(frame: &Bytes, key: i16, version: i16, correlation_id: i32, port: u16) -> Option<Bytes> {
    if key == ApiKey::ApiVersions as i16 {
        let _ = decode_request::<ApiVersionsRequest>(frame, ApiKey::ApiVersions, version).expect("decode");
        let mut resp = ApiVersionsResponse::default();
        for (k, min, max) in [(18, 0, 4), (3, 0, 99)] {
            let mut v = ApiVersion::default();
            v.api_key = k;
            v.min_version = min;
            v.max_version = max;
            resp.api_keys.push(v);
        }
        return Some(encode_response(correlation_id, ApiKey::ApiVersions, version, &resp).expect("encode"));
    }
    if key != ApiKey::Metadata as i16 {
        return None;
    }
    let _ = decode_request::<MetadataRequest>(frame, ApiKey::Metadata, version).expect("decode");
    let mut resp = MetadataResponse::default();
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(7);
    b.host = StrBytes::from_static_str("127.0.0.1");
    b.port = i32::from(port);
    resp.brokers.push(b);
    Some(encode_response(correlation_id, ApiKey::Metadata, version, &resp).expect("encode"))
}

/// A node port base whose broker-7 port was free a moment ago: the port is taken from the
/// kernel (bound to port 0, then released), so the proxy's node listener for broker 7 does not
/// depend on a guessed block of ports being free (a guessed block failed about 1 run in 20 when
/// another process held a port in it).
fn free_block() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port.checked_sub(7).expect("an ephemeral port above 7")
}

#[tokio::test]
async fn serve_rewrites_brokers_to_node_listeners_clamps_versions_and_stops_on_shutdown() {
    let upstream = scripted_broker().await;
    let bootstrap = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy_addr = bootstrap.local_addr().expect("addr");
    let mut config = Config::default();
    config.upstream.bootstrap_servers = vec![upstream];
    config.listener.listen = proxy_addr.to_string();
    config.listener.advertised_host = Some("proxy.test".into());
    let base = free_block();
    config.listener.node_port_base = Some(base);
    config.engine.enabled = false; // the stand-in answers no CreateTopics for a state topic
    config.validate().expect("valid config");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(config, Listeners { bootstrap, admin: None }, async move {
        let _ = stop_rx.await;
    }));

    let mut conn = Connection::connect(&proxy_addr.to_string(), Duration::from_secs(5), "t")
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
        vec![(7, "proxy.test".to_owned(), i32::from(base) + 7)],
        "broker address points at the proxy"
    );

    let mut via_node = Connection::connect(&format!("127.0.0.1:{}", base + 7), Duration::from_secs(5), "t")
        .await
        .expect("the node listener exists before the client sees its address");
    assert!(via_node.send(&req, 12).await.is_ok(), "the node listener forwards to the broker");

    stop_tx.send(()).expect("signal");
    let result = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("serve returns after shutdown");
    assert!(result.expect("join").is_ok());
    drop(via_node);
    drop(conn);
}
