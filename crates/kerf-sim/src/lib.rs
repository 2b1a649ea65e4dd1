//! kerf's simulator: the cluster API in memory on a virtual clock, stand-ins for kube-scheduler,
//! kubelet, the node lifecycle controller and the workload controllers, the scenario loader and the reports. It runs kerf's real
//! controllers; it makes no provisioning decision of its own.

pub mod addresses;
pub mod chaos;
pub mod comparison;
pub mod daemonsets;
pub mod deployments;
pub mod driver;
pub mod kube_scheduler;
pub mod kubelet;
pub mod node_lifecycle;
pub mod owned_pods;
pub mod pod_writes;
pub mod report;
pub mod report_assembly;
pub mod report_buffers;
pub mod report_html;
pub mod report_quotas;
pub mod report_requests;
pub mod rng;
pub mod run_hooks;
pub mod scenario;
pub mod scenario_writer;
pub mod sim_cloud;
pub mod steps;
pub mod what_if;
pub mod workloads;
pub mod world;

pub use driver::{SimError, Simulation};
pub use report::Report;
pub use run_hooks::{NoHooks, RunHooks};
pub use scenario::{Scenario, ScenarioError};
pub use sim_cloud::SimCloud;
