//! Int-or-percent values (`3`, `"25%"`) scaled against a total, as a Deployment's maxSurge and
//! maxUnavailable and a PodDisruptionBudget's minAvailable and maxUnavailable are.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// `v` against `total`: an integer as it is, a percentage of `total` rounded up when
/// `round_up`, else down. A percentage that does not parse counts as 0%.
pub fn scaled(v: &IntOrString, total: i64, round_up: bool) -> i64 {
    match v {
        IntOrString::Int(i) => i64::from(*i),
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let prod = pct * total;
            if round_up { (prod + 99) / 100 } else { prod / 100 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up_or_down_as_asked_and_integers_stay() {
        let pct = |s: &str| IntOrString::String(s.to_string());
        assert_eq!(scaled(&pct("25%"), 7, true), 2);
        assert_eq!(scaled(&pct("25%"), 7, false), 1);
        assert_eq!(scaled(&pct("50%"), 8, true), 4);
        assert_eq!(scaled(&IntOrString::Int(3), 100, false), 3);
    }
}
