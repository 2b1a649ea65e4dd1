//! The interruption queue against moto's SQS: EventBridge messages become typed events, handled
//! ones are deleted, and messages kerf does not act on are dropped without an error.

mod common;

use common::*;
use kerf_aws::{InterruptionKind, InterruptionQueue};

fn event(detail_type: &str, source: &str, detail: &str) -> String {
    format!(
        r#"{{"version":"0","id":"{detail_type}-1","detail-type":"{detail_type}","source":"{source}","account":"123456789012","time":"2025-01-01T00:00:00Z","region":"us-west-2","resources":[],"detail":{detail}}}"#
    )
}

async fn counts(clients: &kerf_aws::AwsClients, url: &str) -> (String, String) {
    let out = clients
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let attrs = out.attributes().cloned().unwrap_or_default();
    let get = |k: aws_sdk_sqs::types::QueueAttributeName| attrs.get(&k).cloned().unwrap_or_default();
    (
        get(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
        get(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

#[tokio::test]
async fn eventbridge_messages_become_typed_events_and_are_deleted_once_handled() {
    let clients = clients().await;
    clients.sqs.create_queue().queue_name("kerf-interruption").send().await.unwrap_or_else(|e| panic!("{e:?}"));
    let queue = InterruptionQueue::new(clients.clone(), "kerf-interruption").await.unwrap_or_else(|e| panic!("{e}"));
    let messages = [
        event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            r#"{"instance-id":"i-0000000000000001","instance-action":"terminate"}"#,
        ),
        event("EC2 Instance Rebalance Recommendation", "aws.ec2", r#"{"instance-id":"i-0000000000000002"}"#),
        event(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            r#"{"instance-id":"i-0000000000000003","state":"stopping"}"#,
        ),
        event(
            "AWS Health Event",
            "aws.health",
            r#"{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"i-0000000000000004"},{"entityValue":"i-0000000000000005"}]}"#,
        ),
        // Not acted on: a running instance, another service's health event, and garbage.
        event(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            r#"{"instance-id":"i-0000000000000006","state":"running"}"#,
        ),
        event(
            "AWS Health Event",
            "aws.health",
            r#"{"service":"RDS","eventTypeCategory":"scheduledChange","affectedEntities":[]}"#,
        ),
        "this is not json".to_string(),
    ];
    for body in &messages {
        clients
            .sqs
            .send_message()
            .queue_url(queue.url())
            .message_body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
    }

    let mut events = Vec::new();
    for _ in 0..5 {
        let got = queue.receive(0).await.unwrap_or_else(|e| panic!("{e}"));
        if got.is_empty() && events.len() >= 4 {
            break;
        }
        events.extend(got);
    }
    events.sort_by(|a, b| a.instance_ids.cmp(&b.instance_ids));
    let summary: Vec<(InterruptionKind, Vec<String>)> =
        events.iter().map(|e| (e.kind.clone(), e.instance_ids.clone())).collect();
    assert_eq!(
        summary,
        vec![
            (InterruptionKind::SpotInterruption, vec!["i-0000000000000001".to_string()]),
            (InterruptionKind::RebalanceRecommendation, vec!["i-0000000000000002".to_string()]),
            (InterruptionKind::StateChange { state: "stopping".to_string() }, vec!["i-0000000000000003".to_string()]),
            (
                InterruptionKind::ScheduledChange,
                vec!["i-0000000000000004".to_string(), "i-0000000000000005".to_string()]
            ),
        ]
    );
    assert!(!events[1].kind.requires_drain());
    // The three messages kerf does not act on are gone already; the four events wait for their
    // handling to finish.
    assert_eq!(counts(&clients, queue.url()).await, ("0".to_string(), "4".to_string()));
    for e in &events {
        queue.delete(e).await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(counts(&clients, queue.url()).await, ("0".to_string(), "0".to_string()));
}

#[tokio::test]
async fn a_missing_queue_is_a_clear_error() {
    let clients = clients().await;
    let err = InterruptionQueue::new(clients, "no-such-queue").await.err();
    let err = err.unwrap_or_else(|| panic!("expected an error"));
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().contains("sqs:GetQueueUrl"), "{err}");
}

#[tokio::test]
async fn the_provider_turns_queue_events_into_notices_for_this_clusters_instances_and_deletes_them() {
    use kerf_cloud::CloudProvider;
    let clients = clients().await;
    let (provider, net) = {
        let net_name = "interrupted";
        let net = network(&clients, net_name, 41).await;
        role(&clients, &format!("{net_name}-node")).await;
        let mut s = settings(net_name);
        s.interruption_queue = Some("kerf-provider-queue".to_string());
        let provider =
            kerf_aws::AwsProvider::new(clients.clone(), s, std::sync::Arc::new(kerf_cloud::ManualClock::new()));
        let nc = node_class(
            "default",
            net_name,
            &format!("  role: {net_name}-node\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n"),
        );
        let r = provider.reconcile_node_class(&nc).await;
        assert!(r.is_ready(), "node class not ready: {}", r.not_ready_reason());
        (provider, net)
    };
    clients.sqs.create_queue().queue_name("kerf-provider-queue").send().await.unwrap_or_else(|e| panic!("{e:?}"));
    let url = clients
        .sqs
        .get_queue_url()
        .queue_name("kerf-provider-queue")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"))
        .queue_url()
        .unwrap_or_default()
        .to_string();

    let spot_reqs = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    \
                     - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n";
    let spot = provider.create(&claim("default-spot", "default", spot_reqs)).await.unwrap_or_else(|e| panic!("{e}"));
    let od_reqs = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    \
                   - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n";
    let od = provider.create(&claim("default-od", "default", od_reqs)).await.unwrap_or_else(|e| panic!("{e}"));
    let id_of = |c: &kerf_api::NodeClaim| {
        c.provider_id().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_string()
    };
    // An instance of no cluster of kerf's: its events are dropped.
    let stranger = run_instance(&clients, &net.subnets[0].0, &[]).await;
    let messages = [
        event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            &format!(r#"{{"instance-id":"{}","instance-action":"terminate"}}"#, id_of(&spot)),
        ),
        event("EC2 Instance Rebalance Recommendation", "aws.ec2", &format!(r#"{{"instance-id":"{}"}}"#, id_of(&od))),
        event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            &format!(r#"{{"instance-id":"{stranger}","instance-action":"terminate"}}"#),
        ),
    ];
    for body in &messages {
        clients.sqs.send_message().queue_url(&url).message_body(body).send().await.unwrap_or_else(|e| panic!("{e:?}"));
    }

    let mut notices = Vec::new();
    for _ in 0..5 {
        notices.extend(provider.interruptions().await.unwrap_or_else(|e| panic!("{e}")));
    }
    notices.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
    let mut want = vec![
        (spot.provider_id().unwrap_or_default().to_string(), InterruptionKind::SpotInterruption),
        (od.provider_id().unwrap_or_default().to_string(), InterruptionKind::RebalanceRecommendation),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let got: Vec<(String, InterruptionKind)> =
        notices.iter().map(|n| (n.provider_id.clone(), n.kind.clone())).collect();
    assert_eq!(got, want);
    let spot_notice = notices.iter().find(|n| n.kind == InterruptionKind::SpotInterruption);
    let at = spot_notice.and_then(|n| n.terminates_at).map(|t| t.to_string());
    assert_eq!(at.as_deref(), Some("2025-01-01T00:02:00Z"), "reclaimed two minutes after the warning");
    // The reclaimed spot offering is not offered again for a while; on-demand still is.
    let zone =
        spot.metadata.labels.as_ref().and_then(|l| l.get("topology.kubernetes.io/zone")).cloned().unwrap_or_default();
    assert!(!provider.is_offering_available("m5.large", &zone, "spot"));
    assert!(provider.is_offering_available("m5.large", &zone, "on-demand"));
    // Every message is gone: handled ones and the stranger's alike.
    assert_eq!(counts(&clients, &url).await, ("0".to_string(), "0".to_string()));
}
