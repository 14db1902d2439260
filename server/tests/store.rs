//! The registry stores against real databases: the same semantics from memory, an SQLite file
//! and PostgreSQL (a fresh database per test), replicas sharing one PostgreSQL database, schema
//! versions, and connection strings that never show their password.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use duet_core::api::{
    Calibration, FeatureInput, Features, JobRef, Observation, ObservationRecord, ObservedJob,
    ObservedJobPrediction, ObservedJobRecord, ObservedPrediction, WorkloadBody,
};
use duet_core::dataset::{JobKind, Mode};
use duet_server::Config;
use duet_server::store::{
    Change, MemoryStore, PostgresStore, Put, SCHEMA_VERSION, SqliteStore, StateLocation, Store,
    StoreError, Written,
};

#[path = "support/pg.rs"]
mod pg;

fn body(solo: f64) -> WorkloadBody {
    WorkloadBody {
        kind: None,
        profiles: BTreeMap::from([(
            "v100".to_string(),
            Features::from([("solo_throughput".into(), FeatureInput::Number(solo))]),
        )]),
    }
}

/// What every store must do, in one script.
async fn same_semantics(store: &impl Store) {
    let first = store
        .write("w1", Some(&body(1.0)), false)
        .await
        .expect("w1");
    assert!(!first.existed);
    let s1 = first.seq.expect("a sequence number");
    let replaced = store
        .write("w1", Some(&body(2.0)), false)
        .await
        .expect("w1 again");
    assert!(replaced.existed);
    assert!(replaced.seq.expect("seq") > s1);
    // Deleting what does not exist writes nothing.
    assert_eq!(
        store.write("nobody", None, false).await.expect("nobody"),
        Written {
            seq: None,
            existed: false
        }
    );
    // A dataset workload exists until a tombstone says not; then it is gone, and may come back.
    let tomb = store.write("seed", None, true).await.expect("seed");
    assert!(tomb.existed && tomb.seq.is_some());
    assert_eq!(
        store.write("seed", None, true).await.expect("again").seq,
        None
    );
    assert!(
        !store
            .write("seed", Some(&body(3.0)), true)
            .await
            .expect("back")
            .existed
    );
    let deleted = store.write("w1", None, false).await.expect("delete w1");
    assert!(deleted.existed);

    let all = store.changes_since(0).await.expect("changes");
    let ids: Vec<(&str, bool)> = all
        .iter()
        .map(|c| (c.id.as_str(), c.body.is_some()))
        .collect();
    assert_eq!(ids, [("seed", true), ("w1", false)], "{all:?}");
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(all[0].body, Some(body(3.0)));
    let later = store.changes_since(all[0].seq).await.expect("later");
    assert_eq!(later, all[1..].to_vec());
    assert!(
        store
            .changes_since(all[1].seq)
            .await
            .expect("none")
            .is_empty()
    );
}

/// A stored observation of `a` alone, `throughput` iterations per second.
fn observation(id: &str, throughput: f64) -> ObservationRecord {
    ObservationRecord {
        observation: Observation {
            id: id.to_string(),
            gpu: "v100".into(),
            mode: None,
            share_a: None,
            share_b: None,
            a: JobRef::workload("a"),
            b: None,
            throughput_a: throughput,
            throughput_b: None,
            solo_throughput_a: None,
            solo_throughput_b: None,
            others: Vec::new(),
            window_s: 10.0,
            observed_at: "2026-12-01T12:00:00Z".into(),
        },
        workload_a: "a".into(),
        workload_b: None,
        features_a: body(throughput).profiles["v100"].clone(),
        features_b: None,
        kind_a: None,
        kind_b: None,
        others: Vec::new(),
        prediction: None,
        observed_at_s: 1_796_126_400.0,
        received_at_s: 1_796_126_401.0,
        server: "test".into(),
    }
}

/// A stored observation of a group of three: `a`, `b` and one further job, with the model's
/// prediction for each.
fn group_observation(id: &str) -> ObservationRecord {
    let mut record = observation(id, 1.0);
    let o = &mut record.observation;
    o.mode = Some(Mode::Mps);
    (o.share_a, o.share_b) = (Some(30.0), Some(30.0));
    o.b = Some(JobRef::workload("b"));
    o.throughput_b = Some(0.5);
    o.others = vec![ObservedJob {
        job: JobRef::workload("c"),
        throughput: 0.25,
        solo_throughput: Some(0.75),
        share: Some(40.0),
    }];
    record.workload_b = Some("b".into());
    record.features_b = Some(body(2.0).profiles["v100"].clone());
    record.others = vec![ObservedJobRecord {
        workload: "c".into(),
        features: body(3.0).profiles["v100"].clone(),
        kind: Some(JobKind::Infer),
    }];
    record.prediction = Some(ObservedPrediction {
        model_version: "m1".into(),
        speed_a: 0.5,
        speed_b: 0.6,
        slowdown_a_p90: 2.5,
        slowdown_b_p90: 2.0,
        calibration: Calibration::Known,
        others: vec![ObservedJobPrediction {
            speed: 0.4,
            slowdown_p90: 3.0,
        }],
    });
    record
}

/// What every store must do with observations: stored once by id, a retry a duplicate, other
/// content under a stored id a conflict that changes nothing, read back in order and newest
/// first.
async fn observation_semantics(store: &impl Store) {
    for (id, v) in [("o1", 1.0), ("o2", 2.0), ("o3", 3.0)] {
        assert!(matches!(
            store
                .put_observations(&[observation(id, v)])
                .await
                .expect(id)[0],
            Put::Stored(_)
        ));
    }
    // A batch: one transaction, one outcome per record in order; an id twice in a batch is
    // stored once.
    let puts = store
        .put_observations(&[
            observation("o2", 2.0),
            observation("o2", 9.0),
            observation("o4", 4.0),
            observation("o4", 4.0),
        ])
        .await
        .expect("a batch");
    assert!(
        matches!(
            puts[..],
            [
                Put::Duplicate,
                Put::Conflict,
                Put::Stored(_),
                Put::Duplicate
            ]
        ),
        "{puts:?}"
    );
    let all = store.observations(0, 100, false).await.expect("all");
    let ids: Vec<&str> = all.iter().map(|(_, r)| r.observation.id.as_str()).collect();
    assert_eq!(ids, ["o1", "o2", "o3", "o4"]);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(all[1].1, observation("o2", 2.0), "the first content stays");
    let newest = store.observations(0, 2, true).await.expect("newest");
    let ids: Vec<&str> = newest
        .iter()
        .map(|(_, r)| r.observation.id.as_str())
        .collect();
    assert_eq!(ids, ["o4", "o3"]);
    let after = store.observations(all[0].0, 1, false).await.expect("page");
    assert_eq!(after, all[1..2].to_vec());
    // A group's further jobs, as resolved, and their predictions are kept whole.
    let group = group_observation("g1");
    let put = store
        .put_observations(std::slice::from_ref(&group))
        .await
        .expect("a group");
    assert!(matches!(put[..], [Put::Stored(_)]), "{put:?}");
    let newest = store.observations(0, 1, true).await.expect("the group");
    assert_eq!(newest[0].1, group);
}

#[tokio::test]
async fn the_memory_store_keeps_at_most_its_bound_and_refuses_a_batch_whole() {
    let store = MemoryStore::new(3);
    let first = [observation("o1", 1.0), observation("o2", 2.0)];
    store.put_observations(&first).await.expect("two fit");
    let over = store
        .put_observations(&[observation("o3", 3.0), observation("o4", 4.0)])
        .await
        .expect_err("four do not");
    assert!(
        matches!(&over, StoreError::Full(m) if m.contains("--max-memory-observations")),
        "{over:?}"
    );
    // Nothing of the refused batch was kept; a retry of what is stored is still answered.
    assert_eq!(
        store.observations(0, 10, false).await.expect("read").len(),
        2
    );
    let retry = store.put_observations(&first).await.expect("a retry");
    assert_eq!(retry, [Put::Duplicate, Put::Duplicate]);
    store
        .put_observations(&[observation("o3", 3.0)])
        .await
        .expect("the third fits");
}

#[tokio::test]
async fn memory_store_semantics() {
    same_semantics(&MemoryStore::default()).await;
    observation_semantics(&MemoryStore::default()).await;
}

#[tokio::test]
async fn sqlite_store_semantics_and_durability() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("registry.sqlite");
    same_semantics(&SqliteStore::open(&path).expect("open")).await;
    observation_semantics(&SqliteStore::open(&path).expect("open")).await;
    // A second open of the file sees every change, and numbers on from the last.
    let again = SqliteStore::open(&path).expect("reopen");
    assert_eq!(
        again.observations(0, 10, false).await.expect("kept").len(),
        5
    );
    let all = again.changes_since(0).await.expect("changes");
    assert_eq!(all.len(), 2);
    let next = again
        .write("w2", Some(&body(1.0)), false)
        .await
        .expect("w2");
    assert_eq!(next.seq, Some(all[1].seq + 1));
}

#[tokio::test]
async fn sqlite_file_from_before_sequences_is_migrated_and_a_newer_one_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let old = dir.path().join("old.sqlite");
    {
        let conn = rusqlite::Connection::open(&old).expect("old file");
        conn.execute_batch("CREATE TABLE workloads (id TEXT PRIMARY KEY, body TEXT);")
            .expect("old schema");
        let text = serde_json::to_string(&body(4.0)).expect("json");
        conn.execute(
            "INSERT INTO workloads VALUES ('kept', ?1), ('a3c', NULL)",
            [text],
        )
        .expect("old rows");
    }
    let store = SqliteStore::open(&old).expect("migrated");
    let all = store.changes_since(0).await.expect("changes");
    assert_eq!(
        all,
        vec![
            Change {
                id: "kept".into(),
                body: Some(body(4.0)),
                seq: 1
            },
            Change {
                id: "a3c".into(),
                body: None,
                seq: 2
            }
        ]
    );
    let newer = dir.path().join("newer.sqlite");
    rusqlite::Connection::open(&newer)
        .and_then(|c| c.execute_batch("PRAGMA user_version = 99;"))
        .expect("newer file");
    let err = SqliteStore::open(&newer).expect_err("newer schema");
    assert!(
        err.contains("schema version 99, newer than this duet's"),
        "{err}"
    );
    assert!(err.contains("newer.sqlite"), "{err}");
}

async fn connected(
    dsn: &str,
) -> (
    PostgresStore,
    tokio::sync::mpsc::UnboundedReceiver<Option<i64>>,
) {
    let store = PostgresStore::new(dsn).expect("a valid DSN");
    let rx = store.connect().await.expect("connects");
    (store, rx)
}

#[tokio::test]
async fn postgres_store_semantics() {
    let Some(db) = pg::TestDatabase::create("store_semantics") else {
        return;
    };
    let (store, _rx) = connected(&db.dsn).await;
    same_semantics(&store).await;
    observation_semantics(&store).await;
    // The schema is created once: a second replica connecting finds it and changes nothing.
    let (other, _rx2) = connected(&db.dsn).await;
    assert_eq!(
        other.changes_since(0).await.expect("changes"),
        store.changes_since(0).await.expect("changes")
    );
    assert_eq!(
        other
            .observations(0, 10, false)
            .await
            .expect("observations"),
        store
            .observations(0, 10, false)
            .await
            .expect("observations")
    );
    let versions = pg::column(&db.dsn, "SELECT version::text FROM duet_schema");
    assert_eq!(versions, [Some(SCHEMA_VERSION.to_string())]);
}

/// A database of schema version 2 (before observations) gets the observations table on the
/// next connection, its registry untouched.
#[tokio::test]
async fn postgres_database_of_version_2_gains_observations() {
    let Some(db) = pg::TestDatabase::create("store_v2") else {
        return;
    };
    let (store, _rx) = connected(&db.dsn).await;
    store
        .write("kept", Some(&body(1.0)), false)
        .await
        .expect("a registration");
    drop(store);
    pg::execute(
        &db.dsn,
        "DROP TABLE duet_observations; DROP SEQUENCE duet_observation_seq; \
         UPDATE duet_schema SET version = 2",
    )
    .expect("back to version 2");
    let (store, _rx) = connected(&db.dsn).await;
    assert_eq!(store.changes_since(0).await.expect("registry").len(), 1);
    observation_semantics(&store).await;
    let versions = pg::column(
        &db.dsn,
        "SELECT version::text FROM duet_schema ORDER BY version",
    );
    assert_eq!(
        versions,
        [Some("2".to_string()), Some(SCHEMA_VERSION.to_string())]
    );
}

/// Two replicas writing the same ids at once: sequence numbers follow commit order (a reader
/// catching up by number misses nothing), every write notifies, the last by number wins.
#[tokio::test]
async fn postgres_replicas_racing_end_in_one_state() {
    let Some(db) = pg::TestDatabase::create("store_race") else {
        return;
    };
    let (a, _rx_a) = connected(&db.dsn).await;
    let (b, mut rx_b) = connected(&db.dsn).await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    // A reader catching up by sequence number while the writes run.
    let reader = {
        let b = b.clone();
        tokio::spawn(async move {
            let mut seen: BTreeMap<String, (Option<WorkloadBody>, i64)> = BTreeMap::new();
            let mut last = 0;
            for _ in 0..200 {
                for c in b.changes_since(last).await.expect("catch up") {
                    assert!(c.seq > last, "out of order: {} after {last}", c.seq);
                    last = c.seq;
                    seen.insert(c.id, (c.body, c.seq));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (seen, last)
        })
    };
    let mut tasks = Vec::new();
    for i in 0..400u32 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let id = format!("w{}", i % 10);
            let value = (i % 3 == 0).then(|| body(f64::from(i + 1)));
            store
                .write(&id, value.as_ref(), false)
                .await
                .expect("write")
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        if let Some(seq) = t.await.expect("task").seq {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    let final_state = a.changes_since(0).await.expect("final");
    assert_eq!(final_state, b.changes_since(0).await.expect("final on b"));
    assert!(final_state.len() <= 10);
    let (mut seen, last) = reader.await.expect("reader");
    for c in b.changes_since(last).await.expect("rest") {
        seen.insert(c.id, (c.body, c.seq));
    }
    let expected: BTreeMap<String, (Option<WorkloadBody>, i64)> = final_state
        .into_iter()
        .map(|c| (c.id, (c.body, c.seq)))
        .collect();
    assert_eq!(
        seen, expected,
        "a reader catching up by number ends where the database is"
    );
    // Each write notified its number.
    let mut notified = Vec::new();
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(500), rx_b.recv()).await {
        notified.extend(n);
    }
    notified.sort_unstable();
    assert_eq!(notified, seqs);
}

#[tokio::test]
async fn postgres_database_newer_than_the_binary_is_refused() {
    let Some(db) = pg::TestDatabase::create("store_newer") else {
        return;
    };
    let (store, _rx) = connected(&db.dsn).await;
    drop(store);
    pg::execute(&db.dsn, "INSERT INTO duet_schema (version) VALUES (99)").expect("version 99");
    let newer = PostgresStore::new(&db.dsn).expect("dsn");
    match newer.connect().await {
        Err(StoreError::Broken(m)) => {
            assert!(
                m.contains(&format!(
                    "schema version 99, newer than this duet's {SCHEMA_VERSION}"
                )),
                "{m}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_postgres_fails_fast_and_names_the_database() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let dsn = format!("postgres://duet:s3cret@127.0.0.1:{port}/registry");
    let store = PostgresStore::new(&dsn).expect("dsn");
    let started = std::time::Instant::now();
    let err = store.connect().await.expect_err("nothing listens");
    assert!(started.elapsed() < Duration::from_secs(5));
    let text = err.to_string();
    assert!(
        text.contains(&format!("postgres://duet@127.0.0.1:{port}/registry")),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
    // Writes fail at once while it is unreachable.
    let write = store.write("w", Some(&body(1.0)), false).await;
    assert!(
        matches!(write, Err(StoreError::Unavailable(_))),
        "{write:?}"
    );
}

#[test]
fn a_password_never_shows() {
    let location = StateLocation::parse("postgresql://duet:hunter2@db.internal:6543/duet");
    assert_eq!(location.describe(), "postgres://duet@db.internal:6543/duet");
    let config = Config {
        state: Some(location),
        ..Config::new("models/default".into())
    };
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("db.internal"), "{shown}");
    assert_eq!(
        StateLocation::parse("state/registry.sqlite"),
        StateLocation::Sqlite("state/registry.sqlite".into())
    );
    let bad = PostgresStore::new("postgres://duet:hunter2@/").expect_err("no host");
    assert!(!bad.contains("hunter2"), "{bad}");
}

/// Writers commit batches of observations at once on two connections while a reader pages by
/// sequence number, as `duet dataset export` does: the reader sees every committed row (a row
/// numbered below one already read never commits after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_export_by_sequence_never_skips_a_row() {
    let Some(db) = pg::TestDatabase::create("observation_pages") else {
        return;
    };
    let (a, _rx_a) = connected(&db.dsn).await;
    let (b, _rx_b) = connected(&db.dsn).await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (b, done) = (b.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen = std::collections::BTreeSet::new();
            let mut last = 0;
            loop {
                let finished = done.load(std::sync::atomic::Ordering::Acquire);
                for (seq, record) in b.observations(last, 7, false).await.expect("a page") {
                    assert!(seq > last);
                    last = seq;
                    seen.insert(record.observation.id);
                }
                if finished
                    && b.observations(last, 1, false)
                        .await
                        .expect("end")
                        .is_empty()
                {
                    return seen;
                }
            }
        })
    };
    let mut writers = Vec::new();
    for w in 0..8u32 {
        let store = if w % 2 == 0 { a.clone() } else { b.clone() };
        writers.push(tokio::spawn(async move {
            for batch in 0..10u32 {
                let records: Vec<ObservationRecord> = (0..3u32)
                    .map(|i| observation(&format!("w{w}-b{batch}-{i}"), f64::from(i + 1)))
                    .collect();
                store.put_observations(&records).await.expect("a batch");
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let seen = reader.await.expect("reader");
    let stored = a.observations(0, 10_000, false).await.expect("all");
    assert_eq!(stored.len(), 240);
    let missed: Vec<&String> = stored
        .iter()
        .map(|(_, r)| &r.observation.id)
        .filter(|id| !seen.contains(*id))
        .collect();
    assert!(missed.is_empty(), "the pages skipped {missed:?}");
}
