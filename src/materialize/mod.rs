//! Typed layout → desired Kubernetes objects (pure rendering, names and content hashes).
//!
//! - [`names`]: object names (content-addressed, at most 63 characters), digests and revisions.
//! - [`hash`]: canonical JSON and sha256 content hashes.
//! - [`render`]: [`render_cluster`] / [`render_all`] turn a validated
//!   [`ClusterDir`](crate::layout::ClusterDir) and a [`RenderContext`] into a [`DesiredCluster`].
//! - [`rollout`]: a validated rollout file into its `FleetRollout`, and each cluster's run of it.
//! - [`pinned`]: a pinned inventory directory read back from its ConfigMaps.
//! - [`fleet`]: which `FleetRollout` objects to write or delete, and the writes.
//! - [`shared`]: the ConfigMaps the whole fleet shares (one file's content each), and their sweep.
//! - [`preflight`]: a rendered cluster's pre-flight against its live objects, pinned into new operations.

pub mod apply;
pub mod fleet;
pub mod hash;
pub mod names;
pub mod pinned;
pub mod preflight;
pub mod render;
pub mod rollout;
pub mod shared;
pub mod state;

pub use hash::{canonical_json, content_hash, sha256_hex, sha8};
pub use names::{
    config_map_name, name_with_suffix, operation_digest, operation_name, revision_string,
    scheduled_operation_name, shorten_name, ContentKind, MAX_NAME_LEN,
};
pub use render::{
    queue_position, render_all, render_cluster, to_yaml_stream, Attribution, DesiredCluster, RenderContext,
    RenderError, ZERO_SHA,
};
