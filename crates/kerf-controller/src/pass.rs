//! One run of one reconciler ([`Pass`]): when it runs, when it must run again, whether it
//! wrote anything; and the timings every reconciler retries by.

use std::time::Duration;

use kerf_api::cluster::ApiError;
use kerf_cloud::Timestamp;

use crate::error::ControllerError;
use crate::util;

/// How long to wait before retrying a write that lost a race (conflict, not found).
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long pods that fit nowhere wait before the provisioner tries them again unprompted.
pub(crate) const UNSCHEDULABLE_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long to wait before retrying a launch that failed for a reason other than capacity.
pub(crate) const LAUNCH_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Writes (or cloud calls) a reconciler keeps in flight at once when it has many independent
/// ones to make (a burst of new claims, their launches, nominations, a drain's evictions):
/// enough that a round trip's latency does not limit a burst of thousands, few enough not to
/// crowd out the API server's other clients. Answers are taken in the order the calls were made, so what a pass records
/// does not depend on which answer came first.
pub(crate) const IN_FLIGHT: usize = 16;

/// One run of one reconciler: when it runs, when it must run again, whether it wrote anything.
#[derive(Debug)]
pub(crate) struct Pass {
    pub now: Timestamp,
    pub wake: Option<Timestamp>,
    /// A write of this pass went through (a failure after it does not grow the backoff).
    pub progressed: bool,
}

impl Pass {
    pub fn new(now: Timestamp) -> Self {
        Pass { now, wake: None, progressed: false }
    }

    pub fn wake_at(&mut self, t: Timestamp) {
        self.wake = util::earliest(self.wake, Some(t));
    }

    pub fn wake_after(&mut self, d: Duration) {
        let t = util::after(self.now, d);
        self.wake_at(t);
    }

    /// Turns a write that lost a race into a retry, and a write the API server rejected into an
    /// error log (retrying it unchanged cannot help); any other API error is fatal.
    pub fn soft<T>(&mut self, what: &str, r: Result<T, ApiError>) -> Result<Option<T>, ControllerError> {
        match r {
            Ok(v) => {
                self.progressed = true;
                Ok(Some(v))
            }
            Err(e @ (ApiError::Conflict { .. } | ApiError::NotFound { .. } | ApiError::AlreadyExists { .. })) => {
                tracing::debug!(error = %e, "{what}: retrying");
                self.wake_after(RETRY_AFTER);
                Ok(None)
            }
            Err(e @ ApiError::Invalid { .. }) => {
                tracing::error!(error = %e, "{what} failed");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}
