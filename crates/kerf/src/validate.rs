//! `kerf validate FILE...`: check NodePool / NodeClaim / EC2NodeClass (and CapacityBuffer,
//! NodeOverlay, ProvisioningRequest, CapacityQuota) manifests the way the API server's CRD validation would.

use std::path::PathBuf;
use std::process::ExitCode;

use kerf_api::manifest::{self, KarpenterObject};

#[derive(clap::Args)]
#[command(after_help = "\
Every problem is printed on stderr, one per line, as
  FILE: KIND/NAME: FIELD.PATH: problem
and every file is checked completely (all documents, all problems). YAML syntax errors and
unreadable files are reported as FILE: ... with the line where known. Documents of other kinds
(Deployment, Service, ...) are skipped; a document that is not a mapping, or that has a Karpenter
apiVersion but no kind, is a problem, and so is a file without any document. For each file without problems, stdout gets
  FILE: ok (N NodePool, N NodeClaim, N EC2NodeClass)
with \", N CapacityBuffer\" (and NodeOverlay, ProvisioningRequest, CapacityQuota) added when
the file has any.

Exit status: 0 when every file is valid, 2 when any problem is found.")]
pub struct Args {
    /// Manifest files (multi-document YAML).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// The outcome of checking one file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FileReport {
    /// Problem lines without the `FILE: ` prefix.
    pub problems: Vec<String>,
    pub node_pools: usize,
    pub node_claims: usize,
    pub ec2_node_classes: usize,
    pub capacity_buffers: usize,
    pub node_overlays: usize,
    pub provisioning_requests: usize,
    pub capacity_quotas: usize,
}

/// Checks the text of one manifest file.
pub fn check_text(text: &str) -> FileReport {
    let mut report = FileReport::default();
    let documents = manifest::yaml_documents(text);
    if documents.is_empty() {
        report.problems.push("the file has no YAML documents (it is empty or only comments)".to_string());
    }
    for document in documents {
        let value = match document {
            Ok(v) => v,
            Err(e) => {
                report.problems.push(e.to_string());
                continue;
            }
        };
        match manifest::decode_karpenter(&value) {
            Ok(None) => {}
            Ok(Some(KarpenterObject::NodePool(_))) => report.node_pools += 1,
            Ok(Some(KarpenterObject::NodeClaim(_))) => report.node_claims += 1,
            Ok(Some(KarpenterObject::EC2NodeClass(_))) => report.ec2_node_classes += 1,
            Ok(Some(KarpenterObject::CapacityBuffer(_))) => report.capacity_buffers += 1,
            Ok(Some(KarpenterObject::NodeOverlay(_))) => report.node_overlays += 1,
            Ok(Some(KarpenterObject::ProvisioningRequest(_))) => report.provisioning_requests += 1,
            Ok(Some(KarpenterObject::CapacityQuota(_))) => report.capacity_quotas += 1,
            Err(problems) => report.problems.extend(problems.iter().map(ToString::to_string)),
        }
    }
    report
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut any_problem = false;
    for file in &args.files {
        let name = file.display();
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{name}: cannot read: {e}");
                any_problem = true;
                continue;
            }
        };
        let report = check_text(&text);
        if report.problems.is_empty() {
            let mut buffers = match report.capacity_buffers {
                0 => String::new(),
                n => format!(", {n} CapacityBuffer"),
            };
            if report.node_overlays > 0 {
                buffers.push_str(&format!(", {} NodeOverlay", report.node_overlays));
            }
            if report.provisioning_requests > 0 {
                buffers.push_str(&format!(", {} ProvisioningRequest", report.provisioning_requests));
            }
            if report.capacity_quotas > 0 {
                buffers.push_str(&format!(", {} CapacityQuota", report.capacity_quotas));
            }
            println!(
                "{name}: ok ({} NodePool, {} NodeClaim, {} EC2NodeClass{buffers})",
                report.node_pools, report.node_claims, report.ec2_node_classes
            );
        } else {
            any_problem = true;
            for p in &report.problems {
                eprintln!("{name}: {p}");
            }
        }
    }
    Ok(if any_problem { ExitCode::from(2) } else { ExitCode::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_kinds_are_skipped_and_karpenter_kinds_counted() {
        let r = check_text(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {whatever: 1}\n---\n\
             apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\n\
             spec: {template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}}}}\n",
        );
        assert_eq!(r, FileReport { node_pools: 1, ..FileReport::default() });
    }

    #[test]
    fn capacity_buffers_are_checked_and_counted() {
        let ok = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: b, namespace: default}\n\
             spec: {podTemplateRef: {name: t}, replicas: 3}\n---\n\
             apiVersion: autoscaling.x-k8s.io/v1\nkind: Workload\nmetadata: {name: w}\nspec: {}\n",
        );
        assert_eq!(ok, FileReport { capacity_buffers: 1, ..FileReport::default() });
        let bad = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: b}\n\
             spec: {podTemplateRef: {name: t}, scalableRef: {apiGroup: apps, kind: Deployment, name: web}, replicaz: 1}\n",
        );
        assert_eq!(
            bad.problems,
            [
                "CapacityBuffer/b: spec.replicaz: unknown field `replicaz`, expected one of `provisioningStrategy`, `podTemplateRef`, `scalableRef`, `replicas`, `percentage`, `limits`",
                "CapacityBuffer/b: spec: set either podTemplateRef or scalableRef, not both (exactly one names the shape of the buffer's pods)",
                "CapacityBuffer/b: spec: a buffer with podTemplateRef needs replicas or limits (nothing else says how many pods' room to keep)",
            ]
        );
        let old = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1alpha1\nkind: CapacityBuffer\nmetadata: {name: b}\nspec: {}\n",
        );
        assert_eq!(
            old.problems,
            [
                "CapacityBuffer/b: apiVersion: autoscaling.x-k8s.io/v1alpha1 is not served for CapacityBuffer; use autoscaling.x-k8s.io/v1beta1"
            ]
        );
    }

    #[test]
    fn syntax_error_names_the_line() {
        let r = check_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a\n");
        assert_eq!(r.problems.len(), 1);
        assert!(r.problems[0].starts_with("line 4: YAML syntax error:"), "{:?}", r.problems);
    }

    #[test]
    fn provisioning_requests_of_either_version_are_checked_and_counted() {
        let ok = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1\nkind: ProvisioningRequest\nmetadata: {name: a, namespace: default}\n\
             spec: {provisioningClassName: check-capacity.autoscaling.x-k8s.io, podSets: [{podTemplateRef: {name: t}, count: 2}]}\n---\n\
             apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: ProvisioningRequest\nmetadata: {name: b}\n\
             spec: {provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io, podSets: [{podTemplateRef: {name: t}, count: 1}]}\n",
        );
        assert_eq!(ok, FileReport { provisioning_requests: 2, ..FileReport::default() });
        let bad = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1\nkind: ProvisioningRequest\nmetadata: {name: p}\n\
             spec: {provisioningClassName: check-capacity.autoscaling.x-k8s.io, podSets: [{podTemplateRef: {name: t}, count: 0}], parameters: {noRetry: \"maybe\"}}\n",
        );
        assert_eq!(
            bad.problems,
            [
                "ProvisioningRequest/p: spec.podSets[0].count: must be at least 1, got 0",
                "ProvisioningRequest/p: spec.parameters.noRetry: must be \"true\" or \"false\", got \"maybe\"",
            ]
        );
    }

    #[test]
    fn capacity_quotas_are_checked_and_counted() {
        let ok = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityQuota\nmetadata: {name: q}\n\
             spec: {selector: {matchLabels: {team: a}}, limits: {resources: {cpu: 64, nodes: 10}}}\n",
        );
        assert_eq!(ok, FileReport { capacity_quotas: 1, ..FileReport::default() });
        let bad = check_text(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityQuota\nmetadata: {name: q}\n\
             spec:\n  selector: {matchExpressions: [{key: team, operator: Equals, values: [a]}]}\n  \
             limits: {resources: {cpu: '-1', memory: 12XB}}\n",
        );
        assert_eq!(
            bad.problems,
            [
                "CapacityQuota/q: spec.limits.resources.memory: quantity \"12XB\" has unknown suffix \"XB\" (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent like e3)",
                "CapacityQuota/q: spec.selector.matchExpressions[0].operator: unknown operator \"Equals\" (In, NotIn, Exists or DoesNotExist)",
                "CapacityQuota/q: spec.limits.resources[cpu]: must not be negative, got -1",
            ]
        );
    }
}
