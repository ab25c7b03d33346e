//! The mirror engine: background streams that copy source-cluster partitions into the
//! destination so every record keeps its source offset (KIP-1279 §5, our §11.3 design).
//! Client-facing proxying does not belong here. Each folder owns one concern; each imports only
//! from those listed above it:
//!
//! - `error`, `lease`, `backoff`: the engine's error type, the lease every write is fenced by, and
//!   the one retry pause (also the proxy's);
//! - `cluster/`: reaching a cluster on the wire (client, connections, Fetch, Produce, group requests);
//! - `topics/`: which topics and groups a mirror selects, which topic configs are copied,
//!   creating destination topics;
//! - `state/`: the state topic (key schema, records, store), progress and sync status, the boot
//!   gate and the catalog of mirror topics;
//! - `copy/`: the copy path, fetch → plan → produce, one task per partition;
//! - `ha/`: several instances — election, shared work, forwarded requests;
//! - `control/`: pause, resume, stop, the mirror definitions and settings, the views, and the
//!   KIP-1279 mirror RPCs answered with them;
//! - `context`: what every mirror of a term shares;
//! - `follow/`: following the state topic on an instance that runs no mirrors;
//! - `sync/`: metadata sync (group offsets, share-group offsets, topic configs);
//! - `failback/`: taking a topic back after a failover (the source proxy's line, incremental or
//!   quarantine and restore);
//! - `mirrors/`: a mirror's topic discovery and a topic's lifecycle;
//! - `engine/`: [`Engine`], [`follow`], [`auto`] (every engine is elected) and the terms' boot.

mod cluster;
mod context;
mod control;
mod copy;
mod engine;
mod error;
mod failback;
mod follow;
mod ha;
mod lease;
mod mirrors;
mod state;
mod sync;
mod topics;

pub use cluster::client::{ClusterClient, ENGINE_CLIENT_ID};
pub use cluster::io_stats::{IoCounters, io_counters};
pub use control::definitions::{MAX_MIRROR_NAME_LEN, invalid_mirror_name};
pub use control::handle::Control;
pub use control::rpc::{described_partition, needs_engine as rpc_needs_engine};
pub use control::{LOADING, MirrorListing, PartitionDetail, TopicResult, codes};
pub use copy::budget::Budget;
pub use copy::txn::TXN_ID_PREFIX;
pub use engine::auto::{ElectionView, EngineSlot, auto};
pub use engine::{ENGINE_VERSION, Engine, EngineLinks, follow};
pub use error::MirrorError;
pub use failback::{Preview as FailbackPreview, PreviewPartition as FailbackPreviewPartition};
pub use follow::follower::FollowProgress;
pub use ha::election::{ELECTION_CLIENT_ID, PROTOCOL_TYPE as ELECTION_PROTOCOL_TYPE};
pub use ha::forward::{ForwardError, Forwarding};
pub use ha::share::{Share, owner_index};
pub use kmp_protocol::Backoff;
pub use lease::Lease;
pub use state::catalog::{Catalog, CatalogTopic};
pub use state::records::{Desired, How, MirrorRecord, Named, Origin, PartitionRecord, Stored, TopicRecord};
pub use state::status::{PartitionKey, PartitionState, PartitionStatus, Recent, StatusBoard, now_ms};
pub use state::store::StateStore;
pub use state::sync_status::{SyncKind, SyncStatus};
pub use topics::configs::{FORCED_CONFIGS, NEVER_COPIED};
