//! A registry write and its application in memory are one unit: a request dropped at any point
//! (its client gone, its time up), right after the store committed it included, leaves the
//! serving registry and the store agreeing, for every store (memory, an SQLite file,
//! PostgreSQL).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use duet_core::api::{FeatureInput, Features, WorkloadBody};
use duet_server::store::{StateLocation, Store};
use duet_server::{AppState, Config};

#[path = "support/http.rs"]
mod http;
use http::{call, model_dir};

#[path = "support/pg.rs"]
mod pg;

fn body(solo: f64) -> WorkloadBody {
    WorkloadBody {
        kind: None,
        profiles: BTreeMap::from([(
            "v100".to_string(),
            Features::from([
                ("solo_throughput".into(), FeatureInput::Number(solo)),
                ("model".into(), FeatureInput::Text("ResNet-50".into())),
                ("batch_size".into(), FeatureInput::Number(64.0)),
            ]),
        )]),
    }
}

/// The ids the store holds a live (not deleted) client entry for.
async fn stored(state: &AppState) -> BTreeSet<String> {
    let mut live = BTreeMap::new();
    for change in state.store.changes_since(0).await.expect("the store reads") {
        live.insert(change.id, change.body.is_some());
    }
    live.into_iter()
        .filter_map(|(id, alive)| alive.then_some(id))
        .collect()
}

/// Of `ids`, those the serving registry answers for.
async fn served(state: &Arc<AppState>, ids: &[String]) -> BTreeSet<String> {
    let app = duet_server::router(state.clone());
    let mut found = BTreeSet::new();
    for id in ids {
        let (status, _) = call(&app, "GET", &format!("/v1/workloads/{id}"), None, None).await;
        if status == StatusCode::OK {
            found.insert(id.clone());
        }
    }
    found
}

/// Registers and deletes workloads, dropping each request after a different number of its
/// polls. The runtime has one thread, so a write the store commits on a blocking thread while
/// this thread sleeps is dropped right after its commit, before its request could go on.
/// Then the store and the serving registry must hold the same workloads.
async fn dropped_writes_never_split(state: Arc<AppState>) {
    let mut ids = Vec::new();
    for round in 0..48u32 {
        let id = format!("dropped-{round}");
        ids.push(id.clone());
        let writer = {
            let (state, id) = (state.clone(), id.clone());
            tokio::spawn(async move {
                state
                    .put_workload(&id, body(1.0 + f64::from(round)))
                    .await?;
                if round % 3 == 0 {
                    state.delete_workload(&id).await?;
                }
                Ok::<_, duet_server::error::Failure>(())
            })
        };
        for _ in 0..round % 8 {
            tokio::task::yield_now().await;
        }
        // Blocks the runtime's one thread: a commit under way ends meanwhile, unseen.
        std::thread::sleep(Duration::from_millis(15));
        writer.abort();
        let _ = writer.await;
    }
    // What a dropped request left running finishes on its own.
    let mut agree = false;
    for _ in 0..100 {
        if stored(&state).await == served(&state, &ids).await {
            agree = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (in_store, in_memory) = (stored(&state).await, served(&state, &ids).await);
    eprintln!(
        "after dropped requests: {} workloads in the store, {} served",
        in_store.len(),
        in_memory.len()
    );
    assert!(!in_store.is_empty(), "some of the writes were committed");
    assert!(
        agree,
        "the store holds {in_store:?}, the serving registry {in_memory:?}"
    );
}

async fn started(location: Option<StateLocation>) -> Arc<AppState> {
    let state = AppState::new(Config {
        state: location,
        ..Config::new(model_dir())
    })
    .expect("state");
    state.start().await.expect("the default model loads");
    state
}

#[tokio::test]
async fn memory() {
    dropped_writes_never_split(started(None).await).await;
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("tmp");
    let location = StateLocation::Sqlite(dir.path().join("registry.sqlite"));
    dropped_writes_never_split(started(Some(location)).await).await;
}

#[tokio::test]
async fn postgres() {
    let Some(db) = pg::TestDatabase::create("dropped_writes") else {
        return;
    };
    let location = StateLocation::Postgres(db.dsn.clone());
    dropped_writes_never_split(started(Some(location)).await).await;
}

/// The registry's caps: a new workload past `--max-workloads` (the model's own counted) and a
/// registration with more profiles than `--max-profiles` are refused 422 naming the flag;
/// replacing a registered workload at the cap is still allowed.
#[tokio::test]
async fn caps_on_workloads_and_profiles_name_their_flags() {
    let probe = started(None).await;
    let app = duet_server::router(probe.clone());
    let (_, listed) = call(&app, "GET", "/v1/workloads", None, None).await;
    let model_own = listed.as_array().map_or(0, Vec::len);
    assert!(model_own > 0, "{listed}");
    let state = AppState::new(Config {
        max_workloads: model_own + 2,
        max_profiles: 1,
        ..Config::new(model_dir())
    })
    .expect("state");
    state.start().await.expect("the default model loads");
    state.put_workload("one", body(1.0)).await.expect("fits");
    state.put_workload("two", body(2.0)).await.expect("fits");
    let over = state
        .put_workload("three", body(3.0))
        .await
        .expect_err("past the cap");
    assert_eq!(over.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(over.error.contains("--max-workloads"), "{}", over.error);
    state
        .put_workload("two", body(4.0))
        .await
        .expect("a replacement at the cap");
    state.delete_workload("one").await.expect("deleted");
    let mut two_devices = body(5.0);
    let v100 = two_devices.profiles["v100"].clone();
    two_devices.profiles.insert("k80".into(), v100);
    let over = state
        .put_workload("three", two_devices)
        .await
        .expect_err("two profiles");
    assert_eq!(over.field.as_deref(), Some("profiles"));
    assert!(over.error.contains("--max-profiles"), "{}", over.error);
    state
        .put_workload("three", body(6.0))
        .await
        .expect("one profile fits");
}
