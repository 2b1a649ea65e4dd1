//! The cloud layer: the [`CloudProvider`] seam, time, the built-in AWS instance catalog, and the
//! simulated provider.

pub mod clock;
pub mod provider;

pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use provider::{CloudError, CloudProvider};
