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
fn unknown_region_exits_2_naming_it() {
    let out = kerf(&["instance-types", "--region", "mars-north-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown region \"mars-north-1\""));
}

#[test]
fn unknown_instance_type_exits_2_naming_it() {
    let out = kerf(&["instance-types", "--json", "m5.large", "c7i.enormous"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown instance type \"c7i.enormous\" in region us-west-2")
    );
}
