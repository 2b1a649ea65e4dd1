//! The checks of `validation` that a CRD can make itself, added to the generated schemas:
//! CEL rules (`x-kubernetes-validations`, Karpenter's where Karpenter has the same check, with
//! kerf's messages otherwise) and the patterns, bounds and enums the types do not carry.
//!
//! Each addition names its field by a path over the schema: `spec.template.spec.requirements`,
//! `[]` for a list's items and `{}` for a map's values (`spec.tags{}`). Lists shared with
//! `validation` (allowed label domains, eviction signals, restricted tags) are read from there.
//!
//! What stays with kerf alone: cron syntax of budget schedules, EBS volume size ranges, the
//! uniqueness of network interface indices, the length limits inside qualified names, and of a
//! CapacityQuota's label selector, which operators take values and its matchLabels keys.

use serde_json::{Value, json};

use crate::validation::{
    AMI_ALIAS_FAMILIES, EBS_VOLUME_TYPES, EVICTION_SIGNALS, MAX_LABELS, MAX_SELECTOR_TAGS, RESERVED_RESOURCES,
    RESTRICTED_TAG_KEYS, RESTRICTED_TAG_PREFIX,
};

/// A qualified name (`[prefix/]name`), as label keys and taint keys are.
const QUALIFIED_NAME: &str =
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
/// A label value (possibly empty).
const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A duration in whole seconds (`1h30m`, `90s`), as the CRDs take `terminationGracePeriod`.
const WHOLE_SECONDS: &str = r"^([0-9]+(s|m|h))+$";
/// An eviction threshold: a percentage up to 100% (two decimals at most) or a quantity.
const EVICTION_THRESHOLD: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%|(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";

/// One thing added to one schema node.
#[derive(Debug, Clone, PartialEq)]
pub struct Addition {
    /// The field, as a path over the schema (see the module doc).
    pub at: String,
    pub what: What,
}

#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// A CEL rule and its message.
    Rule { rule: String, message: String },
    /// A schema keyword and its value (`pattern`, `maxLength`, `enum`, ...).
    Set(&'static str, Value),
    /// A field the object must have (added to `required`).
    Require(&'static str),
    /// A keyword of the generated schema that the CRD must not carry (a `default` that would
    /// fill in a field kerf requires).
    Remove(&'static str),
}

fn rule(at: &str, rule: impl Into<String>, message: impl Into<String>) -> Addition {
    Addition { at: at.to_string(), what: What::Rule { rule: rule.into(), message: message.into() } }
}

fn set(at: &str, key: &'static str, value: Value) -> Addition {
    Addition { at: at.to_string(), what: What::Set(key, value) }
}

fn require(at: &str, field: &'static str) -> Addition {
    Addition { at: at.to_string(), what: What::Require(field) }
}

fn remove(at: &str, keyword: &'static str) -> Addition {
    Addition { at: at.to_string(), what: What::Remove(keyword) }
}

/// `["a", "b"]` as a CEL list literal.
fn cel_list(items: &[&str]) -> String {
    format!("[{}]", items.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", "))
}

/// `['a','b']`, as kerf's messages list allowed values.
fn quoted_list(items: &[&str]) -> String {
    format!("[{}]", items.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(","))
}

/// Which label keys a place accepts (see `validation::LabelUse`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// NodePool template labels and requirements: `karpenter.sh/nodepool` is Karpenter's.
    NodePool,
    /// NodeClaim requirements.
    NodeClaim,
}

/// The restricted label domains ([`crate::labels::RESTRICTED_DOMAINS`]) and the hostname label as
/// `(condition on the key variable, message)`.
fn label_key_rules(var: &str, keys: Keys) -> Vec<(String, String)> {
    let domain = format!("{var}.find('^([^/]+)')");
    let domain_rule = |d: &crate::labels::RestrictedDomain| {
        let mut ors = Vec::new();
        if !d.allowed.is_empty() {
            ors.push(format!("{var} in {}", cel_list(d.allowed)));
        }
        ors.extend(d.exempt.iter().map(|e| format!("{domain}.endsWith('{e}')")));
        ors.push(format!("!{domain}.endsWith('{}')", d.domain));
        (ors.join(" || "), format!("label domain \"{}\" is restricted", d.domain))
    };
    let mut rules: Vec<(String, String)> = crate::labels::RESTRICTED_DOMAINS.iter().map(domain_rule).collect();
    rules.push((
        format!("{var} != 'kubernetes.io/hostname'"),
        "label \"kubernetes.io/hostname\" is restricted".to_string(),
    ));
    if keys == Keys::NodePool {
        rules.push((
            format!("{var} != '{}'", crate::labels::NODE_POOL),
            "label \"karpenter.sh/nodepool\" is restricted".to_string(),
        ));
    }
    rules
}

/// Requirements (a list of `NodeSelectorRequirementWithMinValues`) at `at`, a field kerf
/// requires (an empty list is fine).
fn requirements(at: &str, keys: Keys) -> Vec<Addition> {
    let key = format!("{at}[].key");
    let holder = at.rsplit_once('.').map_or("", |(h, _)| h);
    let mut out = vec![
        require(holder, "requirements"),
        remove(at, "default"),
        set(&key, "maxLength", json!(316)),
        set(&key, "pattern", json!(format!("^{QUALIFIED_NAME}$"))),
        set(&format!("{at}[].values[]"), "maxLength", json!(63)),
        set(&format!("{at}[].values[]"), "pattern", json!(LABEL_VALUE)),
        rule(
            at,
            "self.all(x, x.operator == 'In' ? (has(x.values) && x.values.size() != 0) : true)",
            "requirements with operator 'In' must have a value defined",
        ),
        rule(
            at,
            "self.all(x, (x.operator == 'Exists' || x.operator == 'DoesNotExist') ? (!has(x.values) || x.values.size() == 0) : true)",
            "requirements with operator 'Exists' or 'DoesNotExist' must not have values",
        ),
        rule(
            at,
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (has(x.values) && x.values.size() == 1 && x.values[0].matches('^[0-9]+$')) : true)",
            "requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value",
        ),
        rule(
            at,
            "self.all(x, (x.operator == 'In' && has(x.minValues)) ? (has(x.values) && x.values.size() >= x.minValues) : true)",
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ),
    ];
    out.extend(label_key_rules("self", keys).into_iter().map(|(r, m)| rule(&key, r, m)));
    out
}

/// Taints (`taints`, `startupTaints`) at `at`.
fn taints(at: &str) -> Vec<Addition> {
    vec![
        set(&format!("{at}[].key"), "minLength", json!(1)),
        set(&format!("{at}[].key"), "pattern", json!(format!("^{QUALIFIED_NAME}$"))),
        set(&format!("{at}[].value"), "pattern", json!(format!("^({QUALIFIED_NAME})?$"))),
    ]
}

fn node_pool() -> Vec<Addition> {
    let labels = "spec.template.metadata.labels";
    let mut out = vec![
        set(labels, "maxProperties", json!(MAX_LABELS)),
        set(&format!("{labels}{{}}"), "maxLength", json!(63)),
        set(&format!("{labels}{{}}"), "pattern", json!(LABEL_VALUE)),
        set("spec.disruption.budgets[].reasons", "x-kubernetes-list-type", json!("set")),
        rule(
            "spec.disruption.budgets",
            "self.all(x, has(x.schedule) == has(x.duration))",
            "'schedule' must be set with 'duration'",
        ),
        rule(
            "spec",
            "!has(self.replicas) || !has(self.weight)",
            "'weight' is not supported on static NodePools (replicas is set)",
        ),
        rule(
            "spec",
            "!has(self.replicas) || !has(self.limits) || self.limits.size() == 0 || (self.limits.size() == 1 && 'nodes' in self.limits)",
            "only 'limits.nodes' is supported on static NodePools (replicas is set)",
        ),
    ];
    out.push(rule(
        labels,
        // Backslashes doubled: the pattern sits in a CEL string literal.
        format!("self.all(x, x.size() <= 316 && x.matches('^{}$'))", QUALIFIED_NAME.replace('\\', "\\\\")),
        "label keys must be qualified names ([prefix/]name: alphanumeric at both ends, '-', '_' or '.' inside)",
    ));
    out.extend(
        label_key_rules("x", Keys::NodePool).into_iter().map(|(r, m)| rule(labels, format!("self.all(x, {r})"), m)),
    );
    out.extend(requirements("spec.template.spec.requirements", Keys::NodePool));
    out.extend(taints("spec.template.spec.taints"));
    out.extend(taints("spec.template.spec.startupTaints"));
    out.push(set("spec.template.spec.terminationGracePeriod", "pattern", json!(WHOLE_SECONDS)));
    out
}

fn node_claim() -> Vec<Addition> {
    let mut out = requirements("spec.requirements", Keys::NodeClaim);
    out.extend(taints("spec.taints"));
    out.extend(taints("spec.startupTaints"));
    out.push(set("spec.terminationGracePeriod", "pattern", json!(WHOLE_SECONDS)));
    out
}

/// Selector terms' tag maps at `at`.
fn selector_tags(at: &str) -> Vec<Addition> {
    vec![
        set(at, "maxProperties", json!(MAX_SELECTOR_TAGS)),
        rule(at, "self.all(k, k != '' && self[k] != '')", "empty tag keys or values aren't supported"),
    ]
}

fn ec2_node_class() -> Vec<Addition> {
    let subnets = "spec.subnetSelectorTerms";
    let groups = "spec.securityGroupSelectorTerms";
    let reservations = "spec.capacityReservationSelectorTerms";
    let amis = "spec.amiSelectorTerms";
    let alias = "spec.amiSelectorTerms[].alias";
    let kubelet = "spec.kubelet";
    let mut out = vec![
        require("spec", "subnetSelectorTerms"),
        require("spec", "securityGroupSelectorTerms"),
        require("spec", "amiSelectorTerms"),
        rule(subnets, "self.size() != 0", "subnetSelectorTerms cannot be empty (at least one term is required)"),
        rule(subnets, "self.all(x, has(x.tags) || has(x.id))", "expected at least one, got none, ['tags', 'id']"),
        rule(
            subnets,
            "self.all(x, !(has(x.id) && has(x.tags)))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        ),
        set(&format!("{subnets}[].id"), "pattern", json!("^subnet-[0-9a-z]+$")),
        rule(groups, "self.size() != 0", "securityGroupSelectorTerms cannot be empty (at least one term is required)"),
        rule(
            groups,
            "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
            "expected at least one, got none, ['tags', 'id', 'name']",
        ),
        rule(
            groups,
            "self.all(x, has(x.id) ? !(has(x.tags) || has(x.name)) : true)",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        ),
        rule(
            groups,
            "self.all(x, has(x.name) ? !(has(x.tags) || has(x.id)) : true)",
            "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        ),
        set(&format!("{groups}[].id"), "pattern", json!("^sg-[0-9a-z]+$")),
        rule(
            reservations,
            "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
            "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        ),
        rule(
            reservations,
            "self.all(x, has(x.id) ? !(has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)) : true)",
            "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        ),
        set(&format!("{reservations}[].id"), "pattern", json!("^cr-[0-9a-z]+$")),
        set(&format!("{reservations}[].ownerID"), "pattern", json!("^[0-9]{12}$")),
        set(&format!("{reservations}[].instanceMatchCriteria"), "enum", json!(["open", "targeted"])),
        rule(
            amis,
            "self.size() != 0",
            "amiSelectorTerms cannot be empty (at least one term is required, e.g. alias: al2023@latest)",
        ),
        rule(
            amis,
            "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
            "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        ),
        rule(
            amis,
            "self.all(x, has(x.id) ? !(has(x.tags) || has(x.name) || has(x.alias) || has(x.ssmParameter) || has(x.owner)) : true)",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        rule(
            amis,
            "self.all(x, has(x.alias) ? !(has(x.tags) || has(x.name) || has(x.id) || has(x.ssmParameter) || has(x.owner)) : true)",
            "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        rule(
            amis,
            "!self.exists(x, has(x.alias)) || self.size() == 1",
            "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        ),
        set(&format!("{amis}[].id"), "pattern", json!("^ami-[0-9a-z]+$")),
        set(alias, "maxLength", json!(30)),
        rule(
            alias,
            "self.matches('^[a-zA-Z0-9]+@.+$')",
            "'alias' is improperly formatted, must match the format 'family@version'",
        ),
        rule(
            alias,
            format!("self.find('^[^@]+') in {}", cel_list(AMI_ALIAS_FAMILIES)),
            format!("family is not supported, must be one of the following: {}", cel_list(AMI_ALIAS_FAMILIES)),
        ),
        rule(
            alias,
            "self.find('^[^@]+').startsWith('windows') ? self.find('[^@]+$') == 'latest' : true",
            "windows families may only specify version 'latest'",
        ),
        rule(
            "spec",
            "has(self.role) != has(self.instanceProfile)",
            "must specify exactly one of ['role', 'instanceProfile']",
        ),
        rule(
            "spec",
            "has(self.amiFamily) || self.amiSelectorTerms.exists(x, has(x.alias))",
            "must specify amiFamily if amiSelectorTerms does not contain an alias",
        ),
        rule(
            "spec",
            "!has(self.amiFamily) || self.amiFamily == 'Custom' || !self.amiSelectorTerms.exists(x, has(x.alias)) || self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == self.amiFamily.lowerAscii())",
            "if set, amiFamily must be the alias's family or 'Custom' when using an alias",
        ),
        rule("spec.role", "self != ''", "role cannot be empty"),
        rule("spec.instanceProfile", "self != ''", "instanceProfile cannot be empty"),
        rule("spec.tags", "self.all(k, k != '')", "empty tag keys aren't supported"),
        rule(
            "spec.tags",
            format!("self.all(k, !k.startsWith('{RESTRICTED_TAG_PREFIX}'))"),
            "tag contains a restricted tag matching kubernetes.io/cluster/",
        ),
        rule(
            "spec.blockDeviceMappings",
            "self.filter(x, has(x.rootVolume) && x.rootVolume).size() <= 1",
            "must have only one blockDeviceMappings with rootVolume",
        ),
        rule(
            "spec.blockDeviceMappings[].ebs",
            "has(self.snapshotID) || has(self.volumeSize)",
            "snapshotID or volumeSize must be defined",
        ),
        rule(
            "spec.blockDeviceMappings[].ebs",
            "!has(self.volumeInitializationRate) || has(self.snapshotID)",
            "snapshotID must be set when volumeInitializationRate is set",
        ),
        set("spec.blockDeviceMappings[].ebs.volumeType", "enum", json!(EBS_VOLUME_TYPES)),
        set("spec.blockDeviceMappings[].ebs.volumeInitializationRate", "minimum", json!(100)),
        set("spec.blockDeviceMappings[].ebs.volumeInitializationRate", "maximum", json!(300)),
        set("spec.metadataOptions.httpEndpoint", "enum", json!(["enabled", "disabled"])),
        set("spec.metadataOptions.httpProtocolIPv6", "enum", json!(["enabled", "disabled"])),
        set("spec.metadataOptions.httpTokens", "enum", json!(["required", "optional"])),
        rule("spec.placementGroupSelector", "has(self.name) != has(self.id)", "expected exactly one of ['name', 'id']"),
        rule("spec.placementGroupSelector.name", "self != ''", "name cannot be empty"),
        set("spec.placementGroupSelector.id", "pattern", json!("^pg-[0-9a-z]+$")),
        set("spec.networkInterfaces[].networkCardIndex", "minimum", json!(0)),
        set("spec.networkInterfaces[].deviceIndex", "minimum", json!(0)),
        set("spec.cpuOptions.coreCount", "minimum", json!(1)),
        set("spec.cpuOptions.threadsPerCore", "minimum", json!(1)),
        set("spec.cpuOptions.amdSevSnp", "enum", json!(["enabled", "disabled"])),
        set(&format!("{kubelet}.maxPods"), "minimum", json!(0)),
        set(&format!("{kubelet}.podsPerCore"), "minimum", json!(0)),
        set(&format!("{kubelet}.imageGCHighThresholdPercent"), "minimum", json!(0)),
        set(&format!("{kubelet}.imageGCHighThresholdPercent"), "maximum", json!(100)),
        set(&format!("{kubelet}.imageGCLowThresholdPercent"), "minimum", json!(0)),
        set(&format!("{kubelet}.imageGCLowThresholdPercent"), "maximum", json!(100)),
        rule(
            kubelet,
            "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ? self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent : true",
            "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        ),
        rule(
            kubelet,
            "has(self.evictionSoft) ? self.evictionSoft.all(e, has(self.evictionSoftGracePeriod) && e in self.evictionSoftGracePeriod) : true",
            "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        ),
        rule(
            kubelet,
            "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, has(self.evictionSoft) && e in self.evictionSoft) : true",
            "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
        ),
    ];
    for key in RESTRICTED_TAG_KEYS {
        out.push(rule(
            "spec.tags",
            format!("self.all(k, k != '{key}')"),
            format!("tag contains a restricted tag matching {key}"),
        ));
    }
    for field in ["evictionHard", "evictionSoft", "evictionSoftGracePeriod"] {
        out.push(rule(
            &format!("{kubelet}.{field}"),
            format!("self.all(x, x in {})", cel_list(EVICTION_SIGNALS)),
            format!("valid keys for {field} are {}", quoted_list(EVICTION_SIGNALS)),
        ));
    }
    for field in ["evictionHard", "evictionSoft"] {
        out.push(set(&format!("{kubelet}.{field}{{}}"), "pattern", json!(EVICTION_THRESHOLD)));
    }
    for field in ["kubeReserved", "systemReserved"] {
        let at = format!("{kubelet}.{field}");
        out.push(rule(
            &at,
            format!("self.all(x, x in {})", cel_list(RESERVED_RESOURCES)),
            format!("valid keys for {field} are {}", quoted_list(RESERVED_RESOURCES)),
        ));
        out.push(rule(
            &at,
            "self.all(x, !string(self[x]).startsWith('-'))",
            format!("{field} value cannot be a negative resource quantity"),
        ));
    }
    for terms in [subnets, groups, reservations, amis] {
        out.extend(selector_tags(&format!("{terms}[].tags")));
    }
    out
}

/// CapacityBuffer: upstream's two rules on the spec, and kerf's on `percentage`.
fn capacity_buffer() -> Vec<Addition> {
    vec![
        rule(
            "spec",
            "!(has(self.podTemplateRef) && has(self.scalableRef))",
            "set either podTemplateRef or scalableRef, not both (exactly one names the shape of the buffer's pods)",
        ),
        rule(
            "spec",
            "has(self.podTemplateRef) || has(self.scalableRef)",
            "one of podTemplateRef or scalableRef is required (it names the shape of the buffer's pods)",
        ),
        rule(
            "spec",
            "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
            "a buffer with podTemplateRef needs replicas or limits (nothing else says how many pods' room to keep)",
        ),
        rule(
            "spec",
            "!has(self.percentage) || has(self.scalableRef)",
            "percentage needs scalableRef (it is a percentage of the referenced workload's replicas)",
        ),
    ]
}

/// NodeOverlay: Karpenter's rules (requirements as a NodeClaim's, without `minValues`; NotIn
/// needs values; the price patterns; capacity only extended resources; not both prices).
fn node_overlay() -> Vec<Addition> {
    let at = "spec.requirements";
    let mut out: Vec<Addition> = requirements(at, Keys::NodeClaim)
        .into_iter()
        .filter(|a| !matches!(&a.what, What::Rule { rule, .. } if rule.contains("minValues")))
        .collect();
    out.extend([
        rule(
            at,
            "self.all(x, x.operator == 'NotIn' ? (has(x.values) && x.values.size() != 0) : true)",
            "requirements with operator 'NotIn' must have a value defined",
        ),
        set("spec.price", "pattern", json!(r"^\d+(\.\d+)?$")),
        set(
            "spec.priceAdjustment",
            "pattern",
            json!(r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"),
        ),
        rule(
            "spec.capacity",
            format!("self.all(x, !(x in {}))", cel_list(crate::nodeoverlay::STANDARD_RESOURCES)),
            "invalid resource restricted",
        ),
        rule("spec", "!has(self.price) || !has(self.priceAdjustment)", "cannot set both 'price' and 'priceAdjustment'"),
    ]);
    out
}

/// CapacityQuota: upstream's rules on `spec.limits.resources` (1 to 20 resources, names of at
/// most 63 characters, non-negative whole quantities; a whole quantity written with a fraction
/// and a suffix, `1.5k`, passes and is left to kerf), and what plain schema keywords say of a
/// label selector, which upstream leaves to its quota controller. A CEL rule over the
/// selector's unbounded lists and maps would count against the API server's cost budget: which
/// operators need values, and matchLabels keys, stay with kerf.
fn capacity_quota() -> Vec<Addition> {
    let at = "spec.limits.resources";
    // A label key, and a whole quantity without backslashes (it is a CEL string literal).
    let key = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
    let whole = "^[0-9]+([eE][0-9]+)?$|^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE])$";
    let expr = "spec.selector.matchExpressions[]";
    vec![
        rule(at, "self.size() != 0", "must name at least one resource"),
        set(at, "maxProperties", json!(crate::capacityquota::MAX_LIMITS)),
        rule(at, "self.all(key, size(key) <= 63)", "Resource names must be 63 characters or less."),
        rule(
            at,
            format!("self.all(key, string(self[key]).matches('{whole}'))"),
            "All resource quantities must be non-negative integers.",
        ),
        set(&format!("{expr}.operator"), "enum", json!(["In", "NotIn", "Exists", "DoesNotExist"])),
        set(&format!("{expr}.key"), "pattern", json!(key)),
        set(&format!("{expr}.values[]"), "maxLength", json!(63)),
        set(&format!("{expr}.values[]"), "pattern", json!(LABEL_VALUE)),
        set("spec.selector.matchLabels{}", "maxLength", json!(63)),
        set("spec.selector.matchLabels{}", "pattern", json!(LABEL_VALUE)),
    ]
}

/// The additions of one kind (`NodePool`, `NodeClaim`, `EC2NodeClass`, `CapacityBuffer`,
/// `NodeOverlay`, `CapacityQuota`).
pub fn additions(kind: &str) -> Vec<Addition> {
    match kind {
        crate::capacityquota::KIND => capacity_quota(),
        crate::nodeoverlay::KIND => node_overlay(),
        crate::capacitybuffer::KIND => capacity_buffer(),
        crate::nodepool::KIND => node_pool(),
        crate::nodeclaim::KIND => node_claim(),
        crate::ec2nodeclass::KIND => ec2_node_class(),
        _ => Vec::new(),
    }
}

/// The schema node at `path` (see the module doc), if the schema has that field.
pub fn node_mut<'a>(schema: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut node = schema;
    for segment in path.split('.') {
        let (name, suffix) = match segment.find(['[', '{']) {
            Some(i) => segment.split_at(i),
            None => (segment, ""),
        };
        node = node.get_mut("properties")?.get_mut(name)?;
        let mut rest = suffix;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("[]") {
                node = node.get_mut("items")?;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("{}") {
                node = node.get_mut("additionalProperties")?;
                rest = r;
            } else {
                return None;
            }
        }
    }
    Some(node)
}

/// Adds `kind`'s rules and bounds to its schema. Returns the paths that did not resolve (a
/// field renamed in the types without its rule following; the tests keep this empty).
pub fn apply(kind: &str, schema: &mut Value) -> Vec<String> {
    let mut missing = Vec::new();
    for Addition { at, what } in additions(kind) {
        let Some(node) = node_mut(schema, &at).and_then(Value::as_object_mut) else {
            missing.push(at);
            continue;
        };
        match what {
            What::Set(key, value) => {
                node.insert(key.to_string(), value);
            }
            What::Require(field) => {
                let required = node.entry("required").or_insert_with(|| json!([]));
                if let Some(list) = required.as_array_mut()
                    && !list.iter().any(|f| f == field)
                {
                    list.push(json!(field));
                }
            }
            What::Remove(keyword) => {
                node.remove(keyword);
            }
            What::Rule { rule, message } => {
                let rules = node.entry("x-kubernetes-validations").or_insert_with(|| json!([]));
                if let Some(list) = rules.as_array_mut() {
                    list.push(json!({"rule": rule, "message": message}));
                }
            }
        }
    }
    missing
}
