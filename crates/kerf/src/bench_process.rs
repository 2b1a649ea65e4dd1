//! `kerf` child processes for the benchmarks that run kerf the way an operator does (`kerf
//! serve`, `kerf controller`), and plain HTTP/1.1 to them: one home for starting this executable,
//! finding where it serves, stopping it, and asking it things.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// One plain HTTP/1.1 request to `addr`; (status, body).
pub fn http(addr: &str, method: &str, path: &str, body: Option<(&str, &str)>) -> anyhow::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let (ctype, text) = body.unwrap_or(("application/json", ""));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kerf-bench\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    s.write_all(req.as_bytes())?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let resp = String::from_utf8_lossy(&resp);
    let code = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { unchunk(body) } else { body.to_string() };
    Ok((code, body))
}

/// The body of a chunked response.
fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A child process of this executable, its stderr in a file; stopped when dropped. A wrapped
/// process leads a process group of its own, so the wrapper's children (a profiler runs the
/// measured process as its child) are signalled with it; an unwrapped one stays in this
/// process's group (an interrupt at the terminal reaches it).
pub struct Proc {
    child: Child,
    stderr: PathBuf,
    /// Whether signals go to the process's group (a wrapped process) or the process alone.
    group: bool,
    /// How long a stop waits after SIGTERM before SIGKILL (a profiler writes its data first).
    grace: Duration,
}

impl Proc {
    pub fn spawn(dir: &Path, name: &str, args: &[&str]) -> anyhow::Result<Proc> {
        Proc::spawn_wrapped(dir, name, args, None)
    }

    /// As [`Proc::spawn`], run by `wrapper` (a profiler, e.g. `heaptrack`) when one is given:
    /// `wrapper EXE ARGS`. Figures read from the process (its peak RSS) are then the wrapper's.
    pub fn spawn_wrapped(dir: &Path, name: &str, args: &[&str], wrapper: Option<&str>) -> anyhow::Result<Proc> {
        let exe = std::env::current_exe().context("finding the kerf executable")?;
        let stderr = dir.join(format!("{name}.stderr"));
        let mut command = match wrapper {
            Some(w) => {
                let mut c = Command::new(w);
                c.arg(exe);
                c
            }
            None => Command::new(exe),
        };
        if wrapper.is_some() {
            command.process_group(0);
        }
        let child = command
            .args(args)
            .env("KERF_LOG", std::env::var("KERF_BENCH_LOG").unwrap_or_else(|_| "info".to_string()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).context("stderr file")?)
            .spawn()
            .with_context(|| format!("starting kerf {}", args.first().copied().unwrap_or_default()))?;
        let group = wrapper.is_some();
        let grace = Duration::from_secs(if group { 120 } else { 30 });
        Ok(Proc { child, stderr, group, grace })
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits up to `limit` for a line of stderr containing `marker`.
    pub fn line(&mut self, marker: &str, limit: Duration) -> anyhow::Result<String> {
        let start = Instant::now();
        loop {
            if let Some(l) = self.stderr().lines().find(|l| l.contains(marker)) {
                return Ok(l.to_string());
            }
            self.still_running()?;
            if start.elapsed() > limit {
                bail!("no '{marker}' within {}s: {}", limit.as_secs(), self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// An error saying how the process ended, if it has.
    pub fn still_running(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!("the process exited with {status}: {}", self.stderr());
        }
        Ok(())
    }

    /// SIGTERM, then waits for the process to exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.signal("-TERM");
        let start = Instant::now();
        while self.child.try_wait()?.is_none() {
            if start.elapsed() > self.grace {
                bail!("did not stop within {}s of SIGTERM", self.grace.as_secs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id();
        let target = if self.group { format!("-{pid}") } else { pid.to_string() };
        let _ = Command::new("kill").args([signal, "--", &target]).stderr(Stdio::null()).status();
    }

    /// Peak resident set size (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<u64>().ok()?;
        Some(kb * 1024)
    }
}

impl Drop for Proc {
    /// An unwrapped process is killed; a wrapped one gets SIGTERM, and SIGKILL with its group
    /// after the grace period (a profiler writes its data as the process exits).
    fn drop(&mut self) {
        if self.group && matches!(self.child.try_wait(), Ok(None)) {
            self.signal("-TERM");
            let start = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) && start.elapsed() < self.grace {
                std::thread::sleep(Duration::from_millis(50));
            }
            self.signal("-KILL");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kerf serve SCENARIO --controllers none` on a free loopback port with its kubeconfig in
/// `dir`, waiting up to `limit` for it to serve (a big scenario takes a while to load). Returns
/// the process, the server's `host:port` and the kubeconfig's path.
pub fn serve(dir: &Path, scenario: &Path, limit: Duration) -> anyhow::Result<(Proc, String, PathBuf)> {
    let kubeconfig = dir.join("kubeconfig");
    let sc = scenario.to_str().context("the scenario path is not UTF-8")?;
    let kc = kubeconfig.to_str().context("the kubeconfig path is not UTF-8")?;
    let mut served = Proc::spawn(
        dir,
        "serve",
        &["serve", sc, "--controllers", "none", "--listen", "127.0.0.1:0", "--kubeconfig", kc],
    )?;
    let line = served.line("is served on http://", limit)?;
    let server = line.split("http://").nth(1).map(str::trim).unwrap_or_default().to_string();
    Ok((served, server, kubeconfig))
}

/// GET `path` from `addr` (0 and nothing when it cannot be reached).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    http(addr, "GET", path, None).unwrap_or((0, String::new()))
}
