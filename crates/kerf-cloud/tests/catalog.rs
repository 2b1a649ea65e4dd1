//! Golden tests of the built-in catalog: allocatable must come out exactly as Karpenter's.

use std::collections::BTreeMap;

use kerf_api::InstanceType;
use kerf_api::ec2nodeclass::{BlockDevice, BlockDeviceMapping, EC2NodeClass, KubeletConfiguration};
use kerf_api::{Quantity, labels};
use kerf_cloud::aws::allocatable::kube_reserved_cpu_millis;
use kerf_cloud::aws::{CatalogError, NodeClassSettings, catalog, spot_price};

fn default_type(region: &str, name: &str) -> InstanceType {
    catalog().unwrap().instance_type(region, name, &NodeClassSettings::default()).unwrap()
}

fn alloc(t: &InstanceType) -> BTreeMap<String, String> {
    t.allocatable().iter().map(|(k, v)| (k.clone(), v.canonical())).collect()
}

fn with_kubelet(kubelet: KubeletConfiguration) -> NodeClassSettings {
    NodeClassSettings { name: "default".into(), kubelet, ..Default::default() }
}

#[test]
fn c7i_2xlarge_allocatable_matches_karpenter_exactly() {
    let t = default_type("ap-northeast-2", "c7i.2xlarge");
    // 8 vCPU: 8000m - (60 + 10 + 2×5 + 4000×0.25%=10) = 7910m.
    // 16384Mi - ceil(16384 × 7.5% = 1228.8) = 15155Mi; - (11×58 + 255 = 893Mi) - 100Mi = 14162Mi.
    // pods: 4 ENIs × (15 − 1) + 2 = 58. ephemeral: 20Gi - 1Gi - 10% × 20Gi = 17Gi.
    let a = alloc(&t);
    assert_eq!(a["cpu"], "7910m");
    assert_eq!(a["memory"], "14162Mi");
    assert_eq!(a["pods"], "58");
    assert_eq!(a["ephemeral-storage"], "17Gi");
    assert_eq!(t.capacity.get("memory").canonical(), "15155Mi");
    assert_eq!(t.capacity.get("cpu").canonical(), "8");
}

#[test]
fn m5_large_allocatable_follows_the_formulas() {
    let t = default_type("us-west-2", "m5.large");
    // 2 vCPU: 2000m - (60 + 10) = 1930m.
    // pods: 3 ENIs × (10 − 1) + 2 = 29.
    // 8192Mi - ceil(614.4) = 7577Mi; - (11×29 + 255 = 574Mi) - 100Mi = 6903Mi.
    let a = alloc(&t);
    assert_eq!(a["cpu"], "1930m");
    assert_eq!(a["pods"], "29");
    assert_eq!(a["memory"], "6903Mi");
    assert_eq!(a["ephemeral-storage"], "17Gi");
    assert_eq!(t.labels[labels::ARCH], "amd64");
    assert_eq!(t.labels[labels::INSTANCE_CATEGORY], "m");
    assert_eq!(t.labels[labels::INSTANCE_GENERATION], "5");
    assert_eq!(t.labels[labels::INSTANCE_FAMILY], "m5");
    assert_eq!(t.labels[labels::INSTANCE_SIZE], "large");
    assert_eq!(t.labels[labels::INSTANCE_CPU_MANUFACTURER], "intel");
    assert_eq!(t.labels[labels::INSTANCE_NETWORK_BANDWIDTH], "750");
}

#[test]
fn graviton_m7g_xlarge_loses_the_cma_reserve_before_vm_overhead() {
    let t = default_type("us-west-2", "m7g.xlarge");
    // 4 vCPU: 4000m - (60 + 10 + 2×5) = 3920m.
    // 16384Mi - 64Mi (Graviton CMA) = 16320Mi; - ceil(16320 × 7.5% = 1224) = 15096Mi;
    // pods 4 × 14 + 2 = 58; 15096 - 893 - 100 = 14103Mi.
    let a = alloc(&t);
    assert_eq!(a["cpu"], "3920m");
    assert_eq!(a["memory"], "14103Mi");
    assert_eq!(a["pods"], "58");
    assert_eq!(t.labels[labels::ARCH], "arm64");
    assert_eq!(t.labels[labels::INSTANCE_CPU_MANUFACTURER], "aws");
    assert_eq!(t.labels[labels::INSTANCE_MEMORY], "16384");
}

#[test]
fn gpu_g5_xlarge_has_one_nvidia_gpu_and_gpu_labels() {
    let t = default_type("us-east-1", "g5.xlarge");
    // 4 vCPU → 3920m; 16384Mi → 15155Mi capacity → 15155 - 893 - 100 = 14162Mi; pods 58.
    let a = alloc(&t);
    assert_eq!(a["cpu"], "3920m");
    assert_eq!(a["memory"], "14162Mi");
    assert_eq!(a["pods"], "58");
    assert_eq!(a["nvidia.com/gpu"], "1");
    assert_eq!(t.labels[labels::INSTANCE_GPU_NAME], "a10g");
    assert_eq!(t.labels[labels::INSTANCE_GPU_MANUFACTURER], "nvidia");
    assert_eq!(t.labels[labels::INSTANCE_GPU_COUNT], "1");
    assert_eq!(t.labels[labels::INSTANCE_GPU_MEMORY], "22888");
    assert_eq!(t.labels[labels::INSTANCE_LOCAL_NVME], "250");
}

#[test]
fn inferentia_types_carry_neuron_devices_and_cores() {
    let t = default_type("us-east-1", "inf2.xlarge");
    assert_eq!(t.capacity.get("aws.amazon.com/neuron").canonical(), "1");
    assert_eq!(t.capacity.get("aws.amazon.com/neuroncore").canonical(), "2");
    assert_eq!(t.labels[labels::INSTANCE_ACCELERATOR_NAME], "inferentia2");
    assert_eq!(t.labels[labels::INSTANCE_CATEGORY], "inf");
}

#[test]
fn kube_reserved_cpu_is_tiered_per_core() {
    assert_eq!(kube_reserved_cpu_millis(1000), 60);
    assert_eq!(kube_reserved_cpu_millis(2000), 70);
    assert_eq!(kube_reserved_cpu_millis(3000), 75);
    assert_eq!(kube_reserved_cpu_millis(4000), 80);
    assert_eq!(kube_reserved_cpu_millis(8000), 90);
    // 96 vCPU: 80 + 92000 × 0.25% = 310.
    assert_eq!(kube_reserved_cpu_millis(96000), 310);
}

#[test]
fn kubelet_max_pods_changes_pods_and_kube_reserved_memory() {
    let s = with_kubelet(KubeletConfiguration { max_pods: Some(110), ..Default::default() });
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    // 15155 - (11×110 + 255 = 1465) - 100 = 13590Mi.
    let a = alloc(&t);
    assert_eq!(a["pods"], "110");
    assert_eq!(a["memory"], "13590Mi");
}

#[test]
fn pods_per_core_caps_the_eni_limit() {
    let s = with_kubelet(KubeletConfiguration { pods_per_core: Some(4), ..Default::default() });
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    // min(4 × 8 = 32, 58) = 32; 15155 - (352 + 255) - 100 = 14448Mi.
    let a = alloc(&t);
    assert_eq!(a["pods"], "32");
    assert_eq!(a["memory"], "14448Mi");
    // ...and never raises it.
    let s = with_kubelet(KubeletConfiguration { pods_per_core: Some(50), ..Default::default() });
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    assert_eq!(alloc(&t)["pods"], "58");
}

#[test]
fn kube_and_system_reserved_override_per_resource() {
    let mut kube_reserved = BTreeMap::new();
    kube_reserved.insert("cpu".to_string(), Quantity::parse("200m").unwrap());
    let mut system_reserved = BTreeMap::new();
    system_reserved.insert("memory".to_string(), Quantity::parse("1Gi").unwrap());
    let s = with_kubelet(KubeletConfiguration { kube_reserved, system_reserved, ..Default::default() });
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    let a = alloc(&t);
    assert_eq!(a["cpu"], "7800m");
    // kube-reserved memory keeps its default 893Mi; system-reserved adds 1Gi: 14162 - 1024.
    assert_eq!(a["memory"], "13138Mi");
}

#[test]
fn eviction_hard_accepts_absolute_and_percent_thresholds() {
    let mut eviction_hard = BTreeMap::new();
    eviction_hard.insert("memory.available".to_string(), "5%".to_string());
    eviction_hard.insert("nodefs.available".to_string(), "1Gi".to_string());
    let s = with_kubelet(KubeletConfiguration { eviction_hard, ..Default::default() });
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    let a = alloc(&t);
    // memory: 15155Mi = 15891169280 B; 5% = 794558464 B; 15891169280 - 893Mi - 794558464
    // = 14160232448 B = 13828352Ki.
    assert_eq!(a["memory"], "13828352Ki");
    // storage: 20Gi - 1Gi kube-reserved - 1Gi = 18Gi.
    assert_eq!(a["ephemeral-storage"], "18Gi");
}

#[test]
fn bad_eviction_threshold_names_node_class_and_field() {
    let mut eviction_hard = BTreeMap::new();
    eviction_hard.insert("memory.available".to_string(), "lots".to_string());
    let s = with_kubelet(KubeletConfiguration { eviction_hard, ..Default::default() });
    let err = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("EC2NodeClass default: spec.kubelet.evictionHard[memory.available]: "), "{msg}");
}

#[test]
fn root_volume_size_sets_ephemeral_storage() {
    let nc: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "big"},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                                          "ebs": {"volumeSize": "100Gi"}}]}
    }))
    .unwrap();
    let s = NodeClassSettings::from_node_class(Some(&nc));
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    // 100Gi - 1Gi - 10Gi = 89Gi.
    assert_eq!(alloc(&t)["ephemeral-storage"], "89Gi");
    assert_eq!(t.capacity.get("ephemeral-storage").canonical(), "100Gi");
    // Without rootVolume, the AMI family's root device name is used.
    let s = NodeClassSettings {
        block_device_mappings: vec![BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice { volume_size: Some(Quantity::parse("50Gi").unwrap()), ..Default::default() }),
            root_volume: None,
        }],
        ..Default::default()
    };
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    assert_eq!(alloc(&t)["ephemeral-storage"], "44Gi");
}

#[test]
fn offerings_cover_every_zone_with_on_demand_and_modelled_spot() {
    let t = default_type("ap-northeast-2", "c7i.2xlarge");
    let zones: Vec<&str> = t.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert_eq!(zones.len(), 8, "{zones:?}");
    let od = t.offerings.iter().find(|o| o.capacity_type == "on-demand").unwrap();
    assert_eq!(od.price, 0.4032);
    let spot: Vec<_> = t.offerings.iter().filter(|o| o.capacity_type == "spot").collect();
    assert_eq!(spot.len(), 4);
    for o in spot {
        assert_eq!(o.price, spot_price("c7i.2xlarge", &o.zone, 0.4032), "{}", o.zone);
        assert!(o.price >= 0.4032 * 0.25 - 1e-5 && o.price <= 0.4032 * 0.45 + 1e-5, "{}", o.price);
    }
}

#[test]
fn spot_discount_stays_between_55_and_75_percent_for_every_type_and_zone() {
    let cat = catalog().unwrap();
    for region in cat.regions() {
        for o in cat.offers(region).unwrap() {
            for zone in &o.zones {
                let s = spot_price(&o.instance_type, zone, o.price);
                let ratio = s / o.price;
                assert!((0.25 - 1e-3..=0.45 + 1e-3).contains(&ratio), "{} {zone}: {ratio}", o.instance_type);
            }
        }
    }
}

/// The model as data/README.md writes it, computed independently of the library.
fn documented_spot_price(instance_type: &str, zone: &str, on_demand: f64) -> f64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in format!("{instance_type} {zone}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d049bb133111eb);
    h ^= h >> 31;
    let discount = 0.55 + 0.20 * ((h % 10001) as f64 / 10000.0);
    (on_demand * (1.0 - discount) * 100000.0).round() / 100000.0
}

#[test]
fn spot_price_follows_the_documented_formula_and_is_stable() {
    let cat = catalog().unwrap();
    for o in cat.offers("us-east-1").unwrap() {
        for zone in &o.zones {
            assert_eq!(
                spot_price(&o.instance_type, zone, o.price),
                documented_spot_price(&o.instance_type, zone, o.price),
                "{} {zone}",
                o.instance_type
            );
        }
    }
    // Pinned values: a change to the model shows up here (and must be documented).
    let m5: Vec<f64> =
        ["a", "b", "c", "d"].iter().map(|z| spot_price("m5.large", &format!("us-west-2{z}"), 0.096)).collect();
    assert_eq!(m5, [0.03524, 0.04049, 0.02521, 0.03641]);
}

#[test]
fn spot_prices_differ_between_zones_so_the_cheapest_zone_is_spread_over_the_region() {
    let cat = catalog().unwrap();
    let abc = ["us-west-2a", "us-west-2b", "us-west-2c"];
    let mut cheapest = [0usize; 3];
    let mut all_equal = 0;
    let mut types = 0;
    for o in cat.offers("us-west-2").unwrap() {
        if !abc.iter().all(|z| o.zones.iter().any(|oz| oz == z)) {
            continue;
        }
        types += 1;
        let prices: Vec<f64> = abc.iter().map(|z| spot_price(&o.instance_type, z, o.price)).collect();
        if prices.iter().all(|p| *p == prices[0]) {
            all_equal += 1;
        }
        // Ties go to the first zone, as a cheapest-offering choice breaks them.
        let best = (0..3).min_by(|a, b| prices[*a].total_cmp(&prices[*b]).then(a.cmp(b))).unwrap();
        cheapest[best] += 1;
    }
    assert!(types > 300, "{types}");
    assert!(all_equal * 100 <= types, "{all_equal} of {types} types cost the same in every zone");
    for (zone, n) in abc.iter().zip(cheapest) {
        assert!(n * 100 >= types * 25, "{zone} is the cheapest spot zone for only {n} of {types} types");
    }
}

#[test]
fn catalog_covers_the_required_regions_with_priced_offers_only() {
    let cat = catalog().unwrap();
    // The six regions with the most EKS clusters, and more.
    for region in ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1", "ap-northeast-1"] {
        let offers = cat.offers(region).unwrap();
        assert!(offers.len() > 850, "{region}: {}", offers.len());
        assert!(offers.iter().all(|o| o.price > 0.0));
    }
    assert!(cat.regions().count() >= 30, "{:?}", cat.regions().collect::<Vec<_>>());
    assert_eq!(
        cat.zones("ap-northeast-2").unwrap(),
        ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c", "ap-northeast-2d"]
    );
}

#[test]
fn unknown_region_and_type_are_named() {
    let cat = catalog().unwrap();
    let err = cat.instance_types("mars-north-1", None, &NodeClassSettings::default()).unwrap_err();
    assert!(matches!(err, CatalogError::UnknownRegion { .. }));
    let text = err.to_string();
    assert!(text.starts_with("unknown region \"mars-north-1\" (the built-in catalog covers af-south-1, "), "{text}");
    assert!(text.contains(", us-west-2"), "{text}");
    let err = cat.instance_type("us-west-2", "c7i.huge", &NodeClassSettings::default()).unwrap_err();
    assert_eq!(err.to_string(), "unknown instance type \"c7i.huge\" in region us-west-2");
}

#[test]
fn zone_filter_drops_types_sold_only_elsewhere() {
    let cat = catalog().unwrap();
    let zones = vec!["us-west-2a".to_string()];
    let types = cat.instance_types("us-west-2", Some(&zones), &NodeClassSettings::default()).unwrap();
    assert!(!types.is_empty());
    assert!(types.iter().all(|t| !t.offerings.is_empty() && t.offerings.iter().all(|o| o.zone == "us-west-2a")));
}

#[test]
fn corrupt_catalog_lines_are_reported_with_their_line_number() {
    use kerf_cloud::aws::Catalog;
    let header = r#"{"kind":"header","format":3,"sources":[],"regenerate":"x"}"#;
    let err = Catalog::parse(&format!("{header}\n{{\"kind\":\"type\",\"name\":\"x\"}}\n")).unwrap_err();
    assert!(matches!(err, CatalogError::Corrupt { line: 2, .. }), "{err}");
    let err = Catalog::parse(r#"{"kind":"header","format":9,"sources":[],"regenerate":"x"}"#).unwrap_err();
    assert_eq!(err.to_string(), "built-in instance catalog, line 1: format 9 is not supported (expected 3)");
    let region = r#"{"kind":"region","name":"r-1","zones":["r-1a"]}"#;
    let t = r#"{"kind":"type","name":"t.large","arch":"amd64","vcpu":2,"memoryMiB":4096,"enis":2,"ipv4PerEni":4,"hypervisor":"nitro","bareMetal":false,"cpuManufacturer":"intel","encryptionInTransit":false,"spot":true,"offers":{"r-1":[0.0,"a"]}}"#;
    let err = Catalog::parse(&format!("{header}\n{region}\n{t}\n")).unwrap_err();
    assert_eq!(err.to_string(), "built-in instance catalog, line 3: t.large in r-1 has price 0");
    let t = t.replace("[0.0,", "[0.1,").replace(r#""spot":true"#, r#""spot":true,"priceEstimated":{"r-2":"tier"}"#);
    let err = Catalog::parse(&format!("{header}\n{region}\n{t}\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "built-in instance catalog, line 3: t.large has an estimated price in r-2, where it is not offered"
    );
    let t = t.replace(r#""r-2":"tier""#, r#""r-1":"guess""#);
    let err = Catalog::parse(&format!("{header}\n{region}\n{t}\n")).unwrap_err();
    assert!(err.to_string().contains("unknown variant `guess`"), "{err}");
}

#[test]
fn an_estimated_price_is_marked_with_its_rule_and_carried_into_the_instance_type() {
    use kerf_cloud::aws::EstimateRule;
    let cat = catalog().unwrap();
    // The price source lists no t3.large price in us-west-2: its family's listed prices there
    // give one, $/MiB × 8192 MiB (AWS lists $0.0832).
    let t3 = cat.offer("us-west-2", "t3.large").unwrap();
    assert_eq!(t3.estimate, Some(EstimateRule::Family));
    assert_eq!(t3.price, 0.0832);
    assert!(default_type("us-west-2", "t3.large").price_estimated);
    // A listed price is not marked.
    let m5 = cat.offer("us-west-2", "m5.large").unwrap();
    assert_eq!(m5.estimate, None);
    assert!(!default_type("us-west-2", "m5.large").price_estimated);
    // g5.xlarge: a GPU type takes its own price in a region of the same tier first.
    assert_eq!(cat.offer("us-west-2", "g5.xlarge").unwrap().estimate, Some(EstimateRule::Tier));
    assert_eq!(cat.offer("us-west-2", "g5.xlarge").unwrap().price, cat.offer("us-east-1", "g5.xlarge").unwrap().price);
}

/// Karpenter's published allocatable (AL2023, no block device mappings) for a spread of types:
/// Graviton and Xen, ENI-rich and multi-card types, accelerators and EFA.
#[test]
fn allocatable_matches_karpenters_published_figures_for_a_sample_of_types() {
    let cases: &[(&str, &str, &str, &str)] = &[
        ("a1.medium", "940m", "1392Mi", "8"),
        ("a1.large", "1930m", "3055Mi", "29"),
        ("a1.4xlarge", "15890m", "27322Mi", "234"),
        ("a1.metal", "15890m", "27322Mi", "234"),
        ("c1.medium", "1930m", "1122Mi", "12"),
        ("c3.8xlarge", "31850m", "53903Mi", "234"),
        ("c5.large", "1930m", "3114Mi", "29"),
        ("c5.xlarge", "3920m", "6584Mi", "58"),
        ("i4i.16xlarge", "63770m", "476504Mi", "737"),
        ("i4i.24xlarge", "95690m", "722287Mi", "437"),
        ("i4i.32xlarge", "127610m", "961470Mi", "737"),
        ("inf1.xlarge", "3920m", "6804Mi", "38"),
        ("inf1.24xlarge", "95690m", "177976Mi", "321"),
        ("inf2.8xlarge", "31850m", "118312Mi", "234"),
    ];
    for (name, cpu, memory, pods) in cases {
        let a = alloc(&default_type("us-east-1", name));
        assert_eq!((a["cpu"].as_str(), a["memory"].as_str(), a["pods"].as_str()), (*cpu, *memory, *pods), "{name}");
        assert_eq!(a["ephemeral-storage"], "17Gi", "{name}");
    }
    // Not priced in us-east-1 by the source.
    let c4 = alloc(&default_type("us-west-2", "c4.8xlarge"));
    assert_eq!((c4["cpu"].as_str(), c4["memory"].as_str(), c4["pods"].as_str()), ("35840m", "53903Mi", "234"));
    let metal = default_type("us-east-1", "i4i.metal");
    assert_eq!(metal.labels[labels::INSTANCE_HYPERVISOR], "");
    assert_eq!(metal.capacity.get("vpc.amazonaws.com/efa").canonical(), "1");
    assert_eq!(default_type("us-east-1", "inf1.24xlarge").capacity.get("aws.amazon.com/neuron").canonical(), "16");
}

fn node_class(spec: serde_json::Value) -> NodeClassSettings {
    let nc: EC2NodeClass =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "nc"}, "spec": spec})).unwrap();
    NodeClassSettings::from_node_class(Some(&nc))
}

#[test]
fn bottlerocket_ignores_pods_per_core_whether_named_by_ami_family_or_alias() {
    let kubelet = serde_json::json!({"podsPerCore": 4});
    for spec in [
        serde_json::json!({"amiFamily": "Bottlerocket", "kubelet": kubelet}),
        serde_json::json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "kubelet": kubelet}),
    ] {
        let s = node_class(spec.clone());
        let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
        // The ENI limit stands: 4 × (15 − 1) + 2 = 58, not min(4 × 8, 58) = 32.
        assert_eq!(alloc(&t)["pods"], "58", "{spec}");
        assert_eq!(alloc(&t)["memory"], "14162Mi", "{spec}");
    }
    // The same kubelet on AL2023 is capped.
    let s = node_class(serde_json::json!({"amiSelectorTerms": [{"alias": "al2023@latest"}], "kubelet": kubelet}));
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    assert_eq!(alloc(&t)["pods"], "32");
    // Bottlerocket still honours maxPods.
    let s = node_class(serde_json::json!({"amiFamily": "Bottlerocket", "kubelet": {"maxPods": 20, "podsPerCore": 1}}));
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    assert_eq!(alloc(&t)["pods"], "20");
}

#[test]
fn windows_nodes_default_to_110_pods_instead_of_the_eni_limit() {
    let s = node_class(serde_json::json!({"amiSelectorTerms": [{"alias": "windows2022@latest"}]}));
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    assert_eq!(alloc(&t)["pods"], "110");
    let s = node_class(serde_json::json!({"amiFamily": "Windows2019", "kubelet": {"podsPerCore": 4}}));
    let t = catalog().unwrap().instance_type("us-west-2", "c7i.2xlarge", &s).unwrap();
    assert_eq!(alloc(&t)["pods"], "32");
}

#[test]
fn a_windows_class_offers_amd64_windows_types_with_the_build_label_and_licence_prices() {
    let s = node_class(serde_json::json!({
        "amiSelectorTerms": [{"alias": "windows2022@latest"}],
        "blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": "60Gi"}}],
        "kubelet": {"evictionSoft": {"memory.available": "1Gi"}}
    }));
    let cat = catalog().unwrap();
    let types = cat.instance_types("us-west-2", None, &s).unwrap();
    assert!(!types.is_empty());
    for t in &types {
        assert_eq!(t.labels[labels::OS], "windows", "{}", t.name);
        assert_eq!(t.labels[labels::WINDOWS_BUILD], "10.0.20348", "{}", t.name);
        assert_eq!(t.labels[labels::ARCH], "amd64", "{}", t.name);
        assert!(t.price_estimated, "{}: a Windows price is derived", t.name);
    }
    let t = cat.instance_type("us-west-2", "t3.large", &s).unwrap();
    let linux = default_type("us-west-2", "t3.large");
    let od = |t: &InstanceType| {
        t.offerings.iter().find(|o| o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND).map(|o| o.price).unwrap()
    };
    // t3.large pays the burstable licence fee of its size, $0.0276/h.
    assert!((od(&t) - od(&linux) - 0.0276).abs() < 1e-9, "{} vs {}", od(&t), od(&linux));
    // The root volume is /dev/sda1 on Windows; soft eviction does not apply there.
    // 60Gi - 1Gi kube-reserved - 6Gi nodefs = 53Gi; memory: 8192 - 615 = 7577Mi, - (11×110 + 255)
    // - 100 = 6012Mi.
    let a = alloc(&t);
    assert_eq!(a["ephemeral-storage"], "53Gi");
    assert_eq!(a["memory"], "6012Mi");
    assert_eq!(a["pods"], "110");
    assert!(cat.instance_type("us-west-2", "m7g.large", &s).is_err(), "no arm64 Windows");
    let d = node_class(serde_json::json!({"amiFamily": "Windows2019"}));
    let t = cat.instance_type("us-west-2", "m5.large", &d).unwrap();
    assert_eq!(t.labels[labels::WINDOWS_BUILD], "10.0.17763");
    assert_eq!(alloc(&t)["ephemeral-storage"], "44Gi", "50Gi default root: 50 - 1 - 5");
}

#[test]
fn attachable_ebs_volumes_are_the_type_limit_less_the_volumes_the_node_launches_with() {
    let att = |t: &InstanceType| t.allocatable().get("attachable-volumes-aws-ebs").canonical();
    // Nitro, shared: 28 less the primary ENI (27, as EC2 reports it) less the root volume.
    assert_eq!(att(&default_type("us-west-2", "t3.large")), "26");
    // An NVMe instance store takes one more of the shared 28.
    assert_eq!(att(&default_type("us-west-2", "m5d.large")), "25");
    // A dedicated limit (m7i: 32) less the root volume.
    assert_eq!(att(&default_type("us-west-2", "m7i.large")), "31");
    // Xen: 40 less the root volume.
    assert_eq!(att(&default_type("us-west-2", "t2.large")), "39");
    // Every EBS block device the class maps is attached at launch.
    let s = node_class(serde_json::json!({"blockDeviceMappings": [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi"}},
        {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}
    ]}));
    assert_eq!(att(&catalog().unwrap().instance_type("us-west-2", "t3.large", &s).unwrap()), "25");
}
