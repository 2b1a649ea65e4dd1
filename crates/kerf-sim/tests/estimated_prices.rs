//! A node whose price comes from an estimated catalog price says so in the JSON report
//! (`priceEstimated: true`) and in the HTML report (`≈`); a node at a listed price carries no
//! such mark.

mod common;

use common::*;

/// A NodePool `NAME` launching only `TYPE` on demand in us-west-2a.
fn pool(name: &str, instance_type: &str) -> String {
    format!(
        r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {{name: {name}}}
        spec:
          template:
            metadata: {{labels: {{pool: {name}}}}}
            spec:
              nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
              requirements:
                - {{key: node.kubernetes.io/instance-type, operator: In, values: [{instance_type}]}}
                - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
                - {{key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}}
          disruption: {{consolidateAfter: Never}}
"#
    )
}

#[test]
fn a_node_at_an_estimated_catalog_price_is_marked_in_the_json_and_html_reports() {
    // The price source lists no t3.large price in us-west-2 (the catalog estimates it) and
    // lists m5.large's.
    let yaml = format!(
        "name: estimated\nsteps:\n  - apply:{NODE_CLASS}{}{}{}{}\n  - wait: 2m\n",
        pool("burst", "t3.large"),
        pool("general", "m5.large"),
        deployment("on-t3", 1, "1", "\n              nodeSelector: {pool: burst}"),
        deployment("on-m5", 1, "1", "\n              nodeSelector: {pool: general}"),
    );
    let r = run(&yaml);
    let node = |t: &str| {
        r.nodes.iter().find(|n| n.instance_type.as_deref() == Some(t)).unwrap_or_else(|| panic!("{t}: {r:?}"))
    };
    let (t3, m5) = (node("t3.large"), node("m5.large"));
    assert_eq!((t3.price_per_hour, t3.price_estimated), (Some(0.0832), true));
    assert_eq!((m5.price_per_hour, m5.price_estimated), (Some(0.102), false));

    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    let by_type = |t: &str| {
        json["nodes"].as_array().unwrap().iter().find(|n| n["instanceType"] == t).cloned().unwrap_or_default()
    };
    assert_eq!(by_type("t3.large")["priceEstimated"], true);
    assert!(by_type("m5.large").get("priceEstimated").is_none(), "written only when true");

    let html = r.to_html();
    assert!(html.contains("title=\"estimated price\">≈0.0832</td>"), "the HTML marks the estimate");
    assert!(html.contains(">0.1020</td>"), "a listed price is shown plainly");
}
