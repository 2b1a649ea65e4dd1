//! Kubernetes resource quantities (`1475m`, `1686Mi`, `256M`, `1.5`, `2e3`, `17Gi`).
//!
//! A quantity is held exactly as an integer count of nano-units (10^-9), which covers every
//! suffix from `n` to `Ei` without rounding. Like Kubernetes, values finer than one nano-unit
//! are rounded up, and the suffix family the value was written in (decimal SI, binary SI or
//! decimal exponent) is kept so that formatting gives the canonical Kubernetes form.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANO: i128 = 1_000_000_000;

/// Which suffix family a quantity is formatted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// `m`, ``, `k`, `M`, `G`, ... (powers of 1000).
    #[default]
    DecimalSI,
    /// `Ki`, `Mi`, `Gi`, ... (powers of 1024).
    BinarySI,
    /// `1e3`, `5e-3`.
    DecimalExponent,
}

/// An exact Kubernetes quantity.
#[derive(Clone, Copy, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity is empty")]
    Empty,
    #[error("quantity {0:?} is not a number followed by an optional suffix (e.g. 100m, 1.5, 2Gi, 1e3)")]
    Syntax(String),
    #[error(
        "quantity {0:?} has unknown suffix {1:?} (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent like e3)"
    )]
    Suffix(String, String),
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// A little-endian base-2^32 unsigned integer: just what exact quantity parsing needs.
#[derive(Default)]
struct BigUint(Vec<u32>);

impl BigUint {
    fn mul_add(&mut self, m: u32, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    /// Divides in place; returns the remainder.
    fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.0.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / u64::from(d)) as u32;
            rem = v % u64::from(d);
        }
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        rem as u32
    }

    fn is_zero(&self) -> bool {
        self.0.iter().all(|l| *l == 0)
    }

    fn bits(&self) -> u32 {
        match self.0.iter().rposition(|l| *l != 0) {
            Some(i) => i as u32 * 32 + (32 - self.0[i].leading_zeros()),
            None => 0,
        }
    }

    fn to_u128(&self) -> Option<u128> {
        if self.bits() > 128 {
            return None;
        }
        Some(self.0.iter().rev().fold(0u128, |acc, l| (acc << 32) | u128::from(*l)))
    }
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0, format: Format::DecimalSI };

    /// A quantity of whole units in decimal SI (`pods`, `cpu` cores, `nvidia.com/gpu`).
    pub fn from_units(units: i64) -> Self {
        Quantity { nanos: units as i128 * NANO, format: Format::DecimalSI }
    }

    /// A quantity of thousandths in decimal SI (`cpu` millicores).
    pub fn from_milli(milli: i64) -> Self {
        Quantity { nanos: milli as i128 * 1_000_000, format: Format::DecimalSI }
    }

    /// A byte count formatted in binary SI (`memory`, `ephemeral-storage`).
    pub fn from_bytes(bytes: i64) -> Self {
        Quantity { nanos: bytes as i128 * NANO, format: Format::BinarySI }
    }

    /// A byte count given in mebibytes.
    pub fn from_mebibytes(mib: i64) -> Self {
        Self::from_bytes(mib * 1024 * 1024)
    }

    /// The exact value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    pub fn from_nanos(nanos: i128, format: Format) -> Self {
        Quantity { nanos, format }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn with_format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded up (as Kubernetes' `MilliValue`), saturating.
    pub fn milli_ceil(&self) -> i64 {
        let m = div_ceil(self.nanos, 1_000_000);
        m.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The value in whole units, rounded up (as Kubernetes' `Value`), saturating.
    pub fn value_ceil(&self) -> i64 {
        let v = div_ceil(self.nanos, NANO);
        v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The value as a float, for display and prices only.
    pub fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        Some(Quantity { nanos: self.nanos.checked_add(other.nanos)?, format: self.merged_format(other) })
    }

    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        Some(Quantity { nanos: self.nanos.checked_sub(other.nanos)?, format: self.merged_format(other) })
    }

    /// Saturating addition; keeps this quantity's format (a zero takes the other's).
    pub fn saturating_add(&self, other: &Quantity) -> Quantity {
        Quantity { nanos: self.nanos.saturating_add(other.nanos), format: self.merged_format(other) }
    }

    pub fn saturating_sub(&self, other: &Quantity) -> Quantity {
        Quantity { nanos: self.nanos.saturating_sub(other.nanos), format: self.merged_format(other) }
    }

    /// Multiplies by an integer, saturating.
    pub fn saturating_mul(&self, factor: i64) -> Quantity {
        Quantity { nanos: self.nanos.saturating_mul(factor as i128), format: self.format }
    }

    pub fn max(self, other: Quantity) -> Quantity {
        if other.nanos > self.nanos { other } else { self }
    }

    pub fn min(self, other: Quantity) -> Quantity {
        if other.nanos < self.nanos { other } else { self }
    }

    fn merged_format(&self, other: &Quantity) -> Format {
        if self.nanos == 0 && other.nanos != 0 { other.format } else { self.format }
    }

    /// Parses a quantity as Kubernetes does.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        // Like Kubernetes, no surrounding whitespace is accepted.
        let s = input;
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        let syntax = || QuantityError::Syntax(input.to_string());
        let overflow = || QuantityError::Overflow(input.to_string());
        let bytes = s.as_bytes();
        let mut i = 0;
        let negative = match bytes[0] {
            b'-' => {
                i += 1;
                true
            }
            b'+' => {
                i += 1;
                false
            }
            _ => false,
        };
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &s[int_start..i];
        let mut frac_digits = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &s[frac_start..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(syntax());
        }
        let suffix = &s[i..];
        // The unit: 10^p10 * 2^bin, and the format.
        let (p10, bin, format): (i64, u32, Format) = match suffix {
            "" => (0, 0, Format::DecimalSI),
            "n" => (-9, 0, Format::DecimalSI),
            "u" => (-6, 0, Format::DecimalSI),
            "m" => (-3, 0, Format::DecimalSI),
            "k" => (3, 0, Format::DecimalSI),
            "M" => (6, 0, Format::DecimalSI),
            "G" => (9, 0, Format::DecimalSI),
            "T" => (12, 0, Format::DecimalSI),
            "P" => (15, 0, Format::DecimalSI),
            "E" => (18, 0, Format::DecimalSI),
            "Ki" => (0, 10, Format::BinarySI),
            "Mi" => (0, 20, Format::BinarySI),
            "Gi" => (0, 30, Format::BinarySI),
            "Ti" => (0, 40, Format::BinarySI),
            "Pi" => (0, 50, Format::BinarySI),
            "Ei" => (0, 60, Format::BinarySI),
            _ if suffix.starts_with(['e', 'E']) => {
                let exp: i64 =
                    suffix[1..].parse().map_err(|_| QuantityError::Suffix(input.to_string(), suffix.to_string()))?;
                (exp, 0, Format::DecimalExponent)
            }
            _ => return Err(QuantityError::Suffix(input.to_string(), suffix.to_string())),
        };
        // Exact: nanos = ceil(digits * 10^(9 + p10 - frac_len) * 2^bin), computed on a small
        // big integer so that long fractions and large exponents neither round early nor
        // overflow; only the final value must fit.
        let mut big = BigUint::default();
        for d in int_digits.bytes().chain(frac_digits.bytes()) {
            big.mul_add(10, u32::from(d - b'0'));
        }
        for _ in 0..bin {
            big.mul_add(2, 0);
        }
        let shift = 9i64.saturating_add(p10).saturating_sub(frac_digits.len() as i64);
        let mut inexact = false;
        if shift >= 0 {
            for _ in 0..shift {
                if big.is_zero() {
                    break;
                }
                big.mul_add(10, 0);
                if big.bits() > 128 {
                    return Err(overflow());
                }
            }
        } else {
            for _ in 0..shift.unsigned_abs() {
                if big.is_zero() {
                    break;
                }
                inexact |= big.div_small(10) != 0;
            }
        }
        let magnitude = big.to_u128().filter(|v| *v < i128::MAX as u128).ok_or_else(overflow)?;
        let mut nanos = magnitude as i128 + i128::from(inexact);
        if negative {
            nanos = -nanos;
        }
        Ok(Quantity { nanos, format })
    }

    /// The canonical Kubernetes string form.
    pub fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".to_string();
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        if self.format == Format::BinarySI && abs.is_multiple_of(NANO as u128) {
            let units = abs / NANO as u128;
            // Binary suffixes only when they express the value exactly; below 1Ki, Kubernetes
            // writes the plain number.
            const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            let mut k = 0;
            let mut v = units;
            while k < 6 && v >= 1024 && v.is_multiple_of(1024) {
                v /= 1024;
                k += 1;
            }
            return format!("{sign}{v}{}", SUFFIXES[k]);
        }
        // Decimal: the largest power-of-1000 exponent that keeps the mantissa an integer (SI
        // suffixes stop at E = 10^18; exponents go on).
        let max_exp3 = if self.format == Format::DecimalExponent { i32::MAX } else { 6 };
        let mut exp3: i32 = -3; // in units of 10^3, starting at nano (10^-9)
        let mut v = abs;
        while exp3 < max_exp3 && v.is_multiple_of(1000) {
            v /= 1000;
            exp3 += 1;
        }
        let exp = exp3 * 3;
        if self.format == Format::DecimalExponent {
            if exp == 0 {
                return format!("{sign}{v}");
            }
            return format!("{sign}{v}e{exp}");
        }
        let suffix = match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        };
        format!("{sign}{v}{suffix}")
    }
}

fn div_ceil(num: i128, den: i128) -> i128 {
    let q = num / den;
    if num % den != 0 && ((num > 0) == (den > 0)) { q + 1 } else { q }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}

impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nanos.hash(state)
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

impl fmt::Debug for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quantity({})", self.canonical())
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.canonical())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;
        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 100m, 1.5, 2Gi or 4")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                Quantity::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Quantity::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("quantity {v} is not finite")));
                }
                Quantity::parse(&format!("{v}")).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(QuantityVisitor)
    }
}

impl schemars::JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_the_seed_quantities_and_formats_them_canonically() {
        assert_eq!(q("1475m").canonical(), "1475m");
        assert_eq!(q("1686Mi").canonical(), "1686Mi");
        assert_eq!(q("256M").canonical(), "256M");
        assert_eq!(q("1.5").canonical(), "1500m");
        assert_eq!(q("2e3").canonical(), "2e3");
        assert_eq!(q("17Gi").canonical(), "17Gi");
        assert_eq!(q("7910m").canonical(), "7910m");
        assert_eq!(q("14162Mi").canonical(), "14162Mi");
        assert_eq!(q("58").canonical(), "58");
    }

    #[test]
    fn values_compare_across_formats() {
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("2e3"), q("2k"));
    }

    #[test]
    fn sub_nano_values_round_up() {
        assert_eq!(q("0.1n").nanos(), 1);
        assert_eq!(q("1.0000000001").nanos(), 1_000_000_001);
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(Quantity::parse(""), Err(QuantityError::Empty)));
        assert!(matches!(Quantity::parse("abc"), Err(QuantityError::Syntax(_))));
        assert!(matches!(Quantity::parse("1Qi"), Err(QuantityError::Suffix(..))));
        assert!(matches!(Quantity::parse("1e99"), Err(QuantityError::Overflow(_))));
    }
}
