//! gRPC on its own port (`duet serve --grpc-addr`): the Open Inference Protocol's
//! `inference.GRPCInferenceService` (`kserve.rs`) and duet's `duet.v1.Predictor` (`duet.rs`),
//! from the `.proto` files under `proto/`. They call the same service layer as HTTP
//! (`crate::service`), behind the same token (`authorization` metadata), limits, places of
//! work and time limit, read the same registry snapshot, and are counted in the same request
//! metrics, under their method's path. Registrations, observations and reloads are HTTP only.
//!
//! The messages and services under `proto` are generated from `proto/` by tonic-prost-build
//! and committed (`cargo run --manifest-path tools/protogen/Cargo.toml` writes them again; the
//! test command fails when they are not current), so building the server compiles no protobuf
//! compiler.

pub mod duet;
pub mod intake;
pub mod kserve;
pub mod scan;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::Server;
use tonic::transport::server::Connected;
use tonic::{Code, Request, Response, Status};

use crate::error::Failure;
use crate::service::predict::Spent;
use crate::state::AppState;

/// The messages and services of `proto/`, as tonic-prost-build writes them.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations,
    unused_qualifications,
    unreachable_pub
)]
pub mod proto {
    pub mod inference {
        include!("generated/inference.rs");
    }
    pub mod duet {
        pub mod v1 {
            include!("generated/duet.v1.rs");
        }
    }
}

/// Both services on `listener` until `shutdown` resolves; then requests in flight finish.
///
/// The bounds of the HTTP listener, in HTTP/2's terms: at most `--max-connections` gRPC
/// connections (one more is closed at once, counted in `duet_connections_refused_total`), at
/// most as many concurrent calls per connection as there are places of work and queue (each
/// call's message is read whole, under the server's budget of body bytes in flight, before its
/// places are taken), and HTTP/2 pings every `--idle-timeout` that close a
/// connection whose peer stopped answering.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%addr, "serving gRPC");
    let streams = u32::try_from(state.config.max_inflight + state.config.max_queue)
        .unwrap_or(u32::MAX)
        .max(2);
    let ping = state.config.idle_timeout.max(Duration::from_secs(1));
    Server::builder()
        .max_concurrent_streams(streams)
        .http2_keepalive_interval(Some(ping))
        .http2_keepalive_timeout(Some(ping))
        .add_routes(routes(&state))
        .serve_with_incoming_shutdown(limited(&state, listener), shutdown)
        .await
        .map_err(|e| format!("gRPC: {e}"))
}

/// The bytes every HTTP/2 connection opens with (RFC 9113, 3.4).
const PREFACE_LEN: usize = 24;

/// The connections accepted on `listener`, each holding one of `--max-connections` places
/// until it closes; one over the limit is closed at once, and one that has not sent HTTP/2's
/// connection preface within `--header-timeout` is closed (hyper would wait for it forever,
/// and a few silent sockets would hold every place). Accepting stops when the server stops
/// reading them.
fn limited(
    state: &Arc<AppState>,
    listener: tokio::net::TcpListener,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<Held>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let places = Arc::new(Semaphore::new(state.config.max_connections.max(1)));
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                stream = duet_listen::accept(&listener, "gRPC") => stream,
                () = tx.closed() => return,
            };
            let Ok(place) = places.clone().try_acquire_owned() else {
                state
                    .metrics
                    .guards
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!("gRPC connection over --max-connections closed");
                continue;
            };
            let (tx, state) = (tx.clone(), state.clone());
            tokio::spawn(async move {
                let mut stream = stream;
                let mut preface = [0u8; PREFACE_LEN];
                let read = tokio::time::timeout(
                    state.config.header_timeout,
                    tokio::io::AsyncReadExt::read_exact(&mut stream, &mut preface),
                )
                .await;
                match read {
                    Ok(Ok(_)) => {}
                    // The client closed it first (a TCP probe, say): no timeout to count.
                    Ok(Err(_)) => return,
                    Err(_) => {
                        state
                            .metrics
                            .guards
                            .header_timeouts
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            "gRPC connection closed: no HTTP/2 preface in --header-timeout"
                        );
                        return;
                    }
                }
                let _ = tx
                    .send(Ok(Held {
                        io: stream,
                        preface,
                        given: 0,
                        _place: place,
                    }))
                    .await;
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// A gRPC connection and its place under `--max-connections`, with the preface read from it
/// before it was served, given back first.
#[derive(Debug)]
struct Held {
    io: tokio::net::TcpStream,
    preface: [u8; PREFACE_LEN],
    /// How much of `preface` has been read back.
    given: usize,
    _place: OwnedSemaphorePermit,
}

impl tokio::io::AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.given < PREFACE_LEN {
            let n = buf.remaining().min(PREFACE_LEN - self.given);
            let from = self.given;
            buf.put_slice(&self.preface[from..from + n]);
            self.given += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Held {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connected for Held {
    type ConnectInfo = <tokio::net::TcpStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// Both services behind the guards that come before a message is decoded (`intake`), each
/// message at most `--max-body-bytes` (by default from `--max-pairs`), the bound an HTTP body
/// has.
pub fn routes(state: &Arc<AppState>) -> tonic::service::Routes {
    let limit = state.config.max_body_bytes;
    let kserve = proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer::new(
        kserve::Kserve::new(state.clone()),
    )
    .max_decoding_message_size(limit);
    let duet = proto::duet::v1::predictor_server::PredictorServer::new(duet::Predictor::new(
        state.clone(),
    ))
    .max_decoding_message_size(limit);
    let router = tonic::service::Routes::new(kserve)
        .add_service(duet)
        .into_axum_router()
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            intake::intake,
        ));
    tonic::service::Routes::from(router)
}

/// A failure as a gRPC status: its HTTP status mapped to the nearest code, its field named in
/// the message as `field: error`.
pub fn status(failure: &Failure) -> Status {
    let code = match failure.status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => Code::InvalidArgument,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::REQUEST_TIMEOUT => Code::DeadlineExceeded,
        StatusCode::CONFLICT => Code::Aborted,
        StatusCode::PAYLOAD_TOO_LARGE => Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
        StatusCode::INTERNAL_SERVER_ERROR => Code::Internal,
        _ => Code::Unknown,
    };
    let message = match &failure.field {
        Some(field) => format!("{field}: {}", failure.error),
        None => failure.error.clone(),
    };
    let mut status = Status::new(code, message);
    if code == Code::Unavailable && failure.error.contains("--max-inflight") {
        status.metadata_mut().insert(
            "retry-after",
            tonic::metadata::MetadataValue::from(crate::error::RETRY_AFTER_S),
        );
    }
    status
}

/// The token check of a read, from the `authorization` metadata.
pub fn authorize_read<T>(state: &AppState, request: &Request<T>) -> Result<(), Failure> {
    if state.config.token.is_none() {
        return Ok(());
    }
    let headers = request.metadata().clone().into_headers();
    state.access.read(&headers)
}

/// One call of `method` (`/package.Service/Method`): timed against `--request-timeout` and
/// counted in the request metrics under the method's path, with the HTTP status its outcome
/// has on the HTTP routes.
pub async fn call<T>(
    state: &AppState,
    method: &'static str,
    work: impl Future<Output = Result<T, Failure>>,
) -> Result<Response<T>, Status> {
    let start = Instant::now();
    let limit = state.config.request_timeout;
    let result = match tokio::time::timeout(limit, work).await {
        Ok(result) => result,
        Err(_) => {
            state
                .metrics
                .guards
                .timeouts
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                route = method,
                limit_s = limit.as_secs_f64(),
                "request timed out"
            );
            let mut failure = Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the request took longer than the server's limit of {} s (--request-timeout)",
                    limit.as_secs_f64()
                ),
            );
            failure.logged = true;
            Err(failure)
        }
    };
    let code = result
        .as_ref()
        .map_or_else(|f| f.status, |_| StatusCode::OK);
    state
        .metrics
        .request(method, code.as_u16(), start.elapsed().as_secs_f64());
    match result {
        Ok(answer) => Ok(Response::new(answer)),
        Err(failure) => {
            if failure.status.is_server_error() && !failure.logged {
                tracing::warn!(route = method, status = code.as_u16(), error = %failure.error, "request failed");
            }
            Err(status(&failure))
        }
    }
}

/// Runs `work` on a blocking thread with `places` of model work (`crate::shed`), or the 503 of
/// a server at its limit. The places are held until `work` ends; if the call is dropped first
/// (its client went away, its time ran out), `work` sees `cancelled` set. What `work` keeps in
/// its `Spent` is freed after the answer is handed back, as `/v1/predict` frees a large
/// request's, and a message split over the cores then gives its freed memory back past the mark
/// (`crate::memory`).
pub async fn with_place<T: Send + 'static>(
    state: &Arc<AppState>,
    method: &'static str,
    what: &'static str,
    places: usize,
    work: impl FnOnce(&AppState, &std::sync::atomic::AtomicBool, &mut Spent) -> Result<T, Failure>
    + Send
    + 'static,
) -> Result<T, Failure> {
    let place = crate::shed::take(&state.limiter, &state.metrics.guards, method, places).await?;
    let guard = crate::shed::GiveUpOnDrop::new(place.clone());
    let worker = state.clone();
    let (answer, spent) = tokio::task::spawn_blocking(move || {
        let mut spent = Spent::default();
        let answer = work(&worker, place.cancelled(), &mut spent);
        if places > 1 {
            spent.trim_above(worker.config.memory_mark());
        }
        // The places go back with the answer, before the freeing.
        drop(place);
        (answer, spent)
    })
    .await
    .map_err(|e| state.metrics.guards.join_failure(&e, what))?;
    guard.answered();
    spent.free_later();
    answer
}
