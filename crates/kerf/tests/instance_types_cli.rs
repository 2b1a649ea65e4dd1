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
        serde_json::json!({"cpu": "7910m", "memory": "14162Mi", "pods": "58", "ephemeral-storage": "17Gi",
                           "attachable-volumes-aws-ebs": "31"})
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

/// The six regions with the most EKS clusters.
const EKS_REGIONS: [&str; 6] =
    ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1", "ap-northeast-1"];

/// Per region, every instance type moto's offerings data lists, split into those with a Linux
/// architecture (x86_64 or arm64) and the rest, with each type's zones: read by the Python of
/// `KERF_MOTO_PYTHON` (the venv tools/test makes with tools/requirements-moto.txt, the moto
/// version the catalog is generated from).
fn moto_offerings() -> serde_json::Value {
    let python = std::env::var("KERF_MOTO_PYTHON").unwrap_or_else(|_| {
        panic!(
            "KERF_MOTO_PYTHON is not set: it must name a Python with moto (python3 -m venv /tmp/kerf-moto-venv && \
             /tmp/kerf-moto-venv/bin/pip install -r tools/requirements-moto.txt; \
             export KERF_MOTO_PYTHON=/tmp/kerf-moto-venv/bin/python), as tools/test does"
        )
    });
    let script = r#"
import gzip, json, os, sys, moto
res = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources")
with gzip.open(os.path.join(res, "instance_types.json.gz"), "rt") as f:
    infos = json.load(f)
out = {}
for region in sys.argv[1:]:
    path = os.path.join(res, "instance_type_offerings", "availability-zone", region + ".json.gz")
    with gzip.open(path, "rt") as f:
        offerings = json.load(f)
    zones = {}
    for o in offerings:
        zones.setdefault(o["InstanceType"], []).append(o["Location"])
    linux, other = {}, []
    for name in sorted(zones):
        arches = infos.get(name, {}).get("ProcessorInfo", {}).get("SupportedArchitectures", [])
        if "x86_64" in arches or "arm64" in arches:
            linux[name] = sorted(zones[name])
        else:
            other.append(name)
    out[region] = {"linux": linux, "other": other}
print(json.dumps(out))
"#;
    let out = Command::new(&python).arg("-c").arg(script).args(EKS_REGIONS).output().unwrap();
    assert!(out.status.success(), "{python}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_type_moto_offers_in_the_eks_regions_is_listed_with_a_price_in_its_zones() {
    let moto = moto_offerings();
    for region in EKS_REGIONS {
        let want = moto[region]["linux"].as_object().unwrap();
        // Only macOS types (no Linux architecture) are left out.
        let other = moto[region]["other"].as_array().unwrap();
        assert!(other.iter().all(|n| n.as_str().is_some_and(|n| n.starts_with("mac"))), "{region}: {other:?}");
        assert!(want.len() > 850, "{region}: moto lists {} types", want.len());

        let out = kerf(&["instance-types", "--region", region, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed: std::collections::BTreeMap<&str, &serde_json::Value> =
            doc.as_array().unwrap().iter().map(|t| (t["name"].as_str().unwrap(), t)).collect();
        let missing: Vec<&String> = want.keys().filter(|n| !listed.contains_key(n.as_str())).collect();
        assert!(missing.is_empty(), "{region}: {} of {} types missing: {missing:?}", missing.len(), want.len());
        assert_eq!(listed.len(), want.len(), "{region}: kerf lists types moto does not offer there");
        for (name, zones) in want {
            let t = listed[name.as_str()];
            let offerings = t["offerings"].as_array().unwrap();
            let mut od_zones: Vec<&str> = offerings
                .iter()
                .filter(|o| o["capacityType"] == "on-demand")
                .inspect(|o| assert!(o["price"].as_f64().is_some_and(|p| p > 0.0), "{region} {name}: {o}"))
                .map(|o| o["zone"].as_str().unwrap())
                .collect();
            od_zones.sort_unstable();
            assert_eq!(serde_json::json!(od_zones), *zones, "{region} {name}: zones");
            assert!(t["priceEstimated"].is_boolean(), "{region} {name}");
        }
    }
}

#[test]
fn t3_large_resolves_in_us_west_2_with_its_estimated_price_marked() {
    let out = kerf(&["instance-types", "--region", "us-west-2", "t3.large", "m5.large"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    // The price source lists no t3.large price in us-west-2: the estimate is starred...
    let t3: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&t3[..7], ["t3.large", "2", "7577Mi", "35", "1930m", "6837Mi", "0.0832*"], "{text}");
    assert!(t3[7].ends_with('*'), "spot prices modelled on an estimate are estimates too: {text}");
    // ...a listed one is not, and a note says what the star means.
    let m5: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(m5[6], "0.1020", "{text}");
    assert!(lines[3].starts_with("* estimated: no listed price for the type in us-west-2"), "{text}");

    let out = kerf(&["instance-types", "--region", "us-west-2", "--json", "t3.large", "m5.large"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc[0]["priceEstimated"], true);
    assert_eq!(doc[1]["priceEstimated"], false);
}
