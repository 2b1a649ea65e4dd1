//! `kerf serve` used by a second real client: the official Python `kubernetes` client
//! (tools/requirements-kube-client.txt) runs tests/python/client_suite.py against it: list,
//! watch, create, patches of every type (merge, strategic, JSON, server-side apply), dry runs and
//! delete, of built-in kinds and of a NodePool through CustomObjectsApi.
//!
//! The interpreter is the one `KERF_KUBE_PYTHON` names (tools/test installs the client in its
//! venv and sets it); without it the test fails, saying how to get one.

mod common;

use std::process::Command;

use common::*;

/// The Python that has the `kubernetes` client, or a panic saying how to get one.
fn python() -> String {
    let python = std::env::var("KERF_KUBE_PYTHON").unwrap_or_else(|_| {
        panic!(
            "KERF_KUBE_PYTHON is not set: it must name a Python with the `kubernetes` client of \
             tools/requirements-kube-client.txt (python3 -m venv /tmp/kerf-moto-venv && \
             /tmp/kerf-moto-venv/bin/pip install -r tools/requirements-kube-client.txt && \
             export KERF_KUBE_PYTHON=/tmp/kerf-moto-venv/bin/python), as tools/test does"
        )
    });
    let found = Command::new(&python).args(["-c", "import kubernetes"]).output();
    match found {
        Ok(out) if out.status.success() => python,
        Ok(out) => panic!(
            "{python} cannot import the `kubernetes` client (pip install -r tools/requirements-kube-client.txt): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("cannot run KERF_KUBE_PYTHON={python}: {e}"),
    }
}

#[test]
fn the_python_kubernetes_client_lists_watches_creates_patches_and_deletes_as_on_a_real_api_server() {
    let python = python();
    let s = Served::start("python-client", &["--controllers", "none"]);
    let out = Command::new(&python)
        .arg(repo_file("crates/kerf/tests/python/client_suite.py"))
        .env("KUBECONFIG", &s.kubeconfig)
        .env("HOME", &s.dir)
        .output()
        .expect("run the Python client suite");
    // unittest reports on stderr, one line a test.
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client suite failed:\n{report}\n{}\nserver: {}",
        String::from_utf8_lossy(&out.stdout),
        s.stderr()
    );
    let passed = report.lines().filter(|l| l.ends_with(" ... ok")).count();
    assert_eq!(passed, 8, "every test of the suite ran and passed:\n{report}");
    assert!(s.stop().success());
}
