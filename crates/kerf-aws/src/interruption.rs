//! The interruption queue (`settings.interruptionQueue`): EventBridge delivers EC2 events to an
//! SQS queue; kerf reads them as typed events for the interruption controller. Messages are
//! deleted once the caller has handled them; messages that are not one of the events kerf acts
//! on are logged and deleted at once, never an error.

use aws_sdk_sqs::types::Message;
use serde::Deserialize;

pub use kerf_cloud::InterruptionKind;

use crate::AwsClients;
use crate::error::AwsError;

/// One event from the queue, about one or more instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptionEvent {
    pub kind: InterruptionKind,
    pub instance_ids: Vec<String>,
    /// The EventBridge event ID.
    pub id: String,
    /// When the event happened (RFC 3339, as sent).
    pub time: String,
    /// Hand back to [`InterruptionQueue::delete`] once handled.
    pub receipt_handle: String,
}

/// Why a message is not an event kerf acts on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not an EventBridge event: {0}")]
    Malformed(String),
    #[error("unhandled event {source_name}/{detail_type}")]
    Unhandled { source_name: String, detail_type: String },
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    #[serde(default)]
    time: String,
    #[serde(default)]
    detail: serde_json::Value,
}

#[derive(Deserialize)]
struct InstanceDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    #[serde(default)]
    state: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthDetail {
    #[serde(default)]
    service: String,
    #[serde(default)]
    event_type_category: String,
    #[serde(default)]
    affected_entities: Vec<AffectedEntity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffectedEntity {
    #[serde(default)]
    entity_value: String,
}

/// States of an instance-state-change event that interrupt the node.
const INTERRUPTING_STATES: &[&str] = &["stopping", "stopped", "shutting-down", "terminated"];

/// Reads one message body.
pub fn parse(body: &str, receipt_handle: &str) -> Result<InterruptionEvent, ParseError> {
    let env: Envelope = serde_json::from_str(body).map_err(|e| ParseError::Malformed(e.to_string()))?;
    let unhandled = || ParseError::Unhandled { source_name: env.source.clone(), detail_type: env.detail_type.clone() };
    let instance = || -> Result<InstanceDetail, ParseError> {
        let d: InstanceDetail = serde_json::from_value(env.detail.clone())
            .map_err(|e| ParseError::Malformed(format!("{}: detail: {e}", env.detail_type)))?;
        if d.instance_id.is_empty() {
            return Err(ParseError::Malformed(format!("{}: detail.instance-id is empty", env.detail_type)));
        }
        Ok(d)
    };
    let (kind, instance_ids) = match (env.source.as_str(), env.detail_type.as_str()) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => {
            (InterruptionKind::SpotInterruption, vec![instance()?.instance_id])
        }
        // EC2's user guide names the warning both ways.
        (
            "aws.ec2",
            "EC2 Interruptible Capacity Reservation Instance Interruption Warning"
            | "EC2 Capacity Reservation Instance Interruption Warning",
        ) => (InterruptionKind::CapacityReservationInterruption, vec![instance()?.instance_id]),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            (InterruptionKind::RebalanceRecommendation, vec![instance()?.instance_id])
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let d = instance()?;
            let state = d.state.unwrap_or_default();
            if !INTERRUPTING_STATES.contains(&state.as_str()) {
                return Err(ParseError::Unhandled {
                    source_name: env.source.clone(),
                    detail_type: format!("{} ({state})", env.detail_type),
                });
            }
            (InterruptionKind::StateChange { state }, vec![d.instance_id])
        }
        ("aws.health", "AWS Health Event") => {
            let d: HealthDetail = serde_json::from_value(env.detail.clone())
                .map_err(|e| ParseError::Malformed(format!("AWS Health Event: detail: {e}")))?;
            if d.service != "EC2" || d.event_type_category != "scheduledChange" {
                return Err(unhandled());
            }
            let ids: Vec<String> =
                d.affected_entities.into_iter().map(|e| e.entity_value).filter(|v| v.starts_with("i-")).collect();
            if ids.is_empty() {
                return Err(ParseError::Malformed("AWS Health Event: no affected instance".into()));
            }
            (InterruptionKind::ScheduledChange, ids)
        }
        _ => return Err(unhandled()),
    };
    Ok(InterruptionEvent { kind, instance_ids, id: env.id, time: env.time, receipt_handle: receipt_handle.to_string() })
}

/// The SQS queue EventBridge sends EC2 events to.
#[derive(Debug, Clone)]
pub struct InterruptionQueue {
    clients: AwsClients,
    url: String,
}

impl InterruptionQueue {
    /// The queue named `name` (`settings.interruptionQueue`).
    pub async fn new(clients: AwsClients, name: &str) -> Result<InterruptionQueue, AwsError> {
        let out = clients
            .sqs
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("sqs:GetQueueUrl", e))?;
        let url =
            out.queue_url().ok_or_else(|| AwsError::new("sqs:GetQueueUrl", format!("queue {name} has no URL")))?;
        Ok(InterruptionQueue { url: url.to_string(), clients })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Up to 10 events waiting in the queue (long-polling up to `wait_seconds`). Messages that
    /// are not events kerf acts on are logged and deleted here.
    pub async fn receive(&self, wait_seconds: i32) -> Result<Vec<InterruptionEvent>, AwsError> {
        let out = self
            .clients
            .sqs
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("sqs:ReceiveMessage", e))?;
        let mut events = Vec::new();
        for m in out.messages() {
            match self.read(m) {
                Ok(e) => events.push(e),
                Err((handle, problem)) => {
                    tracing::warn!(queue = %self.url, message_id = m.message_id().unwrap_or_default(), %problem, "dropping interruption message");
                    if let Some(handle) = handle {
                        self.delete_handle(&handle).await?;
                    }
                }
            }
        }
        Ok(events)
    }

    fn read(&self, m: &Message) -> Result<InterruptionEvent, (Option<String>, String)> {
        let handle = m.receipt_handle().map(str::to_string);
        let Some(h) = handle.clone() else { return Err((None, "message has no receipt handle".into())) };
        let body = m.body().ok_or_else(|| (handle.clone(), "message has no body".to_string()))?;
        parse(body, &h).map_err(|e| (handle, e.to_string()))
    }

    /// Deletes a handled event's message.
    pub async fn delete(&self, event: &InterruptionEvent) -> Result<(), AwsError> {
        self.delete_handle(&event.receipt_handle).await
    }

    async fn delete_handle(&self, handle: &str) -> Result<(), AwsError> {
        self.clients
            .sqs
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(handle)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("sqs:DeleteMessage", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_interruption_warnings_name_their_instance() {
        let body = r#"{"version":"0","id":"e1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"1","time":"2025-01-01T00:00:00Z","region":"us-west-2","resources":[],"detail":{"instance-id":"i-0abc","instance-action":"terminate"}}"#;
        let e = parse(body, "h").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.kind, InterruptionKind::SpotInterruption);
        assert_eq!(e.instance_ids, vec!["i-0abc"]);
        assert!(e.kind.requires_drain());
    }

    #[test]
    fn interruptible_reservation_warnings_interrupt_their_instance() {
        for detail_type in [
            "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
            "EC2 Capacity Reservation Instance Interruption Warning",
        ] {
            let body = format!(
                r#"{{"version":"0","id":"e2","detail-type":"{detail_type}","source":"aws.ec2","time":"2025-01-01T00:00:00Z","detail":{{"instance-id":"i-0abc","instance-action":"terminate","instance-termination-time":"2025-01-01T00:02:00Z"}}}}"#
            );
            let e = parse(&body, "h").unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(e.kind, InterruptionKind::CapacityReservationInterruption);
            assert_eq!(e.instance_ids, vec!["i-0abc"]);
            assert!(e.kind.requires_drain());
        }
    }

    #[test]
    fn running_state_changes_and_other_health_events_are_not_interruptions() {
        let running = r#"{"id":"e","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","detail":{"instance-id":"i-1","state":"running"}}"#;
        assert!(matches!(parse(running, "h"), Err(ParseError::Unhandled { .. })));
        let issue = r#"{"id":"e","detail-type":"AWS Health Event","source":"aws.health","detail":{"service":"EC2","eventTypeCategory":"issue","affectedEntities":[{"entityValue":"i-1"}]}}"#;
        assert!(matches!(parse(issue, "h"), Err(ParseError::Unhandled { .. })));
        assert!(matches!(parse("{not json", "h"), Err(ParseError::Malformed(_))));
        let no_id =
            r#"{"id":"e","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{}}"#;
        assert!(matches!(parse(no_id, "h"), Err(ParseError::Malformed(_))));
    }
}
