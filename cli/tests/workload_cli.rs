//! `duet workload run`: one workload of a catalog alone, its rate measured over a window after
//! its warm-up, with the real binary and real processes.

use std::process::Command;

fn duet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_duet"))
}

#[path = "support/catalog.rs"]
mod catalog;
use catalog::write_catalog;

/// `duet workload run` measures after a warm-up (the first iterations compile kernels on a GPU:
/// a window that opened at the start would count one iteration over no time), and refuses a
/// workload that never warms up or finishes too few iterations for a rate.
#[test]
fn workload_run_measures_a_window_after_the_warm_up_and_refuses_what_it_cannot_time() {
    let dir = tempfile::tempdir().expect("tmp");
    let catalog = write_catalog(
        dir.path(),
        r#"
[[workload]]
name = "mute"
kind = "infer"
command = ["sh", "-c", "while true; do echo other; sleep 0.01; done"]
progress = "^tick$"

[[workload]]
name = "slow"
kind = "infer"
command = ["sh", "-c", "while true; do echo tick; sleep 0.4; done"]
progress = "^tick$"
"#,
    );
    let run = |name: &str, extra: &[&str]| {
        let out = duet()
            .args(["workload", "run", name, "--catalog"])
            .arg(&catalog)
            .args(extra)
            .output()
            .expect("duet workload run");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A rate (iterations over the window's own length) on a line naming the window.
    let rate = |line: &str| -> f64 {
        line.split(": ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no rate in {line}"))
    };
    for name in ["mlp", "ticker"] {
        let (ok, stdout, stderr) = run(name, &["--seconds", "0.5"]);
        assert!(ok, "{name}: {stderr}");
        assert!(stdout.contains("window after a 1."), "{stdout}");
        assert!(rate(&stdout) > 10.0, "{stdout}");
    }
    // The ticker's lines come every ~5 ms (its shell's own overhead on top): well under 200/s.
    let (_, stdout, _) = run("ticker", &["--seconds", "0.5"]);
    assert!(rate(&stdout) < 200.0, "{stdout}");
    let (ok, _, stderr) = run("mute", &["--seconds", "0.5", "--timeout", "1.5"]);
    assert!(!ok);
    assert!(
        stderr.contains("`mute` was not warm within its 1.5 s limit (--timeout)")
            && stderr.contains("`progress` pattern"),
        "{stderr}"
    );
    // Warm after 3 lines (1.2 s), then one more line at most in a 0.3 s window.
    let (ok, _, stderr) = run("slow", &["--seconds", "0.3"]);
    assert!(!ok);
    assert!(
        stderr.contains("fewer than 2 iterations in the 0.3 s window")
            && stderr.contains("--seconds"),
        "{stderr}"
    );
}
