//! The simulated cloud: launches instances in virtual time.

pub mod config;
mod custom;
pub mod images;
pub mod nodeclass;
pub mod provider;
pub mod reservations;
pub mod spot_market;

pub use config::{
    CustomInstanceType, CustomOffering, InstanceTypesSource, SimConfig, SimConfigError, UnavailableOffering,
};
pub use provider::{ExistingInstance, ICE_CACHE_TTL, Interruption, SPOT_RECLAIM_AFTER, SimInstance, SimProvider};
pub use reservations::CapacityReservation;
pub use spot_market::SpotMarket;
