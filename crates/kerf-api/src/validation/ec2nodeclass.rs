//! EC2NodeClass validation: the checks Karpenter's `ec2nodeclasses.karpenter.k8s.aws` CRD runs.

use std::collections::BTreeMap;

use super::*;
use crate::ec2nodeclass::{
    AmiFamily, AmiSelectorTerm, BlockDeviceMapping, EC2NodeClass, KubeletConfiguration, MetadataOptions,
};

fn validate_tag_map(tags: &BTreeMap<String, String>, path: &str, errs: &mut Errors) {
    if tags.len() > MAX_SELECTOR_TAGS {
        errs.push(path, format!("has {} tags, at most {MAX_SELECTOR_TAGS} are allowed", tags.len()));
    }
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            errs.push(format!("{path}[{k}]"), "empty tag keys or values aren't supported");
        }
    }
}

fn check_id(id: &Option<String>, prefix: &str, path: &str, errs: &mut Errors) {
    if let Some(id) = id {
        let ok = id
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        if !ok {
            errs.push(path, format!("{id:?} is not a valid id (expected {prefix}<lower-case alphanumerics>)"));
        }
    }
}

/// The family of an AMI alias (`al2023@latest` → `al2023`), if the alias is well-formed.
pub fn ami_alias_family(alias: &str) -> Option<(&str, &str)> {
    let (family, version) = alias.split_once('@')?;
    if family.is_empty() || version.is_empty() || !family.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Some((family, version))
}

fn ami_family_of_alias(family: &str) -> Option<AmiFamily> {
    Some(match family {
        "al2" => AmiFamily::AL2,
        "al2023" => AmiFamily::AL2023,
        "bottlerocket" => AmiFamily::Bottlerocket,
        "windows2019" => AmiFamily::Windows2019,
        "windows2022" => AmiFamily::Windows2022,
        "windows2025" => AmiFamily::Windows2025,
        _ => return None,
    })
}

fn validate_ami_term(t: &AmiSelectorTerm, path: &str, errs: &mut Errors) {
    let set = [
        ("tags", !t.tags.is_empty()),
        ("id", t.id.is_some()),
        ("name", t.name.is_some()),
        ("alias", t.alias.is_some()),
        ("ssmParameter", t.ssm_parameter.is_some()),
    ];
    let count = set.iter().filter(|(_, s)| *s).count();
    if count == 0 {
        errs.push(path, "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']");
    }
    if t.id.is_some() && (count > 1 || t.owner.is_some()) {
        errs.push(
            format!("{path}.id"),
            "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        );
    }
    if t.alias.is_some() && (count > 1 || t.owner.is_some()) {
        errs.push(
            format!("{path}.alias"),
            "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        );
    }
    if let Some(alias) = &t.alias {
        let p = format!("{path}.alias");
        if alias.len() > 30 {
            errs.push(&p, "may not be longer than 30 characters");
        }
        match ami_alias_family(alias) {
            None => errs.push(&p, format!("{alias:?} is improperly formatted, must match the format 'family@version'")),
            Some((family, version)) => {
                if !AMI_ALIAS_FAMILIES.contains(&family) {
                    errs.push(
                        &p,
                        format!(
                            "family {family:?} is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"
                        ),
                    );
                } else if family.starts_with("windows") && version != "latest" {
                    errs.push(&p, "windows families may only specify version 'latest'");
                }
            }
        }
    }
    check_id(&t.id, "ami-", &format!("{path}.id"), errs);
    validate_tag_map(&t.tags, &format!("{path}.tags"), errs);
}

fn validate_kubelet(k: &KubeletConfiguration, path: &str, errs: &mut Errors) {
    for (field, map) in [("evictionHard", &k.eviction_hard), ("evictionSoft", &k.eviction_soft)] {
        for (signal, value) in map {
            let p = format!("{path}.{field}[{signal}]");
            if !EVICTION_SIGNALS.contains(&signal.as_str()) {
                errs.push(&p, format!("valid keys for {field} are {}", quoted_list(EVICTION_SIGNALS)));
            }
            if !is_eviction_threshold(value) {
                errs.push(&p, format!("{value:?} must be a quantity (e.g. 100Mi) or a percentage (e.g. 10%)"));
            }
        }
    }
    for signal in k.eviction_soft_grace_period.keys() {
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            errs.push(
                format!("{path}.evictionSoftGracePeriod[{signal}]"),
                format!("valid keys for evictionSoftGracePeriod are {}", quoted_list(EVICTION_SIGNALS)),
            );
        }
    }
    for signal in k.eviction_soft.keys() {
        if !k.eviction_soft_grace_period.contains_key(signal) {
            errs.push(
                format!("{path}.evictionSoft[{signal}]"),
                "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            );
        }
    }
    for signal in k.eviction_soft_grace_period.keys() {
        if !k.eviction_soft.contains_key(signal) {
            errs.push(
                format!("{path}.evictionSoftGracePeriod[{signal}]"),
                "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            );
        }
    }
    for (field, map) in [("kubeReserved", &k.kube_reserved), ("systemReserved", &k.system_reserved)] {
        for (name, q) in map {
            let p = format!("{path}.{field}[{name}]");
            if !RESERVED_RESOURCES.contains(&name.as_str()) {
                errs.push(&p, format!("valid keys for {field} are {}", quoted_list(RESERVED_RESOURCES)));
            }
            if q.is_negative() {
                errs.push(&p, format!("{field} value cannot be a negative resource quantity"));
            }
        }
    }
    for (field, v) in [("maxPods", k.max_pods), ("podsPerCore", k.pods_per_core)] {
        if let Some(v) = v
            && v < 0
        {
            errs.push(format!("{path}.{field}"), format!("must be 0 or more, got {v}"));
        }
    }
    for (field, v) in [
        ("imageGCHighThresholdPercent", k.image_gc_high_threshold_percent),
        ("imageGCLowThresholdPercent", k.image_gc_low_threshold_percent),
    ] {
        if let Some(v) = v
            && !(0..=100).contains(&v)
        {
            errs.push(format!("{path}.{field}"), format!("must be between 0 and 100, got {v}"));
        }
    }
    if let (Some(high), Some(low)) = (k.image_gc_high_threshold_percent, k.image_gc_low_threshold_percent)
        && high <= low
    {
        errs.push(
            format!("{path}.imageGCHighThresholdPercent"),
            format!("imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent ({high} <= {low})"),
        );
    }
}

fn quoted_list(items: &[&str]) -> String {
    format!("[{}]", items.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(","))
}

/// An eviction threshold: a percentage `0-100%` (up to two decimals) or a quantity.
pub fn is_eviction_threshold(v: &str) -> bool {
    if let Some(pct) = v.strip_suffix('%') {
        let (int, frac) = pct.split_once('.').unwrap_or((pct, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !digits(int) || !digits(frac) || frac.len() > 2 || (pct.contains('.') && frac.is_empty()) {
            return false;
        }
        return match int.parse::<u32>() {
            Ok(n) if int.len() <= 2 => n < 100 || (n == 100 && frac.bytes().all(|b| b == b'0')),
            Ok(100) => frac.bytes().all(|b| b == b'0'),
            _ => false,
        };
    }
    crate::quantity::Quantity::parse(v).is_ok()
}

fn validate_metadata_options(m: &MetadataOptions, path: &str, errs: &mut Errors) {
    let check = |field: &str, v: &Option<String>, allowed: &[&str], errs: &mut Errors| {
        if let Some(v) = v
            && !allowed.contains(&v.as_str())
        {
            errs.push(format!("{path}.{field}"), format!("{v:?} is not one of {}", quoted_list(allowed)));
        }
    };
    check("httpEndpoint", &m.http_endpoint, &["enabled", "disabled"], errs);
    check("httpProtocolIPv6", &m.http_protocol_ipv6, &["enabled", "disabled"], errs);
    check("httpTokens", &m.http_tokens, &["required", "optional"], errs);
    if let Some(h) = m.http_put_response_hop_limit
        && !(1..=64).contains(&h)
    {
        errs.push(format!("{path}.httpPutResponseHopLimit"), format!("must be between 1 and 64, got {h}"));
    }
}

/// EBS volume sizes the CRD accepts: whole 1-59000Gi, 1-64000G, 1-58Ti or 1-64T.
fn volume_size_ok(q: &crate::quantity::Quantity) -> bool {
    let canonical = q.canonical();
    let Some(split) = canonical.find(|c: char| !c.is_ascii_digit()) else { return false };
    let (digits, suffix) = canonical.split_at(split);
    let Ok(n) = digits.parse::<u64>() else { return false };
    match suffix {
        "Gi" => (1..=59_000).contains(&n),
        "G" => (1..=64_000).contains(&n),
        "Ti" => (1..=58).contains(&n),
        "T" => (1..=64).contains(&n),
        _ => false,
    }
}

fn validate_block_device_mappings(bdms: &[BlockDeviceMapping], path: &str, errs: &mut Errors) {
    if bdms.len() > MAX_BLOCK_DEVICE_MAPPINGS {
        errs.push(path, format!("has {} entries, at most {MAX_BLOCK_DEVICE_MAPPINGS} are allowed", bdms.len()));
    }
    let roots = bdms.iter().filter(|b| b.root_volume == Some(true)).count();
    if roots > 1 {
        errs.push(path, format!("must have only one blockDeviceMappings with rootVolume, found {roots}"));
    }
    for (i, b) in bdms.iter().enumerate() {
        let p = format!("{path}[{i}]");
        if let Some(ebs) = &b.ebs {
            if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
                errs.push(format!("{p}.ebs"), "snapshotID or volumeSize must be defined");
            }
            if let Some(t) = &ebs.volume_type
                && !EBS_VOLUME_TYPES.contains(&t.as_str())
            {
                errs.push(
                    format!("{p}.ebs.volumeType"),
                    format!("{t:?} is not one of {}", quoted_list(EBS_VOLUME_TYPES)),
                );
            }
            if let Some(size) = &ebs.volume_size
                && !volume_size_ok(size)
            {
                errs.push(format!("{p}.ebs.volumeSize"), format!("{size} is not a valid EBS volume size (1G to 64T)"));
            }
            if let Some(rate) = ebs.volume_initialization_rate {
                if !(100..=300).contains(&rate) {
                    errs.push(
                        format!("{p}.ebs.volumeInitializationRate"),
                        format!("must be between 100 and 300, got {rate}"),
                    );
                }
                if ebs.snapshot_id.as_deref().is_none_or(str::is_empty) {
                    errs.push(format!("{p}.ebs"), "snapshotID must be set when volumeInitializationRate is set");
                }
            }
        }
    }
}

/// Checks an EC2NodeClass against Karpenter's CRD rules.
pub fn validate_ec2_node_class(nc: &EC2NodeClass) -> Vec<FieldError> {
    let mut errs = Errors::default();
    validate_object_name(nc.metadata.name.as_deref(), &mut errs);
    let s = &nc.spec;

    // Subnets.
    if s.subnet_selector_terms.is_empty() {
        errs.push("spec.subnetSelectorTerms", "subnetSelectorTerms cannot be empty (at least one term is required)");
    } else if s.subnet_selector_terms.len() > MAX_SELECTOR_TERMS {
        errs.push("spec.subnetSelectorTerms", format!("at most {MAX_SELECTOR_TERMS} terms are allowed"));
    }
    for (i, t) in s.subnet_selector_terms.iter().enumerate() {
        let p = format!("spec.subnetSelectorTerms[{i}]");
        match (t.tags.is_empty(), t.id.is_some()) {
            (true, false) => errs.push(&p, "expected at least one, got none, ['tags', 'id']"),
            (false, true) => errs.push(
                format!("{p}.id"),
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            ),
            _ => {}
        }
        check_id(&t.id, "subnet-", &format!("{p}.id"), &mut errs);
        validate_tag_map(&t.tags, &format!("{p}.tags"), &mut errs);
    }

    // Security groups.
    if s.security_group_selector_terms.is_empty() {
        errs.push(
            "spec.securityGroupSelectorTerms",
            "securityGroupSelectorTerms cannot be empty (at least one term is required)",
        );
    } else if s.security_group_selector_terms.len() > MAX_SELECTOR_TERMS {
        errs.push("spec.securityGroupSelectorTerms", format!("at most {MAX_SELECTOR_TERMS} terms are allowed"));
    }
    for (i, t) in s.security_group_selector_terms.iter().enumerate() {
        let p = format!("spec.securityGroupSelectorTerms[{i}]");
        let count = [!t.tags.is_empty(), t.id.is_some(), t.name.is_some()].iter().filter(|b| **b).count();
        if count == 0 {
            errs.push(&p, "expected at least one, got none, ['tags', 'id', 'name']");
        } else if count > 1 {
            if t.id.is_some() {
                errs.push(
                    format!("{p}.id"),
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                );
            }
            if t.name.is_some() {
                errs.push(
                    format!("{p}.name"),
                    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                );
            }
        }
        check_id(&t.id, "sg-", &format!("{p}.id"), &mut errs);
        validate_tag_map(&t.tags, &format!("{p}.tags"), &mut errs);
    }

    // Capacity reservations.
    if s.capacity_reservation_selector_terms.len() > MAX_SELECTOR_TERMS {
        errs.push("spec.capacityReservationSelectorTerms", format!("at most {MAX_SELECTOR_TERMS} terms are allowed"));
    }
    for (i, t) in s.capacity_reservation_selector_terms.iter().enumerate() {
        let p = format!("spec.capacityReservationSelectorTerms[{i}]");
        if t.tags.is_empty() && t.id.is_none() && t.instance_match_criteria.is_none() {
            errs.push(&p, "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']");
        }
        if t.id.is_some() && (!t.tags.is_empty() || t.owner_id.is_some() || t.instance_match_criteria.is_some()) {
            errs.push(
                format!("{p}.id"),
                "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
            );
        }
        if let Some(c) = &t.instance_match_criteria
            && !matches!(c.as_str(), "open" | "targeted")
        {
            errs.push(format!("{p}.instanceMatchCriteria"), format!("{c:?} is not one of ['open','targeted']"));
        }
        if let Some(owner) = &t.owner_id
            && !(owner.len() == 12 && owner.bytes().all(|b| b.is_ascii_digit()))
        {
            errs.push(format!("{p}.ownerID"), format!("{owner:?} is not a 12-digit AWS account id"));
        }
        check_id(&t.id, "cr-", &format!("{p}.id"), &mut errs);
        validate_tag_map(&t.tags, &format!("{p}.tags"), &mut errs);
    }

    // AMIs.
    if s.ami_selector_terms.is_empty() {
        errs.push(
            "spec.amiSelectorTerms",
            "amiSelectorTerms cannot be empty (at least one term is required, e.g. alias: al2023@latest)",
        );
    } else if s.ami_selector_terms.len() > MAX_SELECTOR_TERMS {
        errs.push("spec.amiSelectorTerms", format!("at most {MAX_SELECTOR_TERMS} terms are allowed"));
    }
    for (i, t) in s.ami_selector_terms.iter().enumerate() {
        validate_ami_term(t, &format!("spec.amiSelectorTerms[{i}]"), &mut errs);
    }
    let alias = s.ami_selector_terms.iter().find_map(|t| t.alias.as_deref());
    if alias.is_some() && s.ami_selector_terms.len() > 1 {
        errs.push(
            "spec.amiSelectorTerms",
            "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        );
    }
    match (alias, s.ami_family) {
        (None, None) if !s.ami_selector_terms.is_empty() => {
            errs.push("spec.amiFamily", "must specify amiFamily if amiSelectorTerms does not contain an alias")
        }
        (Some(alias), Some(family)) => {
            let alias_family = ami_alias_family(alias).and_then(|(f, _)| ami_family_of_alias(f));
            if let Some(af) = alias_family
                && family != af
                && family != AmiFamily::Custom
            {
                errs.push(
                    "spec.amiFamily",
                    format!(
                        "if set, amiFamily must be '{af:?}' or 'Custom' when using an {af:?} alias (got {family:?})"
                    ),
                );
            }
        }
        _ => {}
    }

    // Identity.
    match (&s.role, &s.instance_profile) {
        (Some(_), Some(_)) | (None, None) => {
            errs.push("spec", "must specify exactly one of ['role', 'instanceProfile']");
        }
        _ => {}
    }
    if s.role.as_deref() == Some("") {
        errs.push("spec.role", "role cannot be empty");
    }
    if s.instance_profile.as_deref() == Some("") {
        errs.push("spec.instanceProfile", "instanceProfile cannot be empty");
    }

    // Tags.
    for k in s.tags.keys() {
        let p = format!("spec.tags[{k}]");
        if k.is_empty() {
            errs.push(&p, "empty tag keys aren't supported");
        } else if RESTRICTED_TAG_KEYS.contains(&k.as_str()) || k.starts_with(RESTRICTED_TAG_PREFIX) {
            let what = if k.starts_with(RESTRICTED_TAG_PREFIX) { "kubernetes.io/cluster/" } else { k.as_str() };
            errs.push(&p, format!("tag contains a restricted tag matching {what}"));
        }
    }

    if let Some(n) = s.ip_prefix_count
        && n < 0
    {
        errs.push("spec.ipPrefixCount", format!("must be 0 or more, got {n}"));
    }
    if let Some(k) = &s.kubelet {
        validate_kubelet(k, "spec.kubelet", &mut errs);
    }
    validate_block_device_mappings(&s.block_device_mappings, "spec.blockDeviceMappings", &mut errs);
    if let Some(m) = &s.metadata_options {
        validate_metadata_options(m, "spec.metadataOptions", &mut errs);
    }
    validate_placement_and_network(s, &mut errs);
    errs.0
}

/// Placement group, network interfaces, connection tracking and CPU options.
fn validate_placement_and_network(s: &crate::ec2nodeclass::EC2NodeClassSpec, errs: &mut Errors) {
    if let Some(pg) = &s.placement_group_selector {
        match (&pg.name, &pg.id) {
            (None, None) => errs.push("spec.placementGroupSelector", "expected exactly one of ['name', 'id']"),
            (Some(_), Some(_)) => errs.push(
                "spec.placementGroupSelector",
                "'name' and 'id' are mutually exclusive in a placement group selector",
            ),
            _ => {}
        }
        if pg.name.as_deref() == Some("") {
            errs.push("spec.placementGroupSelector.name", "name cannot be empty");
        }
        check_id(&pg.id, "pg-", "spec.placementGroupSelector.id", errs);
    }
    let mut seen = Vec::new();
    for (i, n) in s.network_interfaces.iter().enumerate() {
        let p = format!("spec.networkInterfaces[{i}]");
        for (field, v) in [("networkCardIndex", n.network_card_index), ("deviceIndex", n.device_index)] {
            if v < 0 {
                errs.push(format!("{p}.{field}"), format!("must be 0 or more, got {v}"));
            }
        }
        let at = (n.network_card_index, n.device_index);
        if seen.contains(&at) {
            errs.push(
                &p,
                format!("networkCardIndex {} and deviceIndex {} are already used by another interface", at.0, at.1),
            );
        }
        seen.push(at);
    }
    if let Some(ct) = &s.connection_tracking {
        for (field, v) in [
            ("tcpEstablishedTimeout", &ct.tcp_established_timeout),
            ("udpStreamTimeout", &ct.udp_stream_timeout),
            ("udpTimeout", &ct.udp_timeout),
        ] {
            if let Some(crate::ec2nodeclass::Timeout::Seconds(n)) = v
                && *n < 0
            {
                errs.push(format!("spec.connectionTracking.{field}"), format!("must be 0 or more, got {n}"));
            }
        }
    }
    if let Some(cpu) = &s.cpu_options {
        for (field, v) in [("coreCount", cpu.core_count), ("threadsPerCore", cpu.threads_per_core)] {
            if let Some(v) = v
                && v < 1
            {
                errs.push(format!("spec.cpuOptions.{field}"), format!("must be 1 or more, got {v}"));
            }
        }
        if let Some(v) = &cpu.amd_sev_snp
            && !matches!(v.as_str(), "enabled" | "disabled")
        {
            errs.push("spec.cpuOptions.amdSevSnp", format!("{v:?} is not one of ['enabled','disabled']"));
        }
    }
}
