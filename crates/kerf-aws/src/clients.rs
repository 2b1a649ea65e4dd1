//! The SDK clients the provider talks through, built once from one SDK configuration.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

/// Where the Price List API is asked (it serves every region's prices from there).
pub const PRICING_REGION: &str = "us-east-1";
/// How long one Price List API call may take, retries included: the built-in table prices
/// when it cannot answer, so a server that accepts the call and never answers must not stall
/// the launches waiting on prices.
pub const PRICING_TIMEOUT: Duration = Duration::from_secs(10);

/// One client per AWS service kerf uses, sharing a configuration (endpoint, region,
/// credentials, HTTP client).
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub iam: aws_sdk_iam::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub eks: aws_sdk_eks::Client,
    /// The Price List API, in [`PRICING_REGION`] whatever the region of the others.
    pub pricing: aws_sdk_pricing::Client,
    region: String,
}

impl AwsClients {
    /// Clients configured from the standard sources: `AWS_ENDPOINT_URL` (and the per-service
    /// `AWS_ENDPOINT_URL_EC2`, ...), `AWS_REGION` / profile, and the default credential chain.
    pub async fn from_env() -> Result<AwsClients, crate::Error> {
        let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
        AwsClients::from_sdk_config(&config)
    }

    /// Clients sharing an already loaded configuration. Fails when it has no region.
    pub fn from_sdk_config(config: &SdkConfig) -> Result<AwsClients, crate::Error> {
        let region = config
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| crate::Error::Config("no AWS region: set AWS_REGION or a profile's region".to_string()))?;
        Ok(AwsClients {
            ec2: aws_sdk_ec2::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            iam: aws_sdk_iam::Client::new(config),
            sqs: aws_sdk_sqs::Client::new(config),
            eks: aws_sdk_eks::Client::new(config),
            pricing: aws_sdk_pricing::Client::from_conf(
                aws_sdk_pricing::config::Builder::from(config)
                    .region(Region::new(PRICING_REGION))
                    .timeout_config(
                        config
                            .timeout_config()
                            .map(TimeoutConfig::to_builder)
                            .unwrap_or_default()
                            .operation_timeout(PRICING_TIMEOUT)
                            .build(),
                    )
                    .build(),
            ),
            region,
        })
    }

    /// The region every client talks to.
    pub fn region(&self) -> &str {
        &self.region
    }
}
