//! Which pods duet can predict for: the workloads the server has registered (`GET
//! /v1/workloads`, refreshed in the background) and the pods that bring their features inline.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Result;
use duet_core::api::{FeatureInput, Features};
use duet_core::dataset::Mode;
use duet_scheduler::client::PredictClient;
use duet_scheduler::predictor::{InlineJobs, Sharing};

use crate::cluster::PodInfo;
use crate::contract::Identity;
use crate::devices::SharingStrategy;

/// The feature every job has: iterations per second alone on the device.
const SOLO_THROUGHPUT: &str = "solo_throughput";

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

/// The server's workloads (id -> the devices it has a profile on), the ways of sharing its
/// model predicts, and the features it accepts.
#[derive(Debug, Clone, Default)]
pub struct Known {
    devices: HashMap<String, BTreeSet<String>>,
    modes: BTreeSet<Mode>,
    features: AcceptedFeatures,
    fetched: Option<Instant>,
}

/// The features the serving model accepts (its `model.json`'s `spec`), so that a pod's inline
/// profile is checked as the server checks it before it is sent: the server refuses a whole
/// request for one job's features, so one pod's bad profile would fail every prediction asked
/// beside it (every pod of a scheduling step, every pod judged on its node).
#[derive(Debug, Clone, Default)]
struct AcceptedFeatures {
    /// Name -> its role: numeric (`Some(true)`), categorical (`Some(false)`), or accepted and
    /// unused (`None`, a dataset column the trainer found no signal in).
    roles: HashMap<String, Option<bool>>,
}

impl AcceptedFeatures {
    /// From a `model.json`'s `spec` (empty, checking nothing, where it names no feature).
    fn of(spec: &serde_json::Value) -> AcceptedFeatures {
        let names = |list: &str| -> Vec<String> {
            spec[list]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["name"].as_str().or_else(|| f.as_str()))
                        .map(|n| n.split(':').next().unwrap_or(n).to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut roles = HashMap::new();
        // A name listed twice keeps its first role: numeric, categorical, unused (as the server).
        for (list, role) in [
            ("numeric", Some(true)),
            ("categorical", Some(false)),
            ("dropped", None),
        ] {
            for name in names(list) {
                roles.entry(name).or_insert(role);
            }
        }
        if !roles.is_empty() {
            roles.insert(SOLO_THROUGHPUT.to_string(), Some(true));
        }
        AcceptedFeatures { roles }
    }

    /// Why the server would refuse `features`, where it would.
    fn refusal(&self, features: &Features) -> Option<String> {
        if self.roles.is_empty() {
            return None;
        }
        for (name, value) in features.iter() {
            match (self.roles.get(name.as_str()), value) {
                (None, _) => {
                    let mut known: Vec<&str> = self
                        .roles
                        .iter()
                        .filter(|(_, r)| r.is_some())
                        .map(|(n, _)| n.as_str())
                        .collect();
                    known.sort_unstable();
                    return Some(format!(
                        "unknown feature {}; the model knows {}",
                        crate::contract::quote(name),
                        known.join(", ")
                    ));
                }
                (Some(Some(true)), FeatureInput::Text(_)) => {
                    return Some(format!("`{name}` is numeric: a number or null"));
                }
                (Some(Some(false)), FeatureInput::Number(_)) => {
                    return Some(format!("`{name}` is categorical: a string or null"));
                }
                _ => {}
            }
        }
        let mut missing: Vec<&str> = self
            .roles
            .iter()
            .filter(|(n, r)| r.is_some() && !features.contains_key(n))
            .map(|(n, _)| n.as_str())
            .collect();
        missing.sort_unstable();
        missing
            .first()
            .map(|n| format!("missing feature `{n}` (null where it was not measured)"))
    }
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
    /// A profile for this device the serving model would refuse, and why.
    ProfileRefused { device: String, why: String },
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
            Unknown::ProfileRefused { device, why } => write!(
                f,
                "its {} profile for {device} is one the model refuses: {why}",
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
            features: AcceptedFeatures::of(&meta["spec"]),
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
            features: AcceptedFeatures::default(),
            fetched: Some(Instant::now()),
        }
    }

    /// The same catalogue for a model whose `model.json` has `spec` (the features it accepts).
    #[must_use]
    pub fn with_spec(mut self, spec: &serde_json::Value) -> Known {
        self.features = AcceptedFeatures::of(spec);
        self
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
            Identity::Inline(profiles) if profiles.contains_key(device) => {
                match self.features.refusal(&profiles[device]) {
                    Some(why) => Err(Unknown::ProfileRefused {
                        device: device.to_string(),
                        why,
                    }),
                    None => Ok(inline_key(&pod.uid)),
                }
            }
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

    /// A pod's profile is checked as the server checks a job's features: every feature of the
    /// model present (null where not measured), numbers where numeric, text where categorical,
    /// no name the model does not accept.
    #[test]
    fn a_profile_the_model_refuses_is_one_duet_does_not_know() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/default/model.json");
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("model.json"))
                .expect("json");
        let known = Known::of(&[]).with_spec(&meta["spec"]);
        let why = |profile: serde_json::Value| -> Option<String> {
            let profiles: std::collections::BTreeMap<String, Features> =
                serde_json::from_value(serde_json::json!({ "v100": profile })).expect("profile");
            let mut pod = crate::cluster::tests::pod("p", None, 1, "w");
            pod.job = Ok(crate::contract::JobSpec {
                identity: Identity::Inline(profiles),
                ..crate::contract::JobSpec::unknown()
            });
            known.key(&pod, "v100").err().map(|e| e.to_string())
        };
        let full =
            serde_json::json!({"solo_throughput": 11.2, "batch_size": 64, "model": "ResNet-50"});
        assert_eq!(why(full.clone()), None);
        assert_eq!(
            why(
                serde_json::json!({"solo_throughput": 11.2, "batch_size": null, "model": "Unseen"})
            ),
            None
        );
        for (profile, says) in [
            (
                serde_json::json!({"solo_throughput": 11.2, "batch_size": 64}),
                "missing feature `model`",
            ),
            (
                serde_json::json!({"solo_throughput": 11.2, "batch_size": "64", "model": "LM"}),
                "`batch_size` is numeric",
            ),
            (
                serde_json::json!({"solo_throughput": 11.2, "batch_size": 64, "model": 3}),
                "`model` is categorical",
            ),
            (
                serde_json::json!({"solo_throughput": 11.2, "batch_size": 64, "model": "LM", "colour": 1}),
                "unknown feature colour; the model knows batch_size, model, solo_throughput",
            ),
        ] {
            let why = why(profile.clone()).unwrap_or_default();
            assert!(why.contains(says), "{profile}: {why}");
            assert!(why.contains("profile for v100"), "{why}");
        }
        // A catalogue that never read a spec checks nothing.
        let unchecked = Known::of(&[]);
        let mut pod = crate::cluster::tests::pod("p", None, 1, "w");
        pod.job = Ok(crate::contract::JobSpec {
            identity: Identity::Inline(
                serde_json::from_value(serde_json::json!({"v100": {"solo_throughput": 1.0}}))
                    .expect("profile"),
            ),
            ..crate::contract::JobSpec::unknown()
        });
        assert!(unchecked.key(&pod, "v100").is_ok());
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
