//! Label selector matching for the API machinery the simulator plays (ReplicaSet ownership,
//! PodDisruptionBudget coverage). Scheduling decisions use the scheduling layer instead.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub fn label_selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &sel.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or(&[]);
        let got = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => got.is_some_and(|v| values.contains(v)),
            "NotIn" => got.is_none_or(|v| !values.contains(v)),
            "Exists" => got.is_some(),
            "DoesNotExist" => got.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}
