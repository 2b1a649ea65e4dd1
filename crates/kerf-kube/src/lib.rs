//! The kube layer: kerf's controllers in a real cluster, over kube-rs. [`api::KubeApi`] is the
//! controllers' cluster API; [`watch`] feeds their state from one watcher per kind (with
//! relists; pods decoded slim, `kerf_api::slim_pod`); [`lease`] is leader election; [`recorder`] writes the controllers' events
//! (deduplicated, rate-limited, in the background); [`metrics`] and [`endpoints`] serve
//! Prometheus metrics with Karpenter's names and the health probes; [`runtime`] drives it all on the wall
//! clock; [`kwok::KwokProvider`] launches "instances" as Node objects. No decision lives here:
//! every decision is the controllers'.

pub mod api;
pub mod endpoints;
pub mod kinds;
pub mod kwok;
pub mod lease;
pub mod metrics;
pub mod recorder;
pub mod runtime;
pub mod watch;
