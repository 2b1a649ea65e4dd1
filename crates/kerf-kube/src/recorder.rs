//! The event recorder of `kerf controller`: how the controllers' events become core/v1 Event
//! objects without flooding the API server or the log, and without ever making a controller
//! wait.
//!
//! At scale the controllers emit events faster than one writer can create them (a large
//! scale-up nominates every one of its pods within seconds), and logging every event a bounded
//! queue cannot take would fill the log with nothing else. So an event goes through, in order:
//!
//! 1. the dedupe every recorder shares ([`kerf_api::events::EventDedupe`]): an event identical
//!    to one written within its window (2 minutes, `FailedScheduling` 5; the message compared
//!    apart from its numbers) is not written again, as Karpenter's recorder does. These are not losses (the cluster already shows the event);
//!    they are counted in `kerf_events_deduplicated_total`;
//! 2. a token bucket per event reason ([`RATE_BURST`] at once, [`RATE_PER_SECOND`] sustained),
//!    so that one reason flooding (`Nominated` in a large scale-up) neither floods the API
//!    server nor starves the others (a `DisruptionTerminating` still gets through). Karpenter
//!    limits `Nominated` to 5 a second after a burst of 10; these limits are generous enough
//!    that a scale-up of a thousand pods loses nothing. An event refused here is not
//!    remembered by the dedupe, so the same event emitted again later can still be written;
//! 3. a bounded queue ([`QUEUE`]) to a background task that creates the Event objects one at a
//!    time: [`Recorder::publish`] is synchronous and never waits for it.
//!
//! What is lost (over the rate, the queue full, a write the API server refused or could not
//! take) is counted in `kerf_events_dropped_total{reason="rate_limited|queue_full|write_failed"}`
//! and summarised in at most one WARN line per [`SUMMARY_INTERVAL`] ([`DropSummary`]): counts by
//! cause and by event reason, and the last write error. A line comes [`SUMMARY_DELAY`] after the
//! first loss it reports (so a burst is one line, not a line saying "1" and the rest a minute
//! later) and at least [`SUMMARY_INTERVAL`] after the line before.
//!
//! The deciding parts ([`Gate`], [`TokenBucket`], [`DropSummary`]) are pure and take the time as
//! an argument, so they are tested without waiting.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kerf_api::cluster::EventRecord;
use kerf_api::events::EventDedupe;
use kerf_cloud::{Clock, SystemClock, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

/// Events of one reason written at once before the sustained rate applies.
pub const RATE_BURST: f64 = 1000.0;
/// Events of one reason written per second, sustained.
pub const RATE_PER_SECOND: f64 = 50.0;
/// Events waiting for the writer; more are dropped (`queue_full`).
pub const QUEUE: usize = 10_000;
/// At most one log line about dropped events per this.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);
/// A log line about dropped events waits this long after the first drop it reports.
pub const SUMMARY_DELAY: Duration = Duration::from_secs(10);
/// How often the writer looks whether a summary is due (a drop also looks).
const SUMMARY_CHECK: Duration = Duration::from_secs(5);

/// Why an event was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropCause {
    /// Over its reason's rate.
    RateLimited,
    /// The writer's queue was full (or the writer had stopped).
    QueueFull,
    /// The API server refused the Event or could not be reached.
    WriteFailed,
}

impl DropCause {
    /// The `reason` label of `kerf_events_dropped_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            DropCause::RateLimited => "rate_limited",
            DropCause::QueueFull => "queue_full",
            DropCause::WriteFailed => "write_failed",
        }
    }
}

/// A token bucket: `burst` tokens, refilled at `per_second`; an event takes one.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    /// When the tokens were last counted.
    at: Option<Timestamp>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(burst: f64, per_second: f64) -> Self {
        TokenBucket { burst, per_second, tokens: burst, at: None }
    }

    /// Takes a token if there is one at `now`. A clock that went back refills nothing.
    pub fn try_take(&mut self, now: Timestamp) -> bool {
        if let Some(at) = self.at {
            let elapsed = (now.as_millisecond() - at.as_millisecond()).max(0) as f64 / 1000.0;
            self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Dropped events not yet reported, and when the last report was.
#[derive(Debug)]
pub struct DropSummary {
    interval: Duration,
    delay: Duration,
    causes: BTreeMap<DropCause, u64>,
    /// By event reason (`Nominated`, ...).
    reasons: BTreeMap<String, u64>,
    last_error: Option<String>,
    /// When the first drop not reported yet happened.
    first: Option<Timestamp>,
    reported_at: Option<Timestamp>,
}

/// One report of dropped events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropReport {
    pub causes: BTreeMap<DropCause, u64>,
    pub reasons: BTreeMap<String, u64>,
    pub last_error: Option<String>,
}

impl DropReport {
    pub fn total(&self) -> u64 {
        self.causes.values().sum()
    }

    pub fn count(&self, cause: DropCause) -> u64 {
        self.causes.get(&cause).copied().unwrap_or(0)
    }

    /// `Nominated=118 FailedScheduling=2`, most first.
    pub fn reasons_text(&self) -> String {
        let mut by: Vec<(&String, &u64)> = self.reasons.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut out = String::new();
        for (reason, n) in by {
            if !out.is_empty() {
                out.push(' ');
            }
            let _ = write!(out, "{reason}={n}");
        }
        out
    }

    /// The one log line.
    pub fn log(&self) {
        tracing::warn!(
            dropped = self.total(),
            rate_limited = self.count(DropCause::RateLimited),
            queue_full = self.count(DropCause::QueueFull),
            write_failed = self.count(DropCause::WriteFailed),
            reasons = %self.reasons_text(),
            last_error = self.last_error.as_deref().unwrap_or_default(),
            "events dropped"
        );
    }
}

impl DropSummary {
    /// At most one report per `interval`, each `delay` after the first drop it reports.
    pub fn new(interval: Duration, delay: Duration) -> Self {
        DropSummary {
            interval,
            delay,
            causes: BTreeMap::new(),
            reasons: BTreeMap::new(),
            last_error: None,
            first: None,
            reported_at: None,
        }
    }

    /// One event with `reason` dropped for `cause` at `now` (`error`: what the API server said).
    pub fn note(&mut self, cause: DropCause, reason: &str, error: Option<String>, now: Timestamp) {
        self.first.get_or_insert(now);
        *self.causes.entry(cause).or_default() += 1;
        match self.reasons.get_mut(reason) {
            Some(n) => *n += 1,
            None => {
                self.reasons.insert(reason.to_string(), 1);
            }
        }
        if error.is_some() {
            self.last_error = error;
        }
    }

    /// The drops to report at `now`, if a report is due: there are some, the first of them is
    /// at least the delay old, and the last report at least the interval.
    pub fn due(&mut self, now: Timestamp) -> Option<DropReport> {
        let first = self.first?;
        let after = |t: Timestamp, d: Duration| t.saturating_add(d).unwrap_or(Timestamp::MAX);
        if now < after(first, self.delay) || self.reported_at.is_some_and(|at| now < after(at, self.interval)) {
            return None;
        }
        self.reported_at = Some(now);
        self.take()
    }

    /// The drops not reported yet, whenever (the last report, at shutdown).
    pub fn take(&mut self) -> Option<DropReport> {
        self.first = None;
        if self.causes.is_empty() {
            return None;
        }
        Some(DropReport {
            causes: std::mem::take(&mut self.causes),
            reasons: std::mem::take(&mut self.reasons),
            last_error: self.last_error.take(),
        })
    }
}

/// What becomes of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write it (and [`Gate::written`] once it is queued).
    Write,
    /// An identical one was written within its window.
    Deduplicated,
    Dropped(DropCause),
}

/// The recorder's decisions: dedupe, rate limit per reason, and the drops to report.
#[derive(Debug)]
pub struct Gate {
    dedupe: EventDedupe,
    buckets: HashMap<String, TokenBucket>,
    burst: f64,
    per_second: f64,
    pub summary: DropSummary,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new(RATE_BURST, RATE_PER_SECOND)
    }
}

impl Gate {
    /// Per event reason, `burst` at once and `per_second` sustained.
    pub fn new(burst: f64, per_second: f64) -> Self {
        Gate {
            dedupe: EventDedupe::new(),
            buckets: HashMap::new(),
            burst,
            per_second,
            summary: DropSummary::new(SUMMARY_INTERVAL, SUMMARY_DELAY),
        }
    }

    /// Whether `event` is to be written at `now`. Takes a token when it is.
    pub fn admit(&mut self, event: &EventRecord, now: Timestamp) -> Verdict {
        if self.dedupe.is_repeat(event, now) {
            return Verdict::Deduplicated;
        }
        let bucket = match self.buckets.get_mut(&event.reason) {
            Some(b) => b,
            None => self.buckets.entry(event.reason.clone()).or_insert(TokenBucket::new(self.burst, self.per_second)),
        };
        if bucket.try_take(now) { Verdict::Write } else { Verdict::Dropped(DropCause::RateLimited) }
    }

    /// `event`, admitted, is on its way: identical ones are repeats for its window.
    pub fn written(&mut self, event: &EventRecord, now: Timestamp) {
        self.dedupe.remember(event, now);
    }
}

/// The recorder's counters: `kerf_events_dropped_total{reason}` and
/// `kerf_events_deduplicated_total`. [`EventMetrics::default`] counts without being exported.
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    dropped: Family<Vec<(String, String)>, Counter>,
    deduplicated: Counter,
}

impl EventMetrics {
    /// Counters exported by `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = EventMetrics::default();
        registry.register(
            "kerf_events_dropped",
            "Kubernetes events kerf did not write, by why: rate_limited (over the rate for their reason), queue_full (the background writer fell behind), write_failed (the API server refused the event or could not be reached)",
            m.dropped.clone(),
        );
        registry.register(
            "kerf_events_deduplicated",
            "Kubernetes events kerf did not write because an identical one (same object and reason, the same message apart from its numbers) was written within its window (2 minutes; FailedScheduling 5)",
            m.deduplicated.clone(),
        );
        m
    }

    fn dropped(&self, cause: DropCause) {
        self.dropped.get_or_create(&vec![("reason".to_string(), cause.as_str().to_string())]).inc();
    }
}

struct Shared {
    gate: Mutex<Gate>,
    metrics: EventMetrics,
}

impl Shared {
    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dropped(&self, cause: DropCause, reason: &str, error: Option<String>, now: Timestamp) {
        self.metrics.dropped(cause);
        let report = {
            let mut gate = self.gate();
            gate.summary.note(cause, reason, error, now);
            gate.summary.due(now)
        };
        if let Some(r) = report {
            r.log();
        }
    }

    fn report_due(&self, now: Timestamp) {
        let report = self.gate().summary.due(now);
        if let Some(r) = report {
            r.log();
        }
    }
}

/// Records events as core/v1 Event objects, in the background. Cheap to clone; the clones share
/// one gate and one writer.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
    queue: mpsc::Sender<Event>,
}

impl Recorder {
    /// Must be called within a tokio runtime: it starts the task that writes the events, which
    /// ends when the last clone is dropped.
    pub fn start(client: Client, metrics: EventMetrics) -> Self {
        let (queue, pending) = mpsc::channel(QUEUE);
        let recorder = Recorder::with_queue(queue, Gate::default(), metrics);
        tokio::spawn(write(client, pending, Arc::clone(&recorder.shared)));
        recorder
    }

    fn with_queue(queue: mpsc::Sender<Event>, gate: Gate, metrics: EventMetrics) -> Self {
        Recorder { shared: Arc::new(Shared { gate: Mutex::new(gate), metrics }), queue }
    }

    /// Records `event` at `now` unless the gate says otherwise; `object` makes its Event object.
    /// Never waits: the object is queued for the writer, or dropped and counted.
    pub fn publish(&self, event: &EventRecord, now: Timestamp, object: impl FnOnce() -> Event) {
        let dropped = {
            let mut gate = self.shared.gate();
            match gate.admit(event, now) {
                Verdict::Deduplicated => {
                    self.shared.metrics.deduplicated.inc();
                    None
                }
                Verdict::Dropped(cause) => Some((cause, None)),
                Verdict::Write => match self.queue.try_send(object()) {
                    Ok(()) => {
                        gate.written(event, now);
                        None
                    }
                    Err(TrySendError::Full(_)) => Some((DropCause::QueueFull, None)),
                    Err(TrySendError::Closed(_)) => {
                        Some((DropCause::QueueFull, Some("the event writer has stopped".to_string())))
                    }
                },
            }
        };
        if let Some((cause, error)) = dropped {
            self.shared.dropped(cause, &event.reason, error, now);
        }
    }
}

/// Writes queued events, in order, until every sender is gone; reports drops as they fall due.
async fn write(client: Client, mut pending: mpsc::Receiver<Event>, shared: Arc<Shared>) {
    let mut check = tokio::time::interval(SUMMARY_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = pending.recv() => {
                let Some(ev) = ev else { break };
                let namespace = ev.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
                let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
                if let Err(e) = api.create(&PostParams::default(), &ev).await {
                    let what = format!(
                        "{} {}: {e}",
                        ev.involved_object.kind.as_deref().unwrap_or_default(),
                        ev.involved_object.name.as_deref().unwrap_or_default()
                    );
                    let reason = ev.reason.as_deref().unwrap_or_default();
                    shared.dropped(DropCause::WriteFailed, reason, Some(what), SystemClock.now());
                }
            }
            _ = check.tick() => shared.report_due(SystemClock.now()),
        }
    }
    let last = shared.gate().summary.take();
    if let Some(r) = last {
        r.log();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_ms(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn event(name: &str, reason: &str) -> EventRecord {
        EventRecord {
            kind: "Pod",
            name: format!("default/{name}"),
            uid: None,
            type_: "Normal",
            reason: reason.to_string(),
            message: "Pod should schedule on: nodeclaim/default-abcde".to_string(),
        }
    }

    fn object(e: &EventRecord) -> Event {
        Event { reason: Some(e.reason.clone()), message: Some(e.message.clone()), ..Event::default() }
    }

    fn exported(registry: &Registry) -> String {
        crate::metrics::encode(registry)
    }

    #[test]
    fn identical_events_within_the_window_are_recorded_once() {
        let mut registry = Registry::default();
        let (tx, mut rx) = mpsc::channel(16);
        let r = Recorder::with_queue(tx, Gate::default(), EventMetrics::register(&mut registry));
        let e = event("a", "Nominated");
        for s in 0..5 {
            r.publish(&e, at_ms(s * 1000), || object(&e));
        }
        r.publish(&e, at_ms(120_000), || object(&e));
        let mut written = 0;
        while rx.try_recv().is_ok() {
            written += 1;
        }
        assert_eq!(written, 2, "once, and again when the two minutes are over");
        let text = exported(&registry);
        assert!(text.contains("kerf_events_deduplicated_total 4"), "{text}");
        assert!(!text.contains("kerf_events_dropped_total{"), "a repeat is not a drop: {text}");
    }

    #[test]
    fn events_past_the_rate_limit_are_dropped_and_counted_never_blocking() {
        let mut registry = Registry::default();
        let (tx, mut rx) = mpsc::channel(100);
        // 10 at once, then 2 a second, per reason.
        let r = Recorder::with_queue(tx, Gate::new(10.0, 2.0), EventMetrics::register(&mut registry));
        for i in 0..30 {
            let e = event(&format!("p{i}"), "Nominated");
            r.publish(&e, at_ms(0), || object(&e));
        }
        // Another reason has its own bucket: a flood of nominations does not starve it.
        let other = event("p0", "FailedScheduling");
        r.publish(&other, at_ms(0), || object(&other));
        // Half a second later: one more token.
        let late = event("late", "Nominated");
        r.publish(&late, at_ms(500), || object(&late));
        let mut reasons = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            reasons.push(ev.reason.unwrap_or_default());
        }
        assert_eq!(reasons.iter().filter(|r| *r == "Nominated").count(), 11);
        assert_eq!(reasons.iter().filter(|r| *r == "FailedScheduling").count(), 1);
        let text = exported(&registry);
        assert!(text.contains(r#"kerf_events_dropped_total{reason="rate_limited"} 20"#), "{text}");

        // A refused event is not remembered: emitted again once there is room, it is written.
        let again = event("p29", "Nominated");
        r.publish(&again, at_ms(10_000), || object(&again));
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting_for_the_writer() {
        let mut registry = Registry::default();
        // Nobody takes from the queue: a writer stuck on a slow API server.
        let (tx, _stuck) = mpsc::channel(3);
        let r = Recorder::with_queue(tx, Gate::default(), EventMetrics::register(&mut registry));
        for i in 0..10 {
            let e = event(&format!("p{i}"), "Nominated");
            r.publish(&e, at_ms(0), || object(&e));
        }
        let text = exported(&registry);
        assert!(text.contains(r#"kerf_events_dropped_total{reason="queue_full"} 7"#), "{text}");
        // Not remembered either: the same event gets another chance once the queue has room.
        let gate = r.shared.gate();
        assert!(gate.dedupe.is_repeat(&event("p0", "Nominated"), at_ms(1)));
        assert!(!gate.dedupe.is_repeat(&event("p9", "Nominated"), at_ms(1)));
    }

    #[test]
    fn drops_are_summarised_in_one_log_line_per_interval() {
        let mut s = DropSummary::new(Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(s.due(at_ms(0)), None, "nothing dropped, nothing to say");
        let mut lines = Vec::new();
        fn ask(s: &mut DropSummary, lines: &mut Vec<(i64, DropReport)>, now: i64) {
            if let Some(line) = s.due(at_ms(now)) {
                lines.push((now, line));
            }
        }
        // A burst: 500 drops within a second, the summary asked after each one; then asked
        // every second until 5 s later.
        for i in 0..500 {
            let cause = if i % 10 == 0 { DropCause::QueueFull } else { DropCause::RateLimited };
            let reason = if i % 4 == 0 { "FailedScheduling" } else { "Nominated" };
            s.note(cause, reason, None, at_ms(i * 2));
            ask(&mut s, &mut lines, i * 2);
        }
        for t in (1..=5).map(|k| k * 1000) {
            ask(&mut s, &mut lines, t);
        }
        assert!(lines.is_empty(), "a line waits 10 s after the first drop, to take the whole burst");
        // A trickle: a drop every 150 ms from 10 s to 150 s, the summary asked after each one.
        for i in 0..=933 {
            let now = 10_000 + i * 150;
            s.note(DropCause::RateLimited, "DisruptionBlocked", None, at_ms(now));
            ask(&mut s, &mut lines, now);
        }
        // The burst in one line 10 s after its first drop, then one line a minute.
        let times: Vec<i64> = lines.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![10_000, 70_000, 130_000]);
        let burst = &lines[0].1;
        assert_eq!(burst.total(), 501, "the burst, and the first drop of the trickle");
        assert_eq!(burst.count(DropCause::QueueFull), 50);
        assert_eq!(burst.reasons_text(), "Nominated=375 FailedScheduling=125 DisruptionBlocked=1");
        assert_eq!(lines[1].1.total(), 400);
        // Nothing is lost between lines: the rest comes with the next line that is due.
        s.note(DropCause::WriteFailed, "Nominated", Some("Event default/p: forbidden".to_string()), at_ms(150_000));
        assert_eq!(s.due(at_ms(189_999)), None);
        let last = s.due(at_ms(190_000)).unwrap_or_else(|| panic!("a line is due"));
        let total: u64 = lines.iter().map(|(_, l)| l.total()).sum::<u64>() + last.total();
        assert_eq!(total, 500 + 934 + 1);
        assert_eq!(last.count(DropCause::WriteFailed), 1);
        assert_eq!(last.last_error.as_deref(), Some("Event default/p: forbidden"));
        assert_eq!(s.due(at_ms(400_000)), None, "reported drops are not reported again");

        // After a quiet hour, a new drop also waits its 10 s, not a minute.
        s.note(DropCause::RateLimited, "Nominated", None, at_ms(4_000_000));
        assert_eq!(s.due(at_ms(4_009_999)), None);
        assert_eq!(s.due(at_ms(4_010_000)).map(|l| l.total()), Some(1));
    }

    #[test]
    fn a_token_bucket_refills_at_its_rate_up_to_its_burst() {
        let mut b = TokenBucket::new(2.0, 1.0);
        assert!(b.try_take(at_ms(0)));
        assert!(b.try_take(at_ms(0)));
        assert!(!b.try_take(at_ms(0)));
        assert!(!b.try_take(at_ms(999)));
        assert!(b.try_take(at_ms(1000)));
        // A long quiet time refills the burst, not more.
        assert!(b.try_take(at_ms(100_000)));
        assert!(b.try_take(at_ms(100_000)));
        assert!(!b.try_take(at_ms(100_000)));
        // A clock that went back refills nothing.
        assert!(!b.try_take(at_ms(50_000)));
    }
}
