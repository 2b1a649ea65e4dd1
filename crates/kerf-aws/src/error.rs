//! AWS API errors, reduced to what the provider decides on: the operation, the error code and
//! the message, and how each maps onto a [`CloudError`].

use std::fmt;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use kerf_cloud::CloudError;

/// One failed AWS call.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsError {
    /// `ec2:CreateFleet`, `ssm:GetParameter`, ...
    pub operation: &'static str,
    /// The service's error code (`InvalidInstanceID.NotFound`), absent for transport failures.
    pub code: Option<String>,
    pub message: String,
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{}: {code}: {}", self.operation, self.message),
            None => write!(f, "{}: {}", self.operation, self.message),
        }
    }
}

impl std::error::Error for AwsError {}

impl AwsError {
    /// An error raised by kerf itself about a call's answer.
    pub fn new(operation: &'static str, message: impl Into<String>) -> Self {
        AwsError { operation, code: None, message: message.into() }
    }

    /// Captures an SDK error: the service's code and message when it answered, else the
    /// transport failure with its sources.
    pub fn from_sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: fmt::Debug,
    {
        let code = err.code().map(str::to_string);
        let message = match err.message() {
            Some(m) => m.to_string(),
            None => {
                // The whole chain: "dispatch failure: io error: Connection refused".
                let mut text = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(s) = source {
                    text.push_str(": ");
                    text.push_str(&s.to_string());
                    source = s.source();
                }
                text
            }
        };
        AwsError { operation, code, message }
    }

    pub fn code_is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    /// The named resource does not exist (any more).
    pub fn is_not_found(&self) -> bool {
        self.code.as_deref().is_some_and(|c| {
            c.ends_with(".NotFound")
                || c.ends_with("NotFoundException")
                || c == "NoSuchEntity"
                || c == "ParameterNotFound"
                || c == "InvalidInstanceID.Malformed"
                || c == "AWS.SimpleQueueService.NonExistentQueue"
        })
    }

    /// The answer of a dry run that would have succeeded.
    pub fn is_dry_run_success(&self) -> bool {
        self.code_is("DryRunOperation")
    }

    /// The caller may not make this call.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self.code.as_deref(), Some("UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException"))
    }
}

/// Error codes of CreateFleet that mean "no capacity for this offering now": the offering is
/// marked unavailable and another one is tried.
pub const INSUFFICIENT_CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "ReservationCapacityExceeded",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "UnfulfillableCapacity",
    "Unsupported",
    "VcpuLimitExceeded",
    "InsufficientFreeAddressesInSubnet",
];

pub fn is_insufficient_capacity(code: &str) -> bool {
    INSUFFICIENT_CAPACITY_CODES.contains(&code)
}

impl From<AwsError> for CloudError {
    fn from(e: AwsError) -> Self {
        CloudError::Other(e.to_string())
    }
}
