//! The CustomResourceDefinitions as a cluster installs them (Karpenter's four and SIG
//! Autoscaling's CapacityBuffer): names, short names and
//! categories, scope, subresources, Karpenter's printer columns and the CEL rules of the checks
//! kerf makes (`validation`) that a CRD can express, over the generated `schema`.
//!
//! This is the one home of the printer columns: `kerf crds` writes them into the CRDs and
//! `kerf serve` prints its tables from them.

use serde_json::{Value, json};

use crate::schema;

/// Where a printer column's cell comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnSource {
    /// A field, as a JSON pointer (`/status/nodeName`).
    Field(&'static str),
    /// A label's value.
    Label(&'static str),
    /// The `status` of the condition of this type.
    Condition(&'static str),
    /// `metadata.creationTimestamp`, printed as an age.
    CreationTimestamp,
}

impl ColumnSource {
    /// The column's JSONPath as a CRD declares it (`.metadata.labels.karpenter\.sh/nodepool`,
    /// `.status.conditions[?(@.type=="Ready")].status`).
    pub fn json_path(&self) -> String {
        match self {
            ColumnSource::Field(pointer) => pointer.replace('/', "."),
            ColumnSource::Label(key) => format!(".metadata.labels.{}", key.replace('.', "\\.")),
            ColumnSource::Condition(type_) => format!(".status.conditions[?(@.type==\"{type_}\")].status"),
            ColumnSource::CreationTimestamp => ".metadata.creationTimestamp".to_string(),
        }
    }
}

/// One additional printer column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: &'static str,
    /// `string`, `integer` or `date`.
    pub type_: &'static str,
    /// 0: shown by default; 1: only with `-o wide`.
    pub priority: u8,
    pub source: ColumnSource,
}

const fn column(name: &'static str, type_: &'static str, priority: u8, source: ColumnSource) -> PrinterColumn {
    PrinterColumn { name, type_, priority, source }
}

/// The scale subresource's paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    pub spec_replicas_path: &'static str,
    pub status_replicas_path: &'static str,
}

/// Everything about one CRD but its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrdDefinition {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub scale: Option<Scale>,
    pub columns: &'static [PrinterColumn],
    /// Objects live in a namespace (`scope: Namespaced`).
    pub namespaced: bool,
}

use ColumnSource::{Condition, CreationTimestamp, Field, Label};

/// `nodepools.karpenter.sh`.
pub const NODE_POOL: CrdDefinition = CrdDefinition {
    group: crate::labels::GROUP,
    version: "v1",
    kind: crate::nodepool::KIND,
    list_kind: "NodePoolList",
    plural: "nodepools",
    singular: "nodepool",
    short_names: &[],
    categories: &["karpenter"],
    // A static NodePool (`replicas` set) scales like a workload.
    scale: Some(Scale { spec_replicas_path: ".spec.replicas", status_replicas_path: ".status.nodes" }),
    columns: &[
        column("NodeClass", "string", 0, Field("/spec/template/spec/nodeClassRef/name")),
        column("Nodes", "string", 0, Field("/status/nodes")),
        column("Ready", "string", 0, Condition("Ready")),
        column("Age", "date", 0, CreationTimestamp),
        column("Weight", "integer", 1, Field("/spec/weight")),
        column("CPU", "string", 1, Field("/status/resources/cpu")),
        column("Memory", "string", 1, Field("/status/resources/memory")),
    ],
    namespaced: false,
};

/// `nodeclaims.karpenter.sh`.
pub const NODE_CLAIM: CrdDefinition = CrdDefinition {
    group: crate::labels::GROUP,
    version: "v1",
    kind: crate::nodeclaim::KIND,
    list_kind: "NodeClaimList",
    plural: "nodeclaims",
    singular: "nodeclaim",
    short_names: &[],
    categories: &["karpenter"],
    scale: None,
    columns: &[
        column("Type", "string", 0, Label(crate::labels::INSTANCE_TYPE)),
        column("Capacity", "string", 0, Label(crate::labels::CAPACITY_TYPE)),
        column("Zone", "string", 0, Label(crate::labels::ZONE)),
        column("Node", "string", 0, Field("/status/nodeName")),
        column("Ready", "string", 0, Condition(crate::nodeclaim::CONDITION_READY)),
        column("Age", "date", 0, CreationTimestamp),
        column("ImageID", "string", 1, Field("/status/imageID")),
        column("ID", "string", 1, Field("/status/providerID")),
        column("NodePool", "string", 1, Label(crate::labels::NODE_POOL)),
        column("NodeClass", "string", 1, Field("/spec/nodeClassRef/name")),
        column("Drifted", "string", 1, Condition(crate::nodeclaim::CONDITION_DRIFTED)),
    ],
    namespaced: false,
};

/// `ec2nodeclasses.karpenter.k8s.aws`.
pub const EC2_NODE_CLASS: CrdDefinition = CrdDefinition {
    group: crate::ec2nodeclass::GROUP,
    version: "v1",
    kind: crate::ec2nodeclass::KIND,
    list_kind: "EC2NodeClassList",
    plural: "ec2nodeclasses",
    singular: "ec2nodeclass",
    short_names: &["ec2nc", "ec2ncs"],
    categories: &["karpenter"],
    scale: None,
    columns: &[
        column("Ready", "string", 0, Condition("Ready")),
        column("Age", "date", 0, CreationTimestamp),
        column("Role", "string", 1, Field("/spec/role")),
    ],
    namespaced: false,
};

/// `capacitybuffers.autoscaling.x-k8s.io` (namespaced; upstream's short name and columns, the
/// condition list shown as one column per condition).
pub const CAPACITY_BUFFER: CrdDefinition = CrdDefinition {
    group: crate::capacitybuffer::GROUP,
    version: "v1beta1",
    kind: crate::capacitybuffer::KIND,
    list_kind: "CapacityBufferList",
    plural: "capacitybuffers",
    singular: "capacitybuffer",
    short_names: &["cb"],
    categories: &[],
    scale: None,
    columns: &[
        column("Strategy", "string", 0, Field("/spec/provisioningStrategy")),
        column("PodTemplate", "string", 0, Field("/status/podTemplateRef/name")),
        column("Replicas", "integer", 0, Field("/status/replicas")),
        column("ReadyForProvisioning", "string", 0, Condition(crate::capacitybuffer::CONDITION_READY_FOR_PROVISIONING)),
        column("Provisioning", "string", 0, Condition(crate::capacitybuffer::CONDITION_PROVISIONING)),
        column("Age", "date", 0, CreationTimestamp),
    ],
    namespaced: true,
};

/// `nodeoverlays.karpenter.sh` (`karpenter.sh/v1alpha1`; Karpenter's short name and columns).
pub const NODE_OVERLAY: CrdDefinition = CrdDefinition {
    group: crate::nodeoverlay::GROUP,
    version: crate::nodeoverlay::VERSION,
    kind: crate::nodeoverlay::KIND,
    list_kind: "NodeOverlayList",
    plural: "nodeoverlays",
    singular: "nodeoverlay",
    short_names: &["overlays"],
    categories: &["karpenter"],
    scale: None,
    columns: &[
        column("Ready", "string", 0, Condition(crate::nodeoverlay::CONDITION_READY)),
        column("Age", "date", 0, CreationTimestamp),
        column("Weight", "integer", 1, Field("/spec/weight")),
    ],
    namespaced: false,
};

/// `provisioningrequests.autoscaling.x-k8s.io` (namespaced; upstream's short names, a column
/// per condition kerf sets).
pub const PROVISIONING_REQUEST: CrdDefinition = CrdDefinition {
    group: crate::provisioningrequest::GROUP,
    version: "v1",
    kind: crate::provisioningrequest::KIND,
    list_kind: "ProvisioningRequestList",
    plural: "provisioningrequests",
    singular: "provisioningrequest",
    short_names: &["provreq", "provreqs"],
    categories: &[],
    scale: None,
    columns: &[
        column("Class", "string", 0, Field("/spec/provisioningClassName")),
        column("Accepted", "string", 0, Condition(crate::provisioningrequest::CONDITION_ACCEPTED)),
        column("Provisioned", "string", 0, Condition(crate::provisioningrequest::CONDITION_PROVISIONED)),
        column("Failed", "string", 0, Condition(crate::provisioningrequest::CONDITION_FAILED)),
        column("BookingExpired", "string", 1, Condition(crate::provisioningrequest::CONDITION_BOOKING_EXPIRED)),
        column("Age", "date", 0, CreationTimestamp),
    ],
    namespaced: true,
};

/// `capacityquotas.autoscaling.x-k8s.io` (`autoscaling.x-k8s.io/v1beta1`, cluster-scoped).
pub const CAPACITY_QUOTA: CrdDefinition = CrdDefinition {
    group: crate::capacityquota::GROUP,
    version: "v1beta1",
    kind: crate::capacityquota::KIND,
    list_kind: "CapacityQuotaList",
    plural: "capacityquotas",
    singular: "capacityquota",
    short_names: &[],
    categories: &[],
    scale: None,
    columns: &[column("Age", "date", 0, CreationTimestamp)],
    namespaced: false,
};

/// The CRDs, in the order `kerf crds` prints them.
pub const ALL: [&CrdDefinition; 7] =
    [&NODE_POOL, &NODE_CLAIM, &EC2_NODE_CLASS, &CAPACITY_BUFFER, &NODE_OVERLAY, &PROVISIONING_REQUEST, &CAPACITY_QUOTA];

/// The definition of `kind` (`NodePool`, `NodeClaim`, `EC2NodeClass`, `CapacityBuffer`,
/// `NodeOverlay`, `ProvisioningRequest`, `CapacityQuota`).
pub fn definition(kind: &str) -> Option<&'static CrdDefinition> {
    ALL.into_iter().find(|d| d.kind == kind)
}

impl CrdDefinition {
    /// `plural.group`, the CRD's name.
    pub fn name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// The CRD's file name as Karpenter's chart names it (`karpenter.sh_nodepools.yaml`).
    pub fn file_name(&self) -> String {
        format!("{}_{}.yaml", self.group, self.plural)
    }

    /// The CRD object (`apiextensions.k8s.io/v1` CustomResourceDefinition).
    pub fn custom_resource_definition(&self) -> Value {
        let mut schema = schema::crd_schema(self.kind).unwrap_or_else(|| json!({"type": "object"}));
        // Every addition resolves (the crate's tests hold it to that).
        let _unresolved = crate::crd_rules::apply(self.kind, &mut schema);
        let columns: Vec<Value> = self
            .columns
            .iter()
            .map(|c| {
                let mut col = json!({"name": c.name, "type": c.type_, "jsonPath": c.source.json_path()});
                if c.priority != 0 {
                    col["priority"] = json!(c.priority);
                }
                col
            })
            .collect();
        let mut subresources = json!({"status": {}});
        if let Some(scale) = self.scale {
            subresources["scale"] =
                json!({"specReplicasPath": scale.spec_replicas_path, "statusReplicasPath": scale.status_replicas_path});
        }
        let mut names = json!({
            "kind": self.kind,
            "listKind": self.list_kind,
            "plural": self.plural,
            "singular": self.singular,
            "categories": self.categories,
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.name()},
            "spec": {
                "group": self.group,
                "names": names,
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [{
                    "name": self.version,
                    "served": true,
                    "storage": true,
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                }],
            },
        })
    }

    /// The CRD as one YAML document (starting with `---`).
    pub fn yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        Ok(format!("---\n{}", serde_yaml_ng::to_string(&self.custom_resource_definition())?))
    }
}

/// All the CRDs as a multi-document YAML stream (what `kerf crds` prints).
pub fn all_yaml() -> Result<String, serde_yaml_ng::Error> {
    ALL.iter().map(|d| d.yaml()).collect()
}
