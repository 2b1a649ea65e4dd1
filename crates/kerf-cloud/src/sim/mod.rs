//! The simulated cloud: launches instances in virtual time.

pub mod config;

pub use config::{
    CustomInstanceType, CustomOffering, InstanceTypesSource, SimConfig, SimConfigError, UnavailableOffering,
};
