//! Go-style durations (`90s`, `2m`, `1h30m`, `720h`) and Karpenter's `Never`-able durations.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration written the way Go's `time.ParseDuration` reads it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(pub Duration);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {problem} (expected a Go duration such as 90s, 2m, 1h30m)")]
pub struct DurationError {
    pub input: String,
    pub problem: &'static str,
}

impl GoDuration {
    pub fn from_secs(secs: u64) -> Self {
        GoDuration(Duration::from_secs(secs))
    }

    pub fn as_duration(&self) -> Duration {
        self.0
    }

    pub fn parse(input: &str) -> Result<GoDuration, DurationError> {
        let err = |problem| DurationError { input: input.to_string(), problem };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        if s == "0" {
            return Ok(GoDuration(Duration::ZERO));
        }
        let s = s.strip_prefix('+').unwrap_or(s);
        if s.starts_with('-') {
            return Err(err("negative durations are not allowed"));
        }
        let mut total_nanos: u128 = 0;
        let mut rest = s;
        while !rest.is_empty() {
            let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(|| err("missing unit"))?;
            if num_end == 0 {
                return Err(err("expected a number"));
            }
            let number = &rest[..num_end];
            rest = &rest[num_end..];
            let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
            let unit = &rest[..unit_end];
            rest = &rest[unit_end..];
            let unit_nanos: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                "" => return Err(err("missing unit")),
                _ => return Err(err("unknown unit (use ns, us, ms, s, m or h)")),
            };
            let (int_part, frac_part) = match number.split_once('.') {
                Some((i, f)) => (i, f),
                None => (number, ""),
            };
            if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
                return Err(err("malformed number"));
            }
            let int_val: u128 =
                if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| err("number too large"))? };
            let mut nanos = int_val.checked_mul(unit_nanos).ok_or_else(|| err("too large"))?;
            if !frac_part.is_empty() {
                let digits = &frac_part[..frac_part.len().min(18)];
                let frac_val: u128 = digits.parse().map_err(|_| err("malformed number"))?;
                let scale = 10u128.pow(digits.len() as u32);
                nanos += frac_val * unit_nanos / scale;
            }
            total_nanos = total_nanos.checked_add(nanos).ok_or_else(|| err("too large"))?;
        }
        if total_nanos > u64::MAX as u128 {
            return Err(err("too large"));
        }
        Ok(GoDuration(Duration::from_nanos(total_nanos as u64)))
    }
}

/// Formats like Go's `Duration.String()`: `720h0m0s`, `1m30s`, `500ms`, `0s`.
impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000_000_000 {
            let (v, unit) = if nanos < 1_000 {
                return write!(f, "{nanos}ns");
            } else if nanos < 1_000_000 {
                (nanos as f64 / 1e3, "µs")
            } else {
                (nanos as f64 / 1e6, "ms")
            };
            return write!(f, "{v}{unit}");
        }
        let total_secs = self.0.as_secs();
        let sub = self.0.subsec_nanos();
        let h = total_secs / 3600;
        let m = (total_secs % 3600) / 60;
        let s = total_secs % 60;
        let secs = if sub == 0 {
            format!("{s}")
        } else {
            let frac = format!("{sub:09}");
            format!("{s}.{}", frac.trim_end_matches('0'))
        };
        if h > 0 {
            write!(f, "{h}h{m}m{secs}s")
        } else if m > 0 {
            write!(f, "{m}m{secs}s")
        } else {
            write!(f, "{secs}s")
        }
    }
}

impl fmt::Debug for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        GoDuration::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for GoDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"})
    }
}

/// A duration or `Never` (Karpenter's `NillableDuration`): `None` means never.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NillableDuration(pub Option<GoDuration>);

impl NillableDuration {
    pub const NEVER: NillableDuration = NillableDuration(None);

    pub fn from_secs(secs: u64) -> Self {
        NillableDuration(Some(GoDuration::from_secs(secs)))
    }

    pub fn duration(&self) -> Option<Duration> {
        self.0.map(|d| d.0)
    }

    pub fn is_never(&self) -> bool {
        self.0.is_none()
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{d}"),
            None => f.write_str("Never"),
        }
    }
}

impl fmt::Debug for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        if s == "Never" {
            return Ok(NillableDuration::NEVER);
        }
        GoDuration::parse(&s)
            .map(|d| NillableDuration(Some(d)))
            .map_err(|e| serde::de::Error::custom(format!("{e}, or Never")))
    }
}

impl schemars::JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^(([0-9]+(s|m|h))+|Never)$"})
    }
}

/// A duration the way kubectl prints ages: `45s`, `3m12s`, `17m`, `5h4m`, `3d2h`, `120d`.
pub fn human(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 { format!("{m}m") } else { format!("{m}m{}s", s % 60) }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 { format!("{h}h") } else { format!("{h}h{}m", m % 60) }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 { format!("{d}d") } else { format!("{d}d{}h", h % 24) }
    } else {
        format!("{d}d")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(GoDuration::parse("90s").unwrap().0, Duration::from_secs(90));
        assert_eq!(GoDuration::parse("1h30m").unwrap().0, Duration::from_secs(5400));
        assert_eq!(GoDuration::parse("1.5h").unwrap().0, Duration::from_secs(5400));
        assert_eq!(GoDuration::parse("300ms").unwrap().0, Duration::from_millis(300));
        assert_eq!(GoDuration::parse("0").unwrap().0, Duration::ZERO);
        assert!(GoDuration::parse("10").is_err());
        assert!(GoDuration::parse("-1s").is_err());
        assert!(GoDuration::parse("5d").is_err());
        assert!(GoDuration::parse("").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(GoDuration::from_secs(720 * 3600).to_string(), "720h0m0s");
        assert_eq!(GoDuration::from_secs(90).to_string(), "1m30s");
        assert_eq!(GoDuration::from_secs(0).to_string(), "0s");
        assert_eq!(GoDuration(Duration::from_millis(1500)).to_string(), "1.5s");
    }

    #[test]
    fn never_round_trips() {
        let n: NillableDuration = serde_json::from_str("\"Never\"").unwrap();
        assert!(n.is_never());
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"Never\"");
        let d: NillableDuration = serde_json::from_str("\"720h\"").unwrap();
        assert_eq!(d.duration(), Some(Duration::from_secs(720 * 3600)));
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human(45), "45s");
        assert_eq!(human(192), "3m12s");
        assert_eq!(human(17 * 60), "17m");
        assert_eq!(human(5 * 3600 + 4 * 60), "5h4m");
        assert_eq!(human(3 * 86_400 + 2 * 3600), "3d2h");
    }
}
