//! `kerf serve` speaks the Kubernetes protobuf encoding: kubectl's generators (which send their
//! objects in protobuf) create what they create on a real cluster, an `Accept` list preferring
//! protobuf is answered in it (read back here with k8s-pb's prost types, not the server's own
//! transcoder), watches stream length-prefixed frames, and JSON stays the default.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use k8s_pb::api::core::v1::PodList;
use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Sends a GET with `accept` and returns the connection after the response headers, and those.
fn get(s: &Served, path: &str, accept: &str) -> (std::net::TcpStream, String) {
    let mut c = std::net::TcpStream::connect(s.addr()).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    // HTTP/1.0: the body is the rest of the stream, not chunked.
    write!(c, "GET {path} HTTP/1.0\r\nHost: {}\r\nAccept: {accept}\r\n\r\n", s.addr()).expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).expect("response headers");
        head.push(byte[0]);
    }
    (c, String::from_utf8_lossy(&head).to_lowercase())
}

/// The message inside a `k8s\0` envelope, with the envelope's kind.
fn unwrap(body: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(&body[..4], b"k8s\0", "the protobuf magic");
    let u = Unknown::decode(&body[4..]).expect("runtime.Unknown");
    (u.type_meta.and_then(|t| t.kind).unwrap_or_default(), u.raw.unwrap_or_default())
}

#[test]
fn kubectl_generators_send_protobuf_and_their_objects_read_back_as_created() {
    let s = Served::start("pb-create", &["--controllers", "none"]);
    assert!(kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]).contains("created"));
    assert!(kubectl_ok(&s, &["create", "namespace", "team-a"]).contains("created"));
    let pdb = kubectl_ok(&s, &["create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=1"]);
    assert!(pdb.contains("created"), "{pdb}");
    assert!(kubectl_ok(&s, &["create", "priorityclass", "high", "--value=1000"]).contains("created"));
    assert!(kubectl_ok(&s, &["run", "one", "--image=busybox", "--labels=app=one"]).contains("created"));

    let got = kubectl_ok(
        &s,
        &["get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"],
    );
    assert_eq!(got, "2 nginx");
    let yaml = kubectl_ok(&s, &["get", "namespace", "team-a", "-o", "yaml"]);
    assert!(yaml.contains("name: team-a") && yaml.contains("kind: Namespace"), "{yaml}");
    let yaml = kubectl_ok(&s, &["get", "pdb", "web", "-o", "yaml"]);
    assert!(yaml.contains("minAvailable: 1") && yaml.contains("app: web"), "{yaml}");
    assert_eq!(kubectl_ok(&s, &["get", "priorityclass", "high", "-o", "jsonpath={.value}"]), "1000");
    let yaml = kubectl_ok(&s, &["get", "pods", "-o", "yaml"]);
    assert!(yaml.contains("image: busybox") && yaml.contains("name: one"), "{yaml}");
    // The creator is recorded as the API server records it.
    let managers = kubectl_ok(
        &s,
        &["get", "deployment", "web", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"],
    );
    assert_eq!(managers, "kubectl-create");
}

#[test]
fn protobuf_is_answered_when_preferred_and_a_watch_streams_length_prefixed_frames() {
    let s = Served::start("pb-read", &["--controllers", "none"]);
    kubectl_ok(&s, &["run", "one", "--image=busybox"]);

    let (mut c, head) = get(&s, "/api/v1/namespaces/default/pods", &format!("{PROTOBUF}, application/json"));
    assert!(head.contains(&format!("content-type: {PROTOBUF}")), "{head}");
    let mut body = Vec::new();
    c.read_to_end(&mut body).expect("body");
    let (kind, raw) = unwrap(&body);
    assert_eq!(kind, "PodList");
    let list = PodList::decode(raw.as_slice()).expect("a PodList");
    let pod = &list.items[0];
    assert_eq!(pod.metadata.as_ref().and_then(|m| m.name.as_deref()), Some("one"));
    let image = pod.spec.as_ref().and_then(|s| s.containers[0].image.as_deref());
    assert_eq!(image, Some("busybox"));

    // JSON first in the list, or a custom resource: JSON.
    let (mut c, head) = get(&s, "/api/v1/namespaces/default/pods", &format!("application/json, {PROTOBUF}"));
    assert!(head.contains("content-type: application/json"), "{head}");
    let mut json = String::new();
    c.read_to_string(&mut json).expect("body");
    assert!(json.starts_with("{\"apiVersion\":\"v1\""), "{json}");
    let (_, head) = get(&s, "/apis/karpenter.sh/v1/nodepools", PROTOBUF);
    assert!(head.contains("content-type: application/json"), "{head}");

    // A custom resource sent in protobuf: 415, naming the kind.
    let envelope = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("karpenter.sh/v1".to_string()),
            kind: Some("NodePool".to_string()),
        }),
        raw: Some(Vec::new()),
        content_encoding: None,
        content_type: None,
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(envelope.encode_to_vec());
    let mut c = std::net::TcpStream::connect(s.addr()).expect("connect");
    let head = format!(
        "POST /apis/karpenter.sh/v1/nodepools HTTP/1.0\r\nContent-Type: {PROTOBUF}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).and_then(|_| c.write_all(&body)).expect("send");
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.0 415"), "{answer}");
    assert!(answer.contains("NodePool (karpenter.sh/v1)"), "{answer}");

    let (mut w, head) = get(&s, "/api/v1/namespaces/default/pods?watch=true", &format!("{PROTOBUF};stream=watch"));
    assert!(head.contains("content-type: application/vnd.kubernetes.protobuf;stream=watch"), "{head}");
    let mut frame = || {
        let mut len = [0u8; 4];
        w.read_exact(&mut len).expect("frame length");
        let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
        w.read_exact(&mut buf).expect("frame");
        let event = WatchEvent::decode(buf.as_slice()).expect("a WatchEvent");
        let (kind, raw) = unwrap(&event.object.and_then(|o| o.raw).unwrap_or_default());
        assert_eq!(kind, "Pod");
        let pod = k8s_pb::api::core::v1::Pod::decode(raw.as_slice()).expect("a Pod");
        (event.r#type.unwrap_or_default(), pod.metadata.and_then(|m| m.name).unwrap_or_default())
    };
    assert_eq!(frame(), ("ADDED".to_string(), "one".to_string()));
    // The pods' status changes come as MODIFIED frames in between.
    let mut until = |want: (&str, &str)| {
        for _ in 0..50 {
            let (t, name) = frame();
            if (t.as_str(), name.as_str()) == want {
                return;
            }
            assert_eq!(t, "MODIFIED", "{want:?} expected, {t} {name} seen");
        }
        panic!("no {want:?} frame in 50");
    };
    kubectl_ok(&s, &["run", "two", "--image=busybox"]);
    until(("ADDED", "two"));
    kubectl_ok(&s, &["delete", "pod", "one", "--wait=false"]);
    until(("DELETED", "one"));
}
