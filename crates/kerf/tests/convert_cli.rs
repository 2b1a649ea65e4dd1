//! `kerf convert` run as a binary on manifests written for Karpenter's older APIs, and
//! `kerf simulate` running them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml_ng::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/convert").join(name)
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn kerf(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn convert(files: &[&Path], extra: &[&str]) -> Run {
    let mut args = vec!["convert"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    kerf(&args)
}

fn documents(yaml: &str) -> Vec<Value> {
    kerf_api::manifest::yaml_documents(yaml).into_iter().map(Result::unwrap).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} in output"))
}

fn temp(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kerf-convert-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// The converted output passes `kerf validate`.
fn assert_validates(yaml: &str, tag: &str) {
    let f = temp(&format!("{tag}.yaml"), yaml);
    let run = kerf(&["validate", f.to_str().unwrap()]);
    std::fs::remove_file(&f).ok();
    assert_eq!(run.code, 0, "converted output does not validate: {}\n{yaml}", run.stderr);
}

#[test]
fn v1alpha5_provisioner_and_v1alpha1_template_map_every_field_to_v1() {
    let f = fixture("provisioner-ttl-kubelet-v1alpha5.yaml");
    let run = convert(&[&f], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    assert_eq!(docs.len(), 2, "document order and count are kept");
    let pool = find(&docs, "NodePool", "karpenter-default");
    assert_eq!(pool["apiVersion"], "karpenter.sh/v1");
    let t = &pool["spec"]["template"]["spec"];
    assert_eq!(t["nodeClassRef"]["group"], "karpenter.k8s.aws");
    assert_eq!(t["nodeClassRef"]["kind"], "EC2NodeClass");
    assert_eq!(t["nodeClassRef"]["name"], "karpenter-default");
    assert_eq!(t["expireAfter"], "720h", "ttlSecondsUntilExpired 2592000");
    assert_eq!(t["requirements"].as_sequence().unwrap().len(), 7);
    assert_eq!(pool["spec"]["disruption"]["consolidationPolicy"], "WhenEmpty");
    assert_eq!(pool["spec"]["disruption"]["consolidateAfter"], "60s", "ttlSecondsAfterEmpty 60");
    assert_eq!(pool["spec"]["limits"]["cpu"], "1000");
    assert_eq!(pool["spec"]["limits"]["memory"], "1000Gi");
    let class = find(&docs, "EC2NodeClass", "karpenter-default");
    let s = &class["spec"];
    assert_eq!(s["subnetSelectorTerms"][0]["tags"]["karpenter.sh/discovery"], "bys-dev-eks-main");
    assert_eq!(s["securityGroupSelectorTerms"][0]["tags"]["karpenter.sh/discovery"], "bys-dev-eks-main");
    assert_eq!(s["amiSelectorTerms"][0]["alias"], "al2@latest", "amiFamily AL2 without amiSelector");
    assert!(s.get("amiFamily").is_none());
    assert_eq!(s["instanceProfile"], "KarpenterInstanceProfile");
    assert_eq!(s["kubelet"]["evictionMaxPodGracePeriod"], 60, "kubeletConfiguration moved to the class");
    assert_eq!(s["blockDeviceMappings"][0]["ebs"]["volumeSize"], "30Gi");
    assert_eq!(s["metadataOptions"]["httpPutResponseHopLimit"], 2, "the older IMDS default is kept");
    assert_eq!(s["tags"]["auto-delete"], "no", "a string that YAML 1.1 would read as false stays a string");
    assert!(run.stdout.contains("auto-delete: 'no'"), "{}", run.stdout);
    assert_eq!(s["detailedMonitoring"], true);
    let f = f.display();
    assert!(
        run.stderr.contains(&format!(
            "{f}: Provisioner/karpenter-default: spec.kubeletConfiguration.containerRuntime: left out: no v1 equivalent"
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("spec.kubeletConfiguration: moved to EC2NodeClass karpenter-default's spec.kubelet"));
    assert_validates(&run.stdout, "seed-001");
}

#[test]
fn consolidation_enabled_becomes_when_empty_or_underutilized_and_unset_expiry_never() {
    let f = fixture("provisioner-consolidation-v1alpha5.yaml");
    let run = convert(&[&f], &["--default-instance-profile", "KarpenterNodeInstanceProfile-myeks"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    assert_eq!(docs.len(), 3, "the Deployment is passed on");
    assert_eq!(docs[2]["kind"], "Deployment");
    let pool = find(&docs, "NodePool", "default");
    assert_eq!(pool["spec"]["disruption"]["consolidationPolicy"], "WhenEmptyOrUnderutilized");
    assert_eq!(pool["spec"]["disruption"]["consolidateAfter"], "0s");
    assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "Never", "v1alpha5 nodes never expired by default");
    let reqs = pool["spec"]["template"]["spec"]["requirements"].as_sequence().unwrap();
    let keyed = |k: &str| reqs.iter().find(|r| r["key"] == k).unwrap_or_else(|| panic!("{k}"));
    assert_eq!(keyed("karpenter.sh/capacity-type")["values"][0], "on-demand", "the v1alpha5 webhook default");
    assert_eq!(keyed("kubernetes.io/arch")["values"][0], "amd64");
    let class = find(&docs, "EC2NodeClass", "default");
    assert_eq!(class["spec"]["instanceProfile"], "KarpenterNodeInstanceProfile-myeks");
    assert_eq!(class["spec"]["amiSelectorTerms"][0]["alias"], "al2@latest", "v1alpha1's default family");
    assert_validates(&run.stdout, "seed-004");
}

#[test]
fn a_template_without_instance_profile_exits_2_asking_for_one_and_writes_nothing() {
    let f = fixture("provisioner-consolidation-v1alpha5.yaml");
    let run = convert(&[&f], &[]);
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr.lines().collect::<Vec<_>>(),
        [format!(
            "{}: AWSNodeTemplate/default: spec.instanceProfile: not set: v1alpha5 took it from the aws.defaultInstanceProfile setting, which v1 does not have (give the profile with --default-instance-profile, or set spec.instanceProfile or spec.role)",
            f.display()
        )]
    );
}

#[test]
fn v1beta1_pools_move_kubelet_to_the_class_rename_policies_and_move_expire_after() {
    let f = fixture("capacity-spread-nodepools-v1beta1.yaml");
    let run = convert(&[&f], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    let spot = find(&docs, "NodePool", "teama-spot");
    assert_eq!(spot["spec"]["disruption"]["consolidationPolicy"], "WhenEmptyOrUnderutilized");
    assert_eq!(spot["spec"]["disruption"]["consolidateAfter"], "0s");
    assert_eq!(spot["spec"]["template"]["spec"]["expireAfter"], "720h");
    assert!(spot["spec"]["template"]["spec"].get("kubelet").is_none());
    assert_eq!(spot["spec"]["template"]["spec"]["nodeClassRef"]["group"], "karpenter.k8s.aws");
    let od = find(&docs, "NodePool", "teama-on-demand");
    assert_eq!(od["spec"]["disruption"]["consolidationPolicy"], "WhenEmpty");
    assert_eq!(od["spec"]["disruption"]["consolidateAfter"], "30s");
    assert_eq!(od["spec"]["template"]["spec"]["expireAfter"], "Never");
    assert_eq!(od["spec"]["template"]["spec"]["nodeClassRef"]["kind"], "EC2NodeClass", "defaulted kind");
    let class = find(&docs, "EC2NodeClass", "teama");
    assert_eq!(class["apiVersion"], "karpenter.k8s.aws/v1");
    assert_eq!(class["spec"]["kubelet"]["maxPods"], 58, "both pools' identical kubelet lands once");
    assert_eq!(class["spec"]["amiSelectorTerms"][0]["alias"], "al2023@latest");
    assert!(class["spec"]["tags"].get("karpenter.sh/managed-by").is_none(), "removed in v1");
    assert_validates(&run.stdout, "seed-000");
    let f = fixture("nodepool-chart-v1beta1.yaml");
    let run = convert(&[&f], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    let pool = find(&docs, "NodePool", "default");
    assert_eq!(pool["spec"]["weight"], 10);
    assert_eq!(pool["spec"]["disruption"]["budgets"][0]["nodes"], "10%");
    assert_eq!(find(&docs, "EC2NodeClass", "default")["spec"]["amiSelectorTerms"][0]["alias"], "al2@latest");
    assert_validates(&run.stdout, "seed-003");
}

#[test]
fn different_kubelets_of_two_pools_on_one_class_need_a_decision_and_exit_2() {
    let f = temp(
        "kubelets.yaml",
        "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      \
         requirements: []\n      nodeClassRef: {name: shared}\n      kubelet: {maxPods: 10}\n---\n\
         apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: b}\nspec:\n  template:\n    spec:\n      \
         requirements: []\n      nodeClassRef: {name: shared}\n      kubelet: {maxPods: 20}\n---\n\
         apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata: {name: shared}\nspec:\n  amiFamily: Bottlerocket\n  \
         role: r\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n",
    );
    let run = convert(&[&f], &[]);
    std::fs::remove_file(&f).ok();
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains(
            ": NodePool/b: spec.template.spec.kubelet: v1 keeps kubelet settings on the EC2NodeClass, and shared"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn selectors_ids_names_owners_ubuntu_and_inline_provider_convert() {
    let f = temp(
        "selectors.yaml",
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: inline}\nspec:\n  \
         labels: {team: a}\n  taints: [{key: dedicated, value: a, effect: NoSchedule}]\n  weight: 20\n  \
         provider:\n    subnetSelector: {aws-ids: 'subnet-0a1, subnet-0b2'}\n    securityGroupSelector: {aws::ids: sg-123}\n    \
         instanceProfile: p\n    amiFamily: Bottlerocket\n---\n\
         apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: ubuntu}\nspec:\n  \
         subnetSelector: {Name: private-*}\n  securityGroupSelector: {kubernetes.io/cluster/c: owned}\n  \
         instanceProfile: p\n  amiFamily: Ubuntu\n  amiSelector: {aws::name: 'ubuntu-eks/*', aws::owners: '099720109477,self', team: a}\n  \
         userData: echo hi\n",
    );
    let run = convert(&[&f], &[]);
    std::fs::remove_file(&f).ok();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    assert_eq!(docs.len(), 3);
    let pool = find(&docs, "NodePool", "inline");
    assert_eq!(pool["spec"]["template"]["metadata"]["labels"]["team"], "a");
    assert_eq!(pool["spec"]["template"]["spec"]["taints"][0]["key"], "dedicated");
    assert_eq!(pool["spec"]["weight"], 20);
    assert_eq!(pool["spec"]["template"]["spec"]["nodeClassRef"]["name"], "inline");
    let inline = find(&docs, "EC2NodeClass", "inline");
    assert_eq!(inline["spec"]["subnetSelectorTerms"][0]["id"], "subnet-0a1");
    assert_eq!(inline["spec"]["subnetSelectorTerms"][1]["id"], "subnet-0b2");
    assert_eq!(inline["spec"]["securityGroupSelectorTerms"][0]["id"], "sg-123");
    assert_eq!(inline["spec"]["amiSelectorTerms"][0]["alias"], "bottlerocket@latest");
    let ubuntu = find(&docs, "EC2NodeClass", "ubuntu");
    assert_eq!(ubuntu["spec"]["amiFamily"], "AL2");
    let terms = ubuntu["spec"]["amiSelectorTerms"].as_sequence().unwrap();
    assert_eq!(terms.len(), 2, "one term per name x owner");
    assert_eq!(terms[1]["name"], "ubuntu-eks/*");
    assert_eq!(terms[1]["owner"], "self");
    assert_eq!(terms[1]["tags"]["team"], "a");
    assert_eq!(ubuntu["spec"]["blockDeviceMappings"][0]["deviceName"], "/dev/sda1");
    assert_eq!(ubuntu["spec"]["userData"], "echo hi");
    assert!(run.stderr.contains("Ubuntu is AL2 in v1"), "{}", run.stderr);
    assert_validates(&run.stdout, "selectors");
}

#[test]
fn a_field_the_older_api_does_not_have_exits_2_with_its_path() {
    let f = temp(
        "typo.yaml",
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  providerRef: {name: x}\n  \
         ttlSecondsAfterEmtpy: 30\n  consolidation: {enabled: yes}\n",
    );
    let run = convert(&[&f], &[]);
    std::fs::remove_file(&f).ok();
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].ends_with(": Provisioner/p: spec.ttlSecondsAfterEmtpy: unknown field `ttlSecondsAfterEmtpy` (expected one of: annotations, labels, taints, startupTaints, requirements, kubeletConfiguration, provider, providerRef, ttlSecondsAfterEmpty, ttlSecondsUntilExpired, limits, weight, consolidation)"), "{}", lines[0]);
    assert!(
        lines[1].ends_with(": Provisioner/p: spec.consolidation.enabled: must be a boolean, got a string"),
        "{}",
        lines[1]
    );
}

/// A v1alpha5 Provisioner with a spot requirement that carries an empty `requirements:` key (the
/// old API server pruned it, so the manifest ran as written).
const STRAY_REQUIREMENTS_KEY: &str = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: stray}\nspec:\n  \
    providerRef: {name: stray}\n  requirements:\n    - key: karpenter.sh/capacity-type\n      operator: In\n      \
    values: [spot]\n      requirements:\n---\napiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\n\
    metadata: {name: stray}\nspec:\n  instanceProfile: P\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n";

#[test]
fn an_empty_stray_key_in_a_requirement_is_dropped_and_named_on_stderr() {
    let f = temp("stray.yaml", STRAY_REQUIREMENTS_KEY);
    let run = convert(&[&f], &[]);
    std::fs::remove_file(&f).ok();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.lines().any(|l| l.ends_with(
            ": Provisioner/stray: spec.requirements[0].requirements: left out: `requirements` is not a field here and is empty (the older API server pruned it; expected one of: key, operator, values, minValues)"
        ) && l.starts_with(&f.display().to_string())),
        "{}",
        run.stderr
    );
    let docs = documents(&run.stdout);
    let reqs = &find(&docs, "NodePool", "stray")["spec"]["template"]["spec"]["requirements"];
    let spot = reqs
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "karpenter.sh/capacity-type")
        .expect("the capacity-type requirement is kept");
    assert_eq!(spot["values"], serde_yaml_ng::from_str::<Value>("[spot]").unwrap());
    assert_eq!(spot.as_mapping().unwrap().len(), 3, "only key, operator and values: {spot:?}");
    assert_validates(&run.stdout, "stray");
    // A stray key with something under it is still an unknown field.
    let f = temp("stray-full.yaml", &STRAY_REQUIREMENTS_KEY.replace("requirements:\n---", "requirements: [x]\n---"));
    let run = convert(&[&f], &[]);
    std::fs::remove_file(&f).ok();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("spec.requirements[0].requirements: unknown field `requirements`"), "{}", run.stderr);
}

#[test]
fn simulate_runs_a_provisioner_with_an_empty_stray_key_in_a_requirement_as_convert_does() {
    let dir = std::env::temp_dir().join(format!("kerf-convert-stray-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("stray.yaml"), STRAY_REQUIREMENTS_KEY).unwrap();
    let scenario = dir.join("scenario.yaml");
    std::fs::write(
        &scenario,
        "name: stray\ncloud: {region: us-west-2}\nsteps:\n  - apply: stray.yaml\n  - apply:\n      - apiVersion: v1\n        \
         kind: Pod\n        metadata: {name: p}\n        spec: {containers: [{name: c, image: pause, resources: {requests: {cpu: 500m}}}]}\n  \
         - wait: 2m\n",
    )
    .unwrap();
    let run = kerf(&["simulate", scenario.to_str().unwrap(), "--report", "json"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("kerf: converted from Karpenter's older APIs to v1 for this run: "),
        "{}",
        run.stderr
    );
    let r: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(r["summary"]["podsRunning"], 1, "{}", r["pods"]);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["nodePool"], "stray");
    assert_eq!(nodes[0]["capacityType"], "spot", "the requirement beside the stray key holds");
}

#[test]
fn unreadable_file_and_no_file_exit_2() {
    let run = convert(&[Path::new("/nonexistent/kerf.yaml")], &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.starts_with("/nonexistent/kerf.yaml: cannot read: "), "{}", run.stderr);
    assert_eq!(kerf(&["convert"]).code, 2);
}

#[test]
fn v1_documents_pass_through_unchanged() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/validate/valid/nodeclaim.yaml");
    let run = convert(&[&f], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "");
    let original = documents(&std::fs::read_to_string(&f).unwrap());
    assert_eq!(documents(&run.stdout), original);
}

/// Every seed's manifests, as written for the older APIs, run in `kerf simulate` and say once
/// that they were converted.
#[test]
fn seed_manifests_of_older_apis_simulate_after_saying_they_were_converted() {
    for (scenario, pods) in [
        ("capacity-spread-v1beta1-scenario.yaml", 2),
        ("provisioner-ttl-kubelet-v1alpha5-scenario.yaml", 6),
        ("nodepool-chart-v1beta1-scenario.yaml", 60),
        ("provisioner-consolidation-v1alpha5-scenario.yaml", 20),
    ] {
        let path = fixture(scenario);
        let run = kerf(&["simulate", path.to_str().unwrap(), "--report", "json"]);
        assert_eq!(run.code, 0, "{scenario}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{scenario}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("kerf: converted from Karpenter's older APIs to v1 for this run: "),
            "{}",
            run.stderr
        );
        let r: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(r["summary"]["podsRunning"], pods, "{scenario}");
        assert_eq!(r["summary"]["podsPending"], 0, "{scenario}");
        for n in r["nodes"].as_array().unwrap() {
            assert!(n["nodePool"].is_string(), "{scenario}: every node is launched by a converted pool");
        }
    }
    let run = kerf(&["simulate", fixture("provisioner-consolidation-v1alpha5-scenario.yaml").to_str().unwrap()]);
    assert!(
        run.stderr.contains("provisioner-consolidation-v1alpha5.yaml: Provisioner/default, AWSNodeTemplate/default"),
        "{}",
        run.stderr
    );
}
