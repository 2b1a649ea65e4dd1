//! What every event recorder does with the [`EventRecord`]s the controllers emit before they
//! become core/v1 Event objects, as one pure, synchronous type on an injected clock, so that
//! `kerf controller` (`kerf-kube`'s recorder, which adds a rate limit and a background writer)
//! and `kerf serve` (the in-memory API server's Event objects) behave alike.
//!
//! Identical events within a window are recorded once, as Karpenter's `events.Recorder` does
//! with its TTL cache: two minutes for most events, five for `FailedScheduling`. Identical means
//! the same object, reason and message, the message compared apart from its numbers
//! ([`same_apart_from_numbers`]): "0/17 nodes are available" and "0/18 nodes are available", or
//! two countdowns, say the same thing, and the provisioner repeats `FailedScheduling` for a pod
//! on every retry with whatever the counts are then. Karpenter keys most events by the object
//! alone, so a new message within the window is lost there; here a message that says something
//! new (a pod's new reason, a node's new blocking reason) is recorded at once. The price: two
//! messages that differ only in the digits of a name they carry count as one within the window.
//!
//! An emitter that re-evaluates every pass (the disruption controller's `DisruptionBlocked`)
//! also compares with [`same_apart_from_numbers`] and emits only when the cause changed, so its
//! events do not come back every window either.
//!
//! The controllers' own event log (the simulator's, the test kit's) keeps every event emitted:
//! the window applies where events become Event objects.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::cluster::EventRecord;

/// An identical event is not recorded again within this (Karpenter's default).
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(2 * 60);

/// The window for `FailedScheduling`, which the provisioner repeats on every retry of a pod it
/// cannot place (Karpenter's for the same event).
pub const FAILED_SCHEDULING_DEDUPE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// How long an event with this reason is not recorded again.
pub fn dedupe_window(reason: &str) -> Duration {
    match reason {
        "FailedScheduling" => FAILED_SCHEDULING_DEDUPE_WINDOW,
        _ => DEDUPE_WINDOW,
    }
}

/// Expired entries are swept once the cache holds at least this many.
const MIN_SWEEP: usize = 1024;

/// (kind, name, reason, the message with each number as `#`): what makes two events identical.
type Key = (&'static str, String, String, String);

fn key(event: &EventRecord) -> Key {
    let message = gist(&event.message).map(|c| c.unwrap_or('#')).collect();
    (event.kind, event.name.clone(), event.reason.clone(), message)
}

/// The events recorded recently, each with the instant its window closes.
#[derive(Debug, Default)]
pub struct EventDedupe {
    until: HashMap<Key, Timestamp>,
    /// The size at which expired entries are swept next (twice the size after the last sweep,
    /// so sweeping costs O(1) per event and the cache holds at most twice what is live).
    sweep_at: usize,
}

impl EventDedupe {
    pub fn new() -> Self {
        EventDedupe::default()
    }

    /// Whether an identical event was recorded within its window before `now`.
    pub fn is_repeat(&self, event: &EventRecord, now: Timestamp) -> bool {
        self.until.get(&key(event)).is_some_and(|until| now < *until)
    }

    /// Notes that `event` is recorded at `now`: identical ones are repeats until its window closes.
    pub fn remember(&mut self, event: &EventRecord, now: Timestamp) {
        if self.until.len() >= self.sweep_at.max(MIN_SWEEP) {
            self.until.retain(|_, until| now < *until);
            self.sweep_at = 2 * self.until.len();
        }
        let until = now.saturating_add(dedupe_window(&event.reason)).unwrap_or(Timestamp::MAX);
        self.until.insert(key(event), until);
    }

    /// Whether to record `event` now (it is remembered if so).
    pub fn admit(&mut self, event: &EventRecord, now: Timestamp) -> bool {
        if self.is_repeat(event, now) {
            return false;
        }
        self.remember(event, now);
        true
    }

    /// How many events are remembered (expired ones included until the next sweep).
    pub fn len(&self) -> usize {
        self.until.len()
    }

    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }
}

/// Whether two messages say the same apart from their numbers: a countdown ("consolidatable in
/// 42s"), an age, a count of pods or nodes. An emitter that re-evaluates every pass compares the
/// new message with the last one this way and emits only when the cause changed.
pub fn same_apart_from_numbers(a: &str, b: &str) -> bool {
    gist(a).eq(gist(b))
}

/// The message's characters with each run of ASCII digits as one `None`.
fn gist(message: &str) -> impl Iterator<Item = Option<char>> + '_ {
    message
        .chars()
        .scan(false, |in_number, c| {
            let digit = c.is_ascii_digit();
            let item = match (digit, *in_number) {
                (true, true) => None,
                (true, false) => Some(None),
                (false, _) => Some(Some(c)),
            };
            *in_number = digit;
            Some(item)
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn event(name: &str, reason: &str, message: &str) -> EventRecord {
        EventRecord {
            kind: "Node",
            name: name.to_string(),
            uid: None,
            type_: "Normal",
            reason: reason.to_string(),
            message: message.to_string(),
        }
    }

    #[test]
    fn identical_events_within_the_window_are_recorded_once() {
        let mut d = EventDedupe::new();
        let e = event("n1", "DisruptionBlocked", "Cannot disrupt Node: pod a is annotated");
        assert!(d.admit(&e, at(0)));
        assert!(!d.admit(&e, at(1)));
        assert!(!d.admit(&e, at(119)));
        // The window is two minutes from the recorded one, not from the last repeat.
        assert!(d.admit(&e, at(120)));
        assert!(!d.admit(&e, at(200)));
        // Another object, another reason: not identical.
        assert!(d.admit(&event("n2", "DisruptionBlocked", "Cannot disrupt Node: pod a is annotated"), at(200)));
        assert!(d.admit(&event("n1", "DisruptionTerminating", "Cannot disrupt Node: pod a is annotated"), at(200)));
    }

    #[test]
    fn an_event_with_a_new_message_for_the_same_object_is_recorded() {
        let mut d = EventDedupe::new();
        assert!(d.admit(&event("n1", "DisruptionBlocked", "Cannot disrupt Node: budget"), at(0)));
        assert!(d.admit(&event("n1", "DisruptionBlocked", "Cannot disrupt Node: do-not-disrupt"), at(1)));
        // Back to the first message within its window: already recorded.
        assert!(!d.admit(&event("n1", "DisruptionBlocked", "Cannot disrupt Node: budget"), at(2)));
    }

    #[test]
    fn an_event_whose_message_differs_only_in_its_numbers_is_a_repeat() {
        let mut d = EventDedupe::new();
        let failed = |n: usize| {
            let mut e = event("default/p", "FailedScheduling", "");
            e.kind = "Pod";
            e.message = format!("0/{n} nodes are available: {n} Insufficient cpu; NodePool default: limits exhausted");
            e
        };
        assert!(d.admit(&failed(17), at(0)));
        assert!(!d.admit(&failed(18), at(60)));
        assert!(!d.admit(&failed(123), at(120)));
        assert!(d.admit(&failed(123), at(300)));
    }

    #[test]
    fn failed_scheduling_is_not_repeated_for_five_minutes() {
        let mut d = EventDedupe::new();
        let e = event("default/p", "FailedScheduling", "no instance type fits");
        assert!(d.admit(&e, at(0)));
        assert!(!d.admit(&e, at(299)));
        assert!(d.admit(&e, at(300)));
    }

    #[test]
    fn a_repeat_is_only_checked_until_it_is_remembered() {
        let mut d = EventDedupe::new();
        let e = event("n1", "Nominated", "Pod should schedule on: nodeclaim/a");
        assert!(!d.is_repeat(&e, at(0)));
        assert!(!d.is_repeat(&e, at(0)), "checking does not remember");
        d.remember(&e, at(0));
        assert!(d.is_repeat(&e, at(1)));
    }

    #[test]
    fn expired_events_are_swept_and_the_cache_stays_bounded_by_what_is_live() {
        let mut d = EventDedupe::new();
        for i in 0..10_000 {
            // One distinct event a second: about 120 are live at any time.
            assert!(d.admit(&event(&format!("n{i}"), "Nominated", "m"), at(i)));
        }
        assert!(d.len() < 2 * MIN_SWEEP, "{} remembered", d.len());
        assert!(!d.admit(&event("n9999", "Nominated", "m"), at(10_000)));
    }

    #[test]
    fn messages_that_differ_only_in_numbers_say_the_same() {
        let a = "it was launched 30s ago; kerf keeps a new node for consolidateAfter + 10m (consolidatable in 570s)";
        let b = "it was launched 331s ago; kerf keeps a new node for consolidateAfter + 10m (consolidatable in 269s)";
        assert!(same_apart_from_numbers(a, b));
        assert!(same_apart_from_numbers("budget allows 0 of 12 nodes", "budget allows 1 of 9 nodes"));
        assert!(!same_apart_from_numbers("consolidateAfter 1m0s has not passed", "it was launched 30s ago"));
        assert!(!same_apart_from_numbers("its 3 pod(s)", "its pod(s)"), "a number is not nothing");
        assert!(!same_apart_from_numbers("a 1 2 b", "a 12 b"), "two numbers are not one");
    }
}
