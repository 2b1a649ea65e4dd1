//! A `kerf serve` process for tests: started on a free loopback port, its kubeconfig in a
//! fresh directory, stopped with SIGTERM when dropped.

#![allow(dead_code)]

/// The EC2NodeClass the kwok end-to-end tests apply (every selector answered by the kwok
/// cloud), as a literal document followed by `---`, for `concat!` with the test's own objects.
#[allow(unused_macros)]
macro_rules! demo_node_class {
    () => {
        r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
---
"#
    };
}

pub mod controller;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Served {
    child: Child,
    /// The arguments it was started with (a restart uses them again).
    args: Vec<String>,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
}

pub fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

impl Served {
    /// Starts `kerf serve ARGS --listen 127.0.0.1:0 --kubeconfig DIR/kubeconfig` and waits until
    /// it answers.
    pub fn start(test: &str, args: &[&str]) -> Served {
        let dir = std::env::temp_dir().join(format!("kerf-serve-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join("kubeconfig");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let child = Served::spawn(&dir, &args, "127.0.0.1:0");
        let mut served = Served { child, args, dir, kubeconfig, server: String::new() };
        served.await_kubeconfig();
        served
    }

    fn spawn(dir: &Path, args: &[String], listen: &str) -> Child {
        Command::new(env!("CARGO_BIN_EXE_kerf"))
            .arg("serve")
            .args(args)
            .args(["--listen", listen, "--kubeconfig"])
            .arg(dir.join("kubeconfig"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr")).expect("stderr file"))
            .spawn()
            .expect("start kerf serve")
    }

    /// Waits until the server has written its kubeconfig, and reads its address from it.
    fn await_kubeconfig(&mut self) {
        let served = self;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&served.kubeconfig)
                && let Some(line) = text.lines().find(|l| l.trim_start().starts_with("server:"))
            {
                served.server = line.trim_start().trim_start_matches("server:").trim().to_string();
                break;
            }
            if let Ok(Some(status)) = served.child.try_wait() {
                panic!("kerf serve exited with {status}: {}", served.stderr());
            }
            assert!(Instant::now() < deadline, "kerf serve wrote no kubeconfig in 30s: {}", served.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server with SIGKILL: its state is lost (it keeps none on disk).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a killed server again with the same arguments on the same address, so clients'
    /// kubeconfigs stay valid. Its stderr so far is kept in `stderr.N`.
    pub fn restart(&mut self, n: usize) {
        let _ = std::fs::rename(self.dir.join("stderr"), self.dir.join(format!("stderr.{n}")));
        let _ = std::fs::remove_file(&self.kubeconfig);
        let listen = self.addr().to_string();
        self.child = Served::spawn(&self.dir, &self.args, &listen);
        self.await_kubeconfig();
        assert_eq!(self.addr(), listen, "restarted on the same address");
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> &str {
        self.server.trim_start_matches("http://")
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "kerf serve did not stop within 20s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kubectl command against `served`, failing clearly when kubectl is not installed.
pub fn kubectl_cmd(served: &Served) -> Command {
    let found =
        Command::new("kubectl").arg("version").arg("--client").stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "kubectl is not installed (or not on PATH): these tests drive `kerf serve` with the real kubectl; install kubectl v1.32"
    );
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig").arg(&served.kubeconfig).arg("--request-timeout=20s");
    c
}

pub fn kubectl(served: &Served, args: &[&str]) -> Output {
    kubectl_cmd(served).args(args).output().expect("run kubectl")
}

/// kubectl's stdout; panics with its stderr (and the server's) when it fails.
pub fn kubectl_ok(served: &Served, args: &[&str]) -> String {
    let out = kubectl(served, args);
    assert!(
        out.status.success(),
        "kubectl {} failed: {}\nserver: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        served.stderr()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `check` until it gives a value, or panics after `secs` naming `what`.
pub fn eventually<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs}s waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One raw HTTP/1.1 request; returns (status code, body).
pub fn http(served: &Served, method: &str, path: &str, content_type: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(served.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        served.addr(),
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let code = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

/// `kerf simulate` of the scenario `yaml` (written as `name`.yaml in a directory of its own for
/// the test binary `tag`), its JSON report; the run must succeed.
pub fn simulate_report(tag: &str, name: &str, yaml: &str) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("kerf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scenario directory");
    let path = write(&dir, &format!("{name}.yaml"), yaml);
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().expect("utf-8 path"), "--report", "json"])
        .output()
        .expect("run kerf");
    std::fs::remove_file(&path).ok();
    assert!(out.status.success(), "kerf simulate {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write manifest");
    p
}
