//! Time as controllers, providers and the in-memory API server see it: the [`Clock`] they read
//! and the virtual clock the simulator moves. The wall clock (`SystemClock`) is the cloud layer's:
//! this crate does no I/O.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

pub use k8s_openapi::jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// A clock that only moves when told to (shared by clones). Millisecond resolution.
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// The simulator's epoch: 2025-01-01T00:00:00Z.
    pub const EPOCH_MILLIS: i64 = 1_735_689_600_000;

    pub fn new() -> Self {
        ManualClock { millis: Arc::new(AtomicI64::new(Self::EPOCH_MILLIS)) }
    }

    pub fn set(&self, t: Timestamp) {
        self.millis.store(t.as_millisecond(), Ordering::SeqCst);
    }

    pub fn advance(&self, by: std::time::Duration) {
        self.millis.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }

    /// Seconds since the epoch, as the simulator reports them.
    pub fn elapsed_secs(&self) -> f64 {
        (self.millis.load(Ordering::SeqCst) - Self::EPOCH_MILLIS) as f64 / 1000.0
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        // The stored value always comes from a valid timestamp or a small advance of one.
        Timestamp::from_millisecond(self.millis.load(Ordering::SeqCst)).unwrap_or(Timestamp::UNIX_EPOCH)
    }
}
