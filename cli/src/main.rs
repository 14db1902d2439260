//! The `duet` command. Parses arguments and hands each verb to the library that does the work.

mod args;
mod campaign_cmd;
mod dataset_cmd;
mod evaluate_cmd;
mod flags;
mod kube_cmd;
mod model_cmd;
mod observe_cmd;
mod predict_cmd;
mod profile_cmd;
mod progress;
mod serve_cmd;
mod simulate_cmd;
mod simulate_feedback;
mod train_cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    if matches!(
        cli.command,
        args::Command::Dataset { .. }
            | args::Command::Evaluate { .. }
            | args::Command::Model { .. }
            | args::Command::Train(_)
            | args::Command::Simulate(_)
            | args::Command::Predict(_)
            | args::Command::Observe(_)
            | args::Command::Campaign { .. }
    ) {
        stop_when_the_reader_does();
    }
    let result = match cli.command {
        args::Command::Profile(args) => profile_cmd::profile(args),
        args::Command::Workload { command } => profile_cmd::workload(command),
        args::Command::Serve(args) => serve_cmd::run(args),
        args::Command::Predict(args) => predict_cmd::run(args),
        args::Command::Simulate(args) => simulate_cmd::run(&args),
        args::Command::Dataset { command } => dataset_cmd::run(command),
        args::Command::Model { command } => model_cmd::run(command),
        args::Command::Observe(args) => observe_cmd::run(&args),
        args::Command::Train(args) => train_cmd::run(args),
        args::Command::Evaluate { model, data, json } => evaluate_cmd::run(&model, &data, json),
        args::Command::Campaign { command } => campaign_cmd::run(command),
        args::Command::Extender(args) => kube_cmd::extender(args),
        args::Command::Schedule(args) => kube_cmd::schedule(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A command whose output is read through a pipe (`duet evaluate ... | head`) ends when its
/// reader does, quietly, as Unix tools do, rather than panicking on a closed stdout: SIGPIPE is
/// given back its default action. The commands that serve or run processes keep Rust's (the
/// signal ignored, a write to a closed pipe an error), and sockets never raise it (Linux
/// sends with `MSG_NOSIGNAL`).
#[cfg(unix)]
#[allow(unsafe_code)]
fn stop_when_the_reader_does() {
    // SAFETY: `signal` sets this process's action for SIGPIPE before any thread starts; no
    // handler of ours runs, the default action only.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn stop_when_the_reader_does() {}
