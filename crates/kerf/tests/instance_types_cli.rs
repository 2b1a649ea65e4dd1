//! `kerf instance-types` per the CLI contract.

use std::process::Command;

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf")).args(args).output().unwrap()
}

#[test]
fn json_reports_c7i_2xlarge_allocatable_in_canonical_form() {
    let out = kerf(&["instance-types", "--region", "ap-northeast-2", "--json", "c7i.2xlarge"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let types = doc.as_array().unwrap();
    assert_eq!(types.len(), 1);
    let t = &types[0];
    assert_eq!(t["name"], "c7i.2xlarge");
    assert_eq!(
        t["allocatable"],
        serde_json::json!({"cpu": "7910m", "memory": "14162Mi", "pods": "58", "ephemeral-storage": "17Gi"})
    );
    assert_eq!(t["capacity"]["cpu"], "8");
    assert_eq!(t["labels"]["node.kubernetes.io/instance-type"], "c7i.2xlarge");
    assert_eq!(t["labels"]["topology.kubernetes.io/region"], "ap-northeast-2");
    let offerings = t["offerings"].as_array().unwrap();
    // Four zones, on-demand and spot in each.
    assert_eq!(offerings.len(), 8);
    let od = offerings.iter().find(|o| o["zone"] == "ap-northeast-2a" && o["capacityType"] == "on-demand").unwrap();
    assert_eq!(od["price"], 0.4032);
    assert_eq!(od["available"], true);
}

#[test]
fn table_lists_named_types_with_allocatable_and_prices() {
    let out = kerf(&["instance-types", "--region", "us-west-2", "m5.large", "c7i.2xlarge"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("NAME"));
    let m5: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&m5[..7], ["m5.large", "2", "7577Mi", "29", "1930m", "6903Mi", "0.1020"]);
    assert!(lines[2].starts_with("c7i.2xlarge"));
}

#[test]
fn unknown_region_exits_2_naming_the_argument_and_the_region() {
    let out = kerf(&["instance-types", "--region", "mars-north-1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--region: unknown region \"mars-north-1\""), "{err}");
    // Named types with a bad region: the region is the problem, not each name.
    let out = kerf(&["instance-types", "--region", "mars-north-1", "m5.large"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--region: unknown region \"mars-north-1\""), "{err}");
    assert!(!err.contains("NAME"), "{err}");
}

#[test]
fn unknown_instance_type_exits_2_naming_the_argument_and_the_type() {
    let out = kerf(&["instance-types", "--json", "m5.large", "c7i.enormous"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NAME \"c7i.enormous\": unknown instance type (not in the built-in catalog)"), "{err}");
}

#[test]
fn every_unknown_name_is_reported_not_only_the_first() {
    let out = kerf(&["instance-types", "nope.small", "m5.large", "nope.large"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NAME \"nope.small\": unknown instance type"), "{err}");
    assert!(err.contains("NAME \"nope.large\": unknown instance type"), "{err}");
    assert!(!err.contains("m5.large"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn a_known_type_not_sold_in_the_region_is_told_apart_from_an_unknown_one() {
    // a1.large (first-generation Graviton) is sold in us-west-2 but not in ap-northeast-2.
    let out = kerf(&["instance-types", "--region", "ap-northeast-2", "a1.large", "zz9.large"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NAME \"a1.large\": instance type not sold in --region ap-northeast-2 (sold in "), "{err}");
    assert!(err.contains("us-west-2"), "{err}");
    assert!(!err.contains("a1.large\": unknown"), "{err}");
    assert!(err.contains("NAME \"zz9.large\": unknown instance type"), "{err}");
    // ...and in a region that sells it, it is listed.
    let out = kerf(&["instance-types", "--region", "us-west-2", "a1.large"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
