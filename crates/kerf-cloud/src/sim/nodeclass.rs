//! Node class resolution in the simulated account: what an EC2NodeClass's selector terms find,
//! and its status with Karpenter's conditions.
//!
//! The simulated account has one subnet per zone of the cloud (`subnet-sim<zone>`, e.g.
//! `subnet-simuswest2a`), one security group (`sg-simcluster`, named `kerf-sim`), and for each AMI
//! alias family an image per architecture it supports (`ami-simal2023amd64`). Its subnets,
//! security groups and images carry every tag, so a tag selector written for a real cluster
//! (`karpenter.sh/discovery: my-cluster`) finds them. An `id` term finds the account's own
//! resource of that id, and any other well-formed id (`subnet-`, `sg-`, `ami-` and 8 or 17 hex
//! digits) is assumed to exist, so that manifests pinning real ids run as they are: an assumed
//! subnet is placed in the cloud's zones in turn, an assumed image fits every architecture, and
//! the condition's message names what was assumed. An AMI `name` term likewise finds an assumed
//! image of that name. A `role` gets an instance profile; a named `instanceProfile` exists.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::Condition;
use kerf_api::ec2nodeclass::{
    AmiStatus, CONDITION_AMIS_READY, CONDITION_INSTANCE_PROFILE_READY, CONDITION_READY,
    CONDITION_SECURITY_GROUPS_READY, CONDITION_SUBNETS_READY, CONDITION_VALIDATION_SUCCEEDED, EC2NodeClass,
    EC2NodeClassStatus, READY_DEPENDS_ON, SecurityGroupStatus, SubnetStatus,
};
use kerf_api::shared::{root_condition, set_condition};
use kerf_api::{NodeSelectorRequirementWithMinValues, Operator, labels};

use crate::clock::Timestamp;

/// The security group of the simulated account.
pub const SECURITY_GROUP_ID: &str = "sg-simcluster";
pub const SECURITY_GROUP_NAME: &str = "kerf-sim";

/// `subnet-sim` and the zone's letters and digits: `us-west-2a` → `subnet-simuswest2a`.
pub fn subnet_id(zone: &str) -> String {
    let id: String = zone.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    format!("subnet-sim{id}")
}

/// The architectures the images of an alias family are built for.
fn family_arches(family: &str) -> Option<&'static [&'static str]> {
    match family {
        "al2" | "al2023" | "bottlerocket" => Some(&["amd64", "arm64"]),
        "windows2019" | "windows2022" | "windows2025" => Some(&["amd64"]),
        _ => None,
    }
}

/// One image of the simulated account. A Windows image also requires its OS and build, as
/// Karpenter records them in the class's status.
fn image(family: &str, arch: &str) -> AmiStatus {
    let req = |key: &str, value: &str| NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: Operator::In,
        values: vec![value.to_string()],
        min_values: None,
    };
    let mut requirements = vec![req(labels::ARCH, arch)];
    if let Some(build) = crate::aws::windows::alias_build(family) {
        requirements.push(req(labels::OS, "windows"));
        requirements.push(req(labels::WINDOWS_BUILD, build));
    }
    AmiStatus {
        id: format!("ami-sim{family}{arch}"),
        name: Some(format!("kerf-sim-{family}-{arch}")),
        requirements,
        deprecated: None,
    }
}

/// Every image the account has: each alias family's, and `custom` ones for tag and name terms.
fn all_images() -> Vec<AmiStatus> {
    let mut out = Vec::new();
    for family in ["al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025", "custom"] {
        for arch in family_arches(family).unwrap_or(&["amd64", "arm64"]) {
            out.push(image(family, arch));
        }
    }
    out
}

/// Whether `id` is a well-formed AWS id with `prefix` (`subnet`, `sg`, `ami`): the prefix, a
/// dash and 8 or 17 lowercase hex digits.
fn well_formed(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')).is_some_and(|hex| {
        matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// An image the account is assumed to have (an `id` or `name` term of a real cluster's class):
/// it fits every architecture.
fn assumed_image(id: String, name: Option<String>) -> AmiStatus {
    AmiStatus { id, name, requirements: Vec::new(), deprecated: None }
}

/// One condition's outcome, before it is stamped.
struct Outcome {
    type_: &'static str,
    ok: bool,
    reason: &'static str,
    message: String,
}

impl Outcome {
    fn new(type_: &'static str, ok: bool, reason: &'static str, message: &str) -> Self {
        Outcome {
            type_,
            ok,
            reason: if ok { type_ } else { reason },
            message: if ok { String::new() } else { message.to_string() },
        }
    }

    /// A True outcome says where its answer came from (`found`, unless empty); a False one
    /// says why, when `missing` does.
    fn noting(mut self, found: String, missing: Option<String>) -> Self {
        match (self.ok, missing) {
            (true, _) if !found.is_empty() => self.message = found,
            (false, Some(why)) => self.message = why,
            _ => {}
        }
        self
    }
}

/// Resolves `node_class` against the simulated account whose subnets are in `zones`; the status
/// keeps the node class's other conditions and stamps changed ones with `now`.
pub fn resolve(node_class: &EC2NodeClass, zones: &[String], now: Timestamp) -> EC2NodeClassStatus {
    let spec = &node_class.spec;
    let mut subnets: Vec<SubnetStatus> = zones
        .iter()
        .map(|z| SubnetStatus { id: subnet_id(z), zone: z.clone(), zone_id: None })
        .filter(|s| spec.subnet_selector_terms.iter().any(|t| t.id.as_ref().is_none_or(|id| *id == s.id)))
        .collect();
    let mut assumed_subnets = Vec::new();
    for id in spec.subnet_selector_terms.iter().filter_map(|t| t.id.as_deref()) {
        if well_formed(id, "subnet") && !subnets.iter().any(|s| s.id == id) && !zones.is_empty() {
            let zone = zones[assumed_subnets.len() % zones.len()].clone();
            assumed_subnets.push(format!("subnet {id} in {zone}"));
            subnets.push(SubnetStatus { id: id.to_string(), zone, zone_id: None });
        }
    }
    let group = SecurityGroupStatus { id: SECURITY_GROUP_ID.to_string(), name: Some(SECURITY_GROUP_NAME.to_string()) };
    let mut groups: Vec<SecurityGroupStatus> = spec
        .security_group_selector_terms
        .iter()
        .any(|t| {
            t.id.as_ref().is_none_or(|id| id == SECURITY_GROUP_ID)
                && t.name.as_ref().is_none_or(|n| n == SECURITY_GROUP_NAME)
        })
        .then_some(group)
        .into_iter()
        .collect();
    let mut assumed_groups = Vec::new();
    for t in &spec.security_group_selector_terms {
        let (id, name) = (t.id.as_deref(), t.name.as_deref());
        let known = id == Some(SECURITY_GROUP_ID) || (id.is_none() && name.is_none_or(|n| n == SECURITY_GROUP_NAME));
        if known {
            continue;
        }
        let status = match (id, name) {
            (Some(id), _) if well_formed(id, "sg") => SecurityGroupStatus { id: id.to_string(), name: None },
            (None, Some(name)) => SecurityGroupStatus { id: format!("sg-sim-{name}"), name: Some(name.to_string()) },
            _ => continue,
        };
        if !groups.iter().any(|g| g.id == status.id) {
            assumed_groups.push(format!("security group {}", id.or(name).unwrap_or_default()));
            groups.push(status);
        }
    }
    let images = all_images();
    let mut amis: Vec<AmiStatus> = Vec::new();
    let mut assumed_amis = Vec::new();
    for term in &spec.ami_selector_terms {
        let found: Vec<AmiStatus> = match (&term.alias, &term.id) {
            (Some(alias), _) => {
                let family = alias.split('@').next().unwrap_or_default().to_ascii_lowercase();
                let arches = family_arches(&family).unwrap_or(&[]);
                arches.iter().map(|a| image(&family, a)).collect()
            }
            (None, Some(id)) => {
                let own: Vec<AmiStatus> = images.iter().filter(|i| i.id == *id).cloned().collect();
                if own.is_empty() && well_formed(id, "ami") {
                    assumed_amis.push(format!("image {id}"));
                    vec![assumed_image(id.clone(), None)]
                } else {
                    own
                }
            }
            (None, None) => match &term.name {
                Some(name) => {
                    let own: Vec<AmiStatus> =
                        images.iter().filter(|i| i.name.as_ref() == Some(name)).cloned().collect();
                    if own.is_empty() {
                        assumed_amis.push(format!("image named {name}"));
                        let id: String = name.chars().filter(char::is_ascii_alphanumeric).take(24).collect();
                        vec![assumed_image(format!("ami-simnamed{}", id.to_ascii_lowercase()), Some(name.clone()))]
                    } else {
                        own
                    }
                }
                // Tags, an owner or an SSM parameter: the account's custom images.
                None => vec![image("custom", "amd64"), image("custom", "arm64")],
            },
        };
        for a in found {
            if !amis.iter().any(|x| x.id == a.id) {
                amis.push(a);
            }
        }
    }
    let found = Found {
        subnets,
        groups,
        amis,
        instance_profile: instance_profile(node_class),
        notes: [assumed_subnets, assumed_groups, assumed_amis].map(|what| assumed(&what)),
        no_subnets: None,
    };
    finish(node_class, found, now)
}

/// The instance profile a class gets in the simulated account: the one it names, or one made
/// for its role.
fn instance_profile(node_class: &EC2NodeClass) -> Option<String> {
    match (&node_class.spec.instance_profile, &node_class.spec.role) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(role)) => Some(format!("kerf-sim_{role}")),
        (None, None) => None,
    }
}

/// What the simulated account assumed, as a True condition's message (empty: nothing).
fn assumed(what: &[String]) -> String {
    if what.is_empty() { String::new() } else { format!("assumed in the simulated account: {}", what.join(", ")) }
}

/// The status a real cluster recorded for `node_class` (a `kerf snapshot` keeps it), taken as
/// the account's answer: its subnets in the cloud's `zones`, its security groups and images, its
/// instance profile (or the class's own). The caller takes it only while the class's spec is the
/// one it was recorded for; conditions are set as [`resolve`] sets them, each True one saying
/// where its answer came from.
pub fn resolve_recorded(
    node_class: &EC2NodeClass,
    recorded: &EC2NodeClassStatus,
    zones: &[String],
    now: Timestamp,
) -> EC2NodeClassStatus {
    let subnets: Vec<SubnetStatus> = recorded.subnets.iter().filter(|s| zones.contains(&s.zone)).cloned().collect();
    let note = "as the cluster's status recorded it".to_string();
    let no_subnets = (!recorded.subnets.is_empty()).then(|| {
        let theirs: Vec<&str> = recorded.subnets.iter().map(|s| s.zone.as_str()).collect();
        format!(
            "the recorded subnets are in {}, none a zone of the simulated cloud ({})",
            theirs.join(", "),
            zones.join(", ")
        )
    });
    let found = Found {
        subnets,
        groups: recorded.security_groups.clone(),
        amis: recorded.amis.clone(),
        instance_profile: recorded.instance_profile.clone().or_else(|| instance_profile(node_class)),
        notes: [note.clone(), note.clone(), note],
        no_subnets,
    };
    finish(node_class, found, now)
}

/// What a class's selector terms found, with a note per selector (subnets, security groups,
/// images) for the condition's message.
struct Found {
    subnets: Vec<SubnetStatus>,
    groups: Vec<SecurityGroupStatus>,
    amis: Vec<AmiStatus>,
    instance_profile: Option<String>,
    notes: [String; 3],
    /// Why no subnet was found, when more can be said than that the selector matched none.
    no_subnets: Option<String>,
}

/// The status for what was found: the lists, and Karpenter's conditions stamped with `now` where
/// they change.
fn finish(node_class: &EC2NodeClass, found: Found, now: Timestamp) -> EC2NodeClassStatus {
    let Found { subnets, groups, amis, instance_profile, notes: [subnet_note, group_note, ami_note], no_subnets } =
        found;
    let outcomes = [
        Outcome::new(
            CONDITION_SUBNETS_READY,
            !subnets.is_empty(),
            "SubnetsNotFound",
            "SubnetSelector did not match any Subnets",
        )
        .noting(subnet_note, no_subnets),
        Outcome::new(
            CONDITION_SECURITY_GROUPS_READY,
            !groups.is_empty(),
            "SecurityGroupsNotFound",
            "SecurityGroupSelector did not match any SecurityGroups",
        )
        .noting(group_note, None),
        Outcome::new(CONDITION_AMIS_READY, !amis.is_empty(), "AMINotFound", "AMISelector did not match any AMIs")
            .noting(ami_note, None),
        Outcome::new(
            CONDITION_INSTANCE_PROFILE_READY,
            instance_profile.is_some(),
            "InstanceProfileNotFound",
            "neither role nor instanceProfile is set",
        ),
    ];
    let dependencies_ok = outcomes.iter().all(|o| o.ok);
    let validation = Outcome::new(
        CONDITION_VALIDATION_SUCCEEDED,
        dependencies_ok,
        "DependenciesNotReady",
        "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution",
    );

    let previous = node_class.status.clone().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    let generation = node_class.metadata.generation;
    let stamp = |mut c: Condition| {
        c.last_transition_time = Some(Time(now));
        c.observed_generation = generation;
        c
    };
    for o in outcomes.into_iter().chain([validation]) {
        let c = Condition {
            type_: o.type_.to_string(),
            status: if o.ok { "True" } else { "False" }.to_string(),
            reason: Some(o.reason.to_string()),
            message: (!o.message.is_empty()).then_some(o.message),
            last_transition_time: None,
            observed_generation: None,
        };
        set_condition(&mut conditions, stamp(c));
    }
    let ready = root_condition(&conditions, CONDITION_READY, &READY_DEPENDS_ON);
    set_condition(&mut conditions, stamp(ready));
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    EC2NodeClassStatus {
        subnets,
        security_groups: groups,
        amis,
        instance_profile,
        capacity_reservations: previous.capacity_reservations,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(subnets: &str, groups: &str, amis: &str) -> EC2NodeClass {
        let yaml = format!(
            "metadata: {{name: c}}\nspec:\n  role: R\n  subnetSelectorTerms: {subnets}\n  \
             securityGroupSelectorTerms: {groups}\n  amiSelectorTerms: {amis}\n"
        );
        serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    fn zones() -> Vec<String> {
        vec!["us-west-2a".to_string(), "us-west-2b".to_string()]
    }

    fn condition<'a>(s: &'a EC2NodeClassStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no {t}"))
    }

    #[test]
    fn tag_terms_find_a_subnet_in_every_zone_and_the_class_is_ready() {
        let s = resolve(
            &class("[{tags: {karpenter.sh/discovery: demo}}]", "[{tags: {a: b}}]", "[{alias: al2023@latest}]"),
            &zones(),
            Timestamp::UNIX_EPOCH,
        );
        let ids: Vec<&str> = s.subnets.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, vec!["subnet-simuswest2a", "subnet-simuswest2b"]);
        assert_eq!(s.security_groups[0].id, SECURITY_GROUP_ID);
        let amis: Vec<&str> = s.amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(amis, vec!["ami-simal2023amd64", "ami-simal2023arm64"]);
        assert_eq!(s.instance_profile.as_deref(), Some("kerf-sim_R"));
        for t in READY_DEPENDS_ON.iter().chain([&CONDITION_READY]) {
            assert!(condition(&s, t).is_true(), "{t}: {:?}", condition(&s, t));
        }
    }

    #[test]
    fn an_unknown_subnet_id_makes_subnets_and_ready_false_with_karpenters_reason() {
        let s = resolve(
            &class("[{id: subnet-0abc}]", "[{tags: {a: b}}]", "[{alias: al2023@latest}]"),
            &zones(),
            Timestamp::UNIX_EPOCH,
        );
        assert!(s.subnets.is_empty());
        let ready = condition(&s, CONDITION_READY);
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("SubnetsNotFound"));
        assert_eq!(ready.message.as_deref(), Some("SubnetSelector did not match any Subnets"));
        assert_eq!(condition(&s, CONDITION_VALIDATION_SUCCEEDED).reason.as_deref(), Some("DependenciesNotReady"));
    }

    #[test]
    fn an_id_term_selects_only_that_subnet_and_a_windows_alias_only_amd64_images() {
        let s = resolve(
            &class("[{id: subnet-simuswest2b}]", "[{name: kerf-sim}]", "[{alias: windows2022@latest}]"),
            &zones(),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(s.subnets.len(), 1);
        assert_eq!(s.subnets[0].zone, "us-west-2b");
        let amis: Vec<&str> = s.amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(amis, vec!["ami-simwindows2022amd64"]);
        assert!(condition(&s, CONDITION_READY).is_true());
    }

    #[test]
    fn resolving_again_keeps_the_transition_times_of_unchanged_conditions() {
        let mut c = class("[{tags: {a: b}}]", "[{tags: {a: b}}]", "[{alias: al2@latest}]");
        let first = resolve(&c, &zones(), Timestamp::UNIX_EPOCH);
        c.status = Some(first.clone());
        let later = Timestamp::from_second(60).unwrap_or(Timestamp::UNIX_EPOCH);
        assert_eq!(resolve(&c, &zones(), later), first);
    }

    #[test]
    fn well_formed_ids_of_a_real_cluster_are_assumed_and_the_conditions_say_so() {
        let s = resolve(
            &class(
                "[{id: subnet-0123456789abcdef0}, {id: subnet-89abcdef}, {id: subnet-simuswest2a}]",
                "[{id: sg-0a1b2c3d4e5f60718}]",
                "[{id: ami-0123456789abcdef0}, {name: my-golden-image-2026}]",
            ),
            &zones(),
            Timestamp::UNIX_EPOCH,
        );
        let subnets: Vec<(&str, &str)> = s.subnets.iter().map(|s| (s.id.as_str(), s.zone.as_str())).collect();
        assert_eq!(
            subnets,
            vec![
                ("subnet-simuswest2a", "us-west-2a"),
                ("subnet-0123456789abcdef0", "us-west-2a"),
                ("subnet-89abcdef", "us-west-2b")
            ]
        );
        assert_eq!(s.security_groups.len(), 1);
        assert_eq!(s.security_groups[0].id, "sg-0a1b2c3d4e5f60718");
        let amis: Vec<&str> = s.amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(amis, vec!["ami-0123456789abcdef0", "ami-simnamedmygoldenimage2026"]);
        assert!(s.amis.iter().all(|a| a.requirements.is_empty()), "an assumed image fits every architecture");
        assert!(condition(&s, CONDITION_READY).is_true());
        let msg = condition(&s, CONDITION_SUBNETS_READY).message.clone().unwrap_or_default();
        assert!(msg.contains("subnet subnet-0123456789abcdef0 in us-west-2a"), "{msg}");
        let msg = condition(&s, CONDITION_AMIS_READY).message.clone().unwrap_or_default();
        assert!(
            msg.contains("image ami-0123456789abcdef0") && msg.contains("image named my-golden-image-2026"),
            "{msg}"
        );
        // A malformed id is not assumed.
        let s =
            resolve(&class("[{tags: {a: b}}]", "[{tags: {a: b}}]", "[{id: ami-xyz}]"), &zones(), Timestamp::UNIX_EPOCH);
        assert!(s.amis.is_empty());
    }

    fn recorded(zone: &str) -> EC2NodeClassStatus {
        serde_yaml_ng::from_str(&format!(
            "subnets: [{{id: subnet-0a1b2c3d, zone: {zone}}}]\nsecurityGroups: [{{id: sg-0a1b2c3d}}]\n\
             amis: [{{id: ami-0a1b2c3d, requirements: [{{key: kubernetes.io/arch, operator: In, values: [amd64]}}]}}]\n"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_recorded_status_is_the_answer_and_each_condition_says_so() {
        let c = class("[{tags: {a: b}}]", "[{tags: {a: b}}]", "[{alias: al2023@latest}]");
        let s = resolve_recorded(&c, &recorded("us-west-2b"), &zones(), Timestamp::UNIX_EPOCH);
        assert_eq!(s.subnets.len(), 1);
        assert_eq!(s.amis[0].id, "ami-0a1b2c3d");
        assert_eq!(s.instance_profile.as_deref(), Some("kerf-sim_R"), "none recorded: the role's");
        assert_eq!(condition(&s, CONDITION_READY).status, "True");
        let subnets = condition(&s, CONDITION_SUBNETS_READY);
        assert_eq!(subnets.message.as_deref(), Some("as the cluster's status recorded it"));
    }

    #[test]
    fn recorded_subnets_outside_the_clouds_zones_make_the_class_not_ready_naming_them() {
        let c = class("[{tags: {a: b}}]", "[{tags: {a: b}}]", "[{alias: al2023@latest}]");
        let s = resolve_recorded(&c, &recorded("eu-west-1a"), &zones(), Timestamp::UNIX_EPOCH);
        let subnets = condition(&s, CONDITION_SUBNETS_READY);
        assert_eq!(subnets.status, "False");
        assert_eq!(
            subnets.message.as_deref(),
            Some("the recorded subnets are in eu-west-1a, none a zone of the simulated cloud (us-west-2a, us-west-2b)")
        );
        assert_eq!(condition(&s, CONDITION_READY).status, "False");
    }
}
