//! Validation rules, defaults and decoding, tested on typed objects and small documents.

use std::time::Duration;

use kerf_api::manifest::{self, KarpenterObject, Problem};
use kerf_api::nodepool::{Budget, ConsolidationPolicy};
use kerf_api::validation::{
    self, FieldError, LabelUse, is_budget_nodes, is_eviction_threshold, parse_budget_schedule, restricted_label_problem,
};
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};

fn doc(yaml: &str) -> serde_yaml_ng::Value {
    serde_yaml_ng::from_str(yaml).unwrap()
}

const MINIMAL_NODEPOOL: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
";

const MINIMAL_EC2NODECLASS: &str = "
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
";

fn paths(errs: &[FieldError]) -> Vec<&str> {
    errs.iter().map(|e| e.path.as_str()).collect()
}

#[test]
fn nodepool_defaults_are_karpenters() {
    let np: NodePool = manifest::decode(&doc(MINIMAL_NODEPOOL)).unwrap();
    let t = &np.spec.template.spec;
    assert_eq!(t.expire_after.duration(), Some(Duration::from_secs(720 * 3600)));
    assert_eq!(t.termination_grace_period, None);
    let d = &np.spec.disruption;
    assert_eq!(d.consolidation_policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
    assert_eq!(d.consolidate_after.duration(), Some(Duration::ZERO));
    assert_eq!(d.budgets, vec![Budget { nodes: "10%".into(), schedule: None, duration: None, reasons: None }]);
    assert_eq!(np.spec.weight, None);
    assert_eq!(np.spec.replicas, None);
    assert!(!np.is_static());
    assert_eq!(np.node_limit(), None);
    assert!(validation::validate_node_pool(&np).is_empty());
}

#[test]
fn a_budget_without_nodes_defaults_to_ten_percent() {
    let y = MINIMAL_NODEPOOL.to_string() + "  disruption:\n    budgets: [{schedule: '@daily', duration: 1h}]\n";
    let np: NodePool = manifest::decode(&doc(&y)).unwrap();
    assert_eq!(np.spec.disruption.budgets[0].nodes, "10%");
    // The other disruption fields still take their defaults.
    assert_eq!(np.spec.disruption.consolidation_policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
}

#[test]
fn ec2nodeclass_metadata_options_default_whole_and_per_field() {
    let nc: EC2NodeClass = manifest::decode(&doc(MINIMAL_EC2NODECLASS)).unwrap();
    let m = nc.spec.metadata_options.unwrap();
    assert_eq!(m.http_endpoint.as_deref(), Some("enabled"));
    assert_eq!(m.http_protocol_ipv6.as_deref(), Some("disabled"));
    assert_eq!(m.http_put_response_hop_limit, Some(1));
    assert_eq!(m.http_tokens.as_deref(), Some("required"));

    let y = MINIMAL_EC2NODECLASS.to_string() + "  metadataOptions: {httpTokens: optional}\n";
    let nc: EC2NodeClass = manifest::decode(&doc(&y)).unwrap();
    let m = nc.spec.metadata_options.unwrap();
    assert_eq!(m.http_tokens.as_deref(), Some("optional"));
    assert_eq!(m.http_endpoint.as_deref(), Some("enabled"));
    assert_eq!(m.http_put_response_hop_limit, Some(1));
}

#[test]
fn nodeclaim_expire_after_defaults_to_720h_and_never_is_kept() {
    let y = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: c}\nspec:\n  requirements: []\n  \
             nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}\n";
    let nc: NodeClaim = manifest::decode(&doc(y)).unwrap();
    assert_eq!(nc.spec.expire_after.duration(), Some(Duration::from_secs(720 * 3600)));
    let nc: NodeClaim = manifest::decode(&doc(&format!("{y}  expireAfter: Never\n"))).unwrap();
    assert!(nc.spec.expire_after.is_never());
}

#[test]
fn decode_errors_carry_the_field_path() {
    let y = MINIMAL_NODEPOOL.replace("requirements: []", "requirements: [{key: a, operator: Sometimes}]");
    let err = manifest::decode::<NodePool>(&doc(&y)).unwrap_err();
    assert_eq!(err.path, "spec.template.spec.requirements[0].operator");
    assert!(err.message.starts_with("unknown variant `Sometimes`"), "{}", err.message);
    assert!(err.to_string().starts_with("spec.template.spec.requirements[0].operator: unknown variant"));
}

#[test]
fn field_error_and_problem_display() {
    assert_eq!(
        FieldError::new("spec.weight", "must be between 1 and 100").to_string(),
        "spec.weight: must be between 1 and 100"
    );
    assert_eq!(FieldError::new("", "bad").to_string(), "bad");
    let p = Problem { kind: "NodePool".into(), name: "a".into(), path: "spec.weight".into(), message: "m".into() };
    assert_eq!(p.to_string(), "NodePool/a: spec.weight: m");
}

#[test]
fn decode_karpenter_skips_other_kinds_and_refuses_old_karpenter_apis() {
    assert_eq!(
        manifest::decode_karpenter(&doc("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}")),
        Ok(None)
    );
    assert_eq!(manifest::decode_karpenter(&doc("just: data")), Ok(None));
    let hypershift =
        "apiVersion: hypershift.openshift.io/v1beta1\nkind: NodePool\nmetadata: {name: x}\nspec: {replicas: 2}";
    assert_eq!(manifest::decode_karpenter(&doc(hypershift)), Ok(None));
    let overlay = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: o}\nspec: {requirements: []}";
    assert!(matches!(manifest::decode_karpenter(&doc(overlay)), Ok(Some(manifest::KarpenterObject::NodeOverlay(_)))));
    let overlay = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: o}\n\
                   spec: {requirements: [], price: '1', priceAdjustment: '-10%', capacity: {memory: 1Gi}, weight: 0}";
    let problems: Vec<String> =
        manifest::decode_karpenter(&doc(overlay)).unwrap_err().iter().map(ToString::to_string).collect();
    assert_eq!(
        problems,
        [
            "NodeOverlay/o: spec: cannot set both 'price' and 'priceAdjustment'",
            "NodeOverlay/o: spec.capacity.memory: memory is a standard resource: an overlay adds extended resources only",
            "NodeOverlay/o: spec.weight: must be between 1 and 10000, got 0",
        ]
    );
    let no_version = MINIMAL_NODEPOOL.replace("apiVersion: karpenter.sh/v1\n", "");
    assert_eq!(
        manifest::decode_karpenter(&doc(&no_version)).unwrap_err()[0].to_string(),
        "NodePool/default: apiVersion: required: must be karpenter.sh/v1"
    );

    let v1beta1 = MINIMAL_NODEPOOL.replace("karpenter.sh/v1", "karpenter.sh/v1beta1");
    let problems = manifest::decode_karpenter(&doc(&v1beta1)).unwrap_err();
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "NodePool/default: apiVersion: karpenter.sh/v1beta1 is not served for NodePool; use karpenter.sh/v1 (`kerf convert` converts it)"
        ]
    );
    let provisioner = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec: {}";
    let problems = manifest::decode_karpenter(&doc(provisioner)).unwrap_err();
    assert_eq!(
        problems[0].to_string(),
        "Provisioner/p: kind: Provisioner (karpenter.sh/v1alpha5) is not served by the v1 API; use NodePool (karpenter.sh/v1) (`kerf convert` converts it)"
    );
    match manifest::decode_karpenter(&doc(MINIMAL_EC2NODECLASS)) {
        Ok(Some(KarpenterObject::EC2NodeClass(nc))) => assert_eq!(nc.name(), "default"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_decode_problem_is_reported_not_only_the_first() {
    let y = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: many}
spec:
  weight: 500
  template:
    spec:
      colour: blue
      requirements:
        - {key: a, operator: Inn, values: [x]}
        - {key: b, operator: In, values: []}
        - {key: c, operator: Exists, extra: 1}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      taints: [{key: t, effect: Never}]
  disruption:
    budgets: [{nodes: '5', reasons: [Drifted, Bored]}]
";
    let problems = manifest::decode_karpenter(&doc(y)).unwrap_err();
    let mut got: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    got.sort();
    assert_eq!(
        got,
        [
            "spec.disruption.budgets[0].reasons[1]",
            "spec.template.spec.colour",
            "spec.template.spec.requirements[0].operator",
            "spec.template.spec.requirements[1].values",
            "spec.template.spec.requirements[2].extra",
            "spec.template.spec.taints[0].effect",
            "spec.weight",
        ]
    );
    // Once the decode problems are fixed, the validation problems are the same ones.
    let fixed = y
        .replace("      colour: blue\n", "")
        .replace("Inn", "In")
        .replace(", extra: 1", "")
        .replace("Never", "NoSchedule")
        .replace(", Bored", "");
    let problems = manifest::decode_karpenter(&doc(&fixed)).unwrap_err();
    let got: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(got, ["spec.template.spec.requirements[1].values", "spec.weight"]);
}

#[test]
fn typed_nodepool_validation_lists_every_problem_with_its_path() {
    let mut np: NodePool = manifest::decode(&doc(MINIMAL_NODEPOOL)).unwrap();
    np.metadata.name = None;
    np.spec.weight = Some(0);
    np.spec.replicas = Some(2);
    np.spec.template.metadata.labels.insert("karpenter.sh/custom".into(), "x".into());
    np.spec.template.spec.node_class_ref.kind = String::new();
    let errs = validation::validate_node_pool(&np);
    assert_eq!(
        paths(&errs),
        [
            "metadata.name",
            "spec.template.metadata.labels[karpenter.sh/custom]",
            "spec.template.spec.nodeClassRef.kind",
            "spec.weight",
            "spec.weight",
        ]
    );
    assert_eq!(errs[3].message, "must be between 1 and 100, got 0");
    assert_eq!(errs[4].message, "'weight' is not supported on static NodePools (replicas is set)");
}

#[test]
fn a_static_nodepool_may_limit_only_nodes() {
    let y = MINIMAL_NODEPOOL.to_string() + "  replicas: 3\n  limits: {nodes: '5'}\n";
    let np: NodePool = manifest::decode(&doc(&y)).unwrap();
    assert!(validation::validate_node_pool(&np).is_empty());
    assert!(np.is_static());
    assert_eq!(np.node_limit(), Some(5));
    let y = MINIMAL_NODEPOOL.to_string() + "  replicas: 0\n";
    let np: NodePool = manifest::decode(&doc(&y)).unwrap();
    assert!(validation::validate_node_pool(&np).is_empty(), "replicas 0 without limits is valid");
    let y = MINIMAL_NODEPOOL.to_string() + "  replicas: 3\n  limits: {nodes: '5', memory: 10Gi}\n";
    let np: NodePool = manifest::decode(&doc(&y)).unwrap();
    assert_eq!(paths(&validation::validate_node_pool(&np)), ["spec.limits[memory]"]);
    // Without replicas, any limits are fine.
    let y = MINIMAL_NODEPOOL.to_string() + "  limits: {nodes: '5', memory: 10Gi, cpu: 100}\n";
    let np: NodePool = manifest::decode(&doc(&y)).unwrap();
    assert!(validation::validate_node_pool(&np).is_empty());
}

#[test]
fn requirement_operators_follow_the_crd_rules() {
    let check = |req: &str| -> Vec<String> {
        let y = MINIMAL_NODEPOOL.replace("requirements: []", &format!("requirements: [{req}]"));
        let np: NodePool = manifest::decode(&doc(&y)).unwrap();
        validation::validate_node_pool(&np).into_iter().map(|e| e.to_string()).collect()
    };
    let ok = [
        "{key: app, operator: In, values: [a]}",
        "{key: app, operator: NotIn, values: []}",
        "{key: app, operator: NotIn, values: [a], minValues: 5}",
        "{key: app, operator: Exists}",
        "{key: app, operator: DoesNotExist}",
        "{key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ['0']}",
        "{key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ['64']}",
        "{key: karpenter.k8s.aws/instance-cpu, operator: Gte, values: ['4']}",
        "{key: karpenter.k8s.aws/instance-memory, operator: Lte, values: ['65536']}",
        "{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5], minValues: 2}",
        "{key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 50}",
        "{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}",
        "{key: failure-domain.beta.kubernetes.io/zone, operator: In, values: [us-west-2a]}",
        "{key: topology.k8s.aws/zone-id, operator: In, values: [usw2-az1]}",
        "{key: example.kops.k8s.io/x, operator: Exists}",
        "{key: karpenter.sh/capacity-type, operator: In, values: [spot]}",
    ];
    for r in ok {
        assert_eq!(check(r), Vec::<String>::new(), "{r}");
    }
    assert_eq!(
        check("{key: app, operator: Gt, values: ['1.5']}"),
        [
            "spec.template.spec.requirements[0].values: requirements with operator 'Gt' must have a single non-negative integer value, got [\"1.5\"]"
        ]
    );
    assert_eq!(
        check("{key: app, operator: In, values: [a], minValues: 2}"),
        [
            "spec.template.spec.requirements[0].minValues: requirements with 'minValues' must have at least that many values specified in the 'values' field (minValues 2, 1 values)"
        ]
    );
}

#[test]
fn restricted_label_rules_differ_by_use() {
    use LabelUse::*;
    assert!(restricted_label_problem("karpenter.sh/nodepool", NodePoolRequirement).is_some());
    assert!(restricted_label_problem("karpenter.sh/nodepool", NodePoolLabel).is_some());
    assert!(restricted_label_problem("karpenter.sh/nodepool", NodeClaimRequirement).is_none());
    for key in [
        "kubernetes.io/hostname",
        "karpenter.sh/registered",
        "k8s.io/x",
        "kubernetes.io/role",
        "karpenter.k8s.aws/anything",
    ] {
        for usage in [NodePoolLabel, NodePoolRequirement, NodeClaimRequirement] {
            assert!(restricted_label_problem(key, usage).is_some(), "{key} {usage:?}");
        }
    }
    for key in [
        "team",
        "example.com/team",
        "node.kubernetes.io/role",
        "node-restriction.kubernetes.io/x",
        "kubernetes.io/arch",
        "topology.kubernetes.io/zone",
        "karpenter.sh/capacity-type",
        "karpenter.k8s.aws/instance-gpu-count",
    ] {
        assert!(restricted_label_problem(key, NodePoolLabel).is_none(), "{key}");
    }
}

#[test]
fn budget_nodes_schedules_and_eviction_thresholds() {
    for ok in ["0", "5", "100", "0%", "10%", "99%", "100%"] {
        assert!(is_budget_nodes(ok), "{ok}");
    }
    for bad in ["", "-1", "1.5", "101%", "100.0%", "%", "5 %", "ten"] {
        assert!(!is_budget_nodes(bad), "{bad}");
    }
    for ok in [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "*/5 * * * *",
        "0 9 * * mon-fri",
        "0 0 1 jan *",
    ] {
        assert!(parse_budget_schedule(ok).is_ok(), "{ok}: {:?}", parse_budget_schedule(ok));
    }
    for bad in [
        "",
        "@reboot",
        "@every 5m",
        "* * * *",
        "0 0 * * * *",
        "60 * * * *",
        "* 24 * * *",
        "TZ=UTC 0 * * * *",
        "CRON_TZ=UTC 0 * * * *",
    ] {
        assert!(parse_budget_schedule(bad).is_err(), "{bad}");
    }
    for ok in ["10%", "5.5%", "0.25%", "100%", "100.00%", "100Mi", "1Gi", "0.5", "500m"] {
        assert!(is_eviction_threshold(ok), "{ok}");
    }
    for bad in ["101%", "10.555%", "abc", "%", "10 %", "100.1%"] {
        assert!(!is_eviction_threshold(bad), "{bad}");
    }
}

#[test]
fn budget_schedule_and_duration_must_come_together() {
    let y = MINIMAL_NODEPOOL.to_string()
        + "  disruption:\n    budgets:\n      - {nodes: '0', schedule: '@daily', duration: 10m}\n      - {nodes: '1', duration: 1h}\n";
    let np: NodePool = manifest::decode(&doc(&y)).unwrap();
    let errs = validation::validate_node_pool(&np);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].to_string(), "spec.disruption.budgets[1].schedule: 'schedule' must be set with 'duration'");
}

#[test]
fn ec2nodeclass_ami_family_rules() {
    let check = |spec_extra: &str, terms: &str| -> Vec<String> {
        let y = MINIMAL_EC2NODECLASS.replace("[{alias: al2023@latest}]", terms).to_string() + spec_extra;
        let nc: EC2NodeClass = manifest::decode(&doc(&y)).unwrap();
        validation::validate_ec2_node_class(&nc).into_iter().map(|e| e.path).collect()
    };
    assert!(check("", "[{alias: al2023@latest}]").is_empty());
    assert!(check("  amiFamily: Custom\n", "[{alias: al2023@latest}]").is_empty(), "Custom is allowed with an alias");
    assert!(check("  amiFamily: AL2023\n", "[{alias: al2023@v20240807}]").is_empty());
    assert!(check("  amiFamily: Bottlerocket\n", "[{alias: bottlerocket@1.20.0}]").is_empty());
    assert!(check("  amiFamily: Windows2022\n", "[{alias: windows2022@latest}]").is_empty());
    assert!(check("  amiFamily: AL2\n", "[{id: ami-0abc123}, {name: my-ami, owner: self}]").is_empty());
    assert!(check("  amiFamily: Custom\n", "[{ssmParameter: /my/param}]").is_empty());
    assert_eq!(check("  amiFamily: AL2\n", "[{alias: al2023@latest}]"), ["spec.amiFamily"]);
    assert_eq!(check("", "[{id: ami-0abc}]"), ["spec.amiFamily"]);
    assert_eq!(check("  amiFamily: AL2\n", "[{id: ami-0abc, owner: self}]"), ["spec.amiSelectorTerms[0].id"]);
    assert_eq!(check("  amiFamily: AL2\n", "[{id: AMI-0abc}]"), ["spec.amiSelectorTerms[0].id"]);
    assert_eq!(check("  amiFamily: AL2\n", "[{owner: self}]"), ["spec.amiSelectorTerms[0]"]);
}

#[test]
fn ec2nodeclass_full_manifest_round_trips_and_validates_clean() {
    let y = "
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: full}
spec:
  amiFamily: AL2023
  amiSelectorTerms:
    - {tags: {team: a}, owner: '123456789012'}
    - {name: 'al2023-*', owner: amazon}
  subnetSelectorTerms:
    - {id: subnet-0abc}
    - {tags: {karpenter.sh/discovery: demo}}
  securityGroupSelectorTerms:
    - {name: default}
    - {id: sg-0abc}
  capacityReservationSelectorTerms:
    - {id: cr-0abc}
    - {tags: {team: a}, ownerID: '123456789012'}
    - {instanceMatchCriteria: open}
  ipPrefixCount: 2
  enclaveOptions: {enabled: true}
  associatePublicIPAddress: false
  instanceProfile: KarpenterInstanceProfile
  userData: |
    echo hello
  tags: {team: a, Name: demo}
  kubelet:
    clusterDNS: [10.0.0.10]
    maxPods: 110
    podsPerCore: 10
    systemReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi, pid: '100'}
    kubeReserved: {cpu: 200m, memory: 200Mi}
    evictionHard: {memory.available: 5%, nodefs.available: 10%}
    evictionSoft: {memory.available: 500Mi}
    evictionSoftGracePeriod: {memory.available: 1m}
    evictionMaxPodGracePeriod: 60
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs: {volumeSize: 100Gi, volumeType: gp3, iops: 3000, throughput: 125, encrypted: true, deleteOnTermination: true}
    - deviceName: /dev/xvdb
      ebs: {snapshotID: snap-0abc, volumeInitializationRate: 200}
  instanceStorePolicy: RAID0
  detailedMonitoring: true
  metadataOptions: {httpEndpoint: enabled, httpProtocolIPv6: enabled, httpPutResponseHopLimit: 2, httpTokens: optional}
  context: cr-context
status:
  subnets: [{id: subnet-0abc, zone: us-west-2a, zoneID: usw2-az1}]
  securityGroups: [{id: sg-0abc, name: default}]
  amis: [{id: ami-0abc, name: al2023, requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]
  instanceProfile: KarpenterInstanceProfile
  conditions: [{type: Ready, status: 'True', reason: Ready, lastTransitionTime: '2024-01-01T00:00:00Z'}]
";
    let first = match manifest::decode_karpenter(&doc(y)) {
        Ok(Some(KarpenterObject::EC2NodeClass(nc))) => nc,
        other => panic!("{other:?}"),
    };
    let text = serde_yaml_ng::to_string(&first).unwrap();
    let second: EC2NodeClass = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(second, first, "{text}");
    assert_eq!(serde_yaml_ng::to_string(&second).unwrap(), text, "serialization is stable");
}

#[test]
fn nodepool_full_manifest_round_trips() {
    let y = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: full, labels: {team: a}, annotations: {note: x}}
spec:
  template:
    metadata:
      labels: {team: a, karpenter.sh/capacity-type: spot}
      annotations: {example.com/owner: team-a}
    spec:
      taints: [{key: example.com/dedicated, value: gpu, effect: NoSchedule}]
      startupTaints: [{key: example.com/init, effect: NoExecute}]
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5, r5], minValues: 2}
        - {key: karpenter.k8s.aws/instance-cpu, operator: Lte, values: ['32']}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: Never
      terminationGracePeriod: 1h30m
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 5m
    budgets:
      - {nodes: '20%', reasons: [Empty, Drifted]}
      - {nodes: '0', schedule: '0 9 * * 1-5', duration: 8h, reasons: [Underutilized]}
  limits: {cpu: '1000', memory: 1000Gi, nodes: '50'}
  weight: 50
status:
  resources: {cpu: '8', memory: 32Gi, nodes: '2'}
  nodes: 2
  conditions: [{type: Ready, status: 'True', lastTransitionTime: '2024-01-01T00:00:00Z', observedGeneration: 3}]
";
    let first = match manifest::decode_karpenter(&doc(y)) {
        Ok(Some(KarpenterObject::NodePool(np))) => np,
        other => panic!("{other:?}"),
    };
    let text = serde_yaml_ng::to_string(&first).unwrap();
    let second: NodePool = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(second, first, "{text}");
    assert_eq!(serde_yaml_ng::to_string(&second).unwrap(), text, "serialization is stable");
    assert!(text.contains("expireAfter: Never"));
    assert!(text.contains("terminationGracePeriod: 1h30m0s"));
}

#[test]
fn unquoted_numbers_in_string_fields_get_a_quoting_hint() {
    let y = MINIMAL_NODEPOOL.to_string() + "  disruption:\n    budgets: [{nodes: 5}]\n";
    let problems = manifest::decode_karpenter(&doc(&y)).unwrap_err();
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "NodePool/default: spec.disruption.budgets[0].nodes: invalid type: integer `5`, expected a string (quote the value in YAML)"
        ]
    );
}

fn problem_lines(yaml: &str) -> Vec<String> {
    match manifest::decode_karpenter(&doc(yaml)) {
        Err(ps) => ps.iter().map(ToString::to_string).collect(),
        Ok(o) => panic!("expected problems, got {o:?}"),
    }
}

#[test]
fn a_missing_spec_is_reported_once_as_required_without_follow_on_problems() {
    assert_eq!(
        problem_lines("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\n"),
        ["NodePool/a: spec: required"]
    );
    assert_eq!(
        problem_lines("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: a}\n"),
        ["EC2NodeClass/a: spec: required"]
    );
    assert_eq!(
        problem_lines("apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: a}\nspec: {}\n"),
        [
            "NodeClaim/a: spec.nodeClassRef: required",
            "NodeClaim/a: spec.requirements: required (an empty list is allowed)"
        ]
    );
}

#[test]
fn a_null_nodeclassref_is_required_once_and_the_rest_is_still_checked() {
    let y = MINIMAL_NODEPOOL
        .replace("{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}", "null")
        .replace("spec:\n  template:", "spec:\n  weight: 0\n  template:");
    assert_eq!(
        problem_lines(&y),
        [
            "NodePool/default: spec.template.spec.nodeClassRef: required",
            "NodePool/default: spec.weight: must be between 1 and 100, got 0"
        ]
    );
}

#[test]
fn a_missing_operator_or_effect_is_required_and_checks_keyed_on_the_placeholder_are_dropped() {
    // The operator put in to keep decoding is `In`; its "must have a value" check is not the user's.
    let y = MINIMAL_NODEPOOL.replace(
        "requirements: []",
        "requirements: [{key: app, values: []}, {key: zone, operator: In, values: []}]\n      taints: [{key: a}]",
    );
    assert_eq!(
        problem_lines(&y),
        [
            "NodePool/default: spec.template.spec.requirements[0].operator: required",
            "NodePool/default: spec.template.spec.taints[0].effect: required",
            "NodePool/default: spec.template.spec.requirements[1].values: requirements with operator 'In' must have a value defined",
        ]
    );
}

#[test]
fn a_wrongly_typed_required_field_is_reported_once_not_also_as_required() {
    let y = MINIMAL_NODEPOOL.replace("kind: EC2NodeClass, name: default}", "kind: EC2NodeClass, name: 5}");
    assert_eq!(
        problem_lines(&y),
        [
            "NodePool/default: spec.template.spec.nodeClassRef.name: invalid type: integer `5`, expected a string (quote the value in YAML)"
        ]
    );
}

#[test]
fn kindless_documents_are_refused_only_in_karpenter_api_groups() {
    assert_eq!(manifest::decode_karpenter(&doc("apiVersion: example.com/v1\nmetadata: {name: x}")), Ok(None));
    assert_eq!(manifest::decode_karpenter(&doc("metadata: {name: x}")), Ok(None));
    assert_eq!(
        problem_lines("apiVersion: karpenter.k8s.aws/v1\nmetadata: {name: x}"),
        ["<no kind>/x: kind: required (NodePool, NodeClaim or EC2NodeClass)"]
    );
    assert_eq!(
        problem_lines("apiVersion: karpenter.sh/v1\nkind: 3\nmetadata: {name: x}"),
        ["<no kind>/x: kind: must be a string, got a number"]
    );
    assert_eq!(problem_lines("[1, 2]"), ["<no kind>/<unnamed>: document must be a mapping (object), got a list"]);
}
