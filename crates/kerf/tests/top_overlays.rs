//! `kerf top` and what kerf writes about prices and undone consolidations. Against `kerf serve`
//! running examples/node-overlay-savings-plan.yaml, `--json` and `--once` price every node,
//! NodePool and the cluster at the savings plan's NodeOverlay prices, with the list price and the
//! overlay beside them, as `kerf simulate`'s report of the same scenario does. Against a served
//! cluster whose NodeClaim carries kerf's `kerf.sh/consolidation-reversed` hold and whose NodePool
//! has a `ConsolidationReversed` event (docs/design.md, "Events"), the pool counts the reversal
//! and the node shows it.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;
use serde_json::Value;

fn report(path: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().expect("utf-8 path"), "--report", "json"])
        .output()
        .expect("run kerf simulate");
    assert!(out.status.success(), "kerf simulate failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn top(s: &Served, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("top")
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(args)
        .env("COLUMNS", "400")
        .stdin(Stdio::null())
        .output()
        .expect("run kerf top")
}

fn top_json(s: &Served) -> Value {
    let out = top(s, &["--json"]);
    assert!(out.status.success(), "kerf top --json failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("kerf top --json is JSON")
}

fn names(nodes: &Value) -> BTreeSet<String> {
    nodes.as_array().expect("nodes").iter().filter_map(|n| n["name"].as_str().map(str::to_string)).collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn nodes_pools_and_the_cluster_cost_what_the_savings_plan_overlay_says_as_in_the_report() {
    let example = repo_file("examples/node-overlay-savings-plan.yaml");
    let report = report(&example);
    let reported = report["nodes"].as_array().expect("report nodes");
    assert!(!reported.is_empty() && reported.iter().all(|n| n.get("listPricePerHour").is_some()), "{reported:?}");
    let s = Served::start("top-overlays", &[example.to_str().expect("utf-8 path"), "--speed", "20"]);
    // Served, the steps run in virtual time: the c5 nodes launched first are replaced by m5 once
    // the overlay is applied.
    let j = eventually(240, "the served fleet to reach the report's", || {
        let j = top_json(&s);
        (names(&j["nodes"]) == names(&report["nodes"])
            && j["cluster"]["overlayPriced"].as_u64() == Some(reported.len() as u64)
            && j["cluster"]["podsRunning"] == report["summary"]["podsRunning"])
            .then_some(j)
    });
    let c = &j["cluster"];
    let cost = f(&report["summary"]["costPerHour"]);
    assert!((f(&c["costPerHour"]) - cost).abs() < 1e-9, "{c} vs the report's {cost}");
    assert!((f(&c["costPerMonth"]) - cost * 730.0).abs() < 1e-6, "{c}");
    let mut list_total = 0.0;
    for r in reported {
        let name = r["name"].as_str().expect("name");
        let n = j["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["name"] == name)).expect("shown");
        let (price, list) = (f(&n["pricePerHour"]), f(&n["listPricePerHour"]));
        assert!((price - f(&r["pricePerHour"])).abs() < 1e-9, "{name}: {n} vs {r}");
        assert!((list - f(&r["listPricePerHour"])).abs() < 1e-9, "{name}: {n} vs {r}");
        assert!((price - list * 0.7).abs() < 1e-4, "{name}: the plan's 30% off");
        let overlay = n["nodeOverlay"].as_str().expect("the overlay that set the price");
        assert!(r["nodeOverlays"].as_array().is_some_and(|o| o.iter().any(|x| x == overlay)), "{n} vs {r}");
        list_total += list;
    }
    let pools = j["nodePools"].as_array().expect("pools");
    let pooled: f64 = pools.iter().map(|p| f(&p["costPerHour"])).sum();
    assert!((pooled - cost).abs() < 1e-9, "the pools' costs add up to the cluster's: {pools:?}");
    assert!(list_total > cost + 1e-6, "the overlay prices are below the list prices");

    let once = top(&s, &["--once", "--sort", "price"]);
    assert!(once.status.success(), "{}", String::from_utf8_lossy(&once.stderr));
    let text = String::from_utf8(once.stdout).expect("utf-8");
    let first = text.lines().next().expect("the cluster line");
    for part in [format!("${cost:.4}/hour"), format!("({} at NodeOverlay prices, marked °)", reported.len())] {
        assert!(first.contains(&part), "{part:?} not in {first:?}");
    }
    for r in reported {
        let row = text.lines().find(|l| l.starts_with(r["name"].as_str().expect("name"))).expect("row");
        assert!(row.contains(&format!("{:.4}°", f(&r["pricePerHour"]))), "{row}");
    }
    assert!(s.stop().success());
}

#[test]
fn a_nodepools_undone_consolidations_are_counted_and_a_held_node_shows_its_reversal() {
    let s =
        Served::start("top-reversals", &[repo_file("examples/inflate.yaml").to_str().expect("utf-8"), "--speed", "20"]);
    let (node, claim, pool) = eventually(120, "a node with its NodeClaim", || {
        let j = top_json(&s);
        let n = j["nodes"].as_array()?.iter().find(|n| n["state"] == "Ready" && n["nodeClaim"].is_string())?.clone();
        Some((
            n["name"].as_str()?.to_string(),
            n["nodeClaim"].as_str()?.to_string(),
            n["nodePool"].as_str()?.to_string(),
        ))
    });
    let j = top_json(&s);
    assert!(j["nodePools"].as_array().expect("pools").iter().all(|p| p["reversals"] == 0), "{}", j["nodePools"]);
    assert!(j["nodes"].as_array().expect("nodes").iter().all(|n| n.get("reversal").is_none()));

    // What kerf's disruption controller writes when a consolidation is undone: the hold on each
    // NodeClaim of the decision, and a Warning event on the NodePool naming the decision's time.
    let at = |s: i64| kerf_cloud::Timestamp::from_second(s).expect("a time");
    let now = at(kerf_cloud::Timestamp::now().as_second());
    let decided = at(now.as_second() - 60);
    let hold = format!("kerf.sh/consolidation-reversed=undone {now} decided {decided}");
    kubectl_ok(&s, &["annotate", "nodeclaim", &claim, &hold]);
    let event = format!(
        r#"apiVersion: v1
kind: Event
metadata: {{name: {pool}.reversed, namespace: default}}
involvedObject: {{apiVersion: karpenter.sh/v1, kind: NodePool, name: {pool}}}
reason: ConsolidationReversed
type: Warning
source: {{component: karpenter}}
message: "NodeClaim {pool}-undo launched for pod(s) default/inflate-x that the consolidation decided at {decided} moved (its 3 pod(s) fit on other nodes); its nodes are left alone until the workload changes"
"#
    );
    let file = write(&s.dir, "event.yaml", &event);
    kubectl_ok(&s, &["create", "-f", file.to_str().expect("utf-8")]);

    let j = eventually(30, "the reversal shown", || {
        let j = top_json(&s);
        let p = j["nodePools"].as_array()?.iter().find(|p| p["name"] == pool.as_str())?.clone();
        (p["reversals"] == 1).then_some(j)
    });
    let n = j["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["name"] == node.as_str())).expect("the node");
    let why = n["reversal"].as_str().unwrap_or_else(|| panic!("no reversal on {n}"));
    assert!(why.contains(&format!("undone {now} decided {decided}")), "{why}");
    assert!(why.contains(&format!("NodeClaim {pool}-undo launched")), "the pool's event about it: {why}");
    let others = j["nodes"].as_array().expect("nodes").iter().filter(|m| m["name"] != node.as_str());
    assert!(others.clone().all(|m| m.get("reversal").is_none()), "only the held node");

    let once = top(&s, &["--once"]);
    assert!(once.status.success(), "{}", String::from_utf8_lossy(&once.stderr));
    let text = String::from_utf8(once.stdout).expect("utf-8");
    assert!(text.contains("REVERSED (1H)"), "{text}");
    assert!(
        text.contains(&format!("HELD AFTER A CONSOLIDATION WAS UNDONE (1)\n  {node}: consolidation reversed")),
        "{text}"
    );
    assert!(s.stop().success());
}
