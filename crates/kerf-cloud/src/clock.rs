//! The wall clock, and deadlines on a provider's clock ([`add`]). The [`Clock`] seam, [`Timestamp`] and the simulator's [`ManualClock`] live in
//! `kerf_api::clock`, below every layer that reads time (the API server included).

use std::time::Duration;

pub use kerf_api::clock::{Clock, ManualClock, Timestamp};

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

/// `t + d`, saturating at the clock's range instead of failing.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    let ms = t.as_millisecond().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millisecond(ms).unwrap_or(t)
}
