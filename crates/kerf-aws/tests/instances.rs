//! Get, list, reboot, delete and garbage-collection listing by provider ID, against moto;
//! instances without this cluster's tag are never touched.

mod common;

use std::collections::BTreeSet;

use common::*;
use kerf_cloud::{Clock, CloudError, CloudProvider, SystemClock};

const REQS: &str = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    \
                    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n";

#[tokio::test]
async fn get_list_and_delete_by_provider_id() {
    let clients = clients().await;
    let (provider, _clock, _net, _nc) =
        ready_provider("lifecycle", 31, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    let launched = provider.create(&claim("default-life", "default", REQS)).await.unwrap_or_else(|e| panic!("{e}"));
    let pid = launched.provider_id().unwrap_or_default().to_string();

    let got = provider.get(&pid).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.name(), "default-life");
    assert_eq!(got.provider_id(), Some(pid.as_str()));
    assert_eq!(got.spec.node_class_ref.name, "default");
    let labels = got.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
    assert_eq!(labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("m5.large"));
    assert_eq!(labels.get("karpenter.k8s.aws/instance-family").map(String::as_str), Some("m5"));
    let status = got.status.clone().unwrap_or_default();
    assert_eq!(status.capacity, launched.status.clone().unwrap_or_default().capacity);

    let listed = provider.list().await.unwrap_or_else(|e| panic!("{e}"));
    let pids: Vec<&str> = listed.iter().filter_map(|c| c.provider_id()).collect();
    assert_eq!(pids, vec![pid.as_str()]);

    provider.delete(&launched).await.unwrap_or_else(|e| panic!("{e}"));
    let id = pid.rsplit('/').next().unwrap_or_default().to_string();
    let states = instance_states(&clients, std::slice::from_ref(&id)).await;
    assert!(matches!(states[0].1.as_str(), "shutting-down" | "terminated"), "{states:?}");
    assert!(matches!(provider.get(&pid).await, Err(CloudError::NotFound(_))));
    assert!(matches!(provider.delete(&launched).await, Err(CloudError::NotFound(_))));
    assert!(provider.list().await.unwrap_or_else(|e| panic!("{e}")).is_empty());
}

#[tokio::test]
async fn instances_without_this_clusters_tag_are_never_touched() {
    let clients = clients().await;
    let (provider, _clock, net, _nc) =
        ready_provider("hands-off", 32, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    // Someone else's instance in the same subnet, and one tagged for another cluster.
    let mut foreign = Vec::new();
    for tags in [vec![], vec![("kubernetes.io/cluster/other", "owned"), ("karpenter.sh/nodepool", "default")]] {
        let id = run_instance(&clients, &net.subnets[0].0, &tags).await;
        foreign.push(id);
    }
    for id in &foreign {
        let pid = format!("aws:///us-west-2a/{id}");
        assert!(matches!(provider.get(&pid).await, Err(CloudError::NotFound(_))), "get {pid}");
        let mut claim = claim("someone-elses", "default", REQS);
        claim.status.get_or_insert_with(Default::default).provider_id = Some(pid.clone());
        assert!(matches!(provider.delete(&claim).await, Err(CloudError::NotFound(_))), "delete {pid}");
        assert!(matches!(provider.is_drifted(&claim, None).await, Ok(None)));
    }
    let states = instance_states(&clients, &foreign).await;
    assert!(states.iter().all(|(_, s)| s == "running" || s == "pending"), "{states:?}");
    assert!(provider.list().await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    let orphans = provider.orphaned(&BTreeSet::new()).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(orphans.is_empty(), "{orphans:?}");
}

#[tokio::test]
async fn garbage_collection_lists_this_clusters_instances_that_no_node_claim_accounts_for() {
    let clients = clients().await;
    let (provider, clock, _net, _nc) =
        ready_provider("gc", 33, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    let kept = provider.create(&claim("default-kept", "default", REQS)).await.unwrap_or_else(|e| panic!("{e}"));
    let lost = provider.create(&claim("default-lost", "default", REQS)).await.unwrap_or_else(|e| panic!("{e}"));
    let known: BTreeSet<String> = kept.provider_id().map(str::to_string).into_iter().collect();

    // Just launched: its NodeClaim may not be visible yet, so it is not garbage.
    clock.set(SystemClock.now());
    assert!(provider.orphaned(&known).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    clock.advance(std::time::Duration::from_secs(60));
    let orphans = provider.orphaned(&known).await.unwrap_or_else(|e| panic!("{e}"));
    let pids: Vec<&str> = orphans.iter().filter_map(|c| c.provider_id()).collect();
    assert_eq!(pids, vec![lost.provider_id().unwrap_or_default()]);
    assert_eq!(orphans[0].name(), "default-lost");
}

/// Stops an instance out of band (moto's RebootInstances brings a stopped instance back to
/// running, which is how a test sees that a reboot reached it).
async fn stop(clients: &kerf_aws::AwsClients, id: &str) {
    clients.ec2.stop_instances().instance_ids(id).send().await.unwrap_or_else(|e| panic!("StopInstances: {e:?}"));
}

#[tokio::test]
async fn reboot_restarts_this_clusters_instance_in_place_and_never_another() {
    let clients = clients().await;
    let (provider, _clock, net, _nc) =
        ready_provider("reboot", 34, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    let launched = provider.create(&claim("default-reboot", "default", REQS)).await.unwrap_or_else(|e| panic!("{e}"));
    let pid = launched.provider_id().unwrap_or_default().to_string();
    let id = pid.rsplit('/').next().unwrap_or_default().to_string();
    stop(&clients, &id).await;
    assert_eq!(instance_states(&clients, std::slice::from_ref(&id)).await[0].1, "stopped");

    provider.reboot(&launched).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        instance_states(&clients, std::slice::from_ref(&id)).await[0].1,
        "running",
        "RebootInstances reached it"
    );
    // The same instance: nothing launched, nothing terminated.
    assert_eq!(provider.get(&pid).await.unwrap_or_else(|e| panic!("{e}")).name(), "default-reboot");
    assert_eq!(provider.list().await.unwrap_or_else(|e| panic!("{e}")).len(), 1);

    // Someone else's instance is not rebooted.
    let foreign = run_instance(&clients, &net.subnets[0].0, &[]).await;
    stop(&clients, &foreign).await;
    let mut theirs = claim("someone-elses", "default", REQS);
    theirs.status.get_or_insert_with(Default::default).provider_id = Some(format!("aws:///us-west-2a/{foreign}"));
    assert!(matches!(provider.reboot(&theirs).await, Err(CloudError::NotFound(_))));
    assert_eq!(instance_states(&clients, std::slice::from_ref(&foreign)).await[0].1, "stopped");

    // A terminated instance is gone.
    provider.delete(&launched).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(provider.reboot(&launched).await, Err(CloudError::NotFound(_))));
}
