//! Rolling models out and pods down, with the real binary on loopback: `duet model check`
//! against a folder and a running server, a `current` model that fails to load at restart
//! (the server serves `previous` and says degraded), and SIGTERM under load (no in-flight
//! request fails; `/readyz` turns 503 before the listener closes).

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{Server, TOKEN, duet, model_dir, path};

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

/// A copy of the shipped model whose `model.json` is rewritten by `edit`.
fn edited_model(to: &Path, edit: impl FnOnce(&mut Value)) {
    copy_model(to);
    let file = to.join("model.json");
    let mut meta: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    edit(&mut meta);
    std::fs::write(&file, meta.to_string()).expect("write");
}

fn check(args: &[&str]) -> std::process::Output {
    duet()
        .args(["model", "check", "--engine", "burn"])
        .args(args)
        .output()
        .expect("duet model check")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn model_check_loads_probes_and_compares_with_the_serving_model() {
    let dir = tempfile::tempdir().expect("tmp");
    let shipped = model_dir();
    let shipped = path(&shipped);

    // The shipped model, alone and against itself.
    let out = check(&[shipped]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("loaded and probed"),
        "{}",
        text(&out.stdout)
    );
    let out = check(&[shipped, "--against", shipped]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("it can replace it"),
        "{}",
        text(&out.stdout)
    );

    // A model that cannot be loaded: named with its file.
    let broken = dir.path().join("broken");
    copy_model(&broken);
    std::fs::write(broken.join("member-0.mpk"), b"not a record").expect("corrupt");
    let out = check(&[path(&broken)]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cannot be served")
            && text(&out.stderr).contains("member-0.mpk"),
        "{}",
        text(&out.stderr)
    );

    // A network file damaged after training (64 bytes of model.onnx overwritten: it loaded,
    // passed the probe batch, and served p90 slowdowns of 5e34): named by the digest
    // model.json lists, before anything decodes it, whichever engine is asked for.
    let damaged = dir.path().join("damaged");
    copy_model(&damaged);
    let onnx = damaged.join("model.onnx");
    let mut bytes = std::fs::read(&onnx).expect("onnx");
    let middle = bytes.len() / 2;
    bytes[middle..middle + 64].fill(0x41);
    std::fs::write(&onnx, &bytes).expect("damage");
    let out = check(&[path(&damaged)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("model.onnx: damaged or changed since it was written")
            && text(&out.stderr).contains("model.json `files` lists 78822 bytes"),
        "{}",
        text(&out.stderr)
    );
    // A change made on purpose: its entry deleted from `files`, the file is read as it is.
    let meant = dir.path().join("meant");
    edited_model(&meant, |meta| {
        let files = meta["files"].as_object_mut().expect("files");
        assert!(files.remove("model.onnx").is_some());
    });
    std::fs::write(meant.join("model.onnx"), &bytes).expect("damage");
    // Saved by an editor that puts a byte-order mark first.
    let edited = std::fs::read_to_string(meant.join("model.json")).expect("model.json");
    std::fs::write(meant.join("model.json"), format!("\u{feff}{edited}")).expect("bom");
    let out = check(&[path(&meant)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A listing of a file that is not one of the model's networks.
    let stray = dir.path().join("stray");
    edited_model(&stray, |meta| {
        meta["files"]["report.md"] = json!({"bytes": 1, "fnv1a": "0000000000000000"});
    });
    let out = check(&[path(&stray)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("`files` lists `report.md`, which is not a network file"),
        "{}",
        text(&out.stderr)
    );

    // A member whose layers do not fit model.json (a numeric feature taken out of it; the same
    // as a member copied from another model): named, with both shapes (it panicked in the
    // first forward pass, exit 101).
    let narrower = dir.path().join("narrower");
    edited_model(&narrower, |meta| {
        let numeric = meta["spec"]["numeric"].as_array_mut().expect("numeric");
        numeric.pop();
    });
    let out = check(&[path(&narrower)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("member-0.mpk: its layers are")
            && text(&out.stderr).contains("a member of another model?"),
        "{}",
        text(&out.stderr)
    );

    // A model whose own evaluation says it did not fit (as `--learning-rate 1e6` trains one:
    // MAPE 100% on the random split where the mean scores 16%): refused alone and against the
    // serving model, which it was approved to replace before.
    let diverged = dir.path().join("diverged");
    edited_model(&diverged, |meta| {
        for row in meta["metrics"].as_array_mut().expect("metrics") {
            if row["split"] == "random" && row["predictor"] == "mlp" && row["gpu"] == "all" {
                row["metrics"]["mape_speed"] = json!(1.0);
            }
        }
    });
    for against in [&[][..], &["--against", shipped][..]] {
        let out = check(&[&[path(&diverged)][..], against].concat());
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(
                "problem: split random (gpu all, mode all): the network's MAPE of speed is 100.0%"
            ) && text(&out.stdout).contains("training did not fit")
                && text(&out.stderr).contains("1 problem(s)"),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }

    // A loadable model that lost a device and reads another feature than clients send.
    let other = dir.path().join("other");
    edited_model(&other, |meta| {
        for g in meta["spec"]["gpus"].as_array_mut().expect("gpus") {
            if g == "v100" {
                *g = json!("a100");
            }
        }
        for c in meta["spec"]["categorical"]
            .as_array_mut()
            .expect("categorical")
        {
            if c["name"] == "model" {
                c["name"] = json!("architecture");
            }
        }
    });
    let out = check(&[path(&other), "--against", shipped, "--json"]);
    assert!(!out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let problems = report["problems"].to_string();
    for says in [
        "device `v100`",
        "feature `architecture`: this model requires it",
        "feature `model`: clients of the serving model send it",
    ] {
        assert!(problems.contains(says), "no `{says}` in {problems}");
    }
    assert!(
        text(&out.stderr).contains("3 problem(s)"),
        "{}",
        text(&out.stderr)
    );

    // Against a running server: its serving model and the workloads registered there.
    std::fs::write(dir.path().join("token"), TOKEN).expect("token");
    let server = Server::start(dir.path());
    let registered = ureq::put(&server.url("/v1/workloads/my-infer"))
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .send_json(json!({"kind": "infer", "profiles": {"v100": {
            "solo_throughput": 40.0, "model": "ResNet-18", "batch_size": 32}}}))
        .expect("registered");
    assert_eq!(registered.status(), 201);
    let out = check(&[shipped, "--against", &server.base]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("1 registered workloads checked"),
        "{}",
        text(&out.stdout)
    );
    let out = check(&[path(&other), "--against", &server.base]);
    assert!(!out.status.success());
    let said = text(&out.stdout);
    assert!(
        said.contains("registered workload `my-infer`: this model refuses it"),
        "{said}"
    );
    let out = check(&[shipped, "--against", "http://127.0.0.1:9/"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--against"),
        "{}",
        text(&out.stderr)
    );
}

#[cfg(unix)]
#[test]
fn a_current_model_that_fails_at_restart_serves_previous_degraded() {
    let repo = tempfile::tempdir().expect("tmp");
    let r = repo.path();
    copy_model(&r.join("retrain-good"));
    copy_model(&r.join("retrain-bad"));
    std::fs::write(r.join("retrain-bad/member-0.mpk"), b"not a record").expect("corrupt");
    std::os::unix::fs::symlink("retrain-good", r.join("current")).expect("link");
    std::fs::write(r.join("token"), TOKEN).expect("token");
    let flags: Vec<OsString> = vec![
        "--model-repo".into(),
        r.into(),
        "--token-file".into(),
        r.join("token").into(),
        "--drain-seconds".into(),
        "0".into(),
    ];
    let server = Server::start_model(&r.join("current"), &flags);
    let ready: Value = ureq::get(&server.url("/readyz"))
        .call()
        .expect("ready")
        .into_json()
        .expect("json");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert!(server.stop(Duration::from_secs(30)).success());

    // The rollout: `current` moves to a model that cannot be loaded, `previous` keeps the one
    // it replaced; the pod restarts.
    std::os::unix::fs::symlink("retrain-good", r.join("previous")).expect("link");
    std::fs::remove_file(r.join("current")).expect("unlink");
    std::os::unix::fs::symlink("retrain-bad", r.join("current")).expect("link");
    let server = Server::start_model(&r.join("current"), &flags);
    let ready: Value = ureq::get(&server.url("/readyz"))
        .call()
        .expect("ready, degraded")
        .into_json()
        .expect("json");
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["model"]["serving"], "previous", "{ready}");
    let open = ready.to_string();
    assert!(
        !open.contains("member-0.mpk") && !open.contains(path(r)),
        "{open}"
    );
    let models: Value = ureq::get(&server.url("/v1/models"))
        .call()
        .expect("models")
        .into_json()
        .expect("json");
    assert!(
        models[0]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("previous")),
        "{models}"
    );
    let predicted = ureq::post(&server.url("/v1/predict")).send_json(json!({"gpu": "v100",
        "pairs": [{"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "space"}]}));
    assert_eq!(predicted.expect("predicted by previous").status(), 200);
    let log = server.log();
    assert!(
        log.contains("serving the model repository's previous model")
            && log.contains("member-0.mpk"),
        "{log}"
    );
    assert!(server.stop(Duration::from_secs(30)).success());
}

/// A prediction sent under load: when it was sent, when it was answered, its status or error.
type Sent = (Instant, Instant, Result<u16, String>);

#[cfg(unix)]
#[test]
fn sigterm_under_load_fails_no_request_and_readiness_turns_first() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("token"), TOKEN).expect("token");
    let drain = Duration::from_secs(2);
    let server = Server::start_with(&[
        "--token-file".into(),
        dir.path().join("token").into(),
        "--drain-seconds".into(),
        "2".into(),
    ]);
    let pairs: Vec<Value> = (0..2_000)
        .map(|i| {
            json!({"a": {"workload": if i % 2 == 0 { "a3c" } else { "cyclegan" }},
                   "b": {"workload": "lm-bs80"}, "mode": "space"})
        })
        .collect();
    let body = Arc::new(json!({"gpu": "v100", "pairs": pairs}));
    let stop = Arc::new(AtomicBool::new(false));
    // (sent at, finished at, status or error) of every prediction.
    let results: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let url = server.url("/v1/predict");
    // Three clients: within the default bounds of work in flight and waiting on two cores.
    let load: Vec<_> = (0..3)
        .map(|_| {
            let (body, stop, results, url) =
                (body.clone(), stop.clone(), results.clone(), url.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(60))
                    .build();
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let got = match agent.post(&url).send_json(&*body) {
                        Ok(r) => Ok(r.status()),
                        Err(ureq::Error::Status(code, _)) => Ok(code),
                        Err(e) => Err(e.to_string()),
                    };
                    results
                        .lock()
                        .expect("lock")
                        .push((sent, Instant::now(), got));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let signalled = Instant::now();
    server.signal("TERM");
    // Probe readiness and the listener from outside, a fresh connection each time.
    let probe = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .max_idle_connections(0)
        .build();
    let (mut turned, mut closed) = (None, None);
    let deadline = signalled + Duration::from_secs(60);
    while closed.is_none() {
        assert!(Instant::now() < deadline, "the listener never closed");
        match probe.get(&server.url("/readyz")).call() {
            Ok(_) => {}
            Err(ureq::Error::Status(503, _)) => {
                turned.get_or_insert_with(Instant::now);
            }
            Err(ureq::Error::Status(code, _)) => panic!("/readyz answered {code}"),
            Err(_) => closed = Some(Instant::now()),
        }
        // A load balancer stops routing soon after readiness turns: new predictions stop
        // half-way through the drain, those under way must all finish.
        if turned.is_some_and(|t| t.elapsed() >= drain / 2) {
            stop.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().expect("load thread");
    }
    let turned = turned.expect("/readyz never answered 503 before the listener closed");
    let closed = closed.expect("closed");
    assert!(turned < closed);
    assert!(
        closed - signalled >= drain,
        "the listener closed {:?} after SIGTERM, before the drain of {drain:?}",
        closed - signalled
    );
    let results = results.lock().expect("lock");
    let failed: Vec<_> = results.iter().filter(|(_, _, r)| *r != Ok(200)).collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {failed:?}",
        failed.len(),
        results.len()
    );
    let during = results
        .iter()
        .filter(|(sent, _, _)| *sent > signalled)
        .count();
    assert!(during > 0, "no prediction was sent during the drain");
    assert!(
        results
            .iter()
            .any(|(sent, done, _)| *sent < signalled && *done > signalled),
        "no prediction was in flight at SIGTERM"
    );
    let status = server.wait(Duration::from_secs(30));
    assert!(status.success(), "duet serve exited with {status}");
}
