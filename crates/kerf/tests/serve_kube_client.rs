//! `kerf serve` used by a kube-rs client: a watcher sees every change in order, and a watch
//! restarted from the last resourceVersion it saw gets exactly the changes made meanwhile.

mod common;

use std::time::Duration;

use common::Served;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config};

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(LeaseSpec { holder_identity: Some("kerf-test".to_string()), ..Default::default() }),
    }
}

fn rv(l: &Lease) -> u64 {
    l.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).expect("numeric resourceVersion")
}

async fn client(s: &Served) -> Client {
    let kc = kube::config::Kubeconfig::read_from(&s.kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    Client::try_from(config).expect("client")
}

#[test]
fn kube_watcher_sees_every_change_in_order_and_resumes_from_its_last_resource_version() {
    let s = Served::start("kube", &["--controllers", "none"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let api: Api<Lease> = Api::namespaced(client(&s).await, "default");
        let pp = PostParams::default();
        api.create(&pp, &lease("before")).await.expect("create before");

        let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
        let mut initial = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await {
                Ok(Ok(Some(Event::InitApply(l)))) => initial.push(l.metadata.name.clone().unwrap_or_default()),
                Ok(Ok(Some(Event::InitDone))) => break,
                Ok(Ok(Some(_))) => {}
                other => panic!("watcher ended before its initial list: {other:?}"),
            }
        }
        assert_eq!(initial, ["before"]);

        api.create(&pp, &lease("a")).await.expect("create a");
        api.create(&pp, &lease("b")).await.expect("create b");
        let patch = serde_json::json!({"metadata": {"labels": {"step": "1"}}});
        api.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch a");
        api.delete("before", &DeleteParams::default()).await.expect("delete before");

        let mut seen = Vec::new();
        let mut last = 0;
        while seen.len() < 4 {
            let ev = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
                .await
                .expect("a change within 20s")
                .expect("watch stream")
                .expect("stream open");
            let (what, l) = match ev {
                Event::Apply(l) => ("apply", l),
                Event::Delete(l) => ("delete", l),
                _ => continue,
            };
            assert!(rv(&l) > last, "resourceVersions increase: {} after {last}", rv(&l));
            last = rv(&l);
            let labelled = l.metadata.labels.as_ref().is_some_and(|m| m.contains_key("step"));
            seen.push(format!(
                "{what} {}{}",
                l.metadata.name.unwrap_or_default(),
                if labelled { " labelled" } else { "" }
            ));
        }
        assert_eq!(seen, ["apply a", "apply b", "apply a labelled", "delete before"]);
        drop(stream);

        // Changes while nobody watches, then a watch resumed from the last resourceVersion seen.
        api.create(&pp, &lease("c")).await.expect("create c");
        api.delete("b", &DeleteParams::default()).await.expect("delete b");
        let wp = WatchParams::default().timeout(3);
        let mut resumed = api.watch(&wp, &last.to_string()).await.expect("resume watch").boxed();
        let mut after = Vec::new();
        while after.len() < 2 {
            match tokio::time::timeout(Duration::from_secs(10), resumed.try_next()).await {
                Ok(Ok(Some(WatchEvent::Added(l)))) => {
                    after.push(format!("added {}", l.metadata.name.unwrap_or_default()))
                }
                Ok(Ok(Some(WatchEvent::Deleted(l)))) => {
                    after.push(format!("deleted {}", l.metadata.name.unwrap_or_default()))
                }
                Ok(Ok(Some(WatchEvent::Modified(l)))) => {
                    after.push(format!("modified {}", l.metadata.name.unwrap_or_default()))
                }
                Ok(Ok(Some(_))) => {}
                other => panic!("resumed watch ended early: {other:?} after {after:?}"),
            }
        }
        assert_eq!(after, ["added c", "deleted b"]);
    });
    assert!(s.stop().success());
}
