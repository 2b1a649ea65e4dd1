//! `kerf bench scheduling|consolidation|packing|snapshot|top` per the CLI contract: the JSON object's keys and exit codes.

use std::process::Command;

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf")).args(args).output().unwrap()
}

#[test]
fn json_has_the_contract_keys_and_every_pod_is_scheduled() {
    let out = kerf(&["bench", "scheduling", "--pods", "500", "--instance-types", "50", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    // One JSON object on one line.
    assert_eq!(text.lines().count(), 1, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let obj = doc.as_object().expect("a JSON object");
    for key in ["pods", "scheduled", "nodeClaims", "seconds", "podsPerSecond"] {
        assert!(obj.contains_key(key), "missing {key}: {text}");
    }
    assert_eq!(doc["pods"], 500);
    assert_eq!(doc["scheduled"], doc["pods"]);
    let claims = doc["nodeClaims"].as_u64().expect("nodeClaims is a count");
    assert!((1..=500).contains(&claims), "{text}");
    let seconds = doc["seconds"].as_f64().expect("seconds is a number");
    assert!(seconds > 0.0, "{text}");
    let pps = doc["podsPerSecond"].as_f64().expect("podsPerSecond is a number");
    // podsPerSecond is pods / seconds (rounded to a whole pod).
    assert!((pps - 500.0 / seconds).abs() <= 1.0, "{text}");
}

#[test]
fn zero_pods_is_bad_input_exit_2_naming_the_flag() {
    let out = kerf(&["bench", "scheduling", "--pods", "0", "--instance-types", "50", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--pods"), "{err}");
}

#[test]
fn consolidation_json_has_the_contract_keys_and_evaluates_every_node() {
    let out = kerf(&["bench", "consolidation", "--nodes", "40", "--pods-per-node", "10", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let obj = doc.as_object().expect("a JSON object");
    for key in ["nodes", "pods", "candidates", "seconds", "perCandidateMs", "deletable", "replaceable"] {
        assert!(obj.contains_key(key), "missing {key}: {text}");
    }
    assert_eq!(doc["nodes"], 40);
    assert_eq!(doc["pods"], 400);
    assert_eq!(doc["candidates"], 40);
    let deletable = doc["deletable"].as_u64().expect("deletable is a count");
    let replaceable = doc["replaceable"].as_u64().expect("replaceable is a count");
    assert!(deletable + replaceable <= 40, "{text}");
    assert!(doc["seconds"].as_f64().is_some_and(|s| s > 0.0), "{text}");
    assert!(doc["perCandidateMs"].as_f64().is_some_and(|s| s > 0.0), "{text}");
    let multi = doc["multiNodeSeconds"].as_f64().expect("multiNodeSeconds is a number");
    assert!(multi > 0.0, "{text}");
    // The whole decision: the single-node evaluation plus the multi-node search.
    let whole = doc["decisionSeconds"].as_f64().expect("decisionSeconds is a number");
    assert!((whole - (doc["seconds"].as_f64().unwrap_or(0.0) + multi)).abs() < 1e-9, "{text}");
}

#[test]
fn consolidation_zero_nodes_is_bad_input_exit_2_naming_the_flag() {
    let out = kerf(&["bench", "consolidation", "--nodes", "0", "--pods-per-node", "30"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--nodes"), "{err}");
}

#[test]
fn consolidation_with_room_moves_pods_and_deletes_nodes() {
    let out = kerf(&["bench", "consolidation", "--nodes", "60", "--pods-per-node", "10", "--fill", "0.5", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["pods"], 600);
    assert_eq!(doc["candidates"], 60);
    // Half-full nodes: a node's pods fit on the others, so nodes are deletable and pods move.
    assert!(doc["deletable"].as_u64().is_some_and(|d| d > 0), "{text}");
    assert!(doc["podsMoved"].as_u64().is_some_and(|m| m > 0), "{text}");
    assert!(doc["decisionSeconds"].as_f64().is_some_and(|s| s > 0.0), "{text}");
    // Full nodes (the default): nothing can move.
    let out = kerf(&["bench", "consolidation", "--nodes", "60", "--pods-per-node", "10", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["deletable"], 0, "{doc}");
}

#[test]
fn consolidation_fill_outside_zero_to_one_is_bad_input_exit_2() {
    for fill in ["0", "-0.5", "1.5", "NaN", "half"] {
        let out = kerf(&["bench", "consolidation", "--nodes", "10", "--pods-per-node", "5", "--fill", fill]);
        assert_eq!(out.status.code(), Some(2), "--fill {fill}");
        assert!(out.stdout.is_empty(), "--fill {fill}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--fill"), "--fill {fill}: {err}");
    }
}

/// `kerf bench packing --json` for the named workloads.
fn packing(workloads: &[&str]) -> serde_json::Value {
    let mut args = vec!["bench", "packing", "--json"];
    for w in workloads {
        args.extend(["--workload", w]);
    }
    let out = kerf(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn packing_json_gives_each_workloads_cost_lower_bound_lp_optimum_and_their_ratio() {
    let doc = packing(&["inflate", "memory-analytics"]);
    let workloads = doc["workloads"].as_array().expect("workloads is a list");
    let names: Vec<&str> = workloads.iter().filter_map(|w| w["name"].as_str()).collect();
    assert_eq!(names, ["inflate", "memory-analytics"]);
    for w in workloads {
        assert_eq!(w["scheduled"], w["pods"], "{w}");
        let cost = w["costPerHour"].as_f64().expect("costPerHour");
        let bound = w["lowerBound"].as_f64().expect("lowerBound");
        let ratio = w["ratio"].as_f64().expect("ratio");
        assert!(bound > 0.0 && cost >= bound * 0.9999, "a lower bound above the fleet's cost: {w}");
        assert!((ratio - cost / bound).abs() < 1e-3, "{w}");
        let lp = w["lpOptimum"].as_f64().expect("lpOptimum");
        assert!(lp >= bound * 0.9999, "the proven bound above the LP optimum it comes from: {w}");
        if w["boundConverged"] == true {
            assert!(cost >= lp * 0.9999, "a fleet cheaper than the converged relaxation: {w}");
        }
    }
    let worst_to_lp = doc["maxRatioToLpOptimum"].as_f64().expect("maxRatioToLpOptimum");
    assert!(worst_to_lp >= 1.0 && worst_to_lp <= doc["maxRatio"].as_f64().expect("maxRatio") + 1e-4, "{doc}");
}

#[test]
fn karpenters_two_shape_workload_costs_within_three_percent_of_the_lower_bound() {
    // 500 pods of 900m / 3100Mi and 500 of 3500m / 28Gi: largest first fills each
    // r6a.48xlarge's memory with 50 large pods and strands its CPU; claims kept to a mix of both
    // shapes do not.
    let doc = packing(&["karpenter-two-shape"]);
    let w = &doc["workloads"][0];
    assert_eq!(w["scheduled"], 1000);
    let ratio = w["ratio"].as_f64().expect("ratio");
    assert!(ratio <= 1.03, "{w}");
}

#[test]
fn packing_an_unknown_workload_is_bad_input_exit_2_naming_the_known_ones() {
    let out = kerf(&["bench", "packing", "--workload", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope") && err.contains("web-stack"), "{err}");
}

#[test]
fn mixed_workloads_cost_within_five_percent_of_the_lower_bound() {
    // Several pod shapes each: claims mixing them where largest-first would strand a resource.
    let doc = packing(&["five-shape", "web-stack", "memory-analytics"]);
    for w in doc["workloads"].as_array().expect("workloads is a list") {
        assert_eq!(w["scheduled"], w["pods"], "{w}");
        let ratio = w["ratio"].as_f64().expect("ratio");
        // five-shape: us-west-2's spot c6a.48xlarge (192 vCPU, 737 pods) takes the bound to
        // $29.01/h, and the claims sized by price do not use it for this mix ($33.28/h, as
        // without it): 1.147 of the bound.
        let limit = if w["name"] == "five-shape" { 1.15 } else { 1.05 };
        assert!(ratio <= limit, "{w}");
    }
}

#[test]
fn the_realized_fleet_after_binding_and_five_minutes_of_disruption_stays_within_three_percent_of_the_plan() {
    let out = kerf(&[
        "bench",
        "packing",
        "--json",
        "--realized",
        "--workload",
        "karpenter-two-shape",
        "--workload",
        "web-stack",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for w in doc["workloads"].as_array().expect("workloads") {
        let r = &w["realized"];
        assert_eq!(r["podsPending"], 0, "{w}");
        let to_plan = r["toPlan"].as_f64().expect("toPlan");
        let ratio = r["ratio"].as_f64().expect("ratio");
        assert!(to_plan <= 1.03, "the fleet that runs costs more than the plan: {w}");
        assert!(ratio <= 1.05, "the fleet that runs is more than 5% above the bound: {w}");
        let cost = r["costPerHour"].as_f64().expect("costPerHour");
        assert!((to_plan - cost / w["costPerHour"].as_f64().expect("plan")).abs() < 1e-3, "{w}");
    }
    assert!(doc["maxRealizedRatio"].as_f64().expect("maxRealizedRatio") <= 1.05);
}

#[test]
fn snapshot_bench_reads_every_served_node_and_pod_and_the_half_full_cluster_consolidates() {
    let out = kerf(&["bench", "snapshot", "--nodes", "6", "--pods", "60", "--runs", "1", "--for", "30m", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for key in ["snapshotSeconds", "whatIfSeconds", "snapshotBytes", "costPerHourBefore", "costPerHourAfter"] {
        assert!(doc.get(key).is_some(), "missing {key}: {text}");
    }
    assert_eq!(
        (doc["nodes"].clone(), doc["pods"].clone(), doc["podsPendingAfter"].clone()),
        (6.into(), 60.into(), 0.into())
    );
    let (before, after) = (doc["costPerHourBefore"].as_f64().unwrap(), doc["costPerHourAfter"].as_f64().unwrap());
    assert!(after < before, "half-full nodes consolidate: {text}");
}

#[test]
fn snapshot_bench_with_fill_out_of_range_is_bad_input() {
    let out = kerf(&["bench", "snapshot", "--fill", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fill must be in (0, 1], got 1.5"));
}

#[test]
fn top_bench_times_the_start_memory_and_a_redraw_per_cordoned_node() {
    let out = kerf(&["bench", "top", "--nodes", "6", "--pods", "60", "--changes", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for key in
        ["startSeconds", "peakRssBytes", "firstFrameSeconds", "redrawSeconds", "redrawMaxSeconds", "frameSeconds"]
    {
        assert!(doc[key].as_f64().is_some_and(|v| v > 0.0), "missing or zero {key}: {text}");
    }
    assert_eq!(doc["redrawRuns"].as_array().map(Vec::len), Some(2), "{text}");
    assert!(doc["redrawMaxSeconds"].as_f64() >= doc["redrawSeconds"].as_f64(), "{text}");
}
