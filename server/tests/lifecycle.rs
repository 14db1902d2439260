//! The model's lifecycle in process: reloads single-flight for their whole duration (two at once
//! of different models: one 409 naming the other; of the same model: one load, both get its
//! outcome; a request that gives up leaves the load running and the slot held), the fallback to
//! the repository's `previous` model when the configured one cannot be loaded, the drain, and
//! what `/readyz` tells a client without the token.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use duet_server::{AppState, Config};
use serde_json::{Value, json};

#[path = "support/http.rs"]
mod http;
use http::{call, model_dir};

const TOKEN: &str = "lifecycle-token";

/// A model repository: `a` and `b` (copies of the shipped model) and `broken` (a corrupt
/// record).
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for name in ["a", "b", "broken"] {
        copy_model(&dir.path().join(name));
    }
    std::fs::write(dir.path().join("broken/member-0.mpk"), b"not a record").expect("corrupt");
    dir
}

fn copy_model(to: &Path) {
    std::fs::create_dir(to).expect("mkdir");
    for f in std::fs::read_dir(model_dir()).expect("model") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, to.join(f.file_name().expect("name"))).expect("copy");
    }
    // The datasets that seed the registry, found from anywhere.
    let file = to.join("model.json");
    let mut meta: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    let root = model_dir().join("../..");
    for data in meta["data"].as_array_mut().expect("data") {
        let at = root.join(data["path"].as_str().expect("path"));
        data["path"] = json!(at.display().to_string());
    }
    std::fs::write(&file, meta.to_string()).expect("write");
}

fn config(model: PathBuf, repo: &Path) -> Config {
    Config {
        token: Some(TOKEN.into()),
        model_repo: Some(repo.to_path_buf()),
        ..Config::new(model)
    }
}

async fn started(config: Config) -> (Router, Arc<AppState>) {
    let state = AppState::new(config).expect("state");
    state.start().await.expect("a model loads");
    (duet_server::router(state.clone()), state)
}

async fn reload(app: &Router, model: &str) -> (StatusCode, Value) {
    call(
        app,
        "POST",
        "/v1/models/reload",
        Some(json!({ "model": model })),
        Some(TOKEN),
    )
    .await
}

/// The value of a metric line of `/metrics`.
async fn metric(app: &Router, name: &str) -> f64 {
    let (_, text) = call(app, "GET", "/metrics", None, None).await;
    let text = text.as_str().expect("text").to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

async fn serving_path(app: &Router) -> String {
    let (_, models) = call(app, "GET", "/v1/models", None, None).await;
    models[0]["path"].as_str().expect("path").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reloads_at_once_load_once_and_never_overlap() {
    let repo = repository();
    let (app, _) = started(config(repo.path().join("a"), repo.path())).await;

    // Different models at once: one loads, the other is refused 409 naming it.
    let (x, y) = tokio::join!(reload(&app, "b"), reload(&app, "a"));
    let mut statuses = [x.0, y.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::CONFLICT],
        "{x:?} {y:?}"
    );
    let (winner, refused) = if x.0 == StatusCode::OK {
        ("b", &y)
    } else {
        ("a", &x)
    };
    let error = refused.1["error"].as_str().expect("error");
    assert!(
        error.contains(&format!("model `{winner}` is being loaded")),
        "{error}"
    );
    assert_eq!(
        serving_path(&app).await,
        repo.path().join(winner).display().to_string()
    );

    // The same model at once: one load, both get its outcome.
    let before = metric(&app, "duet_model_reloads_total").await;
    let (x, y) = tokio::join!(reload(&app, "b"), reload(&app, "b"));
    assert_eq!((x.0, y.0), (StatusCode::OK, StatusCode::OK), "{x:?} {y:?}");
    assert_eq!(x.1, y.1);
    assert_eq!(metric(&app, "duet_model_reloads_total").await, before + 1.0);
    assert_eq!(
        serving_path(&app).await,
        repo.path().join("b").display().to_string()
    );

    // A refused model at once: one failed load, both get its error; `b` keeps serving. Its
    // corrupt record is a FIFO fed only once both requests are in, so that a load that fails
    // in microseconds cannot end before the second request arrives.
    let failures = metric(&app, "duet_model_reload_failures_total").await;
    let record = repo.path().join("broken/member-0.mpk");
    std::fs::remove_file(&record).expect("rm");
    let made = std::process::Command::new("mkfifo")
        .arg(&record)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let feeder = std::thread::spawn(move || feed_fifo(&record, Duration::from_millis(300)));
    let (x, y) = tokio::join!(reload(&app, "broken"), reload(&app, "broken"));
    assert!(
        feeder.join().expect("feeder") > 0,
        "the load never read the record"
    );
    assert_eq!(
        (x.0, y.0),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            StatusCode::UNPROCESSABLE_ENTITY
        ),
        "{x:?} {y:?}"
    );
    assert_eq!(x.1, y.1);
    assert!(
        x.1["error"]
            .as_str()
            .is_some_and(|e| e.contains("member-0.mpk")),
        "{}",
        x.1
    );
    assert_eq!(
        metric(&app, "duet_model_reload_failures_total").await,
        failures + 1.0
    );
    assert_eq!(
        serving_path(&app).await,
        repo.path().join("b").display().to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_request_gives_up_keeps_its_slot_until_the_load_ends() {
    let repo = repository();
    let (app, state) = started(config(repo.path().join("a"), repo.path())).await;
    // The request's future dropped mid-load, as the time limit or a client gone drops it.
    let waiting = {
        let state = state.clone();
        let dir = repo.path().join("b");
        tokio::spawn(async move { state.reload(Some(dir)).await })
    };
    while state.lifecycle.reloading().is_none() {
        tokio::task::yield_now().await;
    }
    waiting.abort();
    assert_eq!(state.lifecycle.reloading().as_deref(), Some("b"));
    let refused = reload(&app, "a").await;
    assert_eq!(refused.0, StatusCode::CONFLICT, "{}", refused.1);
    // The load goes on to its end; then the served model and /v1/models agree on it.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while state.lifecycle.reloading().is_some() {
        assert!(std::time::Instant::now() < deadline, "the load never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let served = state.model().expect("a model").dir.display().to_string();
    assert_eq!(served, repo.path().join("b").display().to_string());
    assert_eq!(serving_path(&app).await, served);
    assert_eq!(metric(&app, "duet_model_reloads_total").await, 1.0);
}

#[tokio::test]
async fn a_configured_model_that_fails_falls_back_to_previous_and_says_degraded() {
    let repo = repository();
    copy_model(&repo.path().join("previous"));
    let (app, state) = started(config(repo.path().join("broken"), repo.path())).await;
    assert_eq!(
        serving_path(&app).await,
        repo.path().join("previous").display().to_string()
    );
    let (status, ready) = call(&app, "GET", "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["model"]["serving"], "previous", "{ready}");
    assert_eq!(metric(&app, "duet_model_fallback").await, 1.0);
    let reason = ready["reason"].as_str().expect("reason");
    assert!(reason.contains("previous model serves"), "{reason}");
    // Without the token no error text, no path; with it, why the configured model failed.
    let open = ready.to_string();
    assert!(
        !open.contains("member-0.mpk") && !open.contains(&repo.path().display().to_string()),
        "{open}"
    );
    let (_, detailed) = call(&app, "GET", "/readyz", None, Some(TOKEN)).await;
    assert!(
        detailed["model"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("member-0.mpk")),
        "{detailed}"
    );
    // Predictions are served by `previous`.
    let (s, _) = call(
        &app,
        "POST",
        "/v1/predict",
        Some(json!({"gpu": "v100", "pairs": [
            {"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "space"}]})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // A reload naming no model tries the configured one again: once it is fixed, it serves
    // and the server is plainly ready.
    std::fs::copy(
        model_dir().join("member-0.mpk"),
        repo.path().join("broken/member-0.mpk"),
    )
    .expect("fixed");
    let (s, body) = call(&app, "POST", "/v1/models/reload", None, Some(TOKEN)).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (_, ready) = call(&app, "GET", "/readyz", None, None).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["model"]["serving"], "configured");
    assert_eq!(metric(&app, "duet_model_fallback").await, 0.0);
    assert_eq!(
        state.model().expect("model").dir,
        repo.path().join("broken")
    );
}

#[tokio::test]
async fn without_previous_a_configured_model_that_fails_stops_the_start() {
    let repo = repository();
    let state = AppState::new(config(repo.path().join("broken"), repo.path())).expect("state");
    let failed = state.start().await.expect_err("nothing to fall back on");
    assert!(failed.error.contains("member-0.mpk"), "{}", failed.error);
    // `previous` refused too: both errors named.
    copy_model(&repo.path().join("previous"));
    std::fs::write(repo.path().join("previous/member-1.mpk"), b"bad").expect("corrupt");
    let state = AppState::new(config(repo.path().join("broken"), repo.path())).expect("state");
    let failed = state.start().await.expect_err("previous is broken too");
    assert!(
        failed.error.contains("member-0.mpk")
            && failed
                .error
                .contains("`previous` model cannot be loaded either")
            && failed.error.contains("member-1.mpk"),
        "{}",
        failed.error
    );
}

#[tokio::test]
async fn draining_turns_readiness_off_and_asks_clients_to_close() {
    let repo = repository();
    let (app, state) = started(config(repo.path().join("a"), repo.path())).await;
    assert_eq!(
        call(&app, "GET", "/readyz", None, None).await.0,
        StatusCode::OK
    );
    state.lifecycle.start_draining();
    let (s, body) = call(&app, "GET", "/readyz", None, None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("shutting down")),
        "{body}"
    );
    let (s, ready) = call(&app, "GET", "/v2/health/ready", None, None).await;
    assert_eq!(
        (s, ready["ready"].as_bool()),
        (StatusCode::SERVICE_UNAVAILABLE, Some(false))
    );
    // Requests are still answered, each with `Connection: close`.
    let request = axum::http::Request::builder()
        .method("GET")
        .uri("/v1/models")
        .body(axum::body::Body::empty())
        .expect("request");
    let response = tower::ServiceExt::oneshot(app.clone(), request)
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response
            .headers()
            .get("connection")
            .and_then(|v| v.to_str().ok()),
        Some("close")
    );
}

#[tokio::test]
async fn readiness_names_no_database_host_or_user_without_the_token() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    // A PostgreSQL registry that cannot be reached: the registry is degraded.
    let dsn = format!(
        "host=db-secret-host.invalid port={port} dbname=registry user=duet-user password=s3cret"
    );
    let repo = repository();
    let config = Config {
        state: Some(duet_server::store::StateLocation::parse(&dsn)),
        ..config(repo.path().join("a"), repo.path())
    };
    let (app, _) = started(config).await;
    let (s, ready) = call(&app, "GET", "/readyz", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["registry"]["state"], "degraded", "{ready}");
    assert!(
        ready["reason"]
            .as_str()
            .is_some_and(|r| r.contains("database cannot be reached")),
        "{ready}"
    );
    let open = ready.to_string();
    for secret in [
        "db-secret-host",
        "duet-user",
        "s3cret",
        "\"error\"",
        "\"database\"",
    ] {
        assert!(!open.contains(secret), "`{secret}` in {open}");
    }
    let (_, detailed) = call(&app, "GET", "/readyz", None, Some(TOKEN)).await;
    assert_eq!(
        detailed["registry"]["database"],
        format!("postgres://duet-user@db-secret-host.invalid:{port}/registry")
    );
    assert!(detailed["registry"]["error"].is_string(), "{detailed}");
    assert!(!detailed.to_string().contains("s3cret"), "{detailed}");
    // A wrong token is no token.
    let (_, wrong) = call(&app, "GET", "/readyz", None, Some("nope")).await;
    assert!(!wrong.to_string().contains("db-secret-host"), "{wrong}");
}

/// Writes a corrupt record into the FIFO `path` at every open for reading that comes after
/// `wait` (Burn reads a record it cannot decode a second time, for its error), until none has
/// come for half a second: how many opens it fed.
fn feed_fifo(path: &Path, wait: Duration) -> usize {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Linux's O_NONBLOCK: opening a FIFO to write fails at once (ENXIO) while nobody reads it.
    const O_NONBLOCK: i32 = 0o4000;
    std::thread::sleep(wait);
    let (mut fed, mut last) = (0, std::time::Instant::now());
    let deadline = last + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(O_NONBLOCK)
            .open(path)
        {
            // A reader that closed between this open and the write (Burn ending its first
            // read) gets nothing from it: not counted, and the next open feeds its next read.
            Ok(mut f) => {
                if f.write_all(b"not a record").is_ok() {
                    fed += 1;
                    last = std::time::Instant::now();
                }
            }
            Err(_) if fed > 0 && last.elapsed() > Duration::from_millis(500) => break,
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    fed
}
