//! kerf's controllers. They reach the cluster only through the [`ClusterApi`] trait and read
//! time only from the `now` they are given, so the same code runs in a cluster and in the
//! simulator.
//!
//! [`Manager`] runs them: feed it every watch event with [`Manager::observe`], then call
//! [`Manager::reconcile`] with the current time; it answers when it must run again.

pub mod api;
mod lifecycle;
pub mod manager;
mod nodepool;
mod provisioner;
pub mod state;
mod util;

pub use api::{AnyObject, ApiError, ClusterApi, EventRecord, Object, WatchEvent};
pub use kerf_cloud::{Clock, Timestamp};
pub use manager::{ControllerError, Manager, Options};
pub use state::{ClusterState, ObjectKey};

#[cfg(test)]
mod provisioning_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
