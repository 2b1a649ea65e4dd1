//! kerf's simulator: the cluster API in memory on a virtual clock, stand-ins for kube-scheduler,
//! kubelet and the workload controllers, the scenario loader and the reports. It runs kerf's real
//! controllers; it makes no provisioning decision of its own.

pub mod cluster;
pub mod rng;
pub mod report;
pub mod selector;
pub mod workloads;

pub use cluster::SimCluster;
