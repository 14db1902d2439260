//! `duet simulate` as a user runs it: the committed trace and dataset, the pricing loop asking a
//! real `duet serve` over loopback or the same model in process, the report folder, and every
//! bad input of the command named.

use std::path::{Path, PathBuf};
use std::process::Output;

use duet_core::dataset::{Dataset, Status};
use serde_json::Value;

mod support;
use support::{Server, duet, free_port};

fn repo(path: &str) -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
    .join(path)
}

/// `duet simulate --trace <trace> --dataset <dataset> --out <out>` plus `extra`.
fn simulate_on(trace: &Path, dataset: &Path, out: &Path, extra: &[&str]) -> Output {
    duet()
        .arg("simulate")
        .arg("--trace")
        .arg(trace)
        .arg("--dataset")
        .arg(dataset)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("duet simulate runs")
}

/// The committed trace and Gavel V100 dataset, the first 1,500 jobs on 64 GPUs at load 1.3,
/// the default model in process, plus `extra`.
fn simulate(out: &Path, extra: &[&str]) -> Output {
    let model = repo("models/default");
    let mut args = vec![
        "--model",
        model.to_str().expect("utf-8 path"),
        "--gpus",
        "64",
        "--load",
        "1.3",
        "--max-jobs",
        "1500",
    ];
    args.extend_from_slice(extra);
    simulate_on(
        &repo("traces/alibaba-gpu-v2023"),
        &repo("datasets/gavel-v100"),
        out,
        &args,
    )
}

fn report(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn four_policies_one_report_and_the_server_decides_as_the_model_in_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = dir.path().join("all");
    let o = simulate(&all, &["--engine", "burn"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for file in ["report.md", "report.json", "jct-cdf.svg", "utilisation.svg"] {
        assert!(all.join(file).is_file(), "{file} missing");
    }
    let r = report(&all);
    let outcomes = r["outcomes"].as_array().expect("outcomes");
    let names: Vec<&str> = outcomes
        .iter()
        .map(|o| o["policy"].as_str().expect("policy"))
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names[0] == "exclusive" && names[1] == "packing");
    assert!(names[2].contains("duet model") && names[3].contains("oracle"));
    assert!((r["workload"]["load"].as_f64().expect("load") - 1.3).abs() < 1e-3);
    for o in outcomes {
        assert_eq!(o["jobs"], 1500);
        assert!(o["avg_jct"].as_f64().expect("jct") > 0.0);
    }
    // Stderr is a pipe here: progress comes as plain lines, each policy's last one complete.
    let log = stderr(&o);
    for name in &names {
        assert!(
            log.contains(&format!("{name}: 1500/1500 jobs (100%), simulated hour ")),
            "{name}: {log}"
        );
    }
    assert!(
        !log.contains('\r') && !log.contains('\u{1b}'),
        "no bar drawn: {log}"
    );
    assert!(
        std::fs::read_to_string(all.join("jct-cdf.svg"))
            .expect("plot")
            .contains("%</text>"),
        "the share of jobs in percent"
    );
    for plot in ["jct-cdf.svg", "utilisation.svg"] {
        let svg = std::fs::read_to_string(all.join(plot)).expect("plot");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // Numbers on both axes: the y axis's right-aligned, the x axis's centred beside the
        // two axis titles.
        assert!(
            svg.matches("text-anchor=\"end\">").count() >= 3
                && svg.matches("text-anchor=\"middle\">").count() >= 2 + 3,
            "{plot}: numbers on both axes"
        );
        assert!(
            svg.matches("<polyline").count() >= 4,
            "{plot}: a line per policy"
        );
        assert!(svg.contains("pricing + duet") && svg.contains("pricing + oracle"));
    }
    let md = std::fs::read_to_string(all.join("report.md")).expect("report.md");
    assert!(
        md.contains("| exclusive |") && md.contains("jct-cdf.svg"),
        "{md}"
    );

    // The same policy over HTTP: one /v1/predict per round, the same decisions.
    let server = Server::start_with(&[]);
    let base = server.base.clone();
    let http = dir.path().join("http");
    let o = simulate(
        &http,
        &["--policies", "duet", "--predictor-url", base.as_str()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let over_http = &report(&http)["outcomes"][0];
    let in_process = &outcomes[2];
    assert!(
        over_http["predictor"]
            .as_str()
            .expect("predictor")
            .contains(&base)
    );
    for field in [
        "avg_jct",
        "p99_jct",
        "co_located",
        "slo_violations",
        "rounds",
    ] {
        assert_eq!(over_http[field], in_process[field], "{field}");
    }
    assert!(over_http["predictor_ms"].as_f64().expect("ms") > 0.0);
    assert_eq!(over_http["predictor_calls"], in_process["predictor_calls"]);
    drop(server);
}

#[test]
fn a_gpu_of_three_is_priced_over_http_as_in_process_and_the_report_names_each_groups_truth() {
    let dir = tempfile::tempdir().expect("tempdir");
    let in_process = dir.path().join("in-process");
    let o = simulate(
        &in_process,
        &[
            "--engine",
            "burn",
            "--policies",
            "duet,oracle",
            "--gpu-jobs",
            "3",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = report(&in_process);
    assert_eq!(r["gpu_jobs"], 3);
    let duet_run = &r["outcomes"][0];
    let joined = duet_run["joined"].as_u64().expect("joined");
    assert!(joined > 0, "{duet_run}");
    assert_eq!(duet_run["peak_gpu_jobs"], 3);
    assert_eq!(
        duet_run["joined_measured"], 0,
        "gavel-v100 measured no group"
    );
    let md = std::fs::read_to_string(in_process.join("report.md")).expect("report.md");
    assert!(
        md.contains("A GPU holds up to 3 jobs")
            && md.contains(&format!(
                "{joined} placements joined two or more residents; truth measured for 0, composed for {joined}"
            )),
        "{md}"
    );

    // The server answers the same groups: the same decisions over HTTP.
    let server = Server::start_with(&[]);
    let http = dir.path().join("http");
    let o = simulate(
        &http,
        &[
            "--policies",
            "duet",
            "--predictor-url",
            server.base.as_str(),
            "--gpu-jobs",
            "3",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let over_http = &report(&http)["outcomes"][0];
    for field in [
        "avg_jct",
        "co_located",
        "joined",
        "slo_violations",
        "rounds",
    ] {
        assert_eq!(over_http[field], duet_run[field], "{field}");
    }
    drop(server);

    // A dataset that measured its triples: their truth is the measurement.
    let triples = dir.path().join("triples");
    let o = simulate_on(
        &repo("traces/alibaba-gpu-v2023"),
        &repo("datasets/cpu-dev2c-triples"),
        &triples,
        &[
            "--policies",
            "exclusive,oracle",
            "--gpus",
            "64",
            "--gpu-jobs",
            "3",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let oracle = &report(&triples)["outcomes"][1];
    let joined = oracle["joined"].as_u64().expect("joined");
    assert!(
        joined > 0 && oracle["joined_measured"] == joined,
        "{oracle}"
    );
    assert_eq!(oracle["failed_placements"], 0);

    for bad in ["1", "9"] {
        let out = dir.path().join(format!("bad-{bad}"));
        let o = simulate(&out, &["--policies", "exclusive", "--gpu-jobs", bad]);
        let e = stderr(&o);
        assert!(
            !o.status.success() && e.contains(&format!("--gpu-jobs {bad}: a GPU holds 2 to 8")),
            "{e}"
        );
        assert!(!out.exists());
    }
}

#[test]
fn an_unreachable_predictor_is_retried_then_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r");
    let url = format!("http://127.0.0.1:{}", free_port());
    let o = simulate(
        &out,
        &["--policies", "duet", "--predictor-url", url.as_str()],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(&url) && e.contains("unreachable after"), "{e}");
    assert!(!out.exists());
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r");

    // A trace with a column missing, and one with a negative time.
    let trace = dir.path().join("trace");
    std::fs::create_dir(&trace).expect("mkdir");
    std::fs::copy(
        repo("traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv"),
        trace.join("openb_node_list_gpu_node.csv"),
    )
    .expect("copy");
    let pods = trace.join("openb_pod_list_default.csv");
    std::fs::write(&pods, "name,num_gpu,gpu_milli,qos\np0,1,500,LS\n").expect("write");
    let o = simulate_on(&trace, &repo("datasets/gavel-v100"), &out, &[]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("openb_pod_list_default.csv") && e.contains("`creation_time`"),
        "{e}"
    );
    std::fs::write(
        &pods,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
         p0,1,1,1,500,,LS,Running,0,100,0\np1,1,1,1,500,,BE,Running,-5,100,0\n",
    )
    .expect("write");
    let o = simulate_on(&trace, &repo("datasets/gavel-v100"), &out, &[]);
    let e = stderr(&o);
    assert!(
        e.contains("line 3, column `creation_time`") && e.contains("negative"),
        "{e}"
    );

    // A compression whose arrivals are infinite (1e-308: the report's JCTs were -inf).
    let o = simulate_on(
        &repo("traces/alibaba-gpu-v2023"),
        &repo("datasets/gavel-v100"),
        &out,
        &["--compression", "1e-308"],
    );
    assert!(
        stderr(&o).contains("--compression 1e-308: arrivals are compressed 0.001 to 1000000 times"),
        "{}",
        stderr(&o)
    );

    // A dataset without a successful pair.
    let mut dataset = Dataset::read(&repo("datasets/gavel-v100")).expect("gavel");
    dataset.pairs.retain(|p| p.status != Status::Ok);
    let failed_only = dir.path().join("failed-only");
    dataset.write(&failed_only).expect("write dataset");
    let o = simulate_on(&repo("traces/alibaba-gpu-v2023"), &failed_only, &out, &[]);
    let e = stderr(&o);
    assert!(
        e.contains("failed-only") && e.contains("no successful pair"),
        "{e}"
    );

    // A model that knows nothing of the dataset: refused before any policy runs.
    let model = repo("models/default");
    let o = simulate_on(
        &repo("traces/alibaba-gpu-v2023"),
        &repo("datasets/cpu-dev2c"),
        &out,
        &[
            "--model",
            model.to_str().expect("utf-8 path"),
            "--engine",
            "burn",
            "--gpus",
            "64",
        ],
    );
    let e = stderr(&o);
    assert!(
        e.contains("cannot answer for the pairs of") && e.contains("mode `cpu`"),
        "{e}"
    );
    assert!(
        !e.contains("exclusive  avg JCT"),
        "nothing simulated first: {e}"
    );

    // A cluster smaller than the largest job (8 GPUs on one node).
    let o = simulate_on(
        &repo("traces/alibaba-gpu-v2023"),
        &repo("datasets/gavel-v100"),
        &out,
        &["--gpus", "4"],
    );
    let e = stderr(&o);
    assert!(e.contains("smaller than the largest job"), "{e}");

    // Flags.
    for (flags, expect) in [
        (
            vec!["--policies", "exclusive,fastest"],
            "unknown policy `fastest`",
        ),
        (vec!["--slo", "1.5"], "--slo 1.5"),
        (vec!["--aging", "0"], "--aging 0"),
        (vec!["--min-gain=-1"], "--min-gain -1"),
    ] {
        let o = simulate(&out, &flags);
        let e = stderr(&o);
        assert!(!o.status.success() && e.contains(expect), "{flags:?}: {e}");
    }
    assert!(!out.exists(), "nothing written by a refused run");

    // An existing report folder is never overwritten.
    std::fs::create_dir(&out).expect("mkdir");
    let o = simulate(&out, &["--policies", "exclusive"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("already exists"), "{e}");
}

/// `--feedback`: a model without half the workloads, the loop learning from what its jobs
/// report, retrained as the simulated hours pass; the report says what it learnt.
#[test]
fn feedback_retrains_on_what_the_cluster_observed_and_the_report_says_so() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("feedback");
    let result = simulate(
        &out,
        &["--feedback", "--retrain-hours", "1", "--engine", "burn"],
    );
    assert!(result.status.success(), "{}", stderr(&result));
    let r = report(&out);
    let kinds: Vec<&str> = r["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .map(|o| o["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["exclusive", "duet", "oracle", "learning"]);
    let f = &r["feedback"];
    let workloads = f["workloads"].as_u64().expect("workloads");
    assert_eq!(
        f["held_out"].as_array().map(Vec::len),
        Some((workloads / 2) as usize)
    );
    let checkpoints = f["checkpoints"].as_array().expect("checkpoints");
    assert!(checkpoints.len() >= 2, "{f}");
    let (first, last) = (&checkpoints[0], &checkpoints[checkpoints.len() - 1]);
    assert_eq!(first["observations"], 0);
    assert!(last["observations"].as_u64() > Some(0), "{f}");
    assert!(last["observed_settings"].as_u64() > Some(0), "{f}");
    // Learning from the held-out workloads' own pairs makes their predictions better.
    let mape = |c: &Value| c["held_out_mape"].as_f64().expect("mape");
    assert!(mape(last) < mape(first), "{f}");
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(
        md.contains("## Learning from what the cluster observes"),
        "{md}"
    );
    assert!(md.contains("| observed groups |"), "{md}");
    // On a dataset of measured triples, three to a GPU: the first model, trained on half the
    // workloads, found no signal in some numeric columns, and the registered profiles' numbers
    // for them are accepted unused.
    let triples = tmp.path().join("triples");
    let result = simulate_on(
        &repo("traces/alibaba-gpu-v2023"),
        &repo("datasets/cpu-dev2c-triples"),
        &triples,
        &[
            "--gpus",
            "64",
            "--feedback",
            "--retrain-hours",
            "1",
            "--engine",
            "burn",
            "--gpu-jobs",
            "3",
        ],
    );
    assert!(result.status.success(), "{}", stderr(&result));
    assert_eq!(report(&triples)["gpu_jobs"], 3);
    // Bad feedback settings are named.
    for (flag, value, says) in [
        ("--held-out", "1", "a share in (0, 1)"),
        (
            "--retrain-hours",
            "0",
            "must be at least a simulated second",
        ),
    ] {
        let result = simulate(
            &tmp.path().join(format!("bad{flag}{value}")),
            &["--feedback", flag, value],
        );
        assert!(!result.status.success());
        assert!(
            stderr(&result).contains(&format!("{flag} {value}: {says}")),
            "{}",
            stderr(&result)
        );
    }
}
