//! kerf's controllers. They reach the cluster only through the [`ClusterApi`] trait and read
//! time only from the `now` they are given, so the same code runs in a cluster and in the
//! simulator.

pub mod api;

pub use api::{AnyObject, ApiError, ClusterApi, EventRecord, Object, WatchEvent};
pub use kerf_cloud::{Clock, Timestamp};
