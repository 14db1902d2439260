//! The real `duet extender` against hostile requests, over loopback, on a cluster that never
//! answers (its guards need none, so no control plane): flag values that cannot work refused
//! at start; a half-sent header closed; a pod of a million empty containers, and a body of a
//! million one-byte chunks, taken at their text's cost; a declared length over --max-body-bytes
//! refused before the body; more nodes than --max-nodes refused where they are read; bytes after
//! the JSON refused; a long string where an array belongs named by its length, not echoed; a
//! paused body cut off; SIGTERM not held up by a half-sent body; --max-connections holding while
//! probes answer. Every refusal is a JSON error naming its flag.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::{duet, http_status};

#[path = "support/kube.rs"]
mod plane;
use plane::Process;

#[path = "support/kube_steps.rs"]
mod steps;
use steps::{listening_port, wait_for};

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A kubeconfig in `dir` naming a cluster that never answers.
fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("unreachable.kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: none\n  cluster:\n    server: \
         http://127.0.0.1:9\ncontexts:\n- name: none\n  context:\n    cluster: none\n    user: \
         none\ncurrent-context: none\nusers:\n- name: none\n  user:\n    token: x\n",
    )
    .expect("kubeconfig");
    kubeconfig
}

/// `duet extender` with `flags`, on a cluster that never answers (its guards need none): the
/// process and its port.
fn lone_extender(dir: &Path, log: &str, flags: &[&str]) -> (Process, u16) {
    let kubeconfig = unreachable_kubeconfig(dir);
    let extender = Process::spawn(
        duet()
            .args(["extender", "--listen", "127.0.0.1:0"])
            .args(["--predictor", "http://127.0.0.1:9"])
            .args(flags)
            .arg("--devices")
            .arg(root().join("deploy/k8s/devices.toml"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("RUST_LOG", "info"),
        dir.join(log),
    );
    let port = listening_port(&extender, "duet extender on http://");
    (extender, port)
}

/// Writes `request` on a fresh connection and reads until the server closes it (30 s at
/// most): the status (0 where none came) and the body.
fn raw_call(port: u16, request: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => {
                assert_ne!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock,
                    "still open after 30 s"
                );
                assert_ne!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut,
                    "still open after 30 s"
                );
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = http_status(&text);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

fn post_raw(port: u16, path: &str, body: &[u8]) -> (u16, String) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \
         {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    raw_call(port, &[head.as_bytes(), body].concat())
}

/// A process's peak resident memory (`VmHWM`), KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// The JSON error of an answer, `(error, field)`.
fn json_error(body: &str) -> (String, Option<String>) {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (
        v["error"].as_str().expect("an error").to_string(),
        v["field"].as_str().map(str::to_string),
    )
}

#[test]
fn the_extender_takes_requests_in_under_its_guards() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Flag values that cannot work are refused at start, naming the flag.
    for flags in [
        ["--max-body-bytes", "0"],
        ["--max-nodes", "0"],
        ["--max-connections", "0"],
        ["--header-timeout", "0"],
        ["--request-timeout", "inf"],
        ["--bind-scheduler", " duet"],
        ["--bind-scheduler", "a,,b"],
    ] {
        let out = duet()
            .arg("extender")
            .args(flags)
            .output()
            .expect("duet extender");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(flags[0]),
            "{flags:?}: {err}"
        );
    }

    let (mut extender, port) = lone_extender(
        dir.path(),
        "guards.log",
        &[
            "--header-timeout",
            "1",
            "--idle-timeout",
            "1",
            "--max-nodes",
            "3",
            "--max-body-bytes",
            "8000000",
        ],
    );
    // A pod of a million empty containers and 100,000 annotations (3.4 MB) costs the
    // extender about its text: it is read for what the extender judges it by, the rest skipped
    // (read into k8s-openapi's types, a million containers took gigabytes).
    let before = peak_kib(extender.child.id());
    let containers = vec!["{}"; 1_000_000].join(",");
    let annotations: Vec<String> = (0..100_000).map(|i| format!(r#""n{i}":"""#)).collect();
    let pod = format!(
        r#"{{"Pod": {{"metadata": {{"name": "p", "annotations": {{{}}}}}, "spec": {{"containers": [{containers}]}}}}, "NodeNames": []}}"#,
        annotations.join(",")
    );
    let (status, body) = post_raw(port, "/filter", pod.as_bytes());
    assert_eq!(status, 200, "{body}");
    let grown_kib = peak_kib(extender.child.id()).saturating_sub(before);
    assert!(
        grown_kib < 64 << 10,
        "a {}-byte pod raised the extender's peak by {grown_kib} KiB",
        pod.len()
    );
    // A body of a million one-byte chunks holds its bytes, not a record of each chunk (one
    // permit of the budget each: +18 MiB for this 1 MB body).
    std::fs::write(format!("/proc/{}/clear_refs", extender.child.id()), "5").expect("reset");
    let before = peak_kib(extender.child.id());
    let body = format!(
        r#"{{"Pod": {{"metadata": {{"name": "p"}}}}, "NodeNames": [], "x": "{}"}}"#,
        "a".repeat(1_000_000)
    );
    let mut chunked = b"POST /filter HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
        Transfer-Encoding: chunked\r\n\r\n"
        .to_vec();
    for byte in body.bytes() {
        chunked.extend_from_slice(&[b'1', b'\r', b'\n', byte, b'\r', b'\n']);
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let (status, answer) = raw_call(port, &chunked);
    assert_eq!(status, 200, "{answer}");
    let grown_kib = peak_kib(extender.child.id()).saturating_sub(before);
    assert!(
        grown_kib < 8 << 10,
        "a 1 MB body in one-byte chunks raised the extender's peak by {grown_kib} KiB"
    );
    // A half-sent header is closed after the header timeout, with no answer.
    let (status, _) = raw_call(port, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Le");
    assert_eq!(status, 0);
    // A declared length over --max-body-bytes is refused before a byte of the body is sent.
    let (status, body) = raw_call(
        port,
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n",
    );
    assert_eq!(status, 413, "{body}");
    assert!(json_error(&body).0.contains("--max-body-bytes"), "{body}");
    // More nodes than --max-nodes, by name or whole.
    let pod = r#""Pod": {"metadata": {"name": "p"}}"#;
    for (nodes, field) in [
        (r#""NodeNames": ["a", "b", "c", "d"]"#, "NodeNames"),
        (
            r#""Nodes": {"items": [{"metadata": {"name": "a"}}, {}, {}, {}]}"#,
            "Nodes.items",
        ),
    ] {
        let (status, body) = post_raw(port, "/filter", format!("{{{pod}, {nodes}}}").as_bytes());
        let (error, at) = json_error(&body);
        assert_eq!((status, at.as_deref()), (413, Some(field)), "{body}");
        assert!(error.contains("--max-nodes"), "{body}");
    }
    // A wrong method or path: an error in the same shape, the methods a route answers in Allow.
    let (status, body) = raw_call(
        port,
        b"GET /filter HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 405, "{body}");
    assert!(json_error(&body).0.contains("Allow"), "{body}");
    let (status, body) = post_raw(port, "/no-such-verb", b"{}");
    assert_eq!(status, 404, "{body}");
    assert!(json_error(&body).0.contains("no such route"), "{body}");
    // Bytes after the JSON value.
    let (status, body) = post_raw(
        port,
        "/prioritize",
        format!(r#"{{{pod}, "NodeNames": ["a"]}} {{"more": 1}}"#).as_bytes(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(json_error(&body).0.contains("trailing"), "{body}");
    // A long string where an array belongs is named by its length, not echoed.
    let echo = [
        &br#"{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ""#[..],
        &[0x7f; 100_000],
        br#""}"#,
    ]
    .concat();
    let (status, body) = post_raw(port, "/filter", &echo);
    assert_eq!(status, 400, "{}", &body[..body.len().min(300)]);
    assert!(body.len() < 4096, "{} bytes answered", body.len());
    assert!(
        json_error(&body).0.contains("a string of 100000 bytes"),
        "{body}"
    );
    // A body that stops arriving is cut off; SIGTERM is not held up by one left open.
    let (status, body) = raw_call(
        port,
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"Pod\"",
    );
    assert_eq!(status, 408, "{body}");
    assert!(json_error(&body).0.contains("--idle-timeout"), "{body}");
    // Each refusal is counted in /metrics by the guard that made it.
    let (status, metrics) = raw_call(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200, "{metrics}");
    for (guard, count) in [
        ("header_timeout", 1),
        ("max_body_bytes", 1),
        ("max_nodes", 2),
        ("idle_timeout", 1),
    ] {
        let series = format!("duet_kube_guard_refusals_total{{guard=\"{guard}\"}} {count}\n");
        assert!(metrics.contains(&series), "{series} in:\n{metrics}");
    }
    assert!(
        metrics.contains("duet_kube_connections_open 1\n"),
        "the /metrics call itself:\n{metrics}"
    );
    let mut open = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    std::io::Write::write_all(
        &mut open,
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
    )
    .expect("write");
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &extender.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while extender.running() {
        assert!(
            Instant::now() < deadline,
            "SIGTERM held up by a half-sent body:\n{}",
            extender.tail(20)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(open);

    // --max-connections holds: held connections past it leave only the probes' reserve.
    let (extender, port) = lone_extender(
        dir.path(),
        "connections.log",
        &["--max-connections", "2", "--header-timeout", "60"],
    );
    let held: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    let names = format!(r#"{{{pod}, "NodeNames": []}}"#);
    wait_for(
        "a call over --max-connections is closed unanswered",
        Duration::from_secs(30),
        || post_raw(port, "/filter", names.as_bytes()).0 == 0,
        || extender.tail(20),
    );
    let probe = raw_call(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(probe.0, 200, "{probe:?}");
    assert!(
        probe
            .1
            .contains("duet_kube_guard_refusals_total{guard=\"max_connections\"}"),
        "{}",
        probe.1
    );
    drop(held);
    wait_for(
        "a call is answered once the held connections close",
        Duration::from_secs(30),
        || post_raw(port, "/filter", names.as_bytes()).0 == 200,
        || extender.tail(20),
    );
}

/// `duet schedule`'s probes (`--listen`) are served under the same guards at their defaults: a
/// half-sent header is closed after the 5 s header timeout, not held.
#[test]
fn the_schedulers_probes_close_a_half_sent_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scheduler = Process::spawn(
        duet()
            .args(["schedule", "--listen", "127.0.0.1:0"])
            .args(["--predictor", "http://127.0.0.1:9"])
            .arg("--devices")
            .arg(root().join("deploy/k8s/devices.toml"))
            .arg("--kubeconfig")
            .arg(unreachable_kubeconfig(dir.path()))
            .env("RUST_LOG", "info"),
        dir.path().join("schedule.log"),
    );
    let port = listening_port(&scheduler, "probes on http://");
    let started = Instant::now();
    let (status, _) = raw_call(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Ag");
    assert_eq!(status, 0, "{}", scheduler.tail(20));
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "closed at once"
    );
    let probe = raw_call(
        port,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(probe.0, 200, "{probe:?}");
}

/// `duet schedule --window` takes 1 to 65536 waiting pods a round; another count is refused at
/// start, naming the flag.
#[test]
fn a_window_out_of_range_is_refused_at_start() {
    for window in ["0", "65537"] {
        let out = duet()
            .args(["schedule", "--window", window, "--once"])
            .args(["--predictor", "http://127.0.0.1:9"])
            .arg("--devices")
            .arg(root().join("deploy/k8s/devices.toml"))
            .output()
            .expect("duet schedule");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--window: {window} waiting pods a round; give 1 to 65536"
            )),
            "{stderr}"
        );
    }
}
