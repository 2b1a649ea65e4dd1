use k8s_pb::api::apps::v1::Deployment;
use k8s_pb::api::core::v1::Pod;
use serde_json::json;

use super::*;

/// The message inside an envelope.
fn raw(enveloped: &[u8]) -> Vec<u8> {
    let unknown = Unknown::decode(&enveloped[4..]).unwrap();
    unknown.raw.unwrap()
}

/// An envelope around `raw` for `api_version`/`kind`.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.to_string()), kind: Some(kind.to_string()) }),
        raw: Some(raw),
        content_encoding: None,
        content_type: None,
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
            "creationTimestamp": "2025-01-02T03:04:05Z", "generation": 2,
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx", "args": ["-g", ""],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5}}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "web", "defaultMode": 420}}],
                    "terminationGracePeriodSeconds": 30}}},
        "status": {"replicas": 1, "conditions": [{"type": "Available", "status": "True",
            "lastUpdateTime": "2025-01-02T03:04:05Z"}]}
    })
}

#[test]
fn the_schema_table_loads() {
    assert_eq!(schema::parse_errors(), None);
    assert!(message("apps/v1", "Deployment").is_some());
    assert!(message("v1", "Status").is_some(), "meta types under v1");
    assert!(message("karpenter.sh/v1", "NodePool").is_none());
    assert!(message("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer").is_none());
}

#[test]
fn a_deployment_encodes_as_k8s_pb_reads_it_and_round_trips_through_its_prost_type() {
    let obj = deployment();
    let bytes = encode(&obj).unwrap();
    assert!(bytes.starts_with(b"k8s\0"));
    let d = Deployment::decode(raw(&bytes).as_slice()).unwrap();
    let meta = d.metadata.clone().unwrap();
    assert_eq!(meta.name.as_deref(), Some("web"));
    assert_eq!(meta.creation_timestamp.unwrap().seconds, Some(1_735_787_045));
    let spec = d.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(0), "an explicit zero is sent");
    let pod = spec.template.unwrap().spec.unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.ports[0].container_port, Some(80));
    assert_eq!(c.resources.clone().unwrap().requests["cpu"].string.as_deref(), Some("500m"));
    let probe = c.readiness_probe.clone().unwrap();
    let port = probe.handler.unwrap().http_get.unwrap().port.unwrap();
    assert_eq!((port.r#type, port.str_val.as_deref()), (Some(1), Some("http")), "inline handler, IntOrString");
    assert_eq!(pod.volumes[0].volume_source.clone().unwrap().config_map.unwrap().default_mode, Some(420));
    let fields = meta.managed_fields[0].fields_v1.clone().unwrap().raw.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&fields).unwrap(), json!({"f:spec": {"f:replicas": {}}}));

    // What prost writes back decodes to the same object.
    let again = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).unwrap();
    assert_eq!(again, obj);
}

#[test]
fn what_go_writes_for_unset_fields_is_left_out_as_its_json_leaves_it_out() {
    // Go writes every non-pointer field: empty strings and a zero creationTimestamp.
    let pod = Pod {
        metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".to_string()),
            namespace: Some(String::new()),
            generate_name: Some(String::new()),
            creation_timestamp: Some(Default::default()),
            ..Default::default()
        }),
        spec: Some(k8s_pb::api::core::v1::PodSpec {
            containers: vec![k8s_pb::api::core::v1::Container {
                name: Some("c".to_string()),
                image: Some("i".to_string()),
                working_dir: Some(String::new()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let obj = decode(&envelope("v1", "Pod", pod.encode_to_vec())).unwrap();
    assert_eq!(
        obj,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
    );
}

#[test]
fn a_kind_without_a_message_is_named_in_the_error() {
    let body = envelope("karpenter.sh/v1", "NodePool", Vec::new());
    let err = decode(&body).unwrap_err();
    assert!(err.to_string().contains("NodePool (karpenter.sh/v1)"), "{err}");
    assert!(matches!(decode(b"{\"kind\":1}"), Err(ProtoError::Malformed(_))));
    let bad = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": 7}]}});
    assert_eq!(encode(&bad).unwrap_err().to_string(), "Pod.spec.containers[0].name: must be a string, got 7");
}

#[test]
fn a_watch_frame_is_a_length_then_a_watch_event_holding_the_enveloped_object() {
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    let frame = watch_frame("ADDED", &obj).unwrap();
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    assert_eq!(decode(&event.object.unwrap().raw.unwrap()).unwrap(), obj);
}

#[test]
fn micro_times_keep_microseconds() {
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
        "eventTime": "2025-01-02T03:04:05.123456Z", "involvedObject": {"kind": "Pod"}});
    assert_eq!(decode(&encode(&ev).unwrap()).unwrap(), ev);
}
