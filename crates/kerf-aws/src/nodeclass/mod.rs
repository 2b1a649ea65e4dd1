//! EC2NodeClass reconciliation: resolve subnets, security groups, AMIs and the instance
//! profile, check that the controller may launch with them, and report it all in the node class's
//! `status` with Karpenter's conditions (`SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`,
//! `InstanceProfileReady`, `ValidationSucceeded`, with the `ReservedCapacity` gate
//! `CapacityReservationsReady`, and `Ready` over them: [`kerf_cloud::nodeclass_ready`]), and the
//! capacity reservations its `capacityReservationSelectorTerms` select (see
//! [`crate::reservations`]).

pub mod amis;
pub mod instance_profile;
pub mod network;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::ec2nodeclass::{AmiFamily, EC2NodeClassStatus, SecurityGroupStatus};
use kerf_api::shared::set_condition;
use kerf_api::{Condition, EC2NodeClass};
use kerf_cloud::Timestamp;

use crate::AwsClients;
use crate::error::AwsError;
use crate::settings::AwsSettings;
use amis::{Ami, AmiError};
use network::Subnet;

// Karpenter's condition types, defined once with the EC2NodeClass type.
pub use kerf_api::ec2nodeclass::{
    CONDITION_AMIS_READY, CONDITION_CAPACITY_RESERVATIONS_READY, CONDITION_INSTANCE_PROFILE_READY, CONDITION_READY,
    CONDITION_SECURITY_GROUPS_READY, CONDITION_SUBNETS_READY, CONDITION_VALIDATION_SUCCEEDED,
    READY_DEPENDS_ON as DEPENDENT_CONDITIONS,
};

/// A node class with everything it resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedNodeClass {
    /// The node class as reconciled, its `status` filled in.
    pub node_class: EC2NodeClass,
    /// Most free addresses first.
    pub subnets: Vec<Subnet>,
    pub security_groups: Vec<SecurityGroupStatus>,
    /// Newest first.
    pub amis: Vec<Ami>,
    pub instance_profile: Option<String>,
    /// The active capacity reservations it selected, as EC2 described them during this
    /// reconciliation (empty when read back from a status: the room each has is not there).
    pub reservations: Vec<crate::reservations::Reservation>,
    pub family: AmiFamily,
    /// AWS calls that failed during this reconciliation (their parts read `Unknown`).
    pub errors: Vec<AwsError>,
}

impl ResolvedNodeClass {
    /// What a node class's `status` (as written by an earlier reconciliation, possibly by
    /// another process) says it resolved to. Subnets keep their order; their free-address
    /// counts are unknown.
    pub fn from_status(node_class: &EC2NodeClass) -> Option<ResolvedNodeClass> {
        let status = node_class.status.as_ref()?;
        Some(ResolvedNodeClass {
            node_class: node_class.clone(),
            subnets: status
                .subnets
                .iter()
                .map(|s| Subnet {
                    id: s.id.clone(),
                    zone: s.zone.clone(),
                    zone_id: s.zone_id.clone(),
                    available_ips: 0,
                })
                .collect(),
            security_groups: status.security_groups.clone(),
            amis: status
                .amis
                .iter()
                .map(|a| Ami {
                    id: a.id.clone(),
                    name: a.name.clone(),
                    creation_date: String::new(),
                    deprecated: a.deprecated.unwrap_or(false),
                    requirements: a.requirements.clone(),
                })
                .collect(),
            instance_profile: status.instance_profile.clone(),
            reservations: Vec::new(),
            family: amis::family(&node_class.spec),
            errors: Vec::new(),
        })
    }

    pub fn status(&self) -> &EC2NodeClassStatus {
        // Always set by `reconcile`.
        static EMPTY: std::sync::OnceLock<EC2NodeClassStatus> = std::sync::OnceLock::new();
        self.node_class.status.as_ref().unwrap_or_else(|| EMPTY.get_or_init(EC2NodeClassStatus::default))
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        kerf_api::shared::find_condition(&self.status().conditions, type_)
    }

    /// `Ready` is `True`: instances may be launched with it.
    pub fn is_ready(&self) -> bool {
        self.condition(CONDITION_READY).is_some_and(Condition::is_true)
    }

    /// Why it is not ready, from its `Ready` condition.
    pub fn not_ready_reason(&self) -> String {
        match self.condition(CONDITION_READY) {
            Some(c) => format!(
                "EC2NodeClass {} is not ready: {}: {}",
                self.node_class.name(),
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            ),
            None => format!("EC2NodeClass {} has not been reconciled", self.node_class.name()),
        }
    }
}

/// One condition's outcome before it is stamped with time and generation.
struct Outcome {
    status: &'static str,
    reason: String,
    message: String,
}

impl Outcome {
    fn ok(type_: &str) -> Self {
        Outcome { status: "True", reason: type_.to_string(), message: String::new() }
    }
    fn fail(reason: &str, message: impl Into<String>) -> Self {
        Outcome { status: "False", reason: reason.to_string(), message: message.into() }
    }
    fn unknown(reason: &str, message: impl Into<String>) -> Self {
        Outcome { status: "Unknown", reason: reason.to_string(), message: message.into() }
    }
}

/// Resolves everything the node class selects and returns it with its new status. Failed AWS
/// calls do not abort: their part reads `Unknown` (with the error as message) and they are
/// listed in `errors` so that the caller retries. Capacity reservations are selected only with
/// `reserved_capacity` (Karpenter's `ReservedCapacity` gate); without it the status lists none.
pub async fn reconcile(
    clients: &AwsClients,
    settings: &AwsSettings,
    node_class: &EC2NodeClass,
    now: Timestamp,
    reserved_capacity: bool,
) -> ResolvedNodeClass {
    let spec = &node_class.spec;
    let mut errors = Vec::new();
    let mut outcomes: Vec<(&str, Outcome)> = Vec::new();

    let subnets = match network::subnets(clients, &spec.subnet_selector_terms).await {
        Ok(s) if s.is_empty() => {
            outcomes.push((
                CONDITION_SUBNETS_READY,
                Outcome::fail("SubnetsNotFound", "SubnetSelector did not match any Subnets"),
            ));
            s
        }
        Ok(s) => {
            outcomes.push((CONDITION_SUBNETS_READY, Outcome::ok(CONDITION_SUBNETS_READY)));
            s
        }
        Err(e) => {
            outcomes.push((CONDITION_SUBNETS_READY, Outcome::unknown("SubnetsResolutionFailed", e.to_string())));
            errors.push(e);
            Vec::new()
        }
    };

    let security_groups = match network::security_groups(clients, &spec.security_group_selector_terms).await {
        Ok(g) if g.is_empty() => {
            outcomes.push((
                CONDITION_SECURITY_GROUPS_READY,
                Outcome::fail("SecurityGroupsNotFound", "SecurityGroupSelector did not match any SecurityGroups"),
            ));
            g
        }
        Ok(g) => {
            outcomes.push((CONDITION_SECURITY_GROUPS_READY, Outcome::ok(CONDITION_SECURITY_GROUPS_READY)));
            g
        }
        Err(e) => {
            outcomes.push((
                CONDITION_SECURITY_GROUPS_READY,
                Outcome::unknown("SecurityGroupsResolutionFailed", e.to_string()),
            ));
            errors.push(e);
            Vec::new()
        }
    };

    let now_text = now.to_string();
    let amis = match amis::amis(clients, &spec.ami_selector_terms, &settings.kubernetes_version, &now_text).await {
        Ok(a) if a.is_empty() => {
            outcomes.push((CONDITION_AMIS_READY, Outcome::fail("AMINotFound", "AMISelector did not match any AMIs")));
            a
        }
        Ok(a) => {
            outcomes.push((CONDITION_AMIS_READY, Outcome::ok(CONDITION_AMIS_READY)));
            a
        }
        Err(AmiError::Invalid(message)) => {
            outcomes.push((CONDITION_AMIS_READY, Outcome::fail("AMISelectorInvalid", message)));
            Vec::new()
        }
        Err(AmiError::Aws(e)) => {
            outcomes.push((CONDITION_AMIS_READY, Outcome::unknown("AMIsResolutionFailed", e.to_string())));
            errors.push(e);
            Vec::new()
        }
    };

    let instance_profile = match instance_profile::ensure(clients, settings, node_class).await {
        Ok(name) => {
            outcomes.push((CONDITION_INSTANCE_PROFILE_READY, Outcome::ok(CONDITION_INSTANCE_PROFILE_READY)));
            Some(name)
        }
        Err(e) if e.is_not_found() || e.code_is(instance_profile::INVALID_NODE_CLASS) => {
            let message = match (&spec.instance_profile, &spec.role) {
                (Some(p), _) => format!("instance profile {p:?} not found: {e}"),
                (None, Some(r)) => format!("cannot set up the instance profile for role {r:?}: {e}"),
                (None, None) => e.message.clone(),
            };
            outcomes.push((CONDITION_INSTANCE_PROFILE_READY, Outcome::fail("InstanceProfileNotFound", message)));
            None
        }
        Err(e) => {
            outcomes.push((
                CONDITION_INSTANCE_PROFILE_READY,
                Outcome::unknown("InstanceProfileResolutionFailed", e.to_string()),
            ));
            errors.push(e);
            None
        }
    };

    // `CapacityReservationsReady` (with the gate) counts towards `Ready`: a read that fails
    // keeps the reservations listed before and a True condition; a class never read is not
    // Ready (kerf_cloud::nodeclass_ready).
    let previous_reservations = node_class.status.as_ref().map(|s| s.capacity_reservations.clone()).unwrap_or_default();
    let terms: &[_] = if reserved_capacity { &spec.capacity_reservation_selector_terms } else { &[] };
    let (reservations, reservation_status, reservations_read) = match crate::reservations::select(clients, terms).await
    {
        Ok(found) => {
            let list: Vec<crate::reservations::Reservation> = found.into_values().collect();
            let status = list.iter().map(|r| r.status(now)).collect();
            (list, status, Ok(()))
        }
        Err(e) => {
            let read = Err(e.to_string());
            errors.push(e);
            (Vec::new(), previous_reservations, read)
        }
    };

    let validation = validate(
        clients,
        settings,
        node_class,
        &outcomes,
        &subnets,
        &security_groups,
        &amis,
        instance_profile.as_deref(),
    )
    .await;
    let validation = match validation {
        Ok(o) => o,
        Err(e) => {
            let o = Outcome::unknown("ValidationFailed", e.to_string());
            errors.push(e);
            o
        }
    };
    outcomes.push((CONDITION_VALIDATION_SUCCEEDED, validation));

    let previous = node_class.status.clone().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    let generation = node_class.metadata.generation;
    for (type_, o) in outcomes {
        set_condition(
            &mut conditions,
            Condition {
                type_: type_.to_string(),
                status: o.status.to_string(),
                reason: Some(o.reason),
                message: (!o.message.is_empty()).then_some(o.message),
                last_transition_time: Some(Time(now)),
                observed_generation: generation,
            },
        );
    }
    if reserved_capacity {
        kerf_cloud::nodeclass_ready::set_reservations_read(&mut conditions, reservations_read, now, generation);
    }
    kerf_cloud::nodeclass_ready::set_ready(&mut conditions, reserved_capacity, now, generation);

    let status = EC2NodeClassStatus {
        subnets: subnets.iter().map(Subnet::status).collect(),
        security_groups: security_groups.clone(),
        amis: amis.iter().map(Ami::status).collect(),
        instance_profile: instance_profile.clone(),
        capacity_reservations: reservation_status,
        conditions,
    };
    let mut resolved_class = node_class.clone();
    resolved_class.status = Some(status);
    ResolvedNodeClass {
        node_class: resolved_class,
        subnets,
        security_groups,
        amis,
        instance_profile,
        reservations,
        family: amis::family(spec),
        errors,
    }
}

/// `ValidationSucceeded`: the other parts resolved, the node class's tags do not collide with
/// kerf's, and EC2 would let the controller run an instance with them (a dry-run RunInstances).
#[allow(clippy::too_many_arguments)]
async fn validate(
    clients: &AwsClients,
    settings: &AwsSettings,
    node_class: &EC2NodeClass,
    outcomes: &[(&str, Outcome)],
    subnets: &[Subnet],
    security_groups: &[SecurityGroupStatus],
    amis: &[Ami],
    instance_profile: Option<&str>,
) -> Result<Outcome, AwsError> {
    const AWAITING: &str = "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution";
    if outcomes.iter().any(|(_, o)| o.status == "False") {
        return Ok(Outcome::fail("DependenciesNotReady", AWAITING));
    }
    if outcomes.iter().any(|(_, o)| o.status == "Unknown") {
        return Ok(Outcome::unknown("DependenciesNotReady", AWAITING));
    }
    for key in node_class.spec.tags.keys() {
        if let Some(problem) = crate::tags::restricted_tag_problem(&settings.cluster_name, key) {
            return Ok(Outcome::fail("TagValidationFailed", problem));
        }
    }
    let (Some(subnet), Some(ami), Some(profile)) = (subnets.first(), amis.first(), instance_profile) else {
        return Ok(Outcome::unknown("DependenciesNotReady", AWAITING));
    };
    let arch = ami.requirements.iter().find(|r| r.key == kerf_api::labels::ARCH).and_then(|r| r.values.first());
    let instance_type = if arch.is_some_and(|a| a == "arm64") { "m6g.large" } else { "m5.large" };
    let result = clients
        .ec2
        .run_instances()
        .dry_run(true)
        .image_id(&ami.id)
        .instance_type(aws_sdk_ec2::types::InstanceType::from(instance_type))
        .subnet_id(&subnet.id)
        .set_security_group_ids(Some(security_groups.iter().map(|g| g.id.clone()).collect()))
        .iam_instance_profile(aws_sdk_ec2::types::IamInstanceProfileSpecification::builder().name(profile).build())
        .min_count(1)
        .max_count(1)
        .send()
        .await;
    match result {
        Ok(_) => Ok(Outcome::ok(CONDITION_VALIDATION_SUCCEEDED)),
        Err(e) => {
            let e = AwsError::from_sdk("ec2:RunInstances", e);
            if e.is_dry_run_success() {
                Ok(Outcome::ok(CONDITION_VALIDATION_SUCCEEDED))
            } else if e.is_unauthorized() {
                Ok(Outcome::fail("RunInstancesAuthCheckFailed", "Controller isn't authorized to call ec2:RunInstances"))
            } else {
                Err(e)
            }
        }
    }
}
