//! The cloud layer: the [`CloudProvider`] seam, time, the built-in AWS instance catalog, and the
//! simulated provider.

pub mod aws;
pub mod clock;
pub mod nodeclass_ready;
pub mod provider;
pub mod repair;
pub mod sim;

pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use provider::{
    CloudError, CloudProvider, InterruptionKind, InterruptionNotice, KWOK_PROVIDER_ID_PREFIX, NodeClassResolution,
};

/// Drives a future that completes without waiting (the simulated provider's always do) to its
/// result on the current thread, polling with a waker that does nothing.
pub fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        // Nothing will wake us: a future that is not ready yet is simply polled again.
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Pending on its first poll, ready with 7 on the second.
    struct ReadySecondTime(bool);

    impl Future for ReadySecondTime {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<u32> {
            if self.0 {
                Poll::Ready(7)
            } else {
                self.0 = true;
                Poll::Pending
            }
        }
    }

    #[test]
    fn block_on_returns_a_ready_future_and_repolls_a_pending_one() {
        assert_eq!(super::block_on(async { 3 }), 3);
        assert_eq!(super::block_on(ReadySecondTime(false)), 7);
    }
}
