//! A `kerf controller` process for tests against a [`Served`] cluster: started, its metrics and
//! probe addresses read from its first line, stopped with SIGTERM or killed when dropped.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{Served, kubectl_ok};

/// A `kerf controller` process, its stderr in a file, stopped when dropped.
pub struct Controller {
    pub child: Child,
    pub stderr: PathBuf,
    pub metrics: String,
    pub health: String,
}

impl Controller {
    /// `kerf controller --cloud kwok` against `s` with `extra` arguments.
    pub fn start(s: &Served, name: &str, extra: &[&str]) -> Controller {
        Controller::spawn(s, name, Controller::command(s, extra))
    }

    /// The command [`Controller::start`] runs, for a test to add to (an environment variable).
    pub fn command(s: &Served, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kerf"));
        command
            .args(["controller", "--cloud", "kwok", "--kubeconfig"])
            .arg(&s.kubeconfig)
            .args(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
            .args(extra);
        command
    }

    /// Runs `command` (a `kerf controller` against `s`), its stderr in the server's directory,
    /// and waits until it says where it serves metrics and probes.
    pub fn spawn(s: &Served, name: &str, mut command: Command) -> Controller {
        let stderr = s.dir.join(format!("controller-{name}.stderr"));
        let child = command
            .env("KERF_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start kerf controller");
        let mut c = Controller { child, stderr, metrics: String::new(), health: String::new() };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = c.stderr();
            if let Some(line) =
                text.lines().find(|l| l.starts_with("kerf controller:") && l.contains("metrics on http://"))
            {
                let after = |marker: &str| {
                    line.split(marker).nth(1).and_then(|r| r.split('/').next()).unwrap_or_default().to_string()
                };
                c.metrics = after("metrics on http://");
                c.health = after("probes on http://");
                break;
            }
            if let Ok(Some(status)) = c.child.try_wait() {
                panic!("kerf controller exited with {status}: {text}");
            }
            assert!(Instant::now() < deadline, "kerf controller did not start within 30s: {text}");
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn metrics(&self) -> String {
        get(&self.metrics, "/metrics").1
    }

    pub fn readyz(&self) -> (u16, String) {
        get(&self.health, "/readyz")
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "kerf controller did not stop within 20s of SIGTERM: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` from `addr`: (status code, body).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return (0, String::new()) };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let code = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// The whitespace-separated words kubectl prints for `args`.
pub fn words(s: &Served, args: &[&str]) -> BTreeSet<String> {
    kubectl_ok(s, args).split_whitespace().map(str::to_string).collect()
}
