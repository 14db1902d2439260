//! Replicas of the real `duet serve` sharing one PostgreSQL registry, driven from outside: a
//! write on one replica is used by the other within 1 s (deletions too), 1,000 concurrent writes
//! over both end with every replica equal to the database, racing replace and delete end in one
//! state, a replica started later catches up, and a database that stops and starts during a
//! prediction load fails no prediction and only the writes made while it is down.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{Server, TOKEN};

#[path = "../../server/tests/support/pg.rs"]
mod pg;

/// One second: the bound on propagation between replicas.
const BOUND: Duration = Duration::from_secs(1);

fn profile(solo: f64) -> Value {
    json!({"kind": "infer", "profiles": {"v100": {
        "solo_throughput": solo, "model": "ResNet-18", "batch_size": 32}}})
}

/// A replica on `dsn` (given through --state-file, as a Secret would) with the token in `dir`.
fn replica(dir: &std::path::Path, dsn: &str) -> Server {
    let state = dir.join("state");
    std::fs::write(&state, format!("{dsn}\n")).expect("state file");
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).expect("token");
    Server::start_with(&[
        "--state-file".into(),
        state.into(),
        "--token-file".into(),
        dir.join("token").into(),
    ])
}

/// Replicas A and B on `dsn`, each with its own folder.
fn two_replicas(dsn: &str) -> (tempfile::TempDir, tempfile::TempDir, Server, Server) {
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let a = replica(dir_a.path(), dsn);
    let b = replica(dir_b.path(), dsn);
    (dir_a, dir_b, a, b)
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build()
}

/// The status of a request, whatever it is.
fn status(result: Result<ureq::Response, ureq::Error>) -> u16 {
    match result {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("transport: {e}"),
    }
}

fn put(agent: &ureq::Agent, server: &Server, id: &str, solo: f64) -> u16 {
    status(
        agent
            .put(&server.url(&format!("/v1/workloads/{id}")))
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .send_json(profile(solo)),
    )
}

fn delete(agent: &ureq::Agent, server: &Server, id: &str) -> u16 {
    status(
        agent
            .delete(&server.url(&format!("/v1/workloads/{id}")))
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .call(),
    )
}

/// `/v1/predict` for one V100 pair naming `a` by id.
fn predict(agent: &ureq::Agent, server: &Server, a: &str) -> u16 {
    status(agent.post(&server.url("/v1/predict")).send_json(json!({
        "gpu": "v100",
        "pairs": [{"a": {"workload": a}, "b": {"workload": "a3c"}, "mode": "space"}]
    })))
}

fn get_json(server: &Server, path: &str) -> Value {
    agent()
        .get(&server.url(path))
        .call()
        .expect("GET")
        .into_json()
        .expect("json")
}

/// `/readyz` with the token: the database and its error are shown only to it.
fn readiness_detail(server: &Server) -> Value {
    agent()
        .get(&server.url("/readyz"))
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("GET")
        .into_json()
        .expect("json")
}

/// The client entries a replica lists: id -> v100 solo throughput.
fn client_entries(server: &Server) -> BTreeMap<String, f64> {
    get_json(server, "/v1/workloads")
        .as_array()
        .expect("a list")
        .iter()
        .filter(|w| w["source"] == "client")
        .map(|w| {
            (
                w["workload"].as_str().expect("id").to_string(),
                w["profiles"]["v100"]["solo_throughput"]
                    .as_f64()
                    .expect("solo"),
            )
        })
        .collect()
}

/// Every workload a replica lists, by id.
fn all_ids(server: &Server) -> Vec<String> {
    get_json(server, "/v1/workloads")
        .as_array()
        .expect("a list")
        .iter()
        .map(|w| w["workload"].as_str().expect("id").to_string())
        .collect()
}

/// The registered bodies in the database: id -> v100 solo throughput.
fn database_entries(dsn: &str) -> BTreeMap<String, f64> {
    pg::column(
        dsn,
        "SELECT id || ' ' || body FROM duet_workloads WHERE body IS NOT NULL",
    )
    .into_iter()
    .flatten()
    .map(|row| {
        let (id, body) = row.split_once(' ').expect("id and body");
        let body: Value = serde_json::from_str(body).expect("body");
        (
            id.to_string(),
            body["profiles"]["v100"]["solo_throughput"]
                .as_f64()
                .expect("solo"),
        )
    })
    .collect()
}

/// Waits until `check` holds, at most `within`; returns how long it took.
fn within(within: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn replicas_share_one_registry() {
    let Some(db) = pg::TestDatabase::create("replicas") else {
        return;
    };
    let (_dir_a, _dir_b, a, b) = two_replicas(&db.dsn);
    let ready = get_json(&a, "/readyz");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["registry"]["store"], "postgres");
    assert_eq!(ready["registry"]["state"], "ok");
    let http = agent();

    // Register on A, predict on B within 1 s.
    assert_eq!(predict(&http, &b, "shared"), 404);
    assert_eq!(put(&http, &a, "shared", 40.0), 201);
    let took = within(BOUND, "A's write used by B", || {
        predict(&http, &b, "shared") == 200
    });
    eprintln!("register on A -> predicted on B after {took:?}");

    // Delete on B, 404 on A within 1 s.
    assert_eq!(delete(&http, &b, "shared"), 204);
    assert_eq!(delete(&http, &b, "shared"), 404);
    within(BOUND, "B's delete seen by A", || {
        predict(&http, &a, "shared") == 404
    });
    // A dataset workload deleted on A is gone from B too.
    assert_eq!(delete(&http, &a, "cyclegan"), 204);
    within(BOUND, "a dataset workload's deletion", || {
        predict(&http, &b, "cyclegan") == 404
    });

    // 1,000 concurrent writes over both replicas: every replica ends equal to the database.
    let servers = [&a, &b];
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for t in 0..10usize {
            let failures = &failures;
            let servers = &servers;
            scope.spawn(move || {
                let http = agent();
                for i in 0..100usize {
                    let n = t * 100 + i;
                    let server = servers[n % 2];
                    let id = format!("bulk-{}", n % 400);
                    #[allow(clippy::cast_precision_loss)]
                    let code = put(&http, server, &id, 1.0 + n as f64);
                    if code != 200 && code != 201 {
                        failures.lock().expect("lock").push((id, code));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().expect("failures");
    assert!(
        failures.is_empty(),
        "{} writes failed: {:?}\nA:\n{}\nB:\n{}",
        failures.len(),
        &failures[..failures.len().min(5)],
        a.log(),
        b.log()
    );
    let database = database_entries(&db.dsn);
    assert_eq!(database.len(), 400);
    within(BOUND, "both replicas equal to the database", || {
        client_entries(&a) == database && client_entries(&b) == database
    });
    assert_eq!(all_ids(&a), all_ids(&b));

    // Replace on one replica and delete on the other, racing: one state everywhere.
    for round in 0..20 {
        let id = format!("race-{round}");
        assert_eq!(put(&http, &a, &id, 1.0), 201);
        std::thread::scope(|scope| {
            let replace = scope.spawn(|| put(&agent(), &a, &id, 2.0));
            let remove = scope.spawn(|| delete(&agent(), &b, &id));
            let (r, d) = (
                replace.join().expect("replace"),
                remove.join().expect("delete"),
            );
            // Each client gets a correct answer for its own call.
            assert!(r == 200 || r == 201, "replace answered {r}");
            assert_eq!(d, 204, "delete answered {d}");
        });
    }
    let database = database_entries(&db.dsn);
    within(BOUND, "racing writes settled everywhere", || {
        client_entries(&a) == database && client_entries(&b) == database
    });

    // A replica started after all this starts equal.
    let dir_c = tempfile::tempdir().expect("c");
    let c = replica(dir_c.path(), &db.dsn);
    assert_eq!(client_entries(&c), database);
    assert_eq!(all_ids(&c), all_ids(&a));
    assert!(!all_ids(&c).contains(&"cyclegan".to_string()));
}

/// Sets its flag when dropped, on a panic too.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn replicas_ride_out_a_database_restart() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let Some(db) = pg::TestDatabase::create_in(&cluster.admin(), "restart") else {
        return;
    };
    let shown = format!("postgres://postgres@127.0.0.1:{}/", cluster.port);
    let (_dir_a, _dir_b, a, b) = two_replicas(&db.dsn);
    let http = agent();
    assert_eq!(put(&http, &a, "before", 10.0), 201);
    within(BOUND, "the first write on B", || {
        predict(&http, &b, "before") == 200
    });

    // Predictions by id (a client workload and a dataset one) on both replicas, all along.
    let stop = AtomicBool::new(false);
    let predictions = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    // (when, replica, status) of a write every 50 ms.
    let writes = Mutex::new(Vec::new());
    let started = Instant::now();
    // From the stop to both replicas reporting the registry ok again.
    let (down_at, ok_at) = std::thread::scope(|scope| {
        // Whatever happens below (an assertion failing included), the load threads stop, so a
        // failure is reported instead of the scope waiting on them for ever.
        let _stop_load = StopOnDrop(&stop);
        for server in [&a, &b] {
            let (stop, predictions, failed) = (&stop, &predictions, &failed);
            scope.spawn(move || {
                let http = agent();
                while !stop.load(Ordering::Relaxed) {
                    for id in ["before", "resnet-50-bs64"] {
                        let code = predict(&http, server, id);
                        predictions.fetch_add(1, Ordering::Relaxed);
                        if code != 200 {
                            failed.lock().expect("lock").push(code);
                        }
                    }
                    // A steady load, not a saturating one: on 2 cores, back-to-back requests
                    // from 4 threads starved PostgreSQL itself (a fast shutdown took 17-26 s and
                    // a restart 8 s), which measured the machine, not the replicas.
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
        }
        {
            let (stop, writes) = (&stop, &writes);
            let (a, b) = (&a, &b);
            scope.spawn(move || {
                // Longer than the server's 10 s database limit: a write in flight when the
                // database stops is answered by the server (503), not cut by this client.
                let http = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(30))
                    .build();
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let server = if n.is_multiple_of(2) { a } else { b };
                    let code = put(&http, server, &format!("during-{n}"), f64::from(n + 1));
                    writes
                        .lock()
                        .expect("lock")
                        .push((started.elapsed(), n, code));
                    n += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
        std::thread::sleep(Duration::from_secs(1));
        let down_at = started.elapsed();
        cluster.stop();
        // Down: predictions go on; readiness says degraded and names the database.
        within(Duration::from_secs(5), "A degraded", || {
            get_json(&a, "/readyz")["registry"]["state"] == "degraded"
        });
        let ready = get_json(&a, "/readyz");
        assert_eq!(ready["status"], "degraded", "{ready}");
        assert!(ready["registry"]["error"].is_null(), "{ready}");
        let ready = readiness_detail(&a);
        let error = ready["registry"]["error"].as_str().expect("error");
        assert!(error.contains(&shown), "{error}");
        assert_eq!(a.metric("duet_registry_degraded"), 1.0);
        assert!(a.metric("duet_registry_database_errors_total") >= 1.0);
        let refused = agent()
            .put(&b.url("/v1/workloads/refused"))
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .send_json(profile(1.0));
        match refused {
            Err(ureq::Error::Status(503, r)) => {
                let body: Value = r.into_json().expect("json");
                let message = body["error"].as_str().expect("message");
                assert!(message.contains(&shown), "{message}");
            }
            other => panic!("a write while the database is down: {other:?}"),
        }
        std::thread::sleep(Duration::from_secs(2));
        cluster.resume();
        // Back: both replicas reconnect and catch up, without a restart (within a connection
        // attempt's limits: 3 s to connect, 5 s to set up, 2 s between attempts, twice).
        within(Duration::from_secs(20), "replicas reconnected", || {
            get_json(&a, "/readyz")["registry"]["state"] == "ok"
                && get_json(&b, "/readyz")["registry"]["state"] == "ok"
        });
        let ok_at = started.elapsed();
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        (down_at, ok_at)
    });
    let failed = failed.into_inner().expect("failed");
    assert!(
        failed.is_empty(),
        "{} of {} predictions failed: {failed:?}",
        failed.len(),
        predictions.load(Ordering::Relaxed)
    );
    let writes = writes.into_inner().expect("writes");
    // A write is timed when its answer arrived: one sent just before the stop may be answered
    // just after it, hence the slack.
    let slack = Duration::from_millis(500);
    for (when, n, code) in &writes {
        if *code == 200 || *code == 201 {
            continue;
        }
        assert_eq!(*code, 503, "write {n} answered {code}");
        assert!(
            *when >= down_at && *when <= ok_at + slack,
            "write {n} refused at {when:?}, outside the outage ({down_at:?} to {ok_at:?})"
        );
    }
    assert!(
        writes.iter().any(|(_, _, c)| *c == 503),
        "no write saw the outage"
    );
    assert!(
        writes
            .iter()
            .any(|(w, _, c)| *w > ok_at && (*c == 200 || *c == 201)),
        "no write succeeded after the database returned"
    );
    // Every acknowledged write, on either side of the outage, is on both replicas.
    let database = database_entries(&db.dsn);
    within(
        BOUND,
        "both replicas equal to the database after the outage",
        || client_entries(&a) == database && client_entries(&b) == database,
    );
    assert_eq!(a.metric("duet_registry_degraded"), 0.0);
}

#[test]
fn an_unreachable_database_at_start_degrades_the_registry_not_the_server() {
    let port = support::free_port();
    let dsn = format!("postgres://duet:s3cret@127.0.0.1:{port}/registry");
    let dir = tempfile::tempdir().expect("tmp");
    let server = replica(dir.path(), &dsn);
    let ready = get_json(&server, "/readyz");
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["registry"]["state"], "degraded");
    // Without the token: why in words, no host, user or error text.
    let open = ready.to_string();
    assert!(
        ready["reason"]
            .as_str()
            .is_some_and(|r| r.contains("database cannot be reached"))
            && !open.contains("127.0.0.1")
            && !open.contains("duet@")
            && ready["registry"]["error"].is_null(),
        "{open}"
    );
    let ready = readiness_detail(&server);
    let shown = format!("postgres://duet@127.0.0.1:{port}/registry");
    assert_eq!(ready["registry"]["database"], shown.as_str());
    let error = ready["registry"]["error"].as_str().expect("error");
    assert!(
        error.contains(&shown) && !error.contains("s3cret"),
        "{error}"
    );
    let http = agent();
    // Dataset workloads by id and inline features still predict; writes answer 503.
    assert_eq!(predict(&http, &server, "resnet-50-bs64"), 200);
    let inline = http.post(&server.url("/v1/predict")).send_json(json!({
        "gpu": "v100",
        "pairs": [{"a": {"features": {"solo_throughput": 5.0, "model": "LM", "batch_size": 20}},
                   "b": {"workload": "a3c"}, "mode": "space"}]
    }));
    assert_eq!(status(inline), 200);
    assert_eq!(put(&http, &server, "new", 1.0), 503);
    assert_eq!(delete(&http, &server, "a3c"), 503);
}

/// Observations reported to two replicas land in the one database: a batch retried on the other
/// replica stores nothing twice, both replicas' drift sees every one, and `duet dataset export`
/// reads them from the database.
#[test]
fn observations_from_every_replica_are_exported_from_the_database() {
    let Some(db) = pg::TestDatabase::create("observations") else {
        return;
    };
    let (dir_a, _dir_b, a, b) = two_replicas(&db.dsn);
    let http = agent();
    let observation = |id: &str, speed: f64| {
        json!({"id": id, "gpu": "v100", "mode": "space",
               "a": {"workload": "a3c"}, "b": {"workload": "cyclegan"},
               "throughput_a": 10.0 * speed, "throughput_b": 4.0 * speed,
               "solo_throughput_a": 10.0, "solo_throughput_b": 4.0,
               "window_s": 10.0, "observed_at": "2026-12-01T10:00:00Z"})
    };
    let post = |server: &Server, batch: Vec<Value>| -> Value {
        http.post(&server.url("/v1/observations"))
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .send_json(json!({"observations": batch}))
            .expect("stored")
            .into_json()
            .expect("JSON")
    };
    let first = post(&a, vec![observation("o-1", 0.5), observation("o-2", 0.6)]);
    assert_eq!(first["stored"], json!(["o-1", "o-2"]), "{first}");
    let retried = post(&b, vec![observation("o-2", 0.6), observation("o-3", 0.7)]);
    assert_eq!(retried["stored"], json!(["o-3"]), "{retried}");
    assert_eq!(retried["duplicates"], json!(["o-2"]), "{retried}");
    for server in [&a, &b] {
        assert_eq!(get_json(server, "/v1/drift")["pairs"], 3);
    }
    let out = dir_a.path().join("observed");
    let export = support::duet()
        .args(["dataset", "export", "--state", &db.dsn, "--out"])
        .arg(&out)
        .output()
        .expect("duet dataset export runs");
    let stderr = String::from_utf8_lossy(&export.stderr);
    assert!(export.status.success(), "{stderr}");
    let dataset = duet_core::Dataset::read(&out).expect("a valid dataset");
    assert_eq!(
        dataset.pairs.len(),
        1,
        "three observations of one setting, pooled"
    );
    assert_eq!(dataset.pairs[0].repetitions, Some(3));
    assert!((dataset.pairs[0].throughput_a - 6.0).abs() < 1e-9);
    assert!(dataset.meta.provenance.source.contains("postgres://"));
}
