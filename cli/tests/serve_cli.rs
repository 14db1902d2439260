//! The real `duet serve` binary on a free loopback port, driven from outside: register a
//! workload, predict with `duet predict`, reload by request and by SIGHUP, stop with SIGTERM
//! while a request is in flight, restart on the same state file and find the workload again.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{Server, TOKEN, duet, model_dir, path};

/// `duet predict` against `server` for V100 pairs in the space mode (pairs and files may name
/// their own), with `args` after.
fn predict(server: &Server, args: &[&str]) -> std::process::Output {
    duet()
        .args([
            "predict",
            "--server",
            &server.base,
            "--gpu",
            "v100",
            "--mode",
            "space",
        ])
        .args(args)
        .output()
        .expect("duet predict")
}

#[test]
fn serve_register_predict_reload_restart_and_stop() {
    let dir = tempfile::tempdir().expect("tmp");
    // Written by an editor that puts a byte-order mark first: the token is what follows it.
    std::fs::write(dir.path().join("token"), format!("\u{feff}{TOKEN}\n")).expect("token");
    let server = Server::start(dir.path());

    // Register a workload (writes need the token).
    let profile = json!({"kind": "infer", "profiles": {"v100": {
        "solo_throughput": 40.0, "model": "ResNet-18", "batch_size": 32}}});
    let refused = ureq::put(&server.url("/v1/workloads/my-infer")).send_json(profile.clone());
    assert!(matches!(refused, Err(ureq::Error::Status(401, _))));
    let created = ureq::put(&server.url("/v1/workloads/my-infer"))
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .send_json(profile)
        .expect("registered");
    assert_eq!(created.status(), 201);

    // `duet predict` as a separate process, by id.
    let out = predict(
        &server,
        &["--json", "my-infer,resnet-50-bs64", "a3c,my-infer"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
    let p = answer["predictions"].as_array().expect("predictions");
    assert_eq!(p.len(), 2);
    assert!(p[0]["speed_a"].as_f64().expect("speed") > 0.0);
    // The table form, and a clear error for an unknown id.
    let table = predict(&server, &["a3c,cyclegan"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("a3c") && text.contains("cyclegan") && text.contains("combined"),
        "{text}"
    );
    // Each pair's p90 class and the pair settings behind each job on the device asked (the
    // shipped model records them per device: 26 each, every partner on that device).
    let row = text.lines().nth(2).expect("a row");
    assert!(row.trim_end().ends_with("known      26/26"), "{text}");
    let unknown = predict(&server, &["a3c,nobody"]);
    assert!(!unknown.status.success());
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        err.contains("404")
            && err.contains("pairs[0].b.workload")
            && err.contains("nobody")
            && err.contains("(pairs[0] is argument `a3c,nobody`)"),
        "{err}"
    );

    // Pairs from a CSV file (per-row mode and device) and from JSON lines.
    let csv = dir.path().join("pairs.csv");
    std::fs::write(
        &csv,
        "a,b,mode,gpu\nmy-infer,a3c,space,v100\ncyclegan,lm-bs80,,k80\n",
    )
    .expect("csv");
    let out = predict(&server, &["--json", "--file", path(&csv)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["predictions"].as_array().map(Vec::len), Some(2));
    let jsonl = dir.path().join("pairs.jsonl");
    std::fs::write(
        &jsonl,
        "{\"a\": {\"workload\": \"a3c\"}, \"b\": {\"workload\": \"a3c\"}, \"mode\": \"space\", \"gpu\": \"p100\"}\n\n\
         {\"a\": {\"features\": {\"solo_throughput\": 5.0, \"model\": \"LM\", \"batch_size\": 20}}, \"b\": {\"workload\": \"a3c\"}, \"mode\": \"space\", \"gpu\": \"p100\"}\n",
    )
    .expect("jsonl");
    let out = predict(&server, &["--file", path(&jsonl)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(table.contains("(features)"), "{table}");
    // Three ids are a group; a JSON line with `jobs` is one too.
    let out = predict(&server, &["a3c,cyclegan", "a3c,cyclegan,my-infer"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("group 0 (3 jobs, space)")
            && table.contains("from the pairs' p90s composed")
            && table.contains("my-infer"),
        "{table}"
    );
    // A registered workload the model never trained on is backed by no measurement.
    let job = table
        .lines()
        .find(|l| l.trim_start().starts_with("my-infer"))
        .expect("my-infer's row");
    assert!(job.trim_end().ends_with(" 0"), "{table}");
    let groups = dir.path().join("groups.jsonl");
    std::fs::write(
        &groups,
        "{\"jobs\": [{\"workload\": \"a3c\"}, {\"workload\": \"a3c\"}, {\"workload\": \"cyclegan\"}, {\"workload\": \"my-infer\"}], \"mode\": \"space\"}\n",
    )
    .expect("jsonl");
    let out = predict(&server, &["--json", "--file", path(&groups)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        answer["groups"][0]["jobs"].as_array().map(Vec::len),
        Some(4)
    );
    assert_eq!(answer["predictions"], json!([]));
    // A pair or group the server refuses is named by where it came from, not only by its place
    // in the request (a file of thousands of pairs has a line per pair, a blank one skipped).
    let typo = dir.path().join("typo.csv");
    std::fs::write(&typo, "a,b,mode\na3c,a3c,space\n\na3c,nobdy,space\n").expect("csv");
    let out = predict(&server, &["a3c,a3c", "--file", path(&typo)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pairs[2].b.workload")
            && err.contains("(pairs[2] is ")
            && err.contains("typo.csv line 4)"),
        "{err}"
    );
    let typo = dir.path().join("typo.jsonl");
    std::fs::write(
        &typo,
        "{\"jobs\": [{\"workload\": \"a3c\"}, {\"workload\": \"a3c\"}, {\"workload\": \"nobdy\"}], \"mode\": \"space\"}\n",
    )
    .expect("jsonl");
    let out = predict(&server, &["--file", path(&typo)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("groups[0].jobs[2]") && err.contains("typo.jsonl line 1)"),
        "{err}"
    );
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "a,b,share_a\na3c,a3c,lots\n").expect("csv");
    let out = predict(&server, &["--file", path(&bad)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.csv line 2") && err.contains("share_a"),
        "{err}"
    );

    // Reload by request and by SIGHUP.
    let version = |s: &Server| -> String {
        let models: Value = ureq::get(&s.url("/v1/models"))
            .call()
            .expect("models")
            .into_json()
            .expect("json");
        models[0]["version"].as_str().expect("version").to_string()
    };
    let before = version(&server);
    let reloaded: Value = ureq::post(&server.url("/v1/models/reload"))
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("reload")
        .into_json()
        .expect("json");
    assert_eq!(reloaded["model_version"], before.as_str());
    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.metric("duet_model_reloads_total") < 2.0 {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.metric("duet_model_reload_failures_total"), 0.0);
    // The registered workload survived the reloads.
    assert_eq!(
        ureq::get(&server.url("/v1/workloads/my-infer"))
            .call()
            .expect("get")
            .status(),
        200
    );

    // SIGTERM while a request is in flight (headers and half its body sent): it still gets its
    // answer, then the server exits cleanly.
    let pairs: Vec<Value> = (0..2_000)
        .map(|i| {
            json!({"a": {"workload": if i % 2 == 0 { "a3c" } else { "my-infer" }},
                        "b": {"workload": "lm-bs80"}, "mode": "space"})
        })
        .collect();
    let body = json!({"gpu": "v100", "pairs": pairs}).to_string();
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    write!(
        stream,
        "POST /v1/predict HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("headers");
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);
    stream.write_all(first).expect("first half");
    std::thread::sleep(Duration::from_millis(300));
    server.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    stream.write_all(rest).expect("second half");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    assert!(answer.contains("\"predictions\""));
    let status = server.wait(Duration::from_secs(30));
    assert!(status.success(), "duet serve exited with {status}");

    // A restart on the same state file knows the workload.
    let again = Server::start(dir.path());
    let got: Value = ureq::get(&again.url("/v1/workloads/my-infer"))
        .call()
        .expect("kept across restarts")
        .into_json()
        .expect("json");
    assert_eq!(got["kind"], "infer");
    assert_eq!(got["profiles"]["v100"]["solo_throughput"], 40.0);
    assert!(again.stop(Duration::from_secs(30)).success());
}

#[test]
fn serve_refuses_bad_flags_and_a_missing_model() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = |args: &[&str]| {
        let out = duet().arg("serve").args(args).output().expect("duet serve");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(run(&["--engine", "tpu"]).contains("--engine: unknown engine `tpu`"));
    let missing = dir.path().join("no-model");
    let err = run(&[
        "--model",
        missing.to_str().expect("utf8"),
        "--addr",
        "127.0.0.1:0",
    ]);
    assert!(err.contains("model.json"), "{err}");
    std::fs::write(dir.path().join("empty"), "  \n").expect("token");
    let err = run(&[
        "--token-file",
        dir.path().join("empty").to_str().expect("utf8"),
    ]);
    assert!(err.contains("the token is empty"), "{err}");
    let out = duet()
        .args(["serve", "--protect-reads"])
        .env("DUET_TOKEN", " ")
        .output()
        .expect("duet serve");
    assert!(String::from_utf8_lossy(&out.stderr).contains("DUET_TOKEN: the token is empty"));
    let out = duet()
        .args(["serve", "--protect-reads"])
        .env_remove("DUET_TOKEN")
        .output()
        .expect("duet serve");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--protect-reads needs a token"));

    // A non-loopback address needs a token, or the operator's explicit consent.
    let err = run(&["--addr", "0.0.0.0:0"]);
    assert!(
        err.contains("--addr 0.0.0.0:0: not a loopback address")
            && err.contains("--token-file")
            && err.contains("DUET_TOKEN")
            && err.contains("--allow-open-writes"),
        "{err}"
    );
    let err = run(&["--addr", "127.0.0.1:0", "--grpc-addr", "not-an-address"]);
    assert!(
        err.contains("--grpc-addr not-an-address: cannot listen"),
        "{err}"
    );
    let err = run(&["--model-repo", missing.to_str().expect("utf8")]);
    assert!(
        err.contains("--model-repo") && err.contains("not a folder"),
        "{err}"
    );
    // Seconds past what a Duration holds are refused by name, not a panic.
    for (flag, value) in [
        ("--request-timeout", "1e30"),
        ("--request-timeout", "inf"),
        ("--header-timeout", "NaN"),
        ("--idle-timeout", "0"),
    ] {
        let err = run(&[&format!("{flag}={value}")]);
        assert!(
            err.contains(&format!(
                "{flag} {}: must be a number of seconds above 0 and at most 3600",
                value.parse::<f64>().expect("a number")
            )),
            "{err}"
        );
    }
}

/// The clients refuse what they would send wrong before they ask a server (none listens on
/// port 9 here): seconds past what a Duration holds, shares that are not finite numbers (sent
/// as JSON null, they would be read as none), and a file's bad cell named by its real line.
#[test]
fn clients_refuse_bad_flags_and_cells_before_asking() {
    let dir = tempfile::tempdir().expect("tmp");
    let refused = |args: &[&str]| {
        let out = duet().args(args).output().expect("duet");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        err
    };
    let predict = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "x,y",
            "--mode",
            "mps",
            "--server",
            "http://127.0.0.1:9",
        ];
        args.extend(extra);
        refused(&args)
    };
    for (extra, says) in [
        (
            &["--timeout", "inf"][..],
            "--timeout inf: must be a number of seconds above 0 and at most 3600",
        ),
        (
            &["--timeout", "1e20"],
            "--timeout 100000000000000000000: must be",
        ),
        (&["--timeout", "NaN"], "--timeout NaN: must be"),
        (
            &["--share-a", "NaN"],
            "--share-a: NaN is not a finite number",
        ),
        (
            &["--share-b", "inf"],
            "--share-b: inf is not a finite number",
        ),
    ] {
        let err = predict(extra);
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    let predict_file = |file: &std::path::Path| {
        refused(&[
            "predict",
            "--mode",
            "mps",
            "--server",
            "http://127.0.0.1:9",
            "--file",
            path(file),
        ])
    };
    let pairs = dir.path().join("pairs.csv");
    std::fs::write(&pairs, "a,b,share_a\n\n\"x\ny\",z,50\nx,y,1e999\n").expect("csv");
    let err = predict_file(&pairs);
    assert!(
        err.contains("pairs.csv line 5: column `share_a`: `1e999` is not a finite number"),
        "{err}"
    );
    std::fs::write(&pairs, "a,b,a\nx,y,z\n").expect("csv");
    let err = predict_file(&pairs);
    assert!(err.contains("pairs.csv: column `a` appears twice"), "{err}");
    let observations = dir.path().join("observations.jsonl");
    let err = refused(&["observe", "--file", path(&observations), "--timeout", "inf"]);
    assert!(
        err.contains("--timeout inf: must be a number of seconds"),
        "{err}"
    );
    let err = refused(&["model", "check", path(&model_dir()), "--timeout", "1e30"]);
    assert!(
        err.contains("--timeout 1000000000000000000000000000000: must be"),
        "{err}"
    );
}

#[test]
fn serve_on_every_interface_starts_with_a_token_or_explicit_open_writes() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("token"), TOKEN).expect("token");
    let token = dir.path().join("token");
    for extra in [
        vec!["--token-file".into(), token.clone().into_os_string()],
        vec!["--allow-open-writes".into()],
    ] {
        // Returns once `/readyz` answers 200 on the address it logged (0.0.0.0, reached on
        // loopback); panics with its log otherwise.
        let server = Server::start_at("0.0.0.0:0", &model_dir(), &extra);
        drop(server);
    }
}

#[test]
fn grpc_serves_beside_http_and_stops_with_it() {
    let server = Server::start_with(&[
        "--grpc-addr".into(),
        "127.0.0.1:0".into(),
        "--drain-seconds".into(),
        "1".into(),
    ]);
    let port = server.grpc_port();
    assert!(
        server
            .log()
            .contains(&format!("serving gRPC addr=127.0.0.1:{port}")),
        "{}",
        server.log()
    );
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("gRPC's port takes connections");
    // SIGTERM: the drain, then both listeners close and the server exits cleanly.
    let status = server.stop(Duration::from_secs(30));
    assert!(status.success(), "duet serve exited with {status}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "gRPC's port still open after the server stopped"
    );
}
