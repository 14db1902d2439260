//! The rows of the two tables and the closed vocabularies they use.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How two jobs share one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Two processes, the driver's default time-slicing.
    Timeslice,
    /// CUDA Multi-Process Service, each client limited to an active-thread percentage.
    Mps,
    /// Multi-Instance GPU partitions.
    Mig,
    /// Concurrent processes on one device with no stated mechanism (how Gavel measured).
    Space,
    /// Two processes contending for the CPU cores of a machine without a GPU.
    Cpu,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Timeslice,
        Mode::Mps,
        Mode::Mig,
        Mode::Space,
        Mode::Cpu,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Timeslice => "timeslice",
            Mode::Mps => "mps",
            Mode::Mig => "mig",
            Mode::Space => "space",
            Mode::Cpu => "cpu",
        }
    }
}

/// Lists the names of a closed vocabulary for error messages: `a, b or c`.
pub(crate) fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
                format!("unknown mode `{s}`, expected {}", one_of(&names))
            })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a workload does with the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    Train,
    Infer,
}

impl JobKind {
    pub const ALL: [JobKind; 2] = [JobKind::Train, JobKind::Infer];

    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Train => "train",
            JobKind::Infer => "infer",
        }
    }
}

impl FromStr for JobKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown kind `{s}`, expected train or infer"))
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a co-location run ended. Anything but `Ok` is a label, not a missing value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// The two jobs do not fit in device memory together.
    Oom,
    Crash,
    Timeout,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Ok, Status::Oom, Status::Crash, Status::Timeout];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Oom => "oom",
            Status::Crash => "crash",
            Status::Timeout => "timeout",
        }
    }
}

impl FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Status::ALL.iter().map(|m| m.as_str()).collect();
                format!("unknown status `{s}`, expected {}", one_of(&names))
            })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value of a workload feature column; `None` inside means "not measured".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FeatureValue {
    Number(Option<f64>),
    Category(Option<String>),
}

impl FeatureValue {
    pub fn as_number(&self) -> Option<f64> {
        match self {
            FeatureValue::Number(v) => *v,
            FeatureValue::Category(_) => None,
        }
    }

    pub fn as_category(&self) -> Option<&str> {
        match self {
            FeatureValue::Category(v) => v.as_deref(),
            FeatureValue::Number(_) => None,
        }
    }

    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            FeatureValue::Number(None) | FeatureValue::Category(None)
        )
    }
}

/// One row of `workloads.parquet`: a workload's solo profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Unique id, used by pairs and by the server's registry.
    pub workload: String,
    pub kind: JobKind,
    /// Iterations per second when running alone.
    pub solo_throughput: f64,
    /// Standard deviation of the solo throughput across repetitions, when measured.
    pub solo_throughput_std: Option<f64>,
    /// Standard error of `solo_throughput` from the measured windows' own iteration times
    /// (the optional column `solo_throughput_se`; `None` where the source did not estimate it).
    /// Unlike the spread over repetitions it exists for a single window too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_throughput_se: Option<f64>,
    /// How many solo runs the throughput summarises, when known.
    pub repetitions: Option<u32>,
    /// The feature columns declared in `dataset.json`, by name.
    pub features: BTreeMap<String, FeatureValue>,
}

/// One row of `pairs.parquet`: one co-location measurement of workloads `a` and `b`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub a: String,
    pub b: String,
    /// The device model the pair ran on.
    pub gpu: String,
    pub mode: Mode,
    /// MPS active-thread percentage of `a`, `None` where the mode has no shares.
    pub share_a: Option<f64>,
    pub share_b: Option<f64>,
    /// Co-located iterations per second of `a` (0 when the run did not succeed).
    pub throughput_a: f64,
    pub throughput_b: f64,
    pub throughput_a_std: Option<f64>,
    pub throughput_b_std: Option<f64>,
    /// Standard errors of `throughput_a` and `throughput_b` from the measured windows' own
    /// iteration times (the optional columns `throughput_a_se`, `throughput_b_se`), like
    /// [`Workload::solo_throughput_se`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_a_se: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_b_se: Option<f64>,
    pub repetitions: Option<u32>,
    pub status: Status,
    /// Free text about the run, for example the tail of a failed run's stderr.
    pub note: Option<String>,
    /// The pair counter columns declared in `dataset.json`, by name.
    pub counters: BTreeMap<String, Option<f64>>,
}

/// The most jobs one measured group may hold (a group is three or more; two are a [`Pair`]).
pub const MAX_GROUP_SIZE: usize = 8;

/// One job of a [`Group`]: which workload, its share and how fast it ran among the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupJob {
    pub workload: String,
    /// MPS active-thread percentage, `None` where the mode has no shares.
    pub share: Option<f64>,
    /// Co-located iterations per second (0 when the run did not succeed).
    pub throughput: f64,
    pub throughput_std: Option<f64>,
    /// Standard error from the measured windows' own iteration times, like
    /// [`Workload::solo_throughput_se`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_se: Option<f64>,
}

/// One co-location measurement of three to [`MAX_GROUP_SIZE`] jobs on one device: rows of
/// `groups.parquet` that share a `group` number, one per job. The same workload may appear more
/// than once (two replicas of one service).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub gpu: String,
    pub mode: Mode,
    /// The jobs, in the order they were measured; the group is the multiset.
    pub jobs: Vec<GroupJob>,
    pub repetitions: Option<u32>,
    pub status: Status,
    pub note: Option<String>,
}

impl Group {
    /// `a + b + c`: the jobs' workloads, for messages.
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.jobs.iter().map(|j| j.workload.as_str()).collect();
        names.join(" + ")
    }

    /// The same for every order of the jobs: the device, the mode and the sorted (workload,
    /// share) multiset.
    pub fn setting_key(&self) -> (String, Mode, Vec<(String, Option<u64>)>) {
        let mut jobs: Vec<(String, Option<u64>)> = self
            .jobs
            .iter()
            .map(|j| (j.workload.clone(), j.share.map(f64::to_bits)))
            .collect();
        jobs.sort();
        (self.gpu.clone(), self.mode, jobs)
    }
}

/// Normalised throughput: co-located throughput over solo throughput (1 = no interference).
/// The only place speed is derived; slowdown is its inverse.
pub fn speed(co_located_throughput: f64, solo_throughput: f64) -> f64 {
    co_located_throughput / solo_throughput
}

/// How many times longer a job takes when co-located: `1 / speed`.
pub fn slowdown(co_located_throughput: f64, solo_throughput: f64) -> f64 {
    1.0 / speed(co_located_throughput, solo_throughput)
}

/// One reading of one counter during a measured window: a row of the optional
/// `samples.parquet`, the raw series behind the per-window means and p95s of the tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The measurement: `solo/<workload>/<repetition>` or
    /// `pair/<a>/<b>/<mode>/<share a>/<share b>/<repetition>`.
    pub run: String,
    /// Whose counter: a workload id, or `device` for the GPU as a whole.
    pub source: String,
    /// Seconds since the window opened.
    pub t: f64,
    /// A canonical counter name (`cpu_util`, `rss_mib`, `gpu_util` ...) or `cpu_seconds`,
    /// `context_switches` (cumulative).
    pub counter: String,
    pub value: f64,
}
