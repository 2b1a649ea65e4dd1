//! `kerf serve` under 200 concurrent clients: lists of 1,000 pods, watches, large objects
//! written and deleted, malformed and oversized bodies, wrongly typed fields. Its memory stays
//! within a fixed bound (`BOUND_MIB`), and stops growing once the history of changes that
//! watches replay is full (what a round stores, it deletes again).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

const CLIENTS: usize = 200;
const ROUNDS: usize = 6;
const PODS: usize = 1000;
/// About twice the peak measured for this load in a debug build (see docs/performance.md), a
/// margin for allocator and platform differences: the test fails only when memory is clearly
/// out of hand.
const BOUND_MIB: u64 = 512;

/// One HTTP/1.1 request; (status code, response bytes). Reads the whole response.
fn send(addr: &str, method: &str, path: &str, content_type: &str, body: &[u8]) -> (u16, usize) {
    let Ok(mut s) = TcpStream::connect(addr) else { return (0, 0) };
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).is_err() {
        return (0, 0);
    }
    // The server may answer (and close) before an oversized body is all sent.
    let _ = s.write_all(body);
    let mut first = [0u8; 16];
    let mut got = 0;
    while got < first.len() {
        match s.read(&mut first[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    let code = std::str::from_utf8(&first[..got])
        .ok()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut total = got;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    (code, total)
}

fn pod(name: &str, note: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","annotations":{{"note":"{note}"}}}},"spec":{{"containers":[{{"name":"c","image":"registry.k8s.io/pause:3.10","resources":{{"requests":{{"cpu":"100m"}}}}}}]}}}}"#
    )
    .into_bytes()
}

fn lease(name: &str, note: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"default","annotations":{{"note":"{note}"}}}},"spec":{{"holderIdentity":"x"}}}}"#
    )
    .into_bytes()
}

/// What client `i` does in round `round`.
fn client(addr: &str, i: usize, round: usize) {
    const JSON: &str = "application/json";
    let pods = "/api/v1/namespaces/default/pods";
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    match i % 5 {
        // A large object (a 512 KiB annotation) created, replaced and deleted.
        0 => {
            let name = format!("big-{i}-{round}");
            let note = "x".repeat(512 << 10);
            let (code, _) = send(addr, "POST", leases, JSON, &lease(&name, &note));
            assert_eq!(code, 201, "create {name}");
            let note = "y".repeat(512 << 10);
            let _ = send(addr, "PUT", &format!("{leases}/{name}"), JSON, &lease(&name, &note));
            let (code, _) = send(addr, "DELETE", &format!("{leases}/{name}"), JSON, b"");
            assert_eq!(code, 200, "delete {name}");
        }
        // Malformed bodies: 1 MiB of nesting and garbage, and (every 20th client) one over the
        // body limit.
        1 => {
            let nested = "[".repeat(1 << 20);
            let (code, _) = send(addr, "POST", pods, JSON, nested.as_bytes());
            assert_eq!(code, 400, "deeply nested body");
            let garbage: Vec<u8> = (0..1u32 << 20).map(|n| (n.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
            let (code, _) = send(addr, "POST", pods, JSON, &garbage);
            assert_eq!(code, 400, "garbage body");
            if i % 20 == 1 {
                let huge = vec![b' '; 9 << 20];
                let (code, _) = send(addr, "POST", pods, JSON, &huge);
                assert!(code == 400 || code == 413 || code == 0, "oversized body answered {code}");
            }
        }
        // Lists, whole and as a Table.
        2 => {
            let (code, bytes) = send(addr, "GET", pods, JSON, b"");
            assert_eq!(code, 200);
            assert!(bytes > PODS * 200, "the list holds the pods ({bytes} bytes)");
            let _ = send(addr, "GET", "/api/v1/pods?limit=100", JSON, b"");
        }
        // Watches from the current state, ending on their own.
        3 => {
            let (code, _) = send(addr, "GET", &format!("{pods}?watch=true&timeoutSeconds=2"), JSON, b"");
            assert_eq!(code, 200);
            let _ =
                send(addr, "GET", &format!("{leases}?watch=true&timeoutSeconds=1&allowWatchBookmarks=true"), JSON, b"");
        }
        // Wrongly typed fields and patches of a pod that does not exist.
        _ => {
            let wrong = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w","namespace":"default"},"spec":"not an object"}"#;
            let (code, _) = send(addr, "POST", pods, JSON, wrong);
            assert!(code == 400 || code == 422, "wrongly typed spec answered {code}");
            let _ = send(addr, "PATCH", &format!("{pods}/nobody"), "application/merge-patch+json", b"{\"spec\":1}");
        }
    }
}

/// `VmRSS` or `VmHWM` of a process, in MiB.
fn memory_mib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

#[test]
fn two_hundred_concurrent_clients_keep_kerf_serve_within_its_memory_bound() {
    let s = Served::start("serve-load", &["--controllers", "none"]);
    let addr = s.addr().to_string();
    let pid = s.pid();
    // 1,000 pods to list and watch.
    std::thread::scope(|scope| {
        for t in 0..8 {
            let addr = &addr;
            scope.spawn(move || {
                for n in (t..PODS).step_by(8) {
                    let note = "n".repeat(200);
                    let (code, _) = send(
                        addr,
                        "POST",
                        "/api/v1/namespaces/default/pods",
                        "application/json",
                        &pod(&format!("p{n}"), &note),
                    );
                    assert_eq!(code, 201, "pod p{n}");
                }
            });
        }
    });
    let seeded = memory_mib(pid, "VmRSS");
    let mut after = Vec::new();
    for round in 0..ROUNDS {
        std::thread::scope(|scope| {
            for i in 0..CLIENTS {
                let addr = &addr;
                std::thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(scope, move || client(addr, i, round))
                    .expect("client thread");
            }
        });
        after.push(memory_mib(pid, "VmRSS"));
    }
    let peak = memory_mib(pid, "VmHWM");
    eprintln!(
        "kerf serve RSS: {seeded} MiB with {PODS} pods; after each round of {CLIENTS} clients {after:?} MiB; peak {peak} MiB"
    );
    assert!(peak < BOUND_MIB, "peak RSS {peak} MiB over the {BOUND_MIB} MiB bound (after rounds: {after:?})");
    // No growth once the history is full (third round on): the last round ends where the
    // third did, give or take.
    assert!(after[ROUNDS - 1] <= after[2] + 64, "RSS grows round after round: {after:?} MiB");

    // Still serving.
    let (code, _) = send(&addr, "GET", "/api/v1/namespaces/default/pods?limit=1", "application/json", b"");
    assert_eq!(code, 200, "{}", s.stderr());
}
