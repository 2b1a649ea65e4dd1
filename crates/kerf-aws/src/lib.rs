//! kerf's AWS cloud provider: [`kerf_cloud::CloudProvider`] over EC2 with aws-sdk-rust.
//!
//! Its own crate so that the core crates and the `kerf simulate` binary build without the AWS SDK.
//! Endpoint, region and credentials come from the SDK's standard sources (`AWS_ENDPOINT_URL`,
//! `AWS_REGION`, the credential chain), so the same code runs against EC2 and against a local
//! EC2 API implementation in tests.
//!
//! - [`nodeclass`]: EC2NodeClass resolution and status;
//! - [`launch`]: user data, launch templates, CreateFleet;
//! - [`instances`]: provider IDs, describe / list / terminate (only this cluster's instances);
//! - [`instance_types`]: types, zones and prices; [`pricing`]: on-demand prices;
//! - [`reservations`]: capacity reservations and their `reserved` offerings;
//! - [`interruption`]: the SQS interruption queue;
//! - [`provider`]: [`AwsProvider`], which ties them together.

pub mod base64;
pub mod clients;
pub mod eks;
pub mod error;
pub mod instance_types;
pub mod instances;
pub mod interruption;
pub mod launch;
pub mod nodeclass;
pub mod pricing;
pub mod provider;
pub mod reservations;
pub mod settings;
pub mod tags;

// The SDK crates the clients are of, for callers that configure them or call EC2 themselves
// (the `kerf` binary's end-to-end test) without depending on the SDK directly.
pub use {aws_config, aws_sdk_ec2, aws_sdk_eks};

pub use clients::AwsClients;
pub use error::AwsError;
pub use interruption::{InterruptionEvent, InterruptionKind, InterruptionQueue};
pub use provider::AwsProvider;
pub use settings::AwsSettings;

/// The provider cannot be set up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("AWS configuration: {0}")]
    Config(String),
}
