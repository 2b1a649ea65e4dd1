//! The messages whose JSON is not their fields: times, durations, quantities, int-or-strings and
//! the JSON carried in bytes (`FieldsV1`, `RawExtension`), as the API machinery marshals them.

use k8s_openapi::jiff::Timestamp;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Map, Value};

use super::{ProtoError, decode_into, schema};

const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const TIMESTAMP: &str = "apimachinery.pkg.apis.meta.v1.Timestamp";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const DURATION: &str = "apimachinery.pkg.apis.meta.v1.Duration";
const FIELDS_V1: &str = "apimachinery.pkg.apis.meta.v1.FieldsV1";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";

pub(super) enum Decoded {
    /// A special message's JSON (`None`: left out, as a zero time).
    Special(Option<Value>),
    /// An ordinary message.
    Plain,
}

fn is_special(name: &str) -> bool {
    matches!(name, TIME | TIMESTAMP | MICRO_TIME | DURATION | FIELDS_V1 | QUANTITY | INT_OR_STRING | RAW_EXTENSION)
}

/// The fields of a small message, by JSON name.
fn fields(name: &str, bytes: &[u8]) -> Result<Map<String, Value>, ProtoError> {
    let mut m = Map::new();
    decode_into(schema::by_name(name)?, bytes, &mut m, 0)?;
    Ok(m)
}

fn raw_bytes(m: &Map<String, Value>) -> Result<Vec<u8>, ProtoError> {
    use base64::Engine;
    let b64 = m.get("raw").and_then(Value::as_str).unwrap_or("");
    base64::engine::general_purpose::STANDARD.decode(b64).map_err(super::malformed)
}

pub(super) fn decode(name: &str, bytes: &[u8]) -> Result<Decoded, ProtoError> {
    if !is_special(name) {
        return Ok(Decoded::Plain);
    }
    let m = fields(name, bytes)?;
    let int = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0);
    let v = match name {
        TIME | TIMESTAMP | MICRO_TIME => {
            let (secs, nanos) = (int("seconds"), int("nanos"));
            if secs == 0 && nanos == 0 {
                return Ok(Decoded::Special(None));
            }
            let ts = Timestamp::new(secs, nanos as i32).map_err(super::malformed)?;
            let whole = ts.strftime("%Y-%m-%dT%H:%M:%S");
            Value::String(if name == MICRO_TIME {
                format!("{whole}.{:06}Z", nanos / 1000)
            } else {
                format!("{whole}Z")
            })
        }
        DURATION => Value::String(go_duration(int("duration"))),
        QUANTITY => m.get("string").cloned().unwrap_or_else(|| Value::String("0".to_string())),
        INT_OR_STRING => {
            if int("type") == 1 {
                m.get("strVal").cloned().unwrap_or_else(|| Value::String(String::new()))
            } else {
                Value::from(int("intVal"))
            }
        }
        FIELDS_V1 | RAW_EXTENSION => {
            let raw = raw_bytes(&m)?;
            if raw.is_empty() {
                return Ok(Decoded::Special(None));
            }
            if raw.starts_with(super::MAGIC) {
                super::decode(&raw)?
            } else {
                serde_json::from_slice(&raw).map_err(|e| super::malformed(format!("{name}: {e}")))?
            }
        }
        _ => return Ok(Decoded::Plain),
    };
    Ok(Decoded::Special(Some(v)))
}

fn varint_field(tag: u32, v: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(v, out);
}

fn bytes_field(tag: u32, b: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

/// Writes the fields of a special message for `v` into `out`; false for an ordinary message.
pub(super) fn encode(name: &str, v: &Value, out: &mut Vec<u8>, path: &str) -> Result<bool, ProtoError> {
    if !is_special(name) {
        return Ok(false);
    }
    let wrong = |what: &str| ProtoError::Field { path: path.to_string(), problem: format!("must be {what}, got {v}") };
    match name {
        TIME | TIMESTAMP | MICRO_TIME => {
            let ts: Timestamp = v.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| wrong("an RFC 3339 time"))?;
            varint_field(1, ts.as_second() as u64, out);
            varint_field(2, u64::from(ts.subsec_nanosecond().unsigned_abs()), out);
        }
        DURATION => {
            let nanos = v.as_str().and_then(parse_go_duration).ok_or_else(|| wrong("a duration such as 1h30m"))?;
            varint_field(1, nanos as u64, out);
        }
        QUANTITY => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(wrong("a quantity")),
            };
            bytes_field(1, s.as_bytes(), out);
        }
        INT_OR_STRING => match v {
            Value::Number(n) => {
                let i = n.as_i64().filter(|i| i32::try_from(*i).is_ok()).ok_or_else(|| wrong("a 32-bit integer"))?;
                varint_field(1, 0, out);
                varint_field(2, i as u64, out);
            }
            Value::String(s) => {
                varint_field(1, 1, out);
                bytes_field(3, s.as_bytes(), out);
            }
            _ => return Err(wrong("an integer or a string")),
        },
        _ => bytes_field(1, v.to_string().as_bytes(), out),
    }
    Ok(true)
}

/// A duration in nanoseconds as Go prints it (`1h2m3.5s`, `0s`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        return match n {
            n if n < 1_000 => format!("{sign}{n}ns"),
            n if n < 1_000_000 => format!("{sign}{}µs", trim(n as f64 / 1e3)),
            n => format!("{sign}{}ms", trim(n as f64 / 1e6)),
        };
    }
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let s = trim(rest as f64 / 1e9);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

fn trim(f: f64) -> String {
    let s = format!("{f:.9}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Parses a Go duration (`90s`, `1h30m`, `1.5h`, `250ms`) into nanoseconds.
fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    let total = total.round() as i64;
    Some(if neg { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_print_and_parse_as_go_does() {
        for (text, nanos) in
            [("0s", 0), ("1h0m0s", 3_600_000_000_000), ("1m30s", 90_000_000_000), ("1.5s", 1_500_000_000)]
        {
            assert_eq!(go_duration(nanos), text);
            assert_eq!(parse_go_duration(text), Some(nanos));
        }
        assert_eq!(parse_go_duration("250ms"), Some(250_000_000));
        assert_eq!(parse_go_duration("1x"), None);
    }
}
