//! The report's `provisioningRequests[]` (docs/design.md, "Report"): one entry per
//! ProvisioningRequest — its class, the state its conditions reached, when it was Provisioned
//! (seconds of virtual time) and the reason of its latest condition — in JSON, text and HTML.

use std::collections::BTreeMap;
use std::fmt::Write;

use kerf_api::ProvisioningRequest;
use kerf_api::provisioningrequest::{
    CONDITION_ACCEPTED, CONDITION_BOOKING_EXPIRED, CONDITION_CAPACITY_REVOKED, CONDITION_FAILED, CONDITION_PROVISIONED,
    State,
};
use kerf_cloud::ManualClock;
use serde::Serialize;
use serde_json::Value;

use crate::report::{Seconds, human_secs, table};

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestReport {
    pub namespace: String,
    pub name: String,
    /// `spec.provisioningClassName`.
    pub class: String,
    /// The latest of Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked the request
    /// reached (`Pending` before kerf took it on).
    pub state: String,
    /// When `Provisioned` turned True, if it did.
    pub provisioned_at_seconds: Option<Seconds>,
    /// The reason of the condition behind `state` (with its message: `reason: message`).
    pub reason: Option<String>,
}

fn seconds(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Seconds {
    Seconds((t.0.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0)
}

/// One entry per request, in namespace and name order.
pub fn request_reports(
    requests: &BTreeMap<kerf_controller::ObjectKey, ProvisioningRequest>,
) -> Vec<ProvisioningRequestReport> {
    requests
        .values()
        .map(|r| {
            let state = r.state();
            let behind = match state {
                State::Pending => None,
                State::Accepted => {
                    // Answered "not yet" (check-capacity retries): that answer says why.
                    r.condition(CONDITION_PROVISIONED).or_else(|| r.condition(CONDITION_ACCEPTED))
                }
                State::Provisioned => r.condition(CONDITION_PROVISIONED),
                State::Failed => r.condition(CONDITION_FAILED),
                State::BookingExpired => r.condition(CONDITION_BOOKING_EXPIRED),
                State::CapacityRevoked => r.condition(CONDITION_CAPACITY_REVOKED),
            };
            let provisioned = r.condition(CONDITION_PROVISIONED).filter(|c| c.is_true());
            ProvisioningRequestReport {
                namespace: r.namespace().to_string(),
                name: r.name().to_string(),
                class: r.class().to_string(),
                state: state.as_str().to_string(),
                provisioned_at_seconds: provisioned.and_then(|c| c.last_transition_time.as_ref()).map(seconds),
                reason: behind.and_then(|c| {
                    let reason = c.reason.clone()?;
                    Some(match c.message.as_deref().filter(|m| !m.is_empty()) {
                        Some(m) => format!("{reason}: {m}"),
                        None => reason,
                    })
                }),
            }
        })
        .collect()
}

/// The text report's section (nothing when there are no requests).
pub fn text(out: &mut String, requests: &[ProvisioningRequestReport]) {
    if requests.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Provisioning requests:");
    let rows: Vec<[String; 5]> = requests
        .iter()
        .map(|r| {
            [
                format!("{}/{}", r.namespace, r.name),
                r.class.clone(),
                r.state.clone(),
                r.provisioned_at_seconds.map_or_else(|| "-".to_string(), |s| human_secs(s.0)),
                r.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(out, &["REQUEST", "CLASS", "STATE", "PROVISIONED AT", "REASON"], &rows);
}

/// The HTML report's section (nothing when the report has no requests).
pub fn html(out: &mut String, r: &Value, esc: fn(&str) -> String) {
    let Some(list) = r["provisioningRequests"].as_array().filter(|b| !b.is_empty()) else { return };
    out.push_str("<h2>Provisioning requests</h2>\n");
    out.push_str(
        "<div class=\"scroll\"><table id=\"provisioning-requests\"><thead><tr><th>request</th><th>class</th>\
<th>state</th><th>provisioned at</th><th>reason</th></tr></thead><tbody>\n",
    );
    for q in list {
        let s = |k: &str| q[k].as_str().unwrap_or("—").to_string();
        let at = q["provisionedAtSeconds"].as_f64().map_or_else(|| "—".to_string(), human_secs);
        let _ = writeln!(
            out,
            "<tr><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td></tr>",
            esc(&s("namespace")),
            esc(&s("name")),
            esc(&s("class")),
            esc(&s("state")),
            esc(&at),
            esc(&s("reason")),
        );
    }
    out.push_str("</tbody></table></div>\n");
}
