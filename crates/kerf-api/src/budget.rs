//! When disruption budgets are in force, and how many nodes they let go, as Karpenter computes it.
//!
//! A budget without a schedule is always active. A scheduled budget is active from each cron hit
//! (in UTC) for its duration: at `now` it is active when the first hit after `now - duration` is
//! not after `now`. `nodes` is an integer or a percentage of the pool's nodes, rounded up.

use std::cmp::Ordering;

use croner::errors::CronError;
use croner::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};
use k8s_openapi::jiff::Timestamp;

use crate::nodepool::{Budget, DisruptionReason, NodePool};
use crate::validation::parse_budget_schedule;

/// What an inactive budget allows (Karpenter uses the largest 32-bit integer).
pub const UNBOUNDED: usize = i32::MAX as usize;

/// Why a budget cannot be evaluated (only for objects that skipped validation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("budget schedule: {0}")]
    Schedule(String),
    #[error("budget has a schedule without a duration, or a duration without a schedule")]
    Incomplete,
    #[error("budget nodes {0:?} is neither an integer nor a percentage")]
    Nodes(String),
}

impl Budget {
    /// Whether the budget is in force at `now`.
    pub fn is_active(&self, now: Timestamp) -> Result<bool, BudgetError> {
        let (schedule, duration) = match (&self.schedule, &self.duration) {
            (None, None) => return Ok(true),
            (Some(s), Some(d)) => (s, d),
            _ => return Err(BudgetError::Incomplete),
        };
        window_active(schedule, duration.0, now).map_err(BudgetError::Schedule)
    }

    /// How many of `num_nodes` nodes this budget lets be disrupted at `now`: [`UNBOUNDED`] when
    /// it is not active; a percentage rounds up.
    pub fn allowed_disruptions(&self, now: Timestamp, num_nodes: usize) -> Result<usize, BudgetError> {
        if !self.is_active(now)? {
            return Ok(UNBOUNDED);
        }
        budget_nodes(&self.nodes, num_nodes)
    }
}

/// Whether a window that opens at each hit of the cron `schedule` (UTC, the syntax of budget
/// schedules) and stays open for `duration` is open at `now`: the first hit after
/// `now - duration` is not after `now`. Budgets and kerf's scheduled CapacityBuffers both ask it.
pub fn window_active(schedule: &str, duration: std::time::Duration, now: Timestamp) -> Result<bool, String> {
    let cron = parse_budget_schedule(schedule)?;
    let now_s = now.as_second();
    let span = i64::try_from(duration.as_secs()).unwrap_or(i64::MAX);
    let checkpoint = UtcSecond(now_s.saturating_sub(span));
    match cron.find_next_occurrence(&checkpoint, false) {
        Ok(next) => Ok(next.0 <= now_s),
        // No hit at all within croner's search range: never open.
        Err(_) => Ok(false),
    }
}

/// When the window of [`window_active`] next opens or closes after `now` (to wake then), if
/// croner finds a hit.
pub fn window_next_change(schedule: &str, duration: std::time::Duration, now: Timestamp) -> Option<Timestamp> {
    let cron = parse_budget_schedule(schedule).ok()?;
    let now_s = now.as_second();
    let span = i64::try_from(duration.as_secs()).unwrap_or(i64::MAX);
    // The next opening after now, and the closing of the window open now (if one is).
    let next_open = cron.find_next_occurrence(&UtcSecond(now_s), false).ok().map(|t| t.0);
    let open_since = cron.find_next_occurrence(&UtcSecond(now_s.saturating_sub(span)), false).ok().map(|t| t.0);
    let closing = open_since.filter(|o| *o <= now_s).map(|o| o.saturating_add(span)).filter(|c| *c > now_s);
    let at = match (next_open, closing) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    Timestamp::from_second(at).ok()
}

/// `nodes` of a budget applied to a pool of `num_nodes`.
pub fn budget_nodes(nodes: &str, num_nodes: usize) -> Result<usize, BudgetError> {
    let bad = || BudgetError::Nodes(nodes.to_string());
    if let Some(pct) = nodes.strip_suffix('%') {
        let pct: usize = pct.parse().map_err(|_| bad())?;
        if pct > 100 {
            return Err(bad());
        }
        Ok((num_nodes * pct).div_ceil(100))
    } else {
        nodes.parse().map_err(|_| bad())
    }
}

impl NodePool {
    /// How many of the pool's `num_nodes` nodes may be disrupted at `now` for `reason`: the
    /// smallest allowance of the budgets that apply to the reason (all reasons when a budget
    /// names none). A budget that cannot be evaluated allows nothing (fail closed).
    pub fn allowed_disruptions(&self, now: Timestamp, num_nodes: usize, reason: DisruptionReason) -> usize {
        let mut allowed = UNBOUNDED;
        for budget in &self.spec.disruption.budgets {
            match budget.allowed_disruptions(now, num_nodes) {
                Ok(n) => {
                    if budget.reasons.as_ref().is_none_or(|r| r.contains(&reason)) {
                        allowed = allowed.min(n);
                    }
                }
                Err(_) => return 0,
            }
        }
        allowed
    }
}

/// A UTC instant at whole-second precision: the time line budgets' cron schedules run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UtcSecond(i64);

const SECONDS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month, day) → days since 1970-01-01, proleptic Gregorian.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl CronDateTime for UtcSecond {
    fn to_civil(&self) -> CivilDateTime {
        let (y, m, d) = civil_from_days(self.0.div_euclid(SECONDS_PER_DAY));
        let s = self.0.rem_euclid(SECONDS_PER_DAY);
        let year = i32::try_from(y).unwrap_or(if y < 0 { i32::MIN } else { i32::MAX });
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(year, m, d),
            CivilTime::from_parts_unchecked((s / 3600) as u32, ((s % 3600) / 60) as u32, (s % 60) as u32),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        // 1970-01-01 was a Thursday (4 days after Sunday).
        Weekday::from_days_from_sunday((self.0.div_euclid(SECONDS_PER_DAY) + 4).rem_euclid(7) as u32)
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        let days = days_from_civil(i64::from(civil.year()), civil.month(), civil.day());
        let secs = i64::from(civil.hour()) * 3600 + i64::from(civil.minute()) * 60 + i64::from(civil.second());
        Ok(Resolution::Single(UtcSecond(days * SECONDS_PER_DAY + secs)))
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0.checked_add(seconds).map(UtcSecond)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_conversions_round_trip_and_know_weekdays() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        for days in [-800_000, -1, 0, 59, 10_000, 19_782, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        // 2025-01-01 was a Wednesday.
        let t = UtcSecond(days_from_civil(2025, 1, 1) * SECONDS_PER_DAY + 3600);
        assert_eq!(t.civil_weekday(), Weekday::Wednesday);
        assert_eq!(t.to_civil().hour(), 1);
    }
}
