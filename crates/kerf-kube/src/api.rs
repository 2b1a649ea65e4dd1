//! [`KubeApi`]: the controllers' [`ClusterApi`] over a kube-rs client. Writes carry the
//! object's resourceVersion, so a stale write fails with `Conflict`; evictions go through the
//! Eviction subresource (a refusal by a PodDisruptionBudget, HTTP 429, is `TooManyRequests`);
//! events are core/v1 Events against the object they are about, handed to the
//! [`Recorder`](crate::recorder) (deduplicated, rate-limited, written in the background: a pass
//! does not wait for them).

use kerf_api::MetaView;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kerf_api::cluster::Patch;
use kerf_api::cluster::{ApiError, ClusterApi, EventRecord, Object};
use kerf_cloud::{Clock, SystemClock, Timestamp};
use kube::api::{DeleteParams, DynamicObject, EvictParams, ListParams, PatchParams, PostParams};
use kube::{Api, Client};

use crate::kinds::{self, Kind};
use crate::recorder::{EventMetrics, Recorder};

/// The component name events are reported by (Karpenter's, so dashboards and `kubectl get
/// events --field-selector source=karpenter` keep working).
pub const COMPONENT: &str = "karpenter";

/// The cluster API over a kube-rs client.
#[derive(Clone)]
pub struct KubeApi {
    client: Client,
    /// Who reports events (`reportingInstance`): this process's identity.
    instance: String,
    events: Recorder,
}

/// A client for the controllers. kube-rs's default retry of 429 / 503 / 504 is off: a 429 is
/// an eviction refused by a PodDisruptionBudget, which the termination controller must see at
/// once (it retries on its own schedule), not after minutes of backoff.
/// Requests carry `User-Agent: kerf-controller/VERSION`, so an API server's request counts and
/// audit log name who made them.
pub fn client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    let agent = concat!("kerf-controller/", env!("CARGO_PKG_VERSION"));
    if !config.headers.iter().any(|(k, _)| k == axum::http::header::USER_AGENT) {
        config.headers.push((axum::http::header::USER_AGENT, axum::http::HeaderValue::from_static(agent)));
    }
    Client::try_from(config)
}

/// Maps a kube-rs error on `kind`/`name` to the controllers' [`ApiError`].
pub fn api_error(kind: &'static str, name: &str, e: kube::Error) -> ApiError {
    let name = name.to_string();
    match e {
        kube::Error::Api(s) => match s.code {
            404 => ApiError::NotFound { kind, name },
            409 if s.reason == "AlreadyExists" => ApiError::AlreadyExists { kind, name },
            409 => ApiError::Conflict { kind, name },
            422 | 400 => ApiError::Invalid { kind, name, message: s.message },
            403 => ApiError::Forbidden { kind, name, cause: "Forbidden", message: s.message },
            429 => ApiError::TooManyRequests { name, reason: s.message },
            code => ApiError::Other(format!("{kind} {name}: HTTP {code} {}: {}", s.reason, s.message)),
        },
        other => ApiError::Other(format!("{kind} {name}: {other}")),
    }
}

fn codec(kind: &'static str, name: &str, e: serde_json::Error) -> ApiError {
    ApiError::Other(format!("{kind} {name}: cannot convert: {e}"))
}

impl KubeApi {
    /// Must be called within a tokio runtime: it starts the task that writes events, counted in
    /// `events`.
    pub fn new(client: Client, instance: &str, events: EventMetrics) -> Self {
        let recorder = Recorder::start(client.clone(), events);
        KubeApi { client, instance: instance.to_string(), events: recorder }
    }

    /// The core/v1 Event `event` becomes.
    fn event_object(&self, event: &EventRecord, now: Timestamp) -> Event {
        let kind = kinds::by_name(event.kind);
        let namespaced = kind.is_some_and(|k| k.namespaced);
        let (namespace, name) = match event.name.split_once('/') {
            Some((ns, n)) if namespaced => (ns.to_string(), n.to_string()),
            _ => ("default".to_string(), event.name.clone()),
        };
        let api_version = kind.map(|k| k.resource.api_version.clone());
        Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version,
                kind: Some(event.kind.to_string()),
                name: Some(name.clone()),
                namespace: namespaced.then(|| namespace.clone()),
                uid: event.uid.clone(),
                ..ObjectReference::default()
            },
            reason: Some(event.reason.clone()),
            message: Some(event.message.clone()),
            type_: Some(event.type_.to_string()),
            source: Some(EventSource { component: Some(COMPONENT.to_string()), host: None }),
            reporting_component: Some(COMPONENT.to_string()),
            reporting_instance: Some(self.instance.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            action: Some(event.reason.clone()),
            count: Some(1),
            ..Event::default()
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn kind<K: Object>(&self) -> Result<&'static Kind, ApiError> {
        kinds::by_name(K::KIND).ok_or_else(|| ApiError::Other(format!("kind {} has no place in the API", K::KIND)))
    }

    fn dynamic<K: Object>(&self, namespace: Option<&str>) -> Result<(Api<DynamicObject>, &'static Kind), ApiError> {
        let kind = self.kind::<K>()?;
        let api = match namespace.filter(|_| kind.namespaced) {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            None => Api::all_with(self.client.clone(), &kind.resource),
        };
        Ok((api, kind))
    }

    fn typed<K: Object>(name: &str, obj: DynamicObject) -> Result<K, ApiError> {
        let any = kinds::from_dynamic(K::KIND, obj).map_err(|e| codec(K::KIND, name, e))?;
        any.shared_as::<K>()
            .map(std::sync::Arc::unwrap_or_clone)
            .ok_or_else(|| ApiError::Other(format!("{} {name}: the API returned another kind", K::KIND)))
    }

    /// Replaces the object (`status`: its status subresource), with its resourceVersion as a
    /// precondition.
    async fn replace<K: Object>(&self, obj: K, status: bool) -> Result<K, ApiError> {
        let meta = obj.meta();
        let name = meta.name().unwrap_or_default().to_string();
        let (api, _) = self.dynamic::<K>(meta.namespace())?;
        let body = kinds::to_dynamic(&obj.into_any()).map_err(|e| codec(K::KIND, &name, e))?;
        let pp = PostParams::default();
        let written =
            if status { api.replace_status(&name, &pp, &body).await } else { api.replace(&name, &pp, &body).await };
        let written = written.map_err(|e| api_error(K::KIND, &name, e))?;
        Self::typed(&name, written)
    }
}

impl KubeApi {
    /// PATCH of the object (or its status subresource) with a merge or JSON patch.
    async fn send_patch<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Result<K, ApiError> {
        let (api, _) = self.dynamic::<K>(namespace)?;
        let pp = PatchParams::default();
        let written = match patch {
            Patch::Merge(body) => {
                let p = kube::api::Patch::Merge(body);
                if status { api.patch_status(name, &pp, &p).await } else { api.patch(name, &pp, &p).await }
            }
            Patch::Json(ops) => {
                let ops: json_patch::Patch = serde_json::from_value(ops.clone()).map_err(|e| ApiError::Invalid {
                    kind: K::KIND,
                    name: name.to_string(),
                    message: format!("invalid JSON patch: {e}"),
                })?;
                let p = kube::api::Patch::<()>::Json(ops);
                if status { api.patch_status(name, &pp, &p).await } else { api.patch(name, &pp, &p).await }
            }
        };
        let written = written.map_err(|e| api_error(K::KIND, name, e))?;
        Self::typed(name, written)
    }
}

impl ClusterApi for KubeApi {
    async fn get<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, ApiError> {
        let (api, _) = self.dynamic::<K>(namespace)?;
        match api.get_opt(name).await.map_err(|e| api_error(K::KIND, name, e))? {
            Some(obj) => Self::typed(name, obj).map(Some),
            None => Ok(None),
        }
    }

    async fn list<K: Object>(&self) -> Result<Vec<K>, ApiError> {
        let (api, _) = self.dynamic::<K>(None)?;
        let list = api.list(&ListParams::default()).await.map_err(|e| api_error(K::KIND, "(list)", e))?;
        list.items
            .into_iter()
            .map(|o| {
                let name = o.metadata.name.clone().unwrap_or_default();
                Self::typed(&name, o)
            })
            .collect()
    }

    async fn create<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        let meta = obj.meta();
        let name = meta.name().or(meta.generate_name()).unwrap_or_default().to_string();
        let (api, kind) = self.dynamic::<K>(meta.namespace())?;
        if kind.namespaced && meta.namespace().is_none() {
            return Err(ApiError::Invalid { kind: K::KIND, name, message: "metadata.namespace is required".into() });
        }
        let body = kinds::to_dynamic(&obj.into_any()).map_err(|e| codec(K::KIND, &name, e))?;
        let created = api.create(&PostParams::default(), &body).await.map_err(|e| api_error(K::KIND, &name, e))?;
        Self::typed(&name, created)
    }

    async fn update<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.replace(obj, false).await
    }

    async fn update_status<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.replace(obj, true).await
    }

    async fn patch<K: Object>(&self, namespace: Option<&str>, name: &str, patch: &Patch) -> Result<K, ApiError> {
        self.send_patch(namespace, name, patch, false).await
    }

    async fn patch_status<K: Object>(&self, namespace: Option<&str>, name: &str, patch: &Patch) -> Result<K, ApiError> {
        self.send_patch(namespace, name, patch, true).await
    }

    async fn delete<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), ApiError> {
        let (api, _) = self.dynamic::<K>(namespace)?;
        api.delete(name, &DeleteParams::default()).await.map(|_| ()).map_err(|e| api_error(K::KIND, name, e))
    }

    async fn evict(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.evict(name, &EvictParams::default())
            .await
            .map(|_| ())
            .map_err(|e| api_error("Pod", &format!("{namespace}/{name}"), e))
    }

    async fn record_event(&self, event: EventRecord) {
        let now = SystemClock.now();
        self.events.publish(&event, now, || self.event_object(&event, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.to_string(),
            message: format!("{reason} says the server"),
            ..Status::default()
        }))
    }

    #[test]
    fn api_status_codes_map_to_the_errors_the_controllers_retry_or_report() {
        assert!(matches!(api_error("Node", "a", status(404, "NotFound")), ApiError::NotFound { .. }));
        assert!(matches!(api_error("Node", "a", status(409, "AlreadyExists")), ApiError::AlreadyExists { .. }));
        assert!(matches!(api_error("Node", "a", status(409, "Conflict")), ApiError::Conflict { .. }));
        assert!(matches!(api_error("Node", "a", status(422, "Invalid")), ApiError::Invalid { .. }));
        match api_error("Pod", "default/web", status(429, "TooManyRequests")) {
            ApiError::TooManyRequests { name, reason } => {
                assert_eq!(name, "default/web");
                assert!(reason.contains("TooManyRequests"), "{reason}");
            }
            other => panic!("429 is TooManyRequests, got {other:?}"),
        }
        assert!(matches!(api_error("Node", "a", status(500, "InternalError")), ApiError::Other(_)));
    }
}
