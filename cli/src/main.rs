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
