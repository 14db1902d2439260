//! The real `duet serve` against clients whose messages must cost it nothing before its guards
//! have judged them (the abuse suite's second half; serve_abuse.rs holds the first), each with
//! an asserted bound: gRPC messages of millions of empty entries refused before they are
//! decoded, with peak memory bounded; unauthenticated writes of 25 MB refused before a byte
//! of their bodies is read; slow senders over HTTP and gRPC, with and without the token,
//! holding bytes but never the places of a well-behaved client's predictions; SIGTERM not held
//! up by a trickling gRPC stream. The figures are in BENCHMARKS.md, "Guards before bytes".

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::bytes::{Buf, BufMut};
use serde_json::Value;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

mod support;
use support::{Server, TOKEN, alone, http_status, peak_rss_mib};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A gRPC codec of raw message bytes: what a hostile client sends, never built as structs (a
/// message of 12 million empty entries would take gigabytes in the client too).
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = src.chunk().to_vec();
        src.advance(bytes.len());
        Ok(Some(bytes))
    }
}

async fn channel(port: u16) -> Channel {
    Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("uri")
        .connect()
        .await
        .expect("gRPC connects")
}

/// One unary call of `method` with the raw message `bytes` (and the token, where given).
async fn call(
    channel: Channel,
    method: &'static str,
    bytes: Vec<u8>,
    token: Option<&str>,
) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new(bytes);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("metadata"),
        );
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.unary(request, path, Raw)
        .await
        .map(tonic::Response::into_inner)
}

/// A call of `method` whose message arrives a few bytes a second (each second one more frame of
/// a client stream), until the server answers or `stop` is set.
async fn trickle(
    channel: Channel,
    method: &'static str,
    token: Option<&str>,
    stop: Arc<AtomicBool>,
) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let frames = OneFrameASecond {
        interval: tokio::time::interval(Duration::from_secs(1)),
        stop,
    };
    let mut request = tonic::Request::new(frames);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("metadata"),
        );
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.client_streaming(request, path, Raw)
        .await
        .map(tonic::Response::into_inner)
}

/// A one-byte message a second (six bytes on the wire with its frame), until `stop`.
struct OneFrameASecond {
    interval: tokio::time::Interval,
    stop: Arc<AtomicBool>,
}

impl tokio_stream::Stream for OneFrameASecond {
    type Item = Vec<u8>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Vec<u8>>> {
        if self.stop.load(Ordering::Relaxed) {
            return std::task::Poll::Ready(None);
        }
        self.interval.poll_tick(cx).map(|_| Some(vec![0x0a]))
    }
}

const PREDICT: &str = "/duet.v1.Predictor/Predict";
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// A message of `bytes` bytes, each entry of field `field` empty (two bytes on the wire).
fn empty_entries(field: u32, bytes: usize) -> Vec<u8> {
    let key = u8::try_from(field << 3 | 2).expect("one-byte key");
    std::iter::repeat_n([key, 0], bytes / 2).flatten().collect()
}

#[test]
fn grpc_messages_of_empty_entries_are_refused_before_they_are_decoded() {
    let _alone = alone();
    let server = Server::start_with(&["--grpc-addr".into(), "127.0.0.1:0".into()]);
    let port = server.grpc_port();
    let pid = server.child.id();
    let at_rest = peak_rss_mib(pid);
    let rt = runtime();
    let twenty_four_mb = 24_000_000;
    for (method, field, flag) in [
        (PREDICT, 2, "--max-pairs"),
        (MODEL_INFER, 5, "--max-inflight-body-bytes"),
    ] {
        let message = Arc::new(empty_entries(field, twenty_four_mb));
        let answers = rt.block_on(async {
            let channel = channel(port).await;
            let calls: Vec<_> = (0..3)
                .map(|_| {
                    let (channel, message) = (channel.clone(), message.clone());
                    tokio::spawn(async move { call(channel, method, message.to_vec(), None).await })
                })
                .collect();
            let mut answers = Vec::new();
            for c in calls {
                answers.push(c.await.expect("call"));
            }
            answers
        });
        for answer in answers {
            let status = answer.expect_err("refused");
            assert_eq!(
                status.code(),
                Code::ResourceExhausted,
                "{method}: {status:?}"
            );
            assert!(status.message().contains(flag), "{method}: {status:?}");
        }
    }
    let peak = peak_rss_mib(pid);
    eprintln!(
        "peak RSS {peak:.0} MiB (at rest {at_rest:.0} MiB) after 3 x 24 MB Predict and 3 x 24 MB ModelInfer"
    );
    assert!(peak < 256.0, "peak RSS {peak:.0} MiB");
    // A well-formed message still passes the same guards.
    let pair = duet_server::grpc::proto::duet::v1::PredictRequest {
        gpu: Some("v100".into()),
        pairs: vec![duet_server::grpc::proto::duet::v1::Pair {
            a: Some(workload("a3c")),
            b: Some(workload("cyclegan")),
            mode: "space".into(),
            share_a: None,
            share_b: None,
            gpu: None,
        }],
        groups: Vec::new(),
    };
    let answer = rt
        .block_on(async {
            call(
                channel(port).await,
                PREDICT,
                prost::Message::encode_to_vec(&pair),
                None,
            )
            .await
        })
        .expect("a well-formed prediction");
    let answer: duet_server::grpc::proto::duet::v1::PredictResponse =
        prost::Message::decode(&answer[..]).expect("answer");
    assert_eq!(answer.predictions.len(), 1);
    assert!(
        server.metric("duet_requests_total{route=\"/duet.v1.Predictor/Predict\",status=\"413\"}")
            >= 3.0
    );
}

fn workload(id: &str) -> duet_server::grpc::proto::duet::v1::Job {
    duet_server::grpc::proto::duet::v1::Job {
        job: Some(duet_server::grpc::proto::duet::v1::job::Job::Workload(
            id.into(),
        )),
    }
}

/// Sends a request head declaring a body of `length` bytes (chunked where `None`), then the
/// body from a thread of its own while the answer is read; the status and how long it took.
fn send(addr: &str, head: &str, length: Option<usize>) -> (u16, String, Duration) {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let framing = length.map_or_else(
        || "Transfer-Encoding: chunked\r\n".to_string(),
        |n| format!("Content-Length: {n}\r\n"),
    );
    stream
        .write_all(format!("{head}{framing}Connection: close\r\n\r\n").as_bytes())
        .expect("head");
    let mut writer = stream.try_clone().expect("clone");
    let total = length.unwrap_or(25_000_000);
    let sender = std::thread::spawn(move || {
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            let ok = if length.is_none() {
                writer
                    .write_all(format!("{n:x}\r\n").as_bytes())
                    .and_then(|()| writer.write_all(&chunk[..n]))
                    .and_then(|()| writer.write_all(b"\r\n"))
            } else {
                writer.write_all(&chunk[..n])
            };
            if ok.is_err() {
                return;
            }
            sent += n;
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let took = start.elapsed();
    let _ = stream.read(&mut buf);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = http_status(&text);
    (status, text, took)
}

#[test]
fn unauthenticated_writes_are_refused_before_their_bodies() {
    let _alone = alone();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("token"), TOKEN).expect("token");
    let server = Server::start_with(&[
        "--token-file".into(),
        dir.path().join("token").into(),
        "--protect-reads".into(),
    ]);
    let pid = server.child.id();
    let addr = server.base.trim_start_matches("http://").to_string();
    let at_rest = peak_rss_mib(pid);
    // 64 at once: 25 MB workload registrations, with a length and chunked, and 25 MB chunked
    // predictions (a read, protected), none with the token.
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let (addr, statuses) = (addr.clone(), statuses.clone());
            std::thread::spawn(move || {
                let (head, length) = match i % 3 {
                    0 => (
                        format!("PUT /v1/workloads/w{i} HTTP/1.1\r\nHost: duet\r\n"),
                        Some(25_000_000),
                    ),
                    1 => (
                        format!("PUT /v1/workloads/w{i} HTTP/1.1\r\nHost: duet\r\n"),
                        None,
                    ),
                    _ => (
                        "POST /v1/predict HTTP/1.1\r\nHost: duet\r\n".to_string(),
                        None,
                    ),
                };
                let answer = send(&addr, &head, length);
                statuses.lock().expect("statuses").push(answer);
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    let peak = peak_rss_mib(pid);
    let statuses = statuses.lock().expect("statuses");
    let slowest = statuses.iter().map(|s| s.2).max().unwrap_or_default();
    eprintln!(
        "peak RSS {peak:.0} MiB (at rest {at_rest:.0} MiB); 64 unauthenticated 25 MB bodies, the slowest answered in {slowest:?}"
    );
    for (status, text, _) in statuses.iter() {
        assert_eq!(*status, 401, "{text}");
    }
    assert!(
        peak - at_rest < 16.0,
        "peak RSS {peak:.0} MiB, {at_rest:.0} MiB at rest"
    );
    // With the token, a registration's own limit comes before its body.
    let (status, text, _) = send(
        &addr,
        &format!(
            "PUT /v1/workloads/big HTTP/1.1\r\nHost: duet\r\nAuthorization: Bearer {TOKEN}\r\n"
        ),
        Some(2_000_000),
    );
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("--max-write-body-bytes"), "{text}");
}

/// The latencies' p99, seconds.
fn p99(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    let i = ((seconds.len() as f64) * 0.99).ceil() as usize;
    seconds[i.clamp(1, seconds.len()) - 1]
}

/// 10,000-pair predictions, one after another for `for_s`: their latencies, and how many were
/// not answered 200.
fn predictions(server: &Server, body: &Value, for_s: Duration) -> (Vec<f64>, usize) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let (mut took, mut failed) = (Vec::new(), 0);
    let start = Instant::now();
    while start.elapsed() < for_s {
        let t = Instant::now();
        match agent
            .post(&server.url("/v1/predict"))
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .send_json(body.clone())
        {
            Ok(r) => {
                let _ = r.into_string();
                took.push(t.elapsed().as_secs_f64());
            }
            Err(e) => {
                eprintln!("a well-formed prediction failed: {e}");
                failed += 1;
            }
        }
    }
    (took, failed)
}

#[test]
fn slow_senders_hold_bytes_never_places() {
    let _alone = alone();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("token"), TOKEN).expect("token");
    let server = Server::start_with(&[
        "--token-file".into(),
        dir.path().join("token").into(),
        "--grpc-addr".into(),
        "127.0.0.1:0".into(),
    ]);
    let port = server.grpc_port();
    let addr = server.base.trim_start_matches("http://").to_string();
    let pair = r#"{"a":{"workload":"a3c"},"b":{"workload":"cyclegan"},"mode":"space"}"#;
    let body: Value = serde_json::from_str(&format!(
        r#"{{"gpu":"v100","pairs":[{}]}}"#,
        vec![pair; 10_000].join(",")
    ))
    .expect("json");
    let (unloaded, failed) = predictions(&server, &body, Duration::from_secs(15));
    assert_eq!(failed, 0);
    let unloaded_p99 = p99(unloaded.clone());
    // 16 slow senders for 60 s: chunked HTTP bodies to /v2/.../infer and /v1/predict, and gRPC
    // streams to ModelInfer and Predict, half with the token. Each sends a byte (a frame) a
    // second and starts again when answered.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for i in 0..8 {
        let (addr, stop, answered) = (addr.clone(), stop.clone(), answered.clone());
        senders.push(std::thread::spawn(move || {
            let path = if i % 2 == 0 {
                "/v2/models/default/infer"
            } else {
                "/v1/predict"
            };
            let token = if i < 4 {
                format!("Authorization: Bearer {TOKEN}\r\n")
            } else {
                String::new()
            };
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(&addr) else {
                    continue;
                };
                let head = format!(
                    "POST {path} HTTP/1.1\r\nHost: duet\r\n{token}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                );
                if stream.write_all(head.as_bytes()).is_err() {
                    continue;
                }
                stream
                    .set_nonblocking(true)
                    .expect("nonblocking");
                let mut buf = [0u8; 1024];
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if stream.write_all(b"1\r\n \r\n").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => {
                            answered.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                }
            }
        }));
    }
    let rt = runtime();
    let streams: Vec<_> = (0..8)
        .map(|i| {
            let (stop, answered) = (stop.clone(), answered.clone());
            rt.spawn(async move {
                let method = if i % 2 == 0 { MODEL_INFER } else { PREDICT };
                let token = (i < 4).then_some(TOKEN);
                while !stop.load(Ordering::Relaxed) {
                    let channel = channel(port).await;
                    let _ = trickle(channel, method, token, stop.clone()).await;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (loaded, failed) = predictions(&server, &body, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().expect("sender");
    }
    rt.block_on(async {
        for s in streams {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
    });
    let loaded_p99 = p99(loaded.clone());
    eprintln!(
        "10,000-pair predictions: unloaded p99 {:.0} ms ({} answered), with 16 slow senders for 60 s p99 {:.0} ms ({} answered, {failed} failed); slow senders answered {} times",
        unloaded_p99 * 1e3,
        unloaded.len(),
        loaded_p99 * 1e3,
        loaded.len(),
        answered.load(Ordering::Relaxed)
    );
    assert_eq!(failed, 0, "well-formed predictions were shed or failed");
    assert!(
        loaded_p99 <= 2.0 * unloaded_p99,
        "p99 {loaded_p99:.3} s with slow senders, {unloaded_p99:.3} s without"
    );
}

#[test]
fn sigterm_is_not_held_up_by_a_trickling_stream() {
    let _alone = alone();
    let flags: Vec<OsString> = vec![
        "--grpc-addr".into(),
        "127.0.0.1:0".into(),
        "--request-timeout".into(),
        "5".into(),
        "--drain-seconds".into(),
        "1".into(),
    ];
    let server = Server::start_with(&flags);
    let port = server.grpc_port();
    let rt = runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let stop = stop.clone();
        rt.spawn(async move { trickle(channel(port).await, PREDICT, None, stop).await })
    };
    std::thread::sleep(Duration::from_secs(2));
    let start = Instant::now();
    let status = server.stop(Duration::from_secs(30));
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let answer = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), stream).await });
    eprintln!(
        "SIGTERM with a trickling gRPC stream: exited in {took:?}; the stream got {answer:?}"
    );
    assert!(status.success(), "duet serve exited with {status}");
    // The drain (1 s), then the stream's time limit (5 s) at most, and a margin.
    assert!(took < Duration::from_secs(9), "exited after {took:?}");
}
