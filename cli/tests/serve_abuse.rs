//! The real `duet serve` under hostile and overloaded clients on loopback, each with an asserted
//! bound: bodies over the limits (60 MiB ones included) refused 413 naming the limit while the
//! server's peak memory stays bounded and well-formed predictions are answered; sockets that
//! never finish their header closed within the header timeout, descriptors bounded by the
//! connection limit, probes answered throughout; overload shed 503 with `Retry-After` while
//! `/healthz` stays fast and accepted requests keep their latency, and registrations through a
//! second replica all reach the overloaded one. The counts are the production figures (16
//! clients for 30 s, 2,000 sockets in 30 s, 64 connections); the figures are in BENCHMARKS.md,
//! "Under attack".

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::{Server, TOKEN, alone, http_status, peak_rss_mib, resident_mib};

#[path = "../../server/tests/support/pg.rs"]
mod pg;

/// Connections sending 10,000-pair requests in the overload test, and for how long.
const CONNECTIONS: usize = 64;
const LOADED_FOR: Duration = Duration::from_secs(15);
/// Of them, those that retry 20 ms after a 503 whatever `Retry-After` says (the others wait as
/// it says, as a scheduler's client library does): none in the test command, where the latency
/// bound is asserted; `DUET_ABUSE_IMPATIENT=16` measures them (BENCHMARKS.md, "Under attack"):
/// the bound is then reported, not asserted, since on one machine the clients' own CPU for
/// resending their bodies slows the server's work.
fn impatient() -> usize {
    std::env::var("DUET_ABUSE_IMPATIENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
/// Accepted requests' p99 under overload against the unloaded p99, without a queue and with
/// the default one (at most one request's work ahead, so about twice the unloaded median,
/// which the unloaded p99 exceeds by a noisy margin).
const LATENCY_BOUND: f64 = 2.0;
const QUEUED_LATENCY_BOUND: f64 = 3.0;

/// CPU seconds (user and system) process `pid` has used.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / 100.0
}

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn addr(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// A request's body as the tests send it.
enum Body {
    Bytes(Vec<u8>),
    /// `chunk` repeated until `total` bytes, with `Content-Length` or chunked.
    Repeat {
        chunk: Arc<Vec<u8>>,
        total: usize,
        chunked: bool,
    },
}

/// An answer read off the socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn error(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| self.body.clone())
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// POSTs `body` to `path` on a fresh connection, the body written by a thread of its own
/// while the answer is read, as a client that does not wait for `100 Continue` does: a server
/// that answers before reading the whole body is heard.
fn post(addr: &str, path: &str, body: Body) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let length = match &body {
        Body::Bytes(b) => format!("Content-Length: {}\r\n", b.len()),
        Body::Repeat { chunked: true, .. } => "Transfer-Encoding: chunked\r\n".to_string(),
        Body::Repeat { total, .. } => format!("Content-Length: {total}\r\n"),
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{length}\
         Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes())?;
    let mut writer = stream.try_clone()?;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        match body {
            Body::Bytes(b) => writer.write_all(&b),
            Body::Repeat {
                chunk,
                total,
                chunked,
            } => {
                let mut sent = 0;
                while sent < total {
                    let n = chunk.len().min(total - sent);
                    if chunked {
                        writer.write_all(format!("{n:x}\r\n").as_bytes())?;
                        writer.write_all(&chunk[..n])?;
                        writer.write_all(b"\r\n")?;
                    } else {
                        writer.write_all(&chunk[..n])?;
                    }
                    sent += n;
                }
                if chunked {
                    writer.write_all(b"0\r\n\r\n")?;
                }
                Ok(())
            }
        }
    });
    let answer = read_answer(&mut stream);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    answer
}

/// One HTTP/1.1 answer with a `Content-Length`.
fn read_answer(stream: &mut TcpStream) -> std::io::Result<Answer> {
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "no answer"));
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..end]).into_owned();
    let status = http_status(&head);
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while data.len() < end + length {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&data[end..]).into_owned();
    Ok(Answer { status, head, body })
}

const PAIR: &str = r#"{"a":{"workload":"a3c"},"b":{"workload":"cyclegan"},"mode":"space"}"#;

/// A prediction request of `n` pairs on V100, padded with spaces to `pad_to` bytes.
fn pairs_body(n: usize, pad_to: usize) -> Vec<u8> {
    let mut body = String::from(r#"{"gpu":"v100","pairs":["#);
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push_str(PAIR);
    }
    body.push_str("]}");
    while body.len() < pad_to {
        body.push(' ');
    }
    body.into_bytes()
}

/// A `/v1/limits` value.
fn limit(server: &Server, name: &str) -> usize {
    let limits: Value = ureq::get(&server.url("/v1/limits"))
        .call()
        .expect("limits")
        .into_json()
        .expect("json");
    usize::try_from(limits[name].as_u64().expect(name)).expect("usize")
}

/// What each kind of abusive body got.
#[derive(Debug, Default)]
struct Tally {
    refused: usize,
    shed: usize,
    answered: usize,
}

#[test]
fn bodies_over_the_limits_are_refused_and_memory_stays_bounded() {
    let _alone = alone();
    let max_pairs = 20_000;
    let server = Server::start_with(&[
        "--max-pairs".into(),
        max_pairs.to_string().into(),
        "--max-inflight".into(),
        "2".into(),
        "--max-queue".into(),
        "4".into(),
        "--max-infer-rows".into(),
        "100".into(),
        "--max-observations".into(),
        "5".into(),
    ]);
    let pid = server.child.id();
    let addr = addr(&server);
    let max_body = limit(&server, "max_body_bytes");
    assert_eq!(
        max_body,
        max_pairs * 256 + 64 * 1024,
        "the body limit follows --max-pairs"
    );
    let at_rest = peak_rss_mib(pid);

    let sixty_mib = 60 * 1024 * 1024;
    let chunk = Arc::new(pairs_body(1200, 0)[..64 * 1024].to_vec());
    // At the byte limit and valid: answered. At the byte limit with more pairs than the limit:
    // refused by count. One byte over: refused by length.
    let at_limit = Arc::new(pairs_body(max_pairs, max_body));
    let too_many = Arc::new(pairs_body(max_body / (PAIR.len() + 1) - 1, 0));
    assert!(too_many.len() <= max_body);
    let one_over = Arc::new(pairs_body(10, max_body + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let tallies = Arc::new(Mutex::new(std::collections::BTreeMap::<&str, Tally>::new()));
    let mut attackers = Vec::new();
    for client in 0..16 {
        let (addr, stop, tallies) = (addr.clone(), stop.clone(), tallies.clone());
        let (chunk, at_limit, too_many, one_over) = (
            chunk.clone(),
            at_limit.clone(),
            too_many.clone(),
            one_over.clone(),
        );
        attackers.push(std::thread::spawn(move || {
            let mut round = client;
            while !stop.load(Ordering::Relaxed) {
                let (kind, body, flag) = match round % 5 {
                    0 => (
                        "60 MiB, length declared",
                        Body::Repeat {
                            chunk: chunk.clone(),
                            total: sixty_mib,
                            chunked: false,
                        },
                        "--max-body-bytes",
                    ),
                    1 => (
                        "60 MiB, chunked",
                        Body::Repeat {
                            chunk: chunk.clone(),
                            total: sixty_mib,
                            chunked: true,
                        },
                        "--max-body-bytes",
                    ),
                    2 => (
                        "one byte over the body limit",
                        Body::Bytes(one_over.to_vec()),
                        "--max-body-bytes",
                    ),
                    3 => (
                        "within the body limit, over the pairs limit",
                        Body::Bytes(too_many.to_vec()),
                        "--max-pairs",
                    ),
                    _ => ("at both limits, valid", Body::Bytes(at_limit.to_vec()), ""),
                };
                round += 1;
                let answer = post(&addr, "/v1/predict", body)
                    .unwrap_or_else(|e| panic!("{kind}: no answer: {e}"));
                let mut t = tallies.lock().expect("tallies");
                let tally = t.entry(kind).or_default();
                match answer.status {
                    413 => {
                        assert!(
                            !flag.is_empty() && answer.error().contains(flag),
                            "{kind}: {answer:?}"
                        );
                        tally.refused += 1;
                    }
                    503 => {
                        assert_eq!(
                            answer.header("retry-after"),
                            Some("1"),
                            "{kind}: {answer:?}"
                        );
                        tally.shed += 1;
                    }
                    200 => {
                        assert!(flag.is_empty(), "{kind}: answered 200");
                        tally.answered += 1;
                    }
                    _ => panic!("{kind}: {answer:?}"),
                }
            }
        }));
    }
    // Meanwhile, a well-formed client of 100-pair requests: every prediction answered (one
    // shed would be retried when `Retry-After` says).
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let good = serde_json::from_slice::<Value>(&pairs_body(100, 0)).expect("json");
    let (mut answered, mut retried) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        match agent
            .post(&server.url("/v1/predict"))
            .send_json(good.clone())
        {
            Ok(r) => {
                let v: Value = r.into_json().expect("json");
                assert_eq!(v["predictions"].as_array().map(Vec::len), Some(100));
                answered += 1;
            }
            Err(ureq::Error::Status(503, r)) => {
                assert_eq!(r.header("Retry-After"), Some("1"));
                retried += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => panic!("a well-formed prediction failed: {e}\n{}", server.log()),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().expect("attacker");
    }
    let peak = peak_rss_mib(pid);
    let tallies = tallies.lock().expect("tallies");
    eprintln!(
        "peak RSS {peak:.0} MiB (at rest {at_rest:.0} MiB); well-formed: {answered} answered, \
         {retried} shed and retried; {tallies:#?}"
    );
    // Small requests never wait for a place: none shed, all answered.
    assert!(
        answered >= 20 && retried == 0,
        "{answered} well-formed predictions answered, {retried} shed"
    );
    for kind in [
        "60 MiB, length declared",
        "60 MiB, chunked",
        "one byte over the body limit",
        "within the body limit, over the pairs limit",
    ] {
        assert!(
            tallies.get(kind).is_some_and(|t| t.refused > 0),
            "{kind}: {tallies:?}"
        );
    }
    assert!(peak < 256.0, "peak RSS {peak:.0} MiB");
    // What the burst freed goes back to the system: a large request, once answered and freed,
    // trims the allocator where the server holds more than its bodies in flight and 64 MiB
    // explain (128 MiB here), so the server rests under that mark, not at its peak.
    let answer = post(&addr, "/v1/predict", Body::Bytes(at_limit.to_vec())).expect("answer");
    assert_eq!(answer.status, 200, "{}", answer.head);
    // The request is freed after its answer is handed over: within moments of it.
    let freed_by = Instant::now() + Duration::from_secs(5);
    let mut resident = resident_mib(pid);
    while resident >= 140.0 && Instant::now() < freed_by {
        std::thread::sleep(Duration::from_millis(50));
        resident = resident_mib(pid);
    }
    eprintln!("resident after the burst: {resident:.0} MiB");
    assert!(
        resident < 140.0,
        "{resident:.0} MiB resident after the burst"
    );
    // The other limits are named too: KServe rows, observations per batch.
    let name = server.model_name();
    let meta: Value = ureq::get(&server.url(&format!("/v2/models/{name}")))
        .call()
        .expect("metadata")
        .into_json()
        .expect("json");
    let width =
        usize::try_from(meta["inputs"][0]["shape"][1].as_u64().expect("width")).expect("width");
    let rows = limit(&server, "max_infer_rows") + 1;
    let infer = format!(
        r#"{{"inputs":[{{"name":"pairs","shape":[{rows},{width}],"datatype":"FP32","data":[{}]}}]}}"#,
        vec!["0"; rows * width].join(",")
    );
    let answer = post(
        &addr,
        &format!("/v2/models/{name}/infer"),
        Body::Bytes(infer.into_bytes()),
    )
    .expect("infer");
    assert_eq!(answer.status, 413, "{answer:?}");
    assert!(answer.error().contains("--max-infer-rows"), "{answer:?}");
    let batch = format!(
        r#"{{"observations":[{}]}}"#,
        vec!["{}"; limit(&server, "max_observations") + 1].join(",")
    );
    let answer = post(&addr, "/v1/observations", Body::Bytes(batch.into_bytes())).expect("batch");
    assert_eq!(answer.status, 413, "{answer:?}");
    assert!(answer.error().contains("--max-observations"), "{answer:?}");
}

#[test]
fn slow_headers_are_cut_off_and_probes_answer() {
    let _alone = alone();
    let max_connections = 48;
    let server = Server::start_with(&[
        "--header-timeout".into(),
        "2".into(),
        "--idle-timeout".into(),
        "1".into(),
        "--max-connections".into(),
        max_connections.to_string().into(),
    ]);
    let pid = server.child.id();
    let addr = addr(&server);
    let fds_at_rest = open_fds(pid);
    let stop = Arc::new(AtomicBool::new(false));
    // Probes on fresh connections, every 100 ms, each answered within a second.
    let probes = {
        let (base, stop) = (server.base.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut answered = 0;
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                for path in ["/healthz", "/readyz"] {
                    let agent = ureq::AgentBuilder::new()
                        .timeout(Duration::from_secs(2))
                        .max_idle_connections(0)
                        .build();
                    let t = Instant::now();
                    let r = agent.get(&format!("{base}{path}")).call();
                    assert!(
                        r.as_ref().is_ok_and(|r| r.status() == 200),
                        "{path} unanswered after {:?}: {r:?}",
                        t.elapsed()
                    );
                    slowest = slowest.max(t.elapsed());
                    answered += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (answered, slowest)
        })
    };
    // A well-formed client on its own keep-alive connection, opened before the attack.
    let client = {
        let (base, stop) = (server.base.clone(), stop.clone());
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(10))
                .build();
            let body = serde_json::from_slice::<Value>(&pairs_body(10, 0)).expect("json");
            let mut answered = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = agent
                    .post(&format!("{base}/v1/predict"))
                    .send_json(body.clone());
                assert!(r.is_ok(), "a well-formed prediction failed: {r:?}");
                answered += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            answered
        })
    };
    std::thread::sleep(Duration::from_millis(300));

    // 2,000 sockets in 30 s, each sending part of a header and then nothing.
    let total = 2000;
    let mut open: Vec<(TcpStream, Instant)> = Vec::new();
    let (mut closed, mut slowest_close) = (0, Duration::ZERO);
    let mut max_fds = 0;
    let start = Instant::now();
    let mut opened = 0;
    let mut sweep = |open: &mut Vec<(TcpStream, Instant)>| {
        let mut buf = [0u8; 1024];
        open.retain_mut(|(s, since)| {
            let gone = match s.read(&mut buf) {
                Ok(_) => true,
                Err(e) => e.kind() != ErrorKind::WouldBlock,
            };
            if gone {
                closed += 1;
                slowest_close = slowest_close.max(since.elapsed());
            }
            assert!(
                gone || since.elapsed() < Duration::from_millis(3500),
                "a slow-header socket is still open after {:?}",
                since.elapsed()
            );
            !gone
        });
    };
    while opened < total {
        let due = start + Duration::from_millis(15 * opened as u64);
        if Instant::now() >= due {
            let mut s = TcpStream::connect(&addr).expect("connect");
            let _ = s.write_all(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Le");
            s.set_nonblocking(true).expect("nonblocking");
            open.push((s, Instant::now()));
            opened += 1;
        } else {
            std::thread::sleep(Duration::from_millis(2));
        }
        if opened % 20 == 0 {
            sweep(&mut open);
            max_fds = max_fds.max(open_fds(pid));
        }
    }
    while !open.is_empty() {
        sweep(&mut open);
        max_fds = max_fds.max(open_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let attack = start.elapsed();

    // A body that stops arriving is cut off after --idle-timeout.
    let mut stalled = TcpStream::connect(&addr).expect("connect");
    stalled
        .write_all(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"gpu\"")
        .expect("write");
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let t = Instant::now();
    let answer = read_answer(&mut stalled).expect("an answer to a stalled body");
    assert_eq!(answer.status, 408, "{answer:?}");
    assert!(answer.error().contains("--idle-timeout"), "{answer:?}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());

    stop.store(true, Ordering::Relaxed);
    let (probed, slowest_probe) = probes.join().expect("probes");
    let predicted = client.join().expect("client");
    let refused = server.metric("duet_connections_refused_total");
    let timeouts = server.metric("duet_header_timeouts_total");
    eprintln!(
        "{total} slow sockets in {attack:?}: {closed} closed by the server, slowest after \
         {slowest_close:?} ({timeouts} at the header timeout, {refused} over the limit at \
         once); server descriptors at most {max_fds} (at rest {fds_at_rest}); {probed} probes \
         answered, slowest {slowest_probe:?}; {predicted} well-formed predictions answered"
    );
    assert_eq!(closed, total);
    assert!(
        max_fds <= fds_at_rest + max_connections + 16 + 8,
        "{max_fds} descriptors"
    );
    assert!(
        probed > 50 && predicted > 50,
        "{probed} probes, {predicted} predictions"
    );
    assert!(timeouts + refused >= 1990.0, "{timeouts} + {refused}");
}

/// A replica on the registry `dsn` (given through `--state-file`, as a Secret would), with the
/// token, and `flags`.
fn replica(dir: &std::path::Path, dsn: &str, flags: &[&str]) -> Server {
    let state = dir.join("state");
    std::fs::write(&state, format!("{dsn}\n")).expect("state file");
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).expect("token");
    let mut all: Vec<std::ffi::OsString> = vec![
        "--state-file".into(),
        state.into(),
        "--token-file".into(),
        dir.join("token").into(),
    ];
    all.extend(flags.iter().map(Into::into));
    Server::start_with(&all)
}

#[test]
fn overload_is_shed_with_retry_after_and_healthz_stays_fast() {
    // The default queue (one place per core): an accepted request waits for at most the one
    // running, so its latency is at most about twice the unloaded median.
    overload("2", QUEUED_LATENCY_BOUND);
}

#[test]
fn without_a_queue_accepted_requests_keep_their_unloaded_latency() {
    // `--max-queue 0`: under sustained overload a queue adds latency and no throughput (the
    // clients' retries keep the places busy), so accepted requests keep their own latency.
    overload("0", LATENCY_BOUND);
}

/// 64 connections of 10,000-pair requests against `--max-inflight 2 --max-queue {queue}`, and
/// registrations through a second replica: the excess shed, `/healthz` fast, memory bounded,
/// no registration lost, accepted requests' p99 within `latency_bound` times the unloaded one.
fn overload(queue: &str, latency_bound: f64) {
    let _alone = alone();
    let limits = ["--max-inflight", "2", "--max-queue", queue];
    // Two replicas of one PostgreSQL registry where there is one: registrations go through the
    // second while the first is overloaded, and none accepted may be lost on the first.
    let db = pg::TestDatabase::create("overload");
    let dirs = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let (server, writer) = match &db {
        Some(db) => (
            replica(dirs.0.path(), &db.dsn, &limits),
            Some(replica(dirs.1.path(), &db.dsn, &[])),
        ),
        None => (Server::start_with(&limits.map(Into::into)), None),
    };
    let pid = server.child.id();
    // Serialized once: the clients share the server's two cores.
    let body = pairs_body(10_000, 0);
    let predict = |agent: &ureq::Agent| -> Result<Duration, u16> {
        let t = Instant::now();
        match agent
            .post(&server.url("/v1/predict"))
            .set("Content-Type", "application/json")
            .send_bytes(&body)
        {
            Ok(r) => {
                let _ = r.into_string();
                Ok(t.elapsed())
            }
            Err(ureq::Error::Status(503, r)) => {
                assert_eq!(r.header("Retry-After"), Some("1"));
                assert!(r.into_string().is_ok_and(|b| b.contains("--max-inflight")));
                Err(503)
            }
            Err(e) => panic!("{e}"),
        }
    };
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let mut unloaded: Vec<Duration> = (0..20)
        .map(|_| predict(&agent).expect("unloaded"))
        .collect();
    unloaded.sort();

    let stop = Arc::new(AtomicBool::new(false));
    let shed_seen = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let written = Arc::new(Mutex::new(Vec::new()));
    let cpu_before = (cpu_seconds(&pid.to_string()), cpu_seconds("self"));
    let impatient = impatient();
    std::thread::scope(|scope| {
        for client in 0..CONNECTIONS {
            let (stop, shed_seen, accepted) = (stop.clone(), shed_seen.clone(), accepted.clone());
            let predict = &predict;
            scope.spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(30))
                    .build();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (client as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    match predict(&agent) {
                        Ok(t) => accepted.lock().expect("accepted").push(t),
                        Err(_) => {
                            shed_seen.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(if client < impatient {
                                // A client that ignores Retry-After, as an overloaded one would.
                                Duration::from_millis(20)
                            } else {
                                // Retry-After, jittered (0.5 to 1.5 times), as a client
                                // library's backoff does.
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                Duration::from_millis(500 + x % 1000)
                            });
                        }
                    }
                }
            });
        }
        // Registrations through the second replica, one after another.
        if let Some(writer) = &writer {
            let (stop, written) = (stop.clone(), written.clone());
            scope.spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(10))
                    .build();
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    k += 1;
                    let id = format!("overload-{k}");
                    let answer = agent
                        .put(&writer.url(&format!("/v1/workloads/{id}")))
                        .set("Authorization", &format!("Bearer {TOKEN}"))
                        .send_json(serde_json::json!({"kind": "infer", "profiles": {"v100": {
                            "solo_throughput": 10.0 + k as f64, "model": "ResNet-18",
                            "batch_size": 32}}}));
                    if answer.is_ok_and(|r| r.status() == 201) {
                        written.lock().expect("written").push(id);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
        // A separate prober: /healthz on its own connection every 20 ms.
        let mut probes = Vec::new();
        let prober = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(5))
            .build();
        let start = Instant::now();
        while start.elapsed() < LOADED_FOR {
            let t = Instant::now();
            let r = prober.get(&server.url("/healthz")).call().expect("healthz");
            assert_eq!(r.status(), 200);
            probes.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        probes.sort();
        let p = |v: &[Duration], q: f64| {
            v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
        };
        let mut accepted = accepted.lock().expect("accepted").clone();
        accepted.sort();
        let shed = shed_seen.load(Ordering::Relaxed);
        let peak = peak_rss_mib(pid);
        let (calm, loaded) = (p(&unloaded, 0.99), p(&accepted, 0.99));
        eprintln!(
            "CPU over the load: server {:.1} s, clients {:.1} s",
            cpu_seconds(&pid.to_string()) - cpu_before.0,
            cpu_seconds("self") - cpu_before.1
        );
        eprintln!(
            "unloaded 10,000 pairs p50 {:?} p99 {calm:?}; under {CONNECTIONS} connections \
             ({impatient} ignoring Retry-After): {} accepted p50 {:?} p99 {loaded:?} ({:.2}x), {shed} shed; /healthz from outside p50 \
             {:?} p99 {:?} max {:?} ({} probes); peak RSS {peak:.0} MiB",
            p(&unloaded, 0.5),
            accepted.len(),
            p(&accepted, 0.5),
            loaded.as_secs_f64() / calm.as_secs_f64(),
            p(&probes, 0.5),
            p(&probes, 0.99),
            probes.last(),
            probes.len()
        );
        assert!(shed > 0, "nothing shed");
        assert!(accepted.len() >= 20, "{} accepted", accepted.len());
        assert!(peak < 256.0, "peak RSS {peak:.0} MiB");
        assert!(
            p(&probes, 0.99) < Duration::from_millis(250),
            "/healthz p99 {:?}",
            p(&probes, 0.99)
        );
        // An accepted request runs alone on the cores, after at most one other.
        if impatient == 0 {
            assert!(
                loaded.as_secs_f64() <= latency_bound * calm.as_secs_f64(),
                "accepted p99 {loaded:?} against {calm:?} unloaded"
            );
        }
    });
    // Every registration the second replica accepted reached the overloaded one.
    if writer.is_some() {
        let written = written.lock().expect("written").clone();
        assert!(written.len() >= 10, "{} registrations", written.len());
        let deadline = Instant::now() + Duration::from_secs(10);
        let missing = loop {
            let list: Value = ureq::get(&server.url("/v1/workloads"))
                .call()
                .expect("workloads")
                .into_json()
                .expect("json");
            let text = list.to_string();
            let missing: Vec<&String> = written
                .iter()
                .filter(|id| !text.contains(&format!("\"{id}\"")))
                .collect();
            if missing.is_empty() || Instant::now() > deadline {
                break missing.len();
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        eprintln!(
            "{} registrations through the second replica, {missing} missing on the first",
            written.len()
        );
        assert_eq!(missing, 0, "registrations lost");
    }
    // The server's own count and histogram: every shed counted, /healthz under 50 ms at p99.
    let counted = server.metric("duet_requests_shed_total");
    assert!(
        counted >= shed_seen.load(Ordering::Relaxed) as f64,
        "{counted}"
    );
    let text = ureq::get(&server.url("/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    let bucket = |le: &str| -> f64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "duet_request_duration_seconds_bucket{{route=\"/healthz\",le=\"{le}\"}}"
                ))?
                .trim()
                .parse()
                .ok()
            })
            .unwrap_or(0.0)
    };
    let (fast, all) = (bucket("0.05"), bucket("+Inf"));
    assert!(
        all > 100.0 && fast >= 0.99 * all,
        "/healthz: {fast} of {all} within 50 ms"
    );
    assert!(text.contains("duet_request_timeouts_total 0"), "{text}");
    assert!(text.contains("duet_panics_total 0"), "{text}");
}
