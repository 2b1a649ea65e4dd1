//! Kubernetes quantities: exact parsing, canonical formatting, arithmetic.

use kerf_api::quantity::{Format, Quantity, QuantityError};
use proptest::prelude::*;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn edge_cases_parse_to_exact_values_and_canonical_forms() {
    // (input, nanos, canonical)
    let cases: &[(&str, i128, &str)] = &[
        ("1475m", 1_475_000_000, "1475m"),
        ("1686Mi", 1686 * (1 << 20) * 1_000_000_000, "1686Mi"),
        ("256M", 256_000_000 * 1_000_000_000, "256M"),
        ("1.5", 1_500_000_000, "1500m"),
        ("2e3", 2_000 * 1_000_000_000, "2e3"),
        ("17Gi", 17 * (1 << 30) * 1_000_000_000, "17Gi"),
        (".5", 500_000_000, "500m"),
        ("5.", 5_000_000_000, "5"),
        ("+1", 1_000_000_000, "1"),
        ("-1", -1_000_000_000, "-1"),
        ("-0", 0, "0"),
        ("0.0001", 100_000, "100u"),
        ("1e-3", 1_000_000, "1e-3"),
        ("1E3", 1_000 * 1_000_000_000, "1e3"),
        ("1e+3", 1_000 * 1_000_000_000, "1e3"),
        ("12e2", 1_200 * 1_000_000_000, "1200"),
        ("1.5e3", 1_500 * 1_000_000_000, "1500"),
        ("1e21", 10i128.pow(30), "1e21"),
        ("1E", 10i128.pow(27), "1E"),
        ("1000E", 10i128.pow(30), "1000E"),
        ("8Ei", 8 * (1i128 << 60) * 1_000_000_000, "8Ei"),
        ("1024Ei", 1024 * (1i128 << 60) * 1_000_000_000, "1024Ei"),
        ("0.5Gi", (1 << 29) * 1_000_000_000, "512Mi"),
        ("0.5Ki", 512 * 1_000_000_000, "512"),
        ("0.1Ki", 102_400_000_000, "102400m"),
        ("1536", 1536 * 1_000_000_000, "1536"),
        ("1.0Ki", 1024 * 1_000_000_000, "1Ki"),
        ("9223372036854775807", 9_223_372_036_854_775_807 * 1_000_000_000, "9223372036854775807"),
        ("7910m", 7_910_000_000, "7910m"),
        ("14162Mi", 14162 * (1 << 20) * 1_000_000_000, "14162Mi"),
        ("100Mi", 100 * (1 << 20) * 1_000_000_000, "100Mi"),
        ("0.1n", 1, "1n"),
        ("-0.1n", -1, "-1n"),
        ("1e-10", 1, "1e-9"),
        ("1e-400", 1, "1e-9"),
        ("0e500", 0, "0"),
        ("1.0000000001", 1_000_000_001, "1000000001n"),
        // A long fraction is exact: anything beyond the nano rounds up.
        ("1.0000000000000000000000000000000000000001", 1_000_000_001, "1000000001n"),
        ("2.0000000000000000000000000000000000000000", 2_000_000_000, "2"),
        ("000000000000000000000000000000000000000001", 1_000_000_000, "1"),
    ];
    for (input, nanos, canonical) in cases {
        let v = q(input);
        assert_eq!(v.nanos(), *nanos, "{input}");
        assert_eq!(v.canonical(), *canonical, "{input}");
        assert_eq!(q(canonical), v, "{input}: canonical form parses back to the same value");
    }
}

#[test]
fn malformed_quantities_are_refused_with_the_reason() {
    assert_eq!(Quantity::parse(""), Err(QuantityError::Empty));
    for s in ["abc", "-", "+", ".", "--1", "+-1", " 1", "Mi", "e3", "1 "] {
        assert!(
            matches!(Quantity::parse(s), Err(QuantityError::Syntax(_) | QuantityError::Suffix(..))),
            "{s:?}: {:?}",
            Quantity::parse(s)
        );
    }
    for s in ["1Qi", "1.2.3", "1e", "1ee3", "1e3.5", "1mi", "1KB", "1 Gi", "1Kib"] {
        assert!(matches!(Quantity::parse(s), Err(QuantityError::Suffix(..))), "{s:?}: {:?}", Quantity::parse(s));
    }
    for s in ["1e99", "1e40", "340282366920938463463374607431768211456", "1000000000000000000000000000000000Ei"] {
        assert!(matches!(Quantity::parse(s), Err(QuantityError::Overflow(_))), "{s:?}: {:?}", Quantity::parse(s));
    }
}

#[test]
fn errors_name_the_input() {
    assert_eq!(
        Quantity::parse("1Qi").unwrap_err().to_string(),
        "quantity \"1Qi\" has unknown suffix \"Qi\" (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent like e3)"
    );
}

#[test]
fn yaml_numbers_and_strings_deserialize_to_the_same_quantity() {
    let from_int: Quantity = serde_yaml_ng::from_str("4").unwrap();
    let from_float: Quantity = serde_yaml_ng::from_str("0.5").unwrap();
    let from_str: Quantity = serde_yaml_ng::from_str("\"500m\"").unwrap();
    assert_eq!(from_int, q("4"));
    assert_eq!(from_float, from_str);
    assert_eq!(serde_yaml_ng::to_string(&from_float).unwrap().trim(), "500m");
    assert!(serde_yaml_ng::from_str::<Quantity>("\"lots\"").is_err());
}

#[test]
fn arithmetic_keeps_the_format_of_the_non_zero_operand() {
    assert_eq!(q("1Gi").saturating_add(&q("512Mi")).canonical(), "1536Mi");
    assert_eq!(Quantity::ZERO.saturating_add(&q("1Gi")).canonical(), "1Gi");
    assert_eq!(q("1").saturating_sub(&q("250m")).canonical(), "750m");
    assert_eq!(q("100m").saturating_mul(3).canonical(), "300m");
    assert_eq!(q("1").saturating_sub(&q("2")).canonical(), "-1");
    assert_eq!(q("1475m").milli_ceil(), 1475);
    assert_eq!(q("1475m").value_ceil(), 2);
    assert_eq!(q("1n").milli_ceil(), 1);
}

fn any_format() -> impl Strategy<Value = Format> {
    prop_oneof![Just(Format::DecimalSI), Just(Format::BinarySI), Just(Format::DecimalExponent)]
}

/// Quantities up to ±10^30 nanos (±10^21 units), in any format.
fn any_quantity() -> impl Strategy<Value = Quantity> {
    (-(10i128.pow(30))..10i128.pow(30), any_format()).prop_map(|(n, f)| Quantity::from_nanos(n, f))
}

/// Quantity strings as people write them.
fn quantity_string() -> impl Strategy<Value = String> {
    let suffix = prop_oneof![
        Just("".to_string()),
        prop::sample::select(vec!["n", "u", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"])
            .prop_map(str::to_string),
        (-12i32..12).prop_map(|e| format!("e{e}")),
    ];
    (prop::option::of(prop::sample::select(vec!["+", "-"])), 0u64..1_000_000, prop::option::of(0u32..100_000), suffix)
        .prop_map(|(sign, int, frac, suffix)| {
            let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
            format!("{}{int}{frac}{suffix}", sign.unwrap_or(""))
        })
}

proptest! {
    #[test]
    fn canonical_form_parses_back_to_the_same_value_and_string(x in any_quantity()) {
        let c = x.canonical();
        let back = Quantity::parse(&c).unwrap();
        prop_assert_eq!(back.nanos(), x.nanos());
        prop_assert_eq!(back.canonical(), c);
    }

    #[test]
    fn parsed_strings_have_a_stable_canonical_form(s in quantity_string()) {
        let x = Quantity::parse(&s).unwrap();
        let c = x.canonical();
        let again = Quantity::parse(&c).unwrap();
        prop_assert_eq!(again, x);
        prop_assert_eq!(again.canonical(), c);
    }

    #[test]
    fn parsing_is_exact_for_whole_milli_values(m in -1_000_000_000i64..1_000_000_000) {
        prop_assert_eq!(Quantity::parse(&format!("{m}m")).unwrap(), Quantity::from_milli(m));
        let as_decimal = format!("{}{}.{:03}", if m < 0 { "-" } else { "" }, m.unsigned_abs() / 1000, m.unsigned_abs() % 1000);
        prop_assert_eq!(Quantity::parse(&as_decimal).unwrap(), Quantity::from_milli(m));
    }

    #[test]
    fn addition_is_commutative(a in any_quantity(), b in any_quantity()) {
        prop_assert_eq!(a.checked_add(&b), b.checked_add(&a));
        prop_assert_eq!(a.saturating_add(&b), b.saturating_add(&a));
    }

    #[test]
    fn addition_is_associative(a in any_quantity(), b in any_quantity(), c in any_quantity()) {
        let left = a.checked_add(&b).and_then(|ab| ab.checked_add(&c));
        let right = b.checked_add(&c).and_then(|bc| a.checked_add(&bc));
        prop_assert_eq!(left, right);
    }

    #[test]
    fn subtraction_undoes_addition(a in any_quantity(), b in any_quantity()) {
        prop_assert_eq!(a.checked_add(&b).and_then(|s| s.checked_sub(&b)), Some(a));
        prop_assert_eq!(a.checked_sub(&a).map(|z| z.is_zero()), Some(true));
    }

    #[test]
    fn sums_have_stable_canonical_forms(a in any_quantity(), b in any_quantity()) {
        let s = a.saturating_add(&b);
        let c = s.canonical();
        prop_assert_eq!(Quantity::parse(&c).unwrap().canonical(), c);
    }

    #[test]
    fn order_follows_the_value(a in any_quantity(), b in any_quantity()) {
        prop_assert_eq!(a.cmp(&b), a.nanos().cmp(&b.nanos()));
        prop_assert_eq!(a.max(b).nanos(), a.nanos().max(b.nanos()));
        prop_assert_eq!(a.min(b).nanos(), a.nanos().min(b.nanos()));
    }
}
