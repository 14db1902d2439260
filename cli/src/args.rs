//! The command line, as clap types. Verbs are named after what users do.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use duet_model::network::TrainConfig;

mod kube;
pub use kube::{ExtenderArgs, KubeArgs, ScheduleArgs};

/// duet predicts how much two GPU jobs slow each other down when they share one GPU.
#[derive(Debug, Parser)]
#[command(name = "duet", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure how workloads slow each other down: a co-location campaign, written as a dataset.
    Profile(ProfileArgs),
    /// Run the workloads of a catalog.
    Workload {
        #[command(subcommand)]
        command: WorkloadCommand,
    },
    /// Serve /v1/predict on a model: the workload registry, metrics, hot reload.
    Serve(ServeArgs),
    /// Ask a running server for predictions: pairs from arguments or a CSV/JSONL file.
    Predict(PredictArgs),
    /// Report what the cluster measured (co-locations, solo runs) to a running server, from a
    /// JSON-lines file: one `/v1/observations` observation per line.
    Observe(ObserveArgs),
    /// Fit the degradation regressor on datasets, evaluate it honestly, write a model folder.
    Train(TrainArgs),
    /// Score a trained model on datasets (its own or new ones): accuracy per device and mode.
    Evaluate {
        /// The model folder written by `duet train`.
        #[arg(long)]
        model: PathBuf,
        /// A dataset folder; repeat for several.
        #[arg(long, required = true)]
        data: Vec<PathBuf>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replay a GPU cluster trace under several placement policies (exclusive, packing, the
    /// pricing loop with duet's predictions or with the measured pairs) and write a report.
    Simulate(SimulateArgs),
    /// Import, inspect, validate and merge datasets.
    Dataset {
        #[command(subcommand)]
        command: DatasetCommand,
    },
    /// Check a model folder before it is rolled out.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Budgeted campaigns: judge how duet chooses what to measure, on complete datasets.
    Campaign {
        #[command(subcommand)]
        command: CampaignCommand,
    },
    /// Serve the stock kube-scheduler's extender calls (filter, prioritize, bind) with duet's
    /// prices, from watches of the cluster and one /v1/predict call per scheduling call.
    Extender(ExtenderArgs),
    /// Schedule the pods of schedulerName `duet`: the pricing round over every pending pod at
    /// once, bound with duet's annotations; a pod it cannot place gets an Event saying why.
    Schedule(ScheduleArgs),
}

#[derive(Debug, Subcommand)]
pub enum CampaignCommand {
    /// Replay budgeted campaigns against a complete dataset (measuring a setting reads its
    /// row): test-set MAPE against the share measured for each selection method and the full
    /// data, the audit's estimate against the truth, and the probe curves of held-out
    /// workloads; writes report.md, report.json and SVG plots.
    Replay(ReplayArgs),
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A complete dataset (the oracle); repeat for several devices (one dataset per device).
    #[arg(long, required = true)]
    pub data: Vec<PathBuf>,
    /// Budgets, comma-separated: a share of the selectable settings (25%) or a count of
    /// settings (60); the audit is inside each budget.
    #[arg(long, required = true, value_delimiter = ',')]
    pub budget: Vec<String>,
    /// Selection methods to compare, comma-separated: uncertainty, random.
    #[arg(long, value_delimiter = ',', default_value = "uncertainty,random")]
    pub select: Vec<String>,
    /// Seeds, comma-separated: each draws its own test set, noise, choices and weights.
    #[arg(long, value_delimiter = ',', default_values_t = duet_model::network::DEFAULT_SEEDS)]
    pub seeds: Vec<u64>,
    /// Noise on every measured throughput: times exp(F z), z standard normal (0.03: about 3%).
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub noise: f64,
    /// Rounds after the first (which is chosen before any pair is known) to reach the largest
    /// budget.
    #[arg(long, default_value_t = 8)]
    pub rounds: usize,
    /// Settings the audit measures at the end of each budget (at most a third of it).
    #[arg(long, default_value_t = 30)]
    pub audit: usize,
    /// Every workload is measured in at least this many settings before disagreement ranks.
    #[arg(long, default_value_t = 3)]
    pub min_pairs: usize,
    /// Held-out workloads per seed for the probe curve (and families with --group-by); 0: no
    /// probe curves.
    #[arg(long, default_value_t = 4)]
    pub probe_units: usize,
    /// The largest K of the probe curves (probes per held-out workload).
    #[arg(long, default_value_t = 5)]
    pub max_probes: usize,
    /// Fit the probe curves' models calibrated, as `duet train --final-only` ships a merged
    /// dataset's (an ensemble per calibration fold and the refit instead of one ensemble each),
    /// and report each K's p90 coverage.
    #[arg(long)]
    pub probe_coverage: bool,
    /// Also hold out families: every workload with one value of this categorical workload
    /// feature (for example `model`).
    #[arg(long, value_name = "FEATURE")]
    pub group_by: Option<String>,
    /// An earlier dataset every fit also learns from, as `duet profile --prior` (repeatable;
    /// never a candidate; it must hold none of the --data settings).
    #[arg(long, value_name = "DIR")]
    pub prior: Vec<PathBuf>,
    /// Hidden layer widths of every fit, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = TrainConfig::default().hidden)]
    pub hidden: Vec<usize>,
    /// Networks in each ensemble.
    #[arg(long, default_value_t = TrainConfig::default().ensemble)]
    pub ensemble: usize,
    /// Upper bound on each network's training epochs.
    #[arg(long, default_value_t = TrainConfig::default().max_epochs)]
    pub max_epochs: usize,
    /// Stop a network when its validation loss has not improved for this many epochs.
    #[arg(long, default_value_t = TrainConfig::default().patience)]
    pub patience: usize,
    /// The report folder to write (must not exist).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Load a model as `duet serve` would (records, probe batch through the engine, ONNX
    /// Runtime against Burn), and, with --against, check that it can replace the serving model:
    /// the same features required, every device and mode of the serving one, and (against a
    /// server) every workload clients registered there accepted. Exits non-zero naming each
    /// problem.
    Check(ModelCheckArgs),
}

#[derive(Debug, clap::Args)]
pub struct ModelCheckArgs {
    /// The model folder to check.
    pub dir: PathBuf,
    /// The model it would replace: a running server's base URL (`http://host:port`, its
    /// serving model and registered workloads) or a model folder.
    #[arg(long)]
    pub against: Option<String>,
    /// Engine to load the model with: `onnx` or `burn` (as `duet serve --engine`).
    #[arg(long, default_value = "onnx")]
    pub engine: String,
    /// File holding the server's bearer token, for servers that protect reads (also
    /// `DUET_TOKEN`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Seconds to wait for each answer of the server (at most 3600).
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Turn measurements made elsewhere into a duet dataset.
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Summarise a dataset: workloads by kind, pairs by mode and status, speed distribution.
    Inspect {
        /// The dataset folder.
        dir: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every rule of the dataset format; exits non-zero naming the first problem.
    Validate {
        /// The dataset folder.
        dir: PathBuf,
    },
    /// Write what a server's store holds of observations (`POST /v1/observations`) as a
    /// dataset: repeated observations pooled, settings without observed solo throughputs left
    /// out and counted.
    Export {
        /// The server's store: its SQLite file, or a PostgreSQL URL or key=value string (a
        /// password belongs in --state-file or DUET_STATE, not on the command line).
        #[arg(long, conflicts_with = "state_file")]
        state: Option<String>,
        /// File holding the --state value (a PostgreSQL DSN with its password, e.g. from a
        /// Kubernetes Secret); the environment variable DUET_STATE may hold it instead.
        #[arg(long)]
        state_file: Option<PathBuf>,
        /// The new dataset folder (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// The device to export (needed when several were observed, unless --each-device).
        #[arg(long, conflicts_with = "each_device")]
        gpu: Option<String>,
        /// One dataset per observed device, each in `--out/<device>`.
        #[arg(long)]
        each_device: bool,
        /// Only observations made at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only observations made before this time (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// Dataset name (default: the output folder's name).
        #[arg(long)]
        name: Option<String>,
        /// Print what was kept and left out as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Join the shards of one campaign (same device, same columns) into one dataset.
    Merge {
        /// The shard folders.
        #[arg(required = true, num_args = 1..)]
        shards: Vec<PathBuf>,
        /// The new dataset folder (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Name of the merged dataset (default: the output folder's name).
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImportSource {
    /// Gavel's published throughput matrices (simulation_throughputs.json).
    Gavel {
        /// The Gavel JSON file.
        json: PathBuf,
        /// Which device's table to import: k80, p100 or v100.
        #[arg(long)]
        gpu: String,
        /// The new dataset folder (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Dataset name (default: the output folder's name).
        #[arg(long)]
        name: Option<String>,
        /// Where the JSON comes from, for the provenance (default: names the file).
        #[arg(long)]
        source: Option<String>,
        /// Licence notice to keep with the data (default: a LICENSE file beside the JSON).
        #[arg(long)]
        licence_file: Option<PathBuf>,
        /// Import date for the provenance, YYYY-MM-DD (default: today).
        #[arg(long)]
        date: Option<String>,
    },
    /// Your own measurements as CSV files: workloads, pairs and optionally groups (layout:
    /// README.md, "Bring your own data").
    Csv {
        /// One row per workload: workload, kind, solo_throughput, features...
        #[arg(long)]
        workloads: PathBuf,
        /// One row per co-location setting: a, b, mode, throughput_a, throughput_b, ...
        #[arg(long)]
        pairs: PathBuf,
        /// Settings of three or more jobs, one row per job: group, workload, mode, throughput,
        /// ...
        #[arg(long)]
        groups: Option<PathBuf>,
        /// The new dataset folder (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Device model the pairs ran on (also the default of a missing `gpu` column).
        #[arg(long)]
        gpu: String,
        /// Dataset name (default: the output folder's name).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, default_value = "co-location measurements imported from CSV")]
        description: String,
        /// Where the measurements come from.
        #[arg(long, default_value = "user-supplied CSV files")]
        source: String,
        /// Who measured them.
        #[arg(long, default_value = "unknown")]
        measured_by: String,
        /// Licence of the data.
        #[arg(long, default_value = "unspecified")]
        licence: String,
        /// Measurement date for the provenance, YYYY-MM-DD (default: today).
        #[arg(long)]
        date: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// A dataset folder; repeat for several (for example one per device).
    #[arg(long, required = true)]
    pub data: Vec<PathBuf>,
    /// The new model folder (must not exist).
    #[arg(long)]
    pub out: PathBuf,
    /// Model name (default: the output folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Evaluate with this one seed only (folds, calibration hold-outs and initial weights): the
    /// same seed gives the same model and metrics. Without --seed or --seeds, the shipped
    /// recipe's seeds (--seeds).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Repeat the evaluation with each of these seeds (comma-separated: other folds, calibration
    /// hold-outs and initial weights) and report every metric's mean and standard deviation; the
    /// shipped networks use the first.
    #[arg(long, value_delimiter = ',', conflicts_with = "seed",
          default_values_t = duet_model::network::DEFAULT_SEEDS)]
    pub seeds: Vec<u64>,
    /// Hidden layer widths, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = TrainConfig::default().hidden)]
    pub hidden: Vec<usize>,
    /// Networks in the ensemble (each from its own seed and validation split).
    #[arg(long, default_value_t = TrainConfig::default().ensemble)]
    pub ensemble: usize,
    /// Upper bound on training epochs (early stopping usually ends sooner).
    #[arg(long, default_value_t = TrainConfig::default().max_epochs)]
    pub max_epochs: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = TrainConfig::default().learning_rate)]
    pub learning_rate: f64,
    /// Stop a network when its validation loss has not improved for this many epochs.
    #[arg(long, default_value_t = TrainConfig::default().patience)]
    pub patience: usize,
    /// Train without identity slots: every pair is seen by its features alone, as a new job's
    /// (for comparison; by default each training workload has one).
    #[arg(long)]
    pub no_identities: bool,
    /// Train without the copy of the training rows whose families are hidden (for comparison;
    /// by default three rows of four are also trained with the ids and one job's family or both
    /// hidden, so the network learns to answer for a new family from the measured profile).
    #[arg(long)]
    pub no_family_dropout: bool,
    /// Where the data has measured groups of three or more: `auto` (the default) trains a
    /// network that also learns them, one row per job, and lets it answer each group size where
    /// it beats the composition of pairs on groups it was not trained on (5 folds of whole
    /// groups); `always` lets it answer every measured size, `never` composes every group (both
    /// for comparison).
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub group_network: String,
    /// Loss of the point estimate of ln(speed): `absolute` (the default: tracks the relative
    /// error MAPE measures) or `squared` (for comparison).
    #[arg(long, default_value = "absolute", value_parser = ["absolute", "squared"])]
    pub loss: String,
    /// Where to train: `cpu` (Burn's Flex backend), or `cuda` / `cuda:N` (burn-cuda; needs a
    /// duet built with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Fit only the model that ships (feature spec, ensemble, p90 calibrations), with no
    /// cross-validation and no baselines: for scheduled retraining. model.json then holds no
    /// metrics and its `evaluation` says that none was run.
    #[arg(long, conflicts_with = "seeds")]
    pub final_only: bool,
    /// Also evaluate on `unseen_<FEATURE>`: leave one value of this categorical workload
    /// feature out (for example `model`: every workload of one model held out together, with
    /// no identity slot for any of them), reported in model.json and report.md with the other
    /// splits.
    #[arg(long, value_name = "FEATURE", conflicts_with = "final_only")]
    pub group_by: Option<String>,
    /// The categorical workload feature that names a job's model family (default: `model`
    /// where every dataset declares it; `none`: no family). The evaluation leaves each family
    /// out in turn (`unseen_<FEATURE>`) and calibrates from those folds the p90 of a job whose
    /// family training never had (`calibration: new_family`); with fewer than 5 families, or
    /// with --final-only, such a job gets the model's widest p90, labelled `conservative`.
    #[arg(long, value_name = "FEATURE")]
    pub family: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The model folder written by `duet train`.
    #[arg(long, default_value = "models/default")]
    pub model: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// Also serve gRPC on this address (off by default): the KServe v2
    /// `inference.GRPCInferenceService` and `duet.v1.Predictor` (proto/), with the same token,
    /// limits and model as HTTP.
    #[arg(long, value_name = "ADDR")]
    pub grpc_addr: Option<String>,
    /// Inference engine: `onnx` (ONNX Runtime, the faster: its shared library through
    /// ORT_DYLIB_PATH, which `eval "$(scripts/python-env.sh)"` sets) or `burn` (Burn's Flex CPU
    /// backend, nothing to install).
    #[arg(long, default_value = "onnx")]
    pub engine: String,
    /// Where the workloads clients register are kept: an SQLite file (one machine, kept across
    /// restarts) or a PostgreSQL URL `postgres://user@host:port/db` shared by every replica
    /// (default: memory only). A URL with a password belongs in --state-file or DUET_STATE.
    #[arg(long, conflicts_with = "state_file")]
    pub state: Option<String>,
    /// File holding the --state value (a PostgreSQL URL with its password, e.g. from a
    /// Kubernetes Secret); the environment variable DUET_STATE may hold it instead.
    #[arg(long)]
    pub state_file: Option<PathBuf>,
    /// File holding the bearer token that write endpoints require (also `DUET_TOKEN`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Require the token on read endpoints too (health, readiness and metrics stay open).
    #[arg(long)]
    pub protect_reads: bool,
    /// Serve write endpoints without a token on a non-loopback address (refused otherwise).
    #[arg(long)]
    pub allow_open_writes: bool,
    /// The folder whose subfolders are the models `POST /v1/models/reload` may name (default:
    /// the folder that holds --model).
    #[arg(long)]
    pub model_repo: Option<PathBuf>,
    /// Device of pairs that name none (default: the model's only device, if it has one).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Largest request body accepted, bytes (default: 256 per --max-pairs pair, room for
    /// every pair's features inline, and 64 KiB). A larger body is answered 413 before it is
    /// read.
    #[arg(long)]
    pub max_body_bytes: Option<usize>,
    /// Largest body of a workload registration or a reload, bytes; a larger one is answered
    /// 413 before it is read (after the token, which is checked first).
    #[arg(long, default_value_t = duet_server::state::MAX_WRITE_BODY_BYTES)]
    pub max_write_body_bytes: usize,
    /// Bytes of request bodies the server holds at once, HTTP and gRPC together, with what
    /// gRPC messages decode into (default: four --max-body-bytes bodies, at least 64 MiB). A
    /// body is read before it takes a place of model work; one that would pass this budget is
    /// answered 503 with Retry-After.
    #[arg(long)]
    pub max_inflight_body_bytes: Option<usize>,
    /// Most pairs in one prediction request (counted while the body is parsed).
    #[arg(long, default_value_t = 100_000)]
    pub max_pairs: usize,
    /// Most rows in one KServe `/v2/models/{name}/infer` request (default: two per
    /// --max-pairs pair, as a pair is two rows).
    #[arg(long)]
    pub max_infer_rows: Option<usize>,
    /// Most observations in one `POST /v1/observations` request.
    #[arg(long, default_value_t = 10_000)]
    pub max_observations: usize,
    /// Most workloads registered, the model's own included; a new one past it is answered 422.
    #[arg(long, default_value_t = duet_server::state::MAX_WORKLOADS)]
    pub max_workloads: usize,
    /// Most profiles (devices) in one workload registration; more are answered 422.
    #[arg(long, default_value_t = duet_server::state::MAX_PROFILES)]
    pub max_profiles: usize,
    /// Without --state: most observations kept in memory; a batch that would pass it is
    /// answered 507 (give --state to keep more).
    #[arg(long, default_value_t = duet_server::store::MAX_MEMORY_OBSERVATIONS)]
    pub max_memory_observations: usize,
    /// Places of model work (predict, infer, observations, drift) taken at once (default: one
    /// per core), once its body is read. A request takes one; one of at least 256 KiB, whose
    /// work is split over every core, takes one per core.
    #[arg(long)]
    pub max_inflight: Option<usize>,
    /// Places of model work that may be waited for (default: one per core); beyond these and
    /// --max-inflight, requests are answered 503 at once with Retry-After.
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Seconds a connection has to send a request's whole header, from its opening or the end
    /// of its previous answer (an idle keep-alive connection is closed then too).
    #[arg(long, default_value_t = 5.0)]
    pub header_timeout: f64,
    /// Seconds a request's body may pause before it is cut off (408).
    #[arg(long, default_value_t = 10.0)]
    pub idle_timeout: f64,
    /// Client connections open at once; more are closed on arrival, except probes (health,
    /// readiness, metrics), which have a reserve of 16 beyond it.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a request may take before it is answered 503 (at most 3600).
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout: f64,
    /// Log lines as `text` or `json`.
    #[arg(long, default_value = "text")]
    pub log_format: String,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// After SIGTERM: seconds during which /readyz answers 503 while requests are still served
    /// (so that the Service stops routing here), before the listener closes and in-flight
    /// requests finish. A second SIGTERM or Ctrl-C closes at once.
    #[arg(long, default_value_t = 5.0)]
    pub drain_seconds: f64,
}

#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// Pairs of registered workload ids, `a,b` (or `a:b`); three to eight ids, `a,b,c`, are a
    /// group on one device.
    pub pairs: Vec<String>,
    /// A file of pairs: CSV with columns a, b and optionally mode, share_a, share_b, gpu; or
    /// JSON lines, one `/v1/predict` pair or group object per line (`.jsonl`).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "DUET_SERVER")]
    pub server: String,
    /// Sharing mode of pairs that name none.
    #[arg(long)]
    pub mode: Option<String>,
    /// Share of job a (MPS active-thread percentage) for pairs that name none.
    #[arg(long)]
    pub share_a: Option<f64>,
    #[arg(long)]
    pub share_b: Option<f64>,
    /// Device of pairs that name none.
    #[arg(long)]
    pub gpu: Option<String>,
    /// File holding a bearer token, for servers that protect reads (also `DUET_TOKEN`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Print the server's JSON answer instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the answer (at most 3600).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

#[derive(Debug, clap::Args)]
pub struct ObserveArgs {
    /// JSON lines, one observation per line (`id`, `gpu`, `mode`, `a`, `b`, `throughput_a`,
    /// `throughput_b`, `window_s`, `observed_at` ...; without `b`, a solo run of `a`).
    #[arg(long)]
    pub file: PathBuf,
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "DUET_SERVER")]
    pub server: String,
    /// File holding the bearer token the server's writes need (also `DUET_TOKEN`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Observations per request (at most the server's --max-observations).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Seconds to wait for each answer (at most 3600).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Print the server's answers as JSON lines instead of a summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadCommand {
    /// Run one workload alone and print its throughput.
    Run {
        /// The workload's name in the catalog.
        name: String,
        /// The catalog (TOML).
        #[arg(long)]
        catalog: PathBuf,
        /// `cpu` (Burn's Flex backend) or `cuda` / `cuda:N` (burn-cuda; `--features cuda`).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Seconds measured, after a warm-up of at least 1 s and the first 3 iterations (kernel
        /// compilation and autotuning on a GPU), which is not counted.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Seconds the warm-up may take before the run is abandoned as too slow to measure.
        #[arg(long, default_value_t = 120.0)]
        timeout: f64,
        /// Print a line per finished iteration and run until stopped (what the profiler uses).
        #[arg(long)]
        progress: bool,
    },
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("chooses").args(["budget", "onto"])))]
pub struct ProfileArgs {
    /// The workload catalog (TOML).
    #[arg(long)]
    pub catalog: PathBuf,
    /// Sharing modes, comma-separated: cpu (processes sharing this machine's cores), timeslice
    /// (processes time-slicing one GPU), mps (NVIDIA MPS with --shares; --device cuda).
    #[arg(long, default_value = "cpu", value_delimiter = ',')]
    pub modes: Vec<String>,
    /// MPS active-thread percentages, comma-separated (for the mps mode).
    #[arg(long, default_value = "100", value_delimiter = ',')]
    pub shares: Vec<f64>,
    /// The new dataset folder (must not exist).
    #[arg(long)]
    pub out: PathBuf,
    /// Dataset name (default: the output folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Where workloads run: `cpu` or `cuda[:N]`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Pin the workload processes to these CPUs (`taskset -c` syntax, for example `0`): in the cpu
    /// mode, two jobs then time-slice one core, like two jobs sharing one GPU.
    #[arg(long)]
    pub cpu_set: Option<String>,
    /// The device label recorded in the dataset (default: `cpu`, or the GPU's name).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Seconds of warm-up before each measured window (at most 86400, as every seconds flag here).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Shortest measured window, seconds. A window then goes on until every process's rate
    /// (from its iteration lines' own arrival times) has a relative standard error of at most
    /// --precision, or --window-max has passed; give --window-max equal to it for fixed windows.
    #[arg(long, default_value_t = 2.0)]
    pub window: f64,
    /// Longest measured window, seconds: a window ends here even if a rate is not yet known to
    /// --precision (its standard error is recorded as it is).
    #[arg(long, default_value_t = 30.0)]
    pub window_max: f64,
    /// The relative standard error of every rate at which a window may end (0.02: 2%), estimated
    /// by batch means of the intervals between iteration lines; recorded per setting in the
    /// dataset's `throughput_a_se`, `throughput_b_se` and `solo_throughput_se`.
    #[arg(long, default_value_t = 0.02)]
    pub precision: f64,
    /// Measurements of every setting.
    #[arg(long, default_value_t = 3)]
    pub repetitions: u32,
    /// Measurements of each workload alone (default: --repetitions). The solos are n runs where
    /// the pairs are n², and every slowdown divides by them: a short campaign can repeat them
    /// more often than its pairs.
    #[arg(long)]
    pub solo_repetitions: Option<u32>,
    /// The most jobs measured together: 2 measures every pair; 3 or more measures also every
    /// group of 3 up to this many (a workload may appear more than once in a group), written to
    /// the dataset's groups.parquet. With --budget, the groups follow the budgeted pairs and
    /// their audit (and count outside the budget). Not with --onto, which chooses probes.
    #[arg(long, default_value_t = 2, conflicts_with = "onto")]
    pub group_size: usize,
    /// With --group-size 3 or more: measure only this many groups of each size (`14`) or this
    /// share of them (`25%`), every pair still measured. The groups are a balanced design: each
    /// next one the group whose workloads the chosen ones hold least, so that every workload is
    /// in about as many measured jobs (what a group effect is learnt from); each is measured in
    /// every mode and share.
    #[arg(long)]
    pub group_budget: Option<String>,
    /// Seconds a run may take to reach its window before it is recorded as a timeout.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Milliseconds between counter samples (0: no sampling).
    #[arg(long, default_value_t = 100)]
    pub sample_ms: u64,
    /// Seed of the measurement order.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Run only shard i of n (i from 0); default from JOB_COMPLETION_INDEX with --shards.
    #[arg(long)]
    pub shard: Option<String>,
    /// The shard count when the index comes from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job).
    #[arg(long)]
    pub shards: Option<usize>,
    /// Continue an interrupted campaign from its journal.
    #[arg(long)]
    pub resume: bool,
    /// Measurement date for the provenance, YYYY-MM-DD (default: today).
    #[arg(long)]
    pub date: Option<String>,
    /// Measure only this many pair settings (`60`) or this share of them (`25%`), the audit
    /// included; every workload alone is measured first and not counted. Pairs are chosen in
    /// rounds by the model fitted on what is measured; without it, every setting is measured.
    #[arg(long)]
    pub budget: Option<String>,
    /// New workloads onto this earlier dataset: the catalog's workloads that it lacks are
    /// measured alone and with --probes co-runners each (workloads of both), chosen by the
    /// model fitted on it; the dataset written merges with it (`duet dataset merge`).
    #[arg(long, value_name = "DIR")]
    pub onto: Option<PathBuf>,
    /// Co-runners each new workload is measured with (--onto).
    #[arg(long, default_value_t = duet_campaign::probes::DEFAULT_PROBES, requires = "onto")]
    pub probes: usize,
    /// Measure the co-runners alone again rather than copying their solo rows from --onto.
    #[arg(long, requires = "onto")]
    pub remeasure_solo: bool,
    /// How a budgeted campaign (or --onto's probes) chooses: uncertainty (the ensemble's
    /// disagreement, every workload in a few pairs first) or random.
    #[arg(long, default_value = "uncertainty", requires = "chooses")]
    pub select: String,
    /// Pair settings per round after the first (default: what the budget leaves after the
    /// first round, over 4 rounds).
    #[arg(long, requires = "budget")]
    pub round_size: Option<usize>,
    /// Settings of the audit, drawn uniformly at the end from those never chosen and measured
    /// inside the budget (default: 30, at most a third of the budget).
    #[arg(long, requires = "budget")]
    pub audit: Option<usize>,
    /// Stop choosing once the error of the model on the settings of the last round, predicted
    /// before they were measured, is below this MAPE of speed (percent, `8` or `8%`).
    #[arg(long, requires = "budget")]
    pub target_mape: Option<String>,
    /// Earlier datasets the budgeted campaign's model also learns from (repeatable); they must
    /// be in the campaign's modes.
    #[arg(long, requires = "chooses")]
    pub prior: Vec<PathBuf>,
    /// Networks in the ensemble fitted between rounds.
    #[arg(long, default_value_t = TrainConfig::default().ensemble, requires = "chooses")]
    pub ensemble: usize,
    /// Upper bound on training epochs of the fits between rounds.
    #[arg(long, default_value_t = TrainConfig::default().max_epochs, requires = "chooses")]
    pub max_epochs: usize,
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The trace folder (Alibaba GPU trace 2023: pod list and node list).
    #[arg(long, default_value = "traces/alibaba-gpu-v2023")]
    pub trace: PathBuf,
    /// Another pod list than the folder's `openb_pod_list_default.csv`.
    #[arg(long)]
    pub pods: Option<PathBuf>,
    /// The dataset whose measured pairs are the ground truth and whose workloads the jobs run.
    #[arg(long, default_value = "datasets/gavel-v100")]
    pub dataset: PathBuf,
    /// GPUs in the simulated cluster, drawn from the trace's nodes.
    #[arg(long, default_value_t = 512)]
    pub gpus: u32,
    /// Compress arrivals so that the offered load (GPU-seconds asked over GPU-seconds between
    /// the first and last arrival) is this.
    #[arg(long, default_value_t = 1.0, conflicts_with = "compression")]
    pub load: f64,
    /// Divide arrival times by this instead of aiming at a load.
    #[arg(long)]
    pub compression: Option<f64>,
    /// Policies to compare, comma-separated: exclusive, packing, duet, oracle.
    #[arg(
        long,
        default_value = "exclusive,packing,duet,oracle",
        value_delimiter = ','
    )]
    pub policies: Vec<String>,
    /// The model the `duet` policy runs in process.
    #[arg(long, default_value = "models/default")]
    pub model: PathBuf,
    /// Ask a running duet server (`http://host:port`) instead of running the model in process.
    #[arg(long)]
    pub predictor_url: Option<String>,
    /// File holding the server's bearer token, if it asks for one (also `DUET_TOKEN`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Engine of the in-process model: onnx or burn.
    #[arg(long, default_value = "onnx")]
    pub engine: String,
    /// Minimum speed (normalised throughput) of inference jobs.
    #[arg(long, default_value_t = 0.6)]
    pub slo: f64,
    /// Seed of the node draw and of the workload each pod runs.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Simulate only the first N jobs (by arrival).
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Waiting jobs priced per round, in arrival order.
    #[arg(long, default_value_t = 1024)]
    pub window: usize,
    /// A pair is only formed where it adds at least this share of the resident's throughput.
    #[arg(long, default_value_t = 0.0)]
    pub min_gain: f64,
    /// Device memory of one GPU: with it, a pair whose two workloads' `mem_used_mib` (where the
    /// dataset measured it) add up to more is never formed.
    #[arg(long)]
    pub gpu_memory_mib: Option<f64>,
    /// Jobs one GPU may hold (2 to 8): above 2, a job may join a GPU that already holds two or
    /// more, its truth the dataset's measured group where it has one, else composed from the
    /// measured pairs (the report counts which).
    #[arg(long, default_value_t = 2)]
    pub gpu_jobs: usize,
    /// Hide the queue's state (GPU release rate, typical runtime) from the pricing loop, so that
    /// pairs are judged by throughput alone (for comparison).
    #[arg(long)]
    pub queue_blind: bool,
    /// Seconds of waiting after which a job's priority weight has doubled.
    #[arg(long, default_value_t = 3600.0)]
    pub aging: f64,
    /// Learn from what the cluster observes: a model is trained without a share of the dataset's
    /// workloads (--held-out), the jobs report their true speeds (with a measurement window's
    /// noise), and the model is retrained on them every --retrain-hours. Compares pricing on that
    /// model with and without the feedback, and on the oracle.
    #[arg(long)]
    pub feedback: bool,
    /// With --feedback: the share of the dataset's workloads the first model never sees.
    #[arg(long, default_value_t = 0.5)]
    pub held_out: f64,
    /// With --feedback: simulated hours between retrainings.
    #[arg(long, default_value_t = 2.0)]
    pub retrain_hours: f64,
    /// With --feedback: coefficient of variation of an observed throughput (the noise of a
    /// 10 s window).
    #[arg(long, default_value_t = 0.03)]
    pub feedback_noise: f64,
    /// The report folder to write (must not exist).
    #[arg(long)]
    pub out: PathBuf,
}
