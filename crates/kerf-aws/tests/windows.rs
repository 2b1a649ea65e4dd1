//! Windows node classes against moto: the `windows2022@latest` alias through its public SSM
//! parameter (seeded by tools/moto-fixture.py, as moto serves none), Windows instance types
//! only, and a launch whose user data calls the EKS image's PowerShell bootstrap.

mod common;

use common::*;
use kerf_api::{NodePool, labels};
use kerf_cloud::CloudProvider;

fn pool() -> NodePool {
    serde_yaml_ng::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_windows2022_class_resolves_its_alias_offers_windows_types_and_bootstraps_with_powershell() {
    let clients = clients().await;
    let (provider, _clock, _net, nc) =
        ready_provider("windows", 76, clients.clone(), "  amiSelectorTerms: [{alias: windows2022@latest}]\n").await;
    let image =
        moto().images["/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.33/image_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    let status = nc.status.clone().unwrap_or_default();
    assert_eq!(status.amis.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), vec![image.as_str()]);
    let os = status.amis[0].requirements.iter().find(|r| r.key == labels::OS).map(|r| r.values.clone());
    assert_eq!(os, Some(vec!["windows".to_string()]));

    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!types.is_empty());
    for t in &types {
        assert_eq!(t.labels.get(labels::OS).map(String::as_str), Some("windows"), "{}", t.name);
        assert_eq!(t.labels.get(labels::WINDOWS_BUILD).map(String::as_str), Some("10.0.20348"), "{}", t.name);
        assert_eq!(t.labels.get(labels::ARCH).map(String::as_str), Some("amd64"), "{}", t.name);
    }

    let requirements = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    \
                        - {key: kubernetes.io/os, operator: In, values: [windows]}\n    \
                        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n";
    let launched =
        provider.create(&claim("default-win", "default", requirements)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(launched.status.as_ref().and_then(|s| s.image_id.as_deref()), Some(image.as_str()));
    assert_eq!(launched.metadata.labels.as_ref().and_then(|l| l.get(labels::OS)).map(String::as_str), Some("windows"));

    let lts = clients
        .ec2
        .describe_launch_templates()
        .filters(filter("tag:karpenter.k8s.aws/cluster", "windows"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let name = lts.launch_templates()[0].launch_template_name().unwrap_or_default().to_string();
    let versions = clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let data =
        versions.launch_template_versions()[0].launch_template_data().cloned().unwrap_or_else(|| panic!("no data"));
    let user_data = kerf_aws::base64::decode(data.user_data().unwrap_or_default()).unwrap_or_default();
    let user_data = String::from_utf8(user_data).unwrap_or_else(|e| panic!("{e}"));
    assert!(user_data.starts_with("<powershell>\n"), "{user_data}");
    assert!(user_data.contains("Start-EKSBootstrap.ps1"), "{user_data}");
    assert!(
        user_data
            .contains("-EKSClusterName 'windows' -APIServerEndpoint 'https://cluster.example' -Base64ClusterCA 'Q0E='"),
        "{user_data}"
    );
    assert!(user_data.contains("karpenter.sh/capacity-type=on-demand"), "{user_data}");
    let devices: Vec<&str> = data.block_device_mappings().iter().filter_map(|m| m.device_name()).collect();
    assert_eq!(devices, vec!["/dev/sda1"]);
}
