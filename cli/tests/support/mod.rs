//! What the end-to-end tests of `duet serve` share: the binary, the shipped model, a free
//! loopback port, and a server process started with given flags, stopped on drop.
#![allow(dead_code)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "e2e-token";

pub fn duet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_duet"))
}

/// Quick `duet train` settings for tests (the defaults are the shipped recipe: three seeds of
/// five members).
pub const QUICK_TRAIN: [&str; 8] = [
    "--ensemble",
    "2",
    "--max-epochs",
    "80",
    "--hidden",
    "16",
    "--seed",
    "7",
];

/// `duet train --data data --out out` with [`QUICK_TRAIN`] and `extra`, which must succeed; what
/// it said on stderr.
pub fn train_quick(data: &Path, out: &Path, extra: &[&str]) -> String {
    let trained = duet()
        .args(["train", "--data", path(data), "--out", path(out)])
        .args(QUICK_TRAIN)
        .args(extra)
        .output()
        .expect("duet train");
    let said = String::from_utf8_lossy(&trained.stderr).into_owned();
    assert!(trained.status.success(), "{said}");
    said
}

pub fn model_dir() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../models/default")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

pub struct Server {
    pub child: Child,
    pub base: String,
    log: Arc<Mutex<String>>,
    grpc: Arc<Mutex<Option<u16>>>,
}

impl Server {
    /// The shipped model with the registry in `dir/registry.sqlite` and the token in
    /// `dir/token`.
    pub fn start(dir: &Path) -> Server {
        Server::start_with(&[
            "--state".into(),
            dir.join("registry.sqlite").into(),
            "--token-file".into(),
            dir.join("token").into(),
        ])
    }

    /// `duet serve --engine burn` on the shipped model, with `flags`, on a port the kernel
    /// gives it (read back from its log, so tests running at once never collide on a port);
    /// returns once `/readyz` answers 200. Its log is kept in `log` for failure messages.
    pub fn start_with(flags: &[OsString]) -> Server {
        Server::start_model(&model_dir(), flags)
    }

    /// `start_with` on the model in `model`.
    pub fn start_model(model: &Path, flags: &[OsString]) -> Server {
        Server::start_at("127.0.0.1:0", model, flags)
    }

    /// `start_model` listening on `addr` (port 0: the kernel's choice, read back). `DUET_TOKEN`
    /// is not passed on: a test gives its token by flag. Pass `--grpc-addr 127.0.0.1:0` for gRPC
    /// on a port of the kernel's choice too (`grpc_port` reads it back).
    pub fn start_at(addr: &str, model: &Path, flags: &[OsString]) -> Server {
        let mut child = duet()
            .args(["serve", "--engine", "burn", "--addr", addr])
            .arg("--model")
            .arg(model)
            .args(flags)
            .env("RUST_LOG", "info")
            .env_remove("DUET_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("duet serve starts");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let grpc = Arc::new(Mutex::new(None));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        {
            let (log, grpc) = (log.clone(), grpc.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let addr = line
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("addr="))
                        .map(str::to_string);
                    if let Some(addr) = addr {
                        if line.contains("serving gRPC") {
                            let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
                            if let Ok(mut g) = grpc.lock() {
                                *g = port;
                            }
                        } else if line.contains("listening") {
                            let _ = addr_tx.send(addr.replace("0.0.0.0:", "127.0.0.1:"));
                        }
                    }
                    if let Ok(mut l) = log.lock() {
                        l.push_str(&line);
                        l.push('\n');
                    }
                }
            });
        }
        let Ok(addr) = addr_rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(200));
            panic!(
                "duet serve did not listen:\n{}",
                log.lock().map(|l| l.clone()).unwrap_or_default()
            );
        };
        let server = Server {
            child,
            base: format!("http://{addr}"),
            log,
            grpc,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Ok(r) = ureq::get(&format!("{}/readyz", server.base)).call()
                && r.status() == 200
            {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("duet serve did not become ready:\n{}", server.log());
    }

    /// The value of metric `name` (the first sample line that starts with it) on `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let text = ureq::get(&self.url("/metrics"))
            .call()
            .expect("metrics")
            .into_string()
            .expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    /// The port gRPC listens on, as the server logged it (`serving gRPC addr=`); waits for the
    /// line up to a minute.
    pub fn grpc_port(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(port) = self.grpc.lock().ok().and_then(|g| *g) {
                return port;
            }
            assert!(
                Instant::now() < deadline,
                "duet serve logged no gRPC address:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The name of the model it serves (`GET /v1/models`).
    pub fn model_name(&self) -> String {
        ureq::get(&self.url("/v1/models"))
            .call()
            .expect("models")
            .into_json::<serde_json::Value>()
            .expect("json")[0]["name"]
            .as_str()
            .expect("name")
            .to_string()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// SIGTERM, then the exit status within `within`.
    pub fn stop(self, within: Duration) -> std::process::ExitStatus {
        self.signal("TERM");
        self.wait(within)
    }

    pub fn wait(mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "duet serve ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

/// One test at a time: each loads the machine's two cores on its own, and its bounds (peak
/// memory, probe latency) are its own server's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Holds the test binary's one place until dropped.
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Peak resident memory of process `pid`, MiB (`VmHWM`).
pub fn peak_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmHWM")
}

/// `pid`'s resident memory now (`VmRSS`), in MiB.
pub fn resident_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS")
}

/// A memory line of `/proc/<pid>/status` (`key: N kB`), in MiB.
fn status_mib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"));
    kib / 1024.0
}

/// The status code in a raw HTTP/1.1 answer's status line (0 where there is none).
pub fn http_status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
