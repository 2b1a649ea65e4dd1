use std::sync::Arc;

use kerf_api::Quantity;

use super::*;
use crate::top::fleet::{BufferFacts, Item, PodFacts, Update};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("time")
}

fn node(name: &str, pool: &str, it: &str, zone: &str, ct: &str, cpu_milli: i64) -> NodeFacts {
    let labels = [
        (labels::NODE_POOL, pool),
        (labels::INSTANCE_TYPE, it),
        (labels::ZONE, zone),
        (labels::CAPACITY_TYPE, ct),
        (labels::REGION, "us-west-2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    NodeFacts {
        name: name.to_string(),
        labels,
        created: Some(t(0)),
        ready: Some(true),
        unschedulable: false,
        disrupted: false,
        deleting: false,
        allocatable: ResourceList::new()
            .with("cpu", Quantity::from_milli(cpu_milli))
            .with("memory", Quantity::from_mebibytes(8192)),
        provider_id: Some(format!("kwok://{name}")),
    }
}

fn claim(name: &str, node: Option<&str>, pool: &str) -> ClaimFacts {
    ClaimFacts {
        name: name.to_string(),
        node_pool: Some(pool.to_string()),
        node: node.map(str::to_string),
        provider_id: node.map(|n| format!("kwok://{n}")),
        instance_type: Some("m5.large".to_string()),
        zone: Some("us-west-2a".to_string()),
        capacity_type: Some("on-demand".to_string()),
        created: Some(t(100)),
        deleting: false,
        disruption: None,
        not_launched: None,
        requirement_labels: BTreeMap::new(),
        reversed: None,
    }
}

fn pod(ns: &str, name: &str, node: Option<&str>, phase: &str, owner: &str, cpu_milli: i64) -> PodFacts {
    PodFacts {
        namespace: ns.to_string(),
        name: name.to_string(),
        node: node.map(str::to_string),
        phase: phase.to_string(),
        requests: Arc::new(
            ResourceList::new().with("cpu", Quantity::from_milli(cpu_milli)).with("pods", Quantity::from_units(1)),
        ),
        owner: Some(owner.to_string()),
        nominated: None,
        unschedulable: None,
        finished: false,
    }
}

fn event(key: &str, object: &str, reason: &str, message: &str, component: &str, at: i64) -> EventFacts {
    EventFacts {
        key: key.to_string(),
        object: object.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        component: component.to_string(),
        at: Some(t(at)),
        count: 1,
    }
}

fn pool(name: &str, limits: &str) -> Arc<NodePool> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"limits": serde_json::from_str::<serde_json::Value>(limits).expect("limits"),
                "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
            "status": {"resources": {"cpu": "6", "memory": "24Gi"}}
        }))
        .expect("pool"),
    )
}

use kerf_api::NodePool;

/// Three nodes of two pools, a launching claim, running, bound and pending pods, events.
fn fleet() -> Fleet {
    let mut f = Fleet::default();
    let mut add = |i: Item| f.apply(Update::apply(i));
    add(Item::Pool(pool("general", r#"{"cpu": "100"}"#)));
    add(Item::Pool(pool("batch", r#"{"cpu": "8", "nodes": "3"}"#)));
    add(Item::Node(node("n-a", "general", "m5.large", "us-west-2a", "on-demand", 2000)));
    add(Item::Node(node("n-b", "general", "c5.xlarge", "us-west-2b", "spot", 4000)));
    add(Item::Node(node("n-c", "batch", "m5.2xlarge", "us-west-2c", "on-demand", 8000)));
    add(Item::Claim(claim("general-a", Some("n-a"), "general")));
    add(Item::Claim(claim("general-new", None, "general")));
    add(Item::Pod(pod("default", "web-1", Some("n-a"), "Running", "Deployment web", 1000)));
    add(Item::Pod(pod("default", "web-2", Some("n-a"), "Running", "Deployment web", 500)));
    add(Item::Pod(pod("default", "web-3", Some("n-b"), "Pending", "Deployment web", 1000)));
    add(Item::Pod(pod("default", "big-1", None, "Pending", "Deployment big", 64000)));
    add(Item::Pod(pod("default", "big-2", None, "Pending", "Deployment big", 64000)));
    add(Item::Pod(pod("jobs", "one", None, "Pending", "Job one", 100)));
    let mut done = pod("default", "done", Some("n-c"), "Succeeded", "Job done", 4000);
    done.finished = true;
    add(Item::Pod(done));
    add(Item::NodeEvent(event(
        "default/e1",
        "n-a",
        "DisruptionBlocked",
        "Cannot disrupt Node: pod default/web-1 has a PDB",
        "karpenter",
        10,
    )));
    add(Item::NodeEvent(event(
        "default/e2",
        "n-a",
        "DisruptionBlocked",
        "Cannot disrupt Node: NodePool general has consolidateAfter: Never",
        "karpenter",
        20,
    )));
    add(Item::PodEvent(event(
        "default/e3",
        "default/big-1",
        "FailedScheduling",
        "0/3 nodes are available",
        "default-scheduler",
        30,
    )));
    add(Item::PodEvent(event(
        "default/e4",
        "default/big-2",
        "FailedScheduling",
        "no instance type has 64 cpu in NodePool general",
        "karpenter",
        25,
    )));
    f
}

fn names(frame: &Frame) -> Vec<&str> {
    frame.nodes.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn the_cluster_line_sums_requests_allocatable_catalog_prices_and_pod_counts() {
    let f = fleet();
    let frame = frame(&f, &Options::default(), &CatalogPrices, t(3600));
    let c = &frame.cluster;
    assert_eq!((c.nodes, c.launching), (4, 1), "three nodes and a launching claim");
    let cpu = &c.resources[0];
    // 1 + 0.5 on n-a, 1 on n-b; the finished pod holds nothing.
    assert_eq!((cpu.resource.as_str(), cpu.used, cpu.of), ("cpu", 2.5, Some(14.0)));
    assert_eq!((c.pods_running, c.pods_pending, c.pods_bound_not_started), (2, 3, 1));
    let od = |it: &str| CatalogPrices.price(it, "on-demand", "us-west-2a", Some("us-west-2")).expect("priced");
    let spot = CatalogPrices.price("c5.xlarge", "spot", "us-west-2b", None).expect("spot priced");
    assert!(spot < od("c5.xlarge") * 0.5, "the catalog's spot model is 55-75% off: {spot}");
    let want = od("m5.large") * 2.0 + spot + od("m5.2xlarge");
    assert!((c.cost_per_hour - want).abs() < 1e-9, "{} != {want}", c.cost_per_hour);
    assert!((c.cost_per_month - want * 730.0).abs() < 1e-6);
    assert_eq!(c.unpriced, 0);
}

#[test]
fn nodes_sort_by_name_price_use_and_filter_narrows_the_list_not_the_totals() {
    let f = fleet();
    let mut opts = Options::default();
    assert_eq!(names(&frame(&f, &opts, &CatalogPrices, t(0))), ["general-new", "n-a", "n-b", "n-c"]);
    opts.sort = "price".parse().expect("sort");
    let by_price = frame(&f, &opts, &CatalogPrices, t(0));
    assert_eq!(names(&by_price)[0], "n-c", "the 2xlarge first");
    let prices: Vec<f64> = by_price.nodes.iter().filter_map(|r| r.price_per_hour).collect();
    assert!(prices.windows(2).all(|w| w[0] >= w[1]), "{prices:?}");
    opts.reverse = true;
    assert_eq!(names(&frame(&f, &opts, &CatalogPrices, t(0)))[3], "n-c");
    opts = Options { sort: "cpu".parse().expect("sort"), ..Options::default() };
    // n-a: 1.5 of 2 cpu; n-b: 1 of 4; n-c: 0 of 8; the launching claim has no allocatable.
    assert_eq!(names(&frame(&f, &opts, &CatalogPrices, t(0))), ["n-a", "n-b", "n-c", "general-new"]);
    opts.filter = "SPOT".to_string();
    let filtered = frame(&f, &opts, &CatalogPrices, t(0));
    assert_eq!(names(&filtered), ["n-b"]);
    assert_eq!(filtered.cluster.nodes, 4, "the cluster line counts every node");
    assert!("nope!".parse::<Sort>().unwrap_err().contains("not a sort field"));
}

#[test]
fn node_states_and_the_reason_kerf_keeps_or_removes_a_node() {
    let mut f = fleet();
    let now = t(0);
    let fr = frame(&f, &Options::default(), &CatalogPrices, now);
    let row = |fr: &Frame, n: &str| fr.nodes.iter().find(|r| r.name == n).cloned().expect("row");
    let a = row(&fr, "n-a");
    assert_eq!(a.state, State::Ready);
    assert_eq!(
        a.reason.as_deref(),
        Some("NodePool general has consolidateAfter: Never"),
        "the latest DisruptionBlocked"
    );
    assert_eq!(a.node_claim.as_deref(), Some("general-a"));
    let launching = row(&fr, "general-new");
    assert_eq!((launching.state, launching.instance_type.as_deref()), (State::Launching, Some("m5.large")));
    assert!(launching.price_per_hour.is_some(), "a launching claim is priced by its labels");

    let mut b = f.nodes["n-b"].clone();
    b.unschedulable = true;
    let mut c = f.nodes["n-c"].clone();
    c.ready = Some(false);
    let mut a = f.nodes["n-a"].clone();
    a.disrupted = true;
    let mut ca = f.claims["general-a"].clone();
    ca.disruption = Some("Underutilized: replace with a cheaper node".to_string());
    for i in [Item::Node(a), Item::Node(b), Item::Node(c), Item::Claim(ca)] {
        f.apply(Update::apply(i));
    }
    let fr = frame(&f, &Options { sort: Sort::State, ..Options::default() }, &CatalogPrices, now);
    let states: Vec<(&str, State)> = fr.nodes.iter().map(|r| (r.name.as_str(), r.state)).collect();
    assert_eq!(
        states,
        [
            ("n-c", State::NotReady),
            ("n-a", State::Disrupting),
            ("general-new", State::Launching),
            ("n-b", State::Cordoned)
        ]
    );
    assert_eq!(row(&fr, "n-a").reason.as_deref(), Some("Underutilized: replace with a cheaper node"));
    assert_eq!(fr.node_pools.iter().find(|p| p.name == "general").map(|p| p.disrupting), Some(1));
    // Without its NodeClaim's condition, the node's latest DisruptionTerminating event says why.
    let mut b = f.nodes["n-b"].clone();
    b.disrupted = true;
    f.apply(Update::apply(Item::Node(b)));
    f.apply(Update::apply(Item::NodeEvent(event(
        "default/e5",
        "n-b",
        "DisruptionTerminating",
        "Disrupting Node: Empty/Delete: no pod left",
        "karpenter",
        40,
    ))));
    let fr = frame(&f, &Options::default(), &CatalogPrices, now);
    assert_eq!(
        (row(&fr, "n-b").state, row(&fr, "n-b").reason.as_deref()),
        (State::Disrupting, Some("Empty/Delete: no pod left"))
    );
}

#[test]
fn pending_pods_are_grouped_by_owner_with_kerfs_reason_first() {
    let f = fleet();
    let fr = frame(&f, &Options::default(), &CatalogPrices, t(0));
    let groups: Vec<(&str, &str, usize, &str)> =
        fr.pending.iter().map(|g| (g.namespace.as_str(), g.owner.as_str(), g.pods, g.reason.as_str())).collect();
    assert_eq!(
        groups,
        [
            ("default", "Deployment big", 2, "no instance type has 64 cpu in NodePool general"),
            ("jobs", "Job one", 1, "not scheduled yet"),
        ]
    );
}

#[test]
fn pools_show_use_against_limits_cost_and_the_disruptions_their_budget_allows_now() {
    let mut f = fleet();
    for i in 0..8 {
        f.apply(Update::apply(Item::Node(node(
            &format!("g-{i}"),
            "general",
            "m5.large",
            "us-west-2a",
            "on-demand",
            2000,
        ))));
    }
    let fr = frame(&f, &Options::default(), &CatalogPrices, t(0));
    let general = fr.node_pools.iter().find(|p| p.name == "general").expect("general");
    // n-a, n-b, eight more and the launching claim: the default budget is 10% of 11, rounded up.
    assert_eq!((general.nodes, general.disrupting, general.allowed_disruptions), (11, 0, Some(2)));
    assert_eq!(general.limits[0], Use { resource: "cpu".into(), used: 6.0, of: Some(100.0) });
    let batch = fr.node_pools.iter().find(|p| p.name == "batch").expect("batch");
    let limited: Vec<(&str, Option<f64>)> = batch.limits.iter().map(|u| (u.resource.as_str(), u.of)).collect();
    assert_eq!(limited, [("cpu", Some(8.0)), ("memory", None), ("nodes", Some(3.0))]);
    assert_eq!(batch.limits[2].used, 1.0, "nodes are counted, not read from the status");
    let want: f64 =
        fr.nodes.iter().filter(|r| r.node_pool.as_deref() == Some("batch")).filter_map(|r| r.price_per_hour).sum();
    assert!((batch.cost_per_hour - want).abs() < 1e-12 && want > 0.0);
}

#[test]
fn the_selected_node_shows_its_pods_and_a_node_selector_narrows_everything() {
    let mut f = fleet();
    f.apply(Update::apply(Item::Buffer(BufferFacts {
        namespace: "default".into(),
        name: "burst".into(),
        wanted: "20".into(),
        chunks: Some(20),
        provisioning: Some(("False".into(), "12 of 20 chunks placed".into())),
        not_ready: None,
    })));
    let opts = Options { selected: Some("n-a".into()), ..Options::default() };
    let fr = frame(&f, &opts, &CatalogPrices, t(0));
    let d = fr.selected.expect("a selected node");
    assert_eq!(d.node.name, "n-a");
    assert_eq!(d.pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["web-1", "web-2"]);
    assert_eq!(d.provider_id.as_deref(), Some("kwok://n-a"));
    assert_eq!(fr.buffers[0].provisioning.as_deref(), Some("12 of 20 chunks placed"));

    let opts = Options {
        node_selector: Some(LabelSelector::parse("karpenter.sh/nodepool=batch").expect("selector")),
        ..Options::default()
    };
    let fr = frame(&f, &opts, &CatalogPrices, t(0));
    assert_eq!(names(&fr), ["n-c"]);
    assert_eq!((fr.cluster.nodes, fr.cluster.pods_running, fr.cluster.resources[0].of), (1, 0, Some(8.0)));
    assert_eq!(fr.cluster.pods_pending, 3, "pending pods have no node to select by");
}

#[test]
fn the_catalog_does_not_price_reserved_capacity_or_unknown_types() {
    assert!(CatalogPrices.price("m5.large", "reserved", "us-west-2a", None).is_none());
    assert!(CatalogPrices.price("no.such", "on-demand", "us-west-2a", None).is_none());
    assert!(CatalogPrices.price("m5.large", "on-demand", "nowhere", None).is_none());
}

fn overlay(yaml: &str) -> Item {
    Item::Overlay(Arc::new(serde_yaml_ng::from_str(yaml).expect("overlay")))
}

#[test]
fn nodeoverlays_price_the_nodes_they_select_and_the_costs_follow() {
    let mut f = fleet();
    let list = |it: &str, ct: &str, zone: &str| CatalogPrices.price(it, ct, zone, Some("us-west-2")).expect("listed");
    let before = frame(&f, &Options::default(), &CatalogPrices, t(0));
    // m5 on-demand at 30% off in the general pool only; a flat price for every c5 (weight 10).
    f.apply(Update::apply(overlay(
        "metadata: {name: m5-savings}
spec:
  requirements:
    - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
    - {key: karpenter.sh/nodepool, operator: In, values: [general]}
  priceAdjustment: \"-30%\"",
    )));
    f.apply(Update::apply(overlay(
        "metadata: {name: c5-flat}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [c5]}]
  price: \"0.01\"
  weight: 10",
    )));
    let opts = Options { selected: Some("n-a".into()), ..Options::default() };
    let fr = frame(&f, &opts, &CatalogPrices, t(0));
    let row = |n: &str| fr.nodes.iter().find(|r| r.name == n).cloned().expect("row");
    let a = row("n-a");
    let m5 = list("m5.large", "on-demand", "us-west-2a");
    assert!((a.price_per_hour.expect("priced") - m5 * 0.7).abs() < 1e-9, "{a:?}");
    assert_eq!((a.list_price_per_hour, a.node_overlay.as_deref()), (Some(m5), Some("m5-savings")));
    let b = row("n-b");
    assert_eq!((b.price_per_hour, b.node_overlay.as_deref()), (Some(0.01), Some("c5-flat")));
    let c = row("n-c");
    assert_eq!(
        (c.price_per_hour, c.list_price_per_hour, c.node_overlay.as_deref()),
        (Some(list("m5.2xlarge", "on-demand", "us-west-2c")), None, None),
        "the batch pool is not selected: its list price"
    );
    let launching = row("general-new");
    assert_eq!(launching.node_overlay.as_deref(), Some("m5-savings"), "a launching claim by its pool and type");
    let total: f64 = fr.nodes.iter().filter_map(|r| r.price_per_hour).sum();
    assert!((fr.cluster.cost_per_hour - total).abs() < 1e-12 && total < before.cluster.cost_per_hour);
    assert_eq!(fr.cluster.overlay_priced, 3);
    let general = fr.node_pools.iter().find(|p| p.name == "general").expect("general");
    assert!((general.cost_per_hour - (a.price_per_hour.unwrap_or(0.0) * 2.0 + 0.01)).abs() < 1e-9);
    let json = serde_json::to_value(&fr).expect("json");
    assert_eq!(json["selected"]["node"]["listPricePerHour"], serde_json::json!(m5));
    assert_eq!(json["selected"]["node"]["nodeOverlay"], "m5-savings");
    let n_c = json["nodes"].as_array().and_then(|n| n.iter().find(|r| r["name"] == "n-c")).expect("n-c");
    assert!(n_c.get("listPricePerHour").is_none() && n_c.get("nodeOverlay").is_none(), "{n_c}");
    let text = crate::top::text::render(&fr, &opts.resources, 200, false);
    assert!(text.lines().next().is_some_and(|l| l.contains("(3 at NodeOverlay prices, marked °)")), "{text}");
    assert!(text.contains(&format!("{:.4}°", m5 * 0.7)) && text.contains("0.0100°"), "{text}");
    assert!(
        crate::top::text::price_detail(&a).contains("set by NodeOverlay m5-savings (list price"),
        "{}",
        crate::top::text::price_detail(&a)
    );

    // Deleted (or being deleted), an overlay no longer prices anything.
    f.apply(Update::Delete(crate::top::fleet::Kind::NodeOverlay, "c5-flat".into()));
    let going: kerf_api::NodeOverlay = serde_yaml_ng::from_str(
        "metadata: {name: m5-savings, deletionTimestamp: \"2027-01-01T00:00:00Z\"}\nspec: {requirements: [], price: \"1\"}",
    )
    .expect("overlay");
    f.apply(Update::apply(Item::Overlay(Arc::new(going))));
    let fr = frame(&f, &Options::default(), &CatalogPrices, t(0));
    assert_eq!(fr.cluster.overlay_priced, 0);
    assert!((fr.cluster.cost_per_hour - before.cluster.cost_per_hour).abs() < 1e-12);
}

#[test]
fn reversals_count_per_pool_over_the_last_hour_and_a_held_node_shows_its_reversal() {
    let mut f = fleet();
    let mut held = f.claims["general-a"].clone();
    held.reversed = Some("undone 2027-01-15T08:00:30Z decided 2027-01-15T08:00:00Z".into());
    f.apply(Update::apply(Item::Claim(held)));
    let reversed = |key: &str, pool: &str, claim: &str, decided: &str, at: i64| {
        Item::PoolEvent(event(
            key,
            pool,
            "ConsolidationReversed",
            &format!(
                "NodeClaim {claim} launched for pod(s) default/web-9 that the consolidation decided at {decided} moved (its 2 pod(s) fit on other nodes); its nodes are left alone until the workload changes"
            ),
            "karpenter",
            at,
        ))
    };
    f.apply(Update::apply(reversed("default/r1", "general", "general-b", "2027-01-15T08:00:00Z", 4000)));
    f.apply(Update::apply(reversed("default/r2", "general", "general-x", "2027-01-15T07:00:00Z", 6000)));
    f.apply(Update::apply(reversed("default/r3", "general", "general-y", "2027-01-15T06:00:00Z", 100)));
    let opts = Options { selected: Some("n-a".into()), ..Options::default() };
    let fr = frame(&f, &opts, &CatalogPrices, t(7000));
    let count = |name: &str| fr.node_pools.iter().find(|p| p.name == name).map(|p| p.reversals);
    assert_eq!((count("general"), count("batch")), (Some(2), Some(0)), "r3 is over an hour old");
    let d = fr.selected.clone().expect("selected");
    let why = d.node.reversal.expect("n-a's claim is held");
    assert!(why.contains("kerf.sh/consolidation-reversed: undone 2027-01-15T08:00:30Z"), "{why}");
    assert!(why.contains("NodeClaim general-b launched"), "the event about its decision: {why}");
    assert!(!why.contains("general-x"), "{why}");
    assert!(fr.nodes.iter().filter(|r| r.name != "n-a").all(|r| r.reversal.is_none()));
    let text = crate::top::text::render(&fr, &opts.resources, 400, false);
    assert!(text.contains("HELD AFTER A CONSOLIDATION WAS UNDONE (1)\n  n-a: consolidation reversed"), "{text}");
    assert!(text.contains("REVERSED (1H)"), "{text}");
}
