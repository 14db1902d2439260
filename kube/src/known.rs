//! Which pods duet can predict for: the workloads the server has registered (`GET
//! /v1/workloads`, refreshed in the background) and the pods that bring their features inline.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Result;
use duet_core::dataset::Mode;
use duet_scheduler::client::PredictClient;
use duet_scheduler::predictor::{InlineJobs, Sharing};

use crate::cluster::PodInfo;
use crate::contract::Identity;
use crate::devices::SharingStrategy;

/// How often the catalogue is read again.
pub const REFRESH: Duration = Duration::from_secs(30);

/// A refresh of the catalogue, one at a time: a call that arrives while one runs waits for it
/// and then takes its result instead of running another, and none runs within `QUIET` of the
/// last one's end (a server that does not answer is not asked once per call).
#[derive(Debug, Default)]
pub struct SingleFlight(tokio::sync::Mutex<Option<Instant>>);

/// The least time between the end of one refresh and the start of the next.
pub const QUIET: Duration = Duration::from_secs(2);

impl SingleFlight {
    /// Runs `refresh` unless one ran while this call waited or ended less than [`QUIET`] ago;
    /// whether it ran.
    pub async fn run(&self, refresh: impl Future<Output = ()>) -> bool {
        let asked = Instant::now();
        let mut last = self.0.lock().await;
        if last.is_some_and(|t| t >= asked || t.elapsed() < QUIET) {
            return false;
        }
        refresh.await;
        *last = Some(Instant::now());
        true
    }
}

/// The server's workloads (id -> the devices it has a profile on) and the ways of sharing its
/// model predicts.
#[derive(Debug, Clone, Default)]
pub struct Known {
    devices: HashMap<String, BTreeSet<String>>,
    modes: BTreeSet<Mode>,
    fetched: Option<Instant>,
}

/// Why duet cannot predict for a pod on a device.
#[derive(Debug, Clone, PartialEq)]
pub enum Unknown {
    /// No `duet.io/workload` nor `duet.io/profiles`.
    Unannotated,
    /// An annotation duet cannot read.
    Unreadable(String),
    /// A workload the server has not registered, or not on this device.
    NotRegistered { workload: String, device: String },
    /// Inline features without a profile for this device.
    NoProfile { device: String },
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unknown::Unannotated => write!(
                f,
                "no {} or {} annotation",
                crate::contract::WORKLOAD,
                crate::contract::PROFILES
            ),
            Unknown::Unreadable(e) => f.write_str(e),
            Unknown::NotRegistered { workload, device } => write!(
                f,
                "workload {} has no profile on {device} in the server's registry",
                crate::contract::quote(workload)
            ),
            Unknown::NoProfile { device } => write!(
                f,
                "{} has no profile for {device}",
                crate::contract::PROFILES
            ),
        }
    }
}

impl Known {
    /// Reads the server's catalogue and its model's modes.
    pub fn fetch(client: &PredictClient) -> Result<Known> {
        let devices = client
            .workloads()?
            .into_iter()
            .map(|w| (w.workload, w.body.profiles.into_keys().collect()))
            .collect();
        let meta = client.model_meta()?;
        let modes = meta["spec"]["modes"]
            .as_array()
            .map(|modes| {
                modes
                    .iter()
                    .filter_map(|m| m.as_str().and_then(|m| m.parse::<Mode>().ok()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Known {
            devices,
            modes,
            fetched: Some(Instant::now()),
        })
    }

    /// A catalogue from ids and devices, for a model of every mode (tests, benchmarks).
    pub fn of(entries: &[(&str, &[&str])]) -> Known {
        Known {
            modes: Mode::ALL.into_iter().collect(),
            devices: entries
                .iter()
                .map(|(id, devices)| {
                    (
                        (*id).to_string(),
                        devices.iter().map(|d| (*d).to_string()).collect(),
                    )
                })
                .collect(),
            fetched: Some(Instant::now()),
        }
    }

    /// Whether it is older than `age` (or was never read).
    pub fn older_than(&self, age: Duration) -> bool {
        self.fetched.is_none_or(|t| t.elapsed() >= age)
    }

    /// The sharings of `strategy` duet uses: those of its first listed mode the model
    /// predicts (a mapping lists them in order of preference).
    pub fn sharings(&self, strategy: &SharingStrategy) -> Vec<Sharing> {
        strategy
            .sharings
            .iter()
            .map(|s| s.mode)
            .find(|m| self.modes.contains(m))
            .map(|mode| {
                strategy
                    .sharings
                    .iter()
                    .filter(|s| s.mode == mode)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The same catalogue for a model that predicts only `modes`.
    #[must_use]
    pub fn with_modes(mut self, modes: impl IntoIterator<Item = Mode>) -> Known {
        self.modes = modes.into_iter().collect();
        self
    }

    /// The modes the model predicts, in words.
    pub fn modes(&self) -> String {
        let modes: Vec<&str> = self.modes.iter().map(|m| m.as_str()).collect();
        modes.join(", ")
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Whether the server has registered `workload` at all.
    pub fn has_any(&self, workload: &str) -> bool {
        self.devices.contains_key(workload)
    }

    /// Whether the server has registered `workload` on `device`.
    pub fn has(&self, workload: &str, device: &str) -> bool {
        self.devices
            .get(workload)
            .is_some_and(|devices| devices.contains(device))
    }

    /// The id a prediction names `pod` by on `device`: its workload, or `pod:<uid>` for
    /// inline features (`inline_jobs` gives them); why not, where duet does not know it there.
    pub fn key(&self, pod: &PodInfo, device: &str) -> Result<String, Unknown> {
        let job = pod
            .job
            .as_ref()
            .map_err(|e| Unknown::Unreadable(e.to_string()))?;
        match &job.identity {
            Identity::Unannotated => Err(Unknown::Unannotated),
            Identity::Workload(id) if self.has(id, device) => Ok(id.clone()),
            Identity::Workload(id) => Err(Unknown::NotRegistered {
                workload: id.clone(),
                device: device.to_string(),
            }),
            Identity::Inline(profiles) if profiles.contains_key(device) => Ok(inline_key(&pod.uid)),
            Identity::Inline(_) => Err(Unknown::NoProfile {
                device: device.to_string(),
            }),
        }
    }
}

/// The id of a pod's inline features in a prediction request.
pub fn inline_key(uid: &str) -> String {
    format!("pod:{uid}")
}

/// The inline features of `pods`, by their keys.
pub fn inline_jobs<'a>(pods: impl IntoIterator<Item = &'a PodInfo>) -> InlineJobs {
    pods.into_iter()
        .filter_map(|p| match p.job.as_ref().ok().map(|j| &j.identity) {
            Some(Identity::Inline(profiles)) => Some((inline_key(&p.uid), profiles.clone())),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_refreshes_run_once() {
        let flight = SingleFlight::default();
        let runs = AtomicUsize::new(0);
        let calls = (0..200).map(|_| {
            flight.run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                // The others arrive while it runs.
                tokio::task::yield_now().await;
            })
        });
        let ran = futures::future::join_all(calls).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(ran.iter().filter(|r| **r).count(), 1);
    }

    #[test]
    fn an_unregistered_workload_is_quoted_short() {
        let why = Unknown::NotRegistered {
            workload: "x".repeat(100 << 10),
            device: "v100".into(),
        };
        assert!(
            why.to_string().len() < 400,
            "{} bytes",
            why.to_string().len()
        );
    }
}
