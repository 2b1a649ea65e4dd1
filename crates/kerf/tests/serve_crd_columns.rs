//! kubectl reads kerf's CRD kinds from `kerf serve` the way a cluster with `kerf crds` installed
//! shows them: the printer columns of the CRDs (`-o wide` adds the priority-1 ones), the
//! EC2NodeClass short names and the `karpenter` category.

mod common;

use common::*;
use kerf_api::crd::{self, CrdDefinition};

fn header(table: &str) -> Vec<String> {
    table.lines().next().unwrap_or("").split_whitespace().map(str::to_string).collect()
}

/// NAME, then the CRD's columns (all of them with `-o wide`), as kubectl prints them.
fn expected(def: &CrdDefinition, wide: bool) -> Vec<String> {
    std::iter::once("NAME".to_string())
        .chain(def.columns.iter().filter(|c| wide || c.priority == 0).map(|c| c.name.to_uppercase()))
        .collect()
}

#[test]
fn kubectl_prints_the_crd_columns_short_names_and_category_of_kerfs_kinds() {
    // No controllers: the NodeClaim created below stays as it is.
    let s = Served::start("crd-columns", &["--controllers", "none"]);
    let manifest = repo_file("examples/manifests/default-nodepool.yaml");
    kubectl_ok(&s, &["create", "-f", manifest.to_str().unwrap()]);
    let claim = write(
        &s.dir,
        "claim.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: default-abcde\n  labels:\n    karpenter.sh/nodepool: default\n    node.kubernetes.io/instance-type: m5.large\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
    );
    kubectl_ok(&s, &["create", "-f", claim.to_str().unwrap()]);

    let pools = kubectl_ok(&s, &["get", "nodepools"]);
    assert_eq!(header(&pools), expected(&crd::NODE_POOL, false), "{pools}");
    let pools = kubectl_ok(&s, &["get", "nodepools", "-o", "wide"]);
    assert_eq!(header(&pools), expected(&crd::NODE_POOL, true), "{pools}");
    assert_eq!(header(&pools), ["NAME", "NODECLASS", "NODES", "READY", "AGE", "WEIGHT", "CPU", "MEMORY"]);

    for short in ["ec2nc", "ec2ncs"] {
        let classes = kubectl_ok(&s, &["get", short, "-o", "wide"]);
        assert_eq!(header(&classes), expected(&crd::EC2_NODE_CLASS, true), "{classes}");
        assert!(classes.lines().nth(1).is_some_and(|row| row.starts_with("default ")), "{classes}");
    }
    let claims = kubectl_ok(&s, &["get", "nodeclaims", "-o", "wide"]);
    assert_eq!(header(&claims), expected(&crd::NODE_CLAIM, true), "{claims}");
    let row: Vec<&str> = claims.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!((row[0], row[1]), ("default-abcde", "m5.large"), "{claims}");

    let all = kubectl_ok(&s, &["get", "karpenter", "-o", "name"]);
    assert!(all.contains("nodepool.karpenter.sh/default"), "{all}");
    assert!(all.contains("ec2nodeclass.karpenter.k8s.aws/default"), "{all}");
}
