//! The one in-memory Kubernetes API server: objects with uids, resourceVersions, generateName,
//! finalizers and deletionTimestamp, the status subresource, merge and JSON patches, watches and
//! eviction honouring PodDisruptionBudgets. The simulator drives it, controller tests use it,
//! and `kerf serve` serves it over HTTP.

pub mod access;
pub mod admission;
pub mod apply;
pub mod budget_status;
pub mod cluster;
pub mod custom;
pub mod discovery;
pub mod dry_run;
pub mod field_validation;
pub mod history;
pub mod http;
pub mod jsonpath;
pub mod kinds;
pub mod managed;
pub mod media;
pub mod metrics_api;
pub mod openapi;
mod parts;
mod patch;
pub mod pod_form;
pub mod proto;
pub mod requests;
pub mod rest;
mod scale;
pub mod selectors;
pub mod server_fields;
pub mod services;
mod status;
pub mod stored;
pub mod strategic;
pub mod table;
pub mod value_validation;
pub mod writes;

pub use cluster::SimCluster;
pub use pod_form::PodForm;
pub use server_fields::ServerFields;
pub use stored::{DynamicObject, Stored};
pub use writes::{ChangeType, Commit, Mode, Part, Preconditions};
