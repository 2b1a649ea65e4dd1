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
