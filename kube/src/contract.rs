//! The annotations contract between a pod, duet and a device plugin (README, "duet on
//! Kubernetes").
//!
//! A pod says what it is: `duet.io/workload` (a workload the server has registered) or
//! `duet.io/profiles` (its features inline, per device), and optionally `duet.io/objective`,
//! `duet.io/priority` and `duet.io/memory-mib`. duet says where it put it, on the binding itself
//! (the API server merges a binding's annotations into the pod when it binds): `duet.io/gpu`,
//! `duet.io/sharing`, `duet.io/mps-share`, and for information `duet.io/beside` and
//! `duet.io/predicted-speed`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use duet_core::api::{FeatureInput, Features};
use duet_core::dataset::Mode;

/// A registered workload's id.
pub const WORKLOAD: &str = "duet.io/workload";
/// The pod's features inline: a JSON object, device -> features (`solo_throughput` included).
pub const PROFILES: &str = "duet.io/profiles";
/// The least speed (co-located over alone, in (0, 1]) the pod must keep, judged on the p90.
pub const OBJECTIVE: &str = "duet.io/objective";
/// Its weight in the pricing loop, > 0 (default 1).
pub const PRIORITY: &str = "duet.io/priority";
/// Device memory it holds, MiB: a share is offered only where both footprints fit the GPU.
pub const MEMORY: &str = "duet.io/memory-mib";
/// Written by duet: the GPUs of the node it was given, by index (`3`, or `0,1`).
pub const GPU: &str = "duet.io/gpu";
/// Written by duet: `exclusive`, or the duet mode it shares its GPU in (`timeslice`, `mps`,
/// `space`).
pub const SHARING: &str = "duet.io/sharing";
/// Written by duet under MPS: the active-thread percentage to start it with.
pub const MPS_SHARE: &str = "duet.io/mps-share";
/// Written by duet: the pod it shares its GPU with, `namespace/name`.
pub const BESIDE: &str = "duet.io/beside";
/// Written by duet: the speed the model predicted for it where it was placed.
pub const PREDICTED_SPEED: &str = "duet.io/predicted-speed";

/// Every annotation of the contract: what a pod's reader keeps of its annotations (a pod in a
/// scheduler's call is read for these alone).
pub const ANNOTATIONS: [&str; 10] = [
    WORKLOAD,
    PROFILES,
    OBJECTIVE,
    PRIORITY,
    MEMORY,
    GPU,
    SHARING,
    MPS_SHARE,
    BESIDE,
    PREDICTED_SPEED,
];

/// The most GPUs a `duet.io/gpu` annotation may name (more than any node holds).
pub const MAX_GPUS: usize = 64;

/// The most of a pod's annotation text an error quotes, bytes.
pub const QUOTED_BYTES: usize = 200;

/// `text` as an error quotes it: whole up to [`QUOTED_BYTES`], else cut at a character's
/// boundary there, saying how much was left out (an annotation may be as long as the API server
/// takes, and its error is held once per reason and sent back to the scheduler).
pub fn quote(text: &str) -> String {
    duet_core::api::clipped_at(text, QUOTED_BYTES)
}

/// An annotation duet cannot read: the pod is then one duet does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationError {
    pub annotation: &'static str,
    pub message: String,
}

impl fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "annotation {}: {}", self.annotation, self.message)
    }
}

impl std::error::Error for AnnotationError {}

fn bad(annotation: &'static str, message: impl Into<String>) -> AnnotationError {
    AnnotationError {
        annotation,
        message: message.into(),
    }
}

/// What a pod is, to duet.
#[derive(Debug, Clone, PartialEq)]
pub enum Identity {
    /// A workload registered with the server.
    Workload(String),
    /// Its features inline: device -> features.
    Inline(BTreeMap<String, Features>),
    /// Neither annotation: a pod duet does not know.
    Unannotated,
}

/// What a pod asks of duet.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub identity: Identity,
    pub objective: Option<f64>,
    pub priority: f64,
    pub memory_mib: Option<f64>,
}

impl JobSpec {
    /// A pod without duet's annotations (or with ones duet cannot read).
    pub fn unknown() -> JobSpec {
        JobSpec {
            identity: Identity::Unannotated,
            objective: None,
            priority: 1.0,
            memory_mib: None,
        }
    }
}

fn number(
    annotations: &BTreeMap<String, String>,
    name: &'static str,
    valid: impl Fn(f64) -> bool,
    expected: &str,
) -> Result<Option<f64>, AnnotationError> {
    let Some(text) = annotations.get(name) else {
        return Ok(None);
    };
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && valid(v) => Ok(Some(v)),
        _ => Err(bad(name, format!("`{}` is not {expected}", quote(text)))),
    }
}

/// The job a pod's annotations describe; an error names the first annotation duet cannot read.
pub fn job_of(annotations: &BTreeMap<String, String>) -> Result<JobSpec, AnnotationError> {
    let identity = match (annotations.get(WORKLOAD), annotations.get(PROFILES)) {
        (Some(_), Some(_)) => {
            return Err(bad(
                PROFILES,
                format!("give {WORKLOAD} or {PROFILES}, not both"),
            ));
        }
        (Some(id), None) if id.trim().is_empty() => return Err(bad(WORKLOAD, "empty")),
        (Some(id), None) => Identity::Workload(id.trim().to_string()),
        (None, Some(text)) => Identity::Inline(profiles(text)?),
        (None, None) => Identity::Unannotated,
    };
    Ok(JobSpec {
        identity,
        objective: number(
            annotations,
            OBJECTIVE,
            |v| v > 0.0 && v <= 1.0,
            "a speed in (0, 1]",
        )?,
        priority: number(annotations, PRIORITY, |v| v > 0.0, "a weight > 0")?.unwrap_or(1.0),
        memory_mib: number(annotations, MEMORY, |v| v > 0.0, "a size in MiB > 0")?,
    })
}

/// Devices one `duet.io/profiles` may name (the server's `--max-profiles` default).
pub const MAX_PROFILE_DEVICES: usize = 64;

/// Features one device's profile may hold: far more than a model takes, and what a pod holds in
/// the view stays small whatever its annotation says.
pub const MAX_PROFILE_FEATURES: usize = 256;

fn profiles(text: &str) -> Result<BTreeMap<String, Features>, AnnotationError> {
    let profiles: BTreeMap<String, Features> = serde_json::from_str(text).map_err(|e| {
        bad(
            PROFILES,
            format!(
                "not a JSON object of device -> features: {}",
                quote(&e.to_string())
            ),
        )
    })?;
    if profiles.is_empty() {
        return Err(bad(PROFILES, "no device"));
    }
    if profiles.len() > MAX_PROFILE_DEVICES {
        return Err(bad(
            PROFILES,
            format!(
                "{} devices, more than {MAX_PROFILE_DEVICES}",
                profiles.len()
            ),
        ));
    }
    for (device, features) in &profiles {
        if features.len() > MAX_PROFILE_FEATURES {
            return Err(bad(
                PROFILES,
                format!(
                    "device {}: {} features, more than {MAX_PROFILE_FEATURES}",
                    quote(device),
                    features.len()
                ),
            ));
        }
        match features.get("solo_throughput") {
            Some(FeatureInput::Number(v)) if *v > 0.0 => {}
            _ => {
                return Err(bad(
                    PROFILES,
                    format!(
                        "device {}: solo_throughput must be a number > 0",
                        quote(device)
                    ),
                ));
            }
        }
    }
    Ok(profiles)
}

/// Where duet put a pod: the node's GPUs by index and how it shares them.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub gpus: Vec<u32>,
    /// The mode it shares its GPU in; `None`: alone (exclusive).
    pub sharing: Option<Mode>,
    /// Its MPS active-thread percentage, where it was given one.
    pub mps_share: Option<f64>,
}

/// The assignment a bound pod's annotations record; `None` where duet did not place it.
pub fn assignment_of(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Assignment>, AnnotationError> {
    let Some(text) = annotations.get(GPU) else {
        return Ok(None);
    };
    let mut gpus = Vec::new();
    let mut seen = HashSet::new();
    for part in text.split(',') {
        if gpus.len() == MAX_GPUS {
            return Err(bad(
                GPU,
                format!("`{}` names more than {MAX_GPUS} GPUs", quote(text)),
            ));
        }
        let index = part.trim().parse::<u32>().map_err(|_| {
            bad(
                GPU,
                format!("`{}` is not a list of GPU indices", quote(text)),
            )
        })?;
        if !seen.insert(index) {
            return Err(bad(
                GPU,
                format!("`{}` names GPU {index} twice", quote(text)),
            ));
        }
        gpus.push(index);
    }
    let sharing = match annotations.get(SHARING).map(String::as_str) {
        None | Some("exclusive") => None,
        Some(mode) => Some(
            mode.parse::<Mode>()
                .map_err(|e| bad(SHARING, format!("{e} or exclusive")))?,
        ),
    };
    let mps_share = number(
        annotations,
        MPS_SHARE,
        |v| v > 0.0 && v <= 100.0,
        "a percentage in (0, 100]",
    )?;
    Ok(Some(Assignment {
        gpus,
        sharing,
        mps_share,
    }))
}

/// The type of the pod condition in which duet also records where it put a pod: the pod's
/// status, which the API server clears when a pod is created and which the pod's owner cannot
/// write (`pods/status` is a permission of the kubelet and the schedulers, not of a namespace's
/// editors), where its annotations are the owner's to edit. duet writes it before the binding,
/// so no pod it binds is without one; a restarted scheduler believes it over the annotations
/// where it names the node the pod is bound to (`cluster::PodInfo::read`).
pub const RECORD: &str = "duet.io/placement";

/// The record's node key (the others are the annotations' own).
const RECORD_NODE: &str = "node";

/// `assignment` as its annotations write it, `key=value` separated by spaces
/// (`duet.io/gpu=0,1 duet.io/sharing=space`).
pub fn describe(assignment: &Assignment) -> String {
    assignment_annotations(assignment, None, None)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The record's message: the node, then `assignment` as [`describe`] writes it
/// (`node=gpu-a duet.io/gpu=0,1 duet.io/sharing=space`).
pub fn record_message(node: &str, assignment: &Assignment) -> String {
    format!("{RECORD_NODE}={node} {}", describe(assignment))
}

/// The node and assignment a record's message gives; an error where it is not one duet writes
/// (a key it does not know is passed over: a later duet may write more).
pub fn record_assignment(message: &str) -> Result<(String, Assignment), AnnotationError> {
    let not_duet_s = || {
        bad(
            RECORD,
            format!("`{}` is not a record duet writes", quote(message)),
        )
    };
    let mut node = None;
    let mut fields = BTreeMap::new();
    for part in message.split_whitespace() {
        let (key, value) = part.split_once('=').ok_or_else(not_duet_s)?;
        if key == RECORD_NODE {
            if node.replace(value.to_string()).is_some() {
                return Err(not_duet_s());
            }
        } else if [GPU, SHARING, MPS_SHARE].contains(&key)
            && fields.insert(key.to_string(), value.to_string()).is_some()
        {
            return Err(not_duet_s());
        }
    }
    let node = node.filter(|n| !n.is_empty()).ok_or_else(not_duet_s)?;
    let assignment =
        assignment_of(&fields)?.ok_or_else(|| bad(RECORD, "the record names no GPU"))?;
    Ok((node, assignment))
}

/// The annotations that record `assignment` (and, beside a resident, who and how fast).
pub fn assignment_annotations(
    assignment: &Assignment,
    beside: Option<&str>,
    predicted_speed: Option<f64>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let gpus: Vec<String> = assignment.gpus.iter().map(u32::to_string).collect();
    out.insert(GPU.to_string(), gpus.join(","));
    out.insert(
        SHARING.to_string(),
        assignment
            .sharing
            .map_or("exclusive", Mode::as_str)
            .to_string(),
    );
    if let Some(share) = assignment.mps_share {
        out.insert(MPS_SHARE.to_string(), format!("{share}"));
    }
    if let Some(beside) = beside {
        out.insert(BESIDE.to_string(), beside.to_string());
    }
    if let Some(speed) = predicted_speed {
        out.insert(PREDICTED_SPEED.to_string(), format!("{speed:.3}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `duet.io/` annotation this file names is in `ANNOTATIONS` (what a call's pod keeps);
    /// the record's condition type is not an annotation.
    #[test]
    fn every_annotation_of_the_contract_is_listed() {
        let named: Vec<&str> = include_str!("contract.rs")
            .lines()
            .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \"duet.io/"))
            .filter(|l| !l.starts_with("pub const RECORD:"))
            .filter_map(|l| l.split('"').nth(1))
            .collect();
        assert_eq!(named.len(), ANNOTATIONS.len(), "{named:?}");
        assert!(named.iter().all(|n| ANNOTATIONS.contains(n)), "{named:?}");
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn a_pod_says_what_it_is_by_id_or_inline() {
        let job = job_of(&annotations(&[
            (WORKLOAD, "resnet-50-bs64"),
            (OBJECTIVE, "0.8"),
            (PRIORITY, "2"),
            (MEMORY, "12000"),
        ]))
        .expect("valid");
        assert_eq!(job.identity, Identity::Workload("resnet-50-bs64".into()));
        assert_eq!(
            (job.objective, job.priority, job.memory_mib),
            (Some(0.8), 2.0, Some(12000.0))
        );
        let job = job_of(&annotations(&[(
            PROFILES,
            r#"{"v100": {"solo_throughput": 12.5, "model": "ResNet-50", "batch_size": 64}}"#,
        )]))
        .expect("valid");
        let Identity::Inline(profiles) = job.identity else {
            panic!("{job:?}")
        };
        assert_eq!(
            profiles["v100"]["solo_throughput"],
            FeatureInput::Number(12.5)
        );
        assert_eq!(job_of(&BTreeMap::new()), Ok(JobSpec::unknown()));
    }

    /// A profile is held to MAX_PROFILE_DEVICES devices of MAX_PROFILE_FEATURES features, and
    /// a pod that asks for no GPU is not read at all.
    #[test]
    fn a_profile_is_bounded_and_read_only_for_a_gpu_pod() {
        let features = |n: usize| -> String {
            let extra: Vec<String> = (0..n).map(|k| format!(r#""f{k}": 1"#)).collect();
            format!(r#"{{"solo_throughput": 1, {}}}"#, extra.join(","))
        };
        let of = |text: String| job_of(&annotations(&[(PROFILES, text.as_str())]));
        assert!(
            of(format!(
                r#"{{"v100": {}}}"#,
                features(MAX_PROFILE_FEATURES - 1)
            ))
            .is_ok()
        );
        let e =
            of(format!(r#"{{"v100": {}}}"#, features(MAX_PROFILE_FEATURES))).expect_err("too many");
        assert!(e.to_string().contains("257 features, more than 256"), "{e}");
        let devices: Vec<String> = (0..=MAX_PROFILE_DEVICES)
            .map(|k| format!(r#""d{k}": {{"solo_throughput": 1}}"#))
            .collect();
        let e = of(format!("{{{}}}", devices.join(","))).expect_err("too many");
        assert!(e.to_string().contains("65 devices, more than 64"), "{e}");
        let pod = |gpus: &str| -> crate::cluster::PodInfo {
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "uid": "p", "annotations": {PROFILES: "not json"}},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
            }))
            .expect("pod");
            crate::cluster::PodInfo::read(&pod, "nvidia.com/gpu")
        };
        assert!(pod("1").job.is_err());
        assert_eq!(pod("0").job, Ok(JobSpec::unknown()));
    }

    #[test]
    fn an_unreadable_annotation_is_named() {
        for (pairs, named) in [
            (vec![(OBJECTIVE, "1.5")], OBJECTIVE),
            (vec![(OBJECTIVE, "fast")], OBJECTIVE),
            (vec![(PRIORITY, "0")], PRIORITY),
            (vec![(MEMORY, "-1")], MEMORY),
            (vec![(WORKLOAD, " ")], WORKLOAD),
            (vec![(WORKLOAD, "a"), (PROFILES, "{}")], PROFILES),
            (vec![(PROFILES, "[1]")], PROFILES),
            (vec![(PROFILES, r#"{"v100": {"model": "x"}}"#)], PROFILES),
        ] {
            let e = job_of(&annotations(&pairs)).expect_err("must fail");
            assert_eq!(e.annotation, named, "{pairs:?}: {e}");
        }
    }

    #[test]
    fn an_assignment_reads_back_what_duet_wrote() {
        let assignment = Assignment {
            gpus: vec![3],
            sharing: Some(Mode::Mps),
            mps_share: Some(50.0),
        };
        let written = assignment_annotations(&assignment, Some("ns/resident"), Some(0.8123));
        assert_eq!(written[GPU], "3");
        assert_eq!(written[SHARING], "mps");
        assert_eq!(written[PREDICTED_SPEED], "0.812");
        assert_eq!(assignment_of(&written), Ok(Some(assignment)));
        let whole = Assignment {
            gpus: vec![0, 1],
            sharing: None,
            mps_share: None,
        };
        assert_eq!(
            assignment_of(&assignment_annotations(&whole, None, None)),
            Ok(Some(whole))
        );
        assert_eq!(assignment_of(&BTreeMap::new()), Ok(None));
        for bad in ["x", "1,1", "-1"] {
            let e = assignment_of(&annotations(&[(GPU, bad)])).expect_err("must fail");
            assert_eq!(e.annotation, GPU);
        }
        let e =
            assignment_of(&annotations(&[(GPU, "0"), (SHARING, "shared")])).expect_err("must fail");
        assert_eq!(e.annotation, SHARING);
    }

    #[test]
    fn a_record_reads_back_what_duet_wrote_and_nothing_else() {
        for assignment in [
            Assignment {
                gpus: vec![0, 3],
                sharing: None,
                mps_share: None,
            },
            Assignment {
                gpus: vec![1],
                sharing: Some(Mode::Mps),
                mps_share: Some(37.5),
            },
        ] {
            let message = record_message("gpu-a", &assignment);
            assert_eq!(
                record_assignment(&message),
                Ok(("gpu-a".to_string(), assignment)),
                "{message}"
            );
        }
        assert_eq!(
            record_message(
                "gpu-b",
                &Assignment {
                    gpus: vec![2],
                    sharing: Some(Mode::Space),
                    mps_share: None,
                }
            ),
            "node=gpu-b duet.io/gpu=2 duet.io/sharing=space"
        );
        for bad in [
            "",
            "node=n duet.io/sharing=space",
            "duet.io/gpu=0",
            "node= duet.io/gpu=0",
            "node=a node=b duet.io/gpu=0",
            "node=n duet.io/gpu=0 duet.io/gpu=1",
            "gpu 0",
            "node=n duet.io/gpu=zero",
        ] {
            let e = record_assignment(bad).expect_err(bad);
            assert!([RECORD, GPU].contains(&e.annotation), "{bad}: {e}");
        }
        // A key it does not know (a later duet's) is passed over.
        assert_eq!(
            record_assignment("node=n duet.io/gpu=1 duet.io/later=x").map(|(_, a)| a.gpus),
            Ok(vec![1])
        );
    }

    #[test]
    fn a_long_gpu_list_is_refused_quickly_and_quoted_short() {
        let list = |n: usize| (0..n).map(|g| g.to_string()).collect::<Vec<_>>().join(",");
        let most = assignment_of(&annotations(&[(GPU, &list(MAX_GPUS))])).expect("valid");
        assert_eq!(most.map(|a| a.gpus.len()), Some(MAX_GPUS));
        // 100,000 distinct indices: refused at the 65th, the text quoted clipped.
        let e = assignment_of(&annotations(&[(GPU, &list(100_000))])).expect_err("too many");
        assert_eq!(e.annotation, GPU);
        assert!(e.message.contains("more than 64 GPUs"), "{e}");
        assert!(e.to_string().len() < 400, "{e}");
        // A duplicate far down a list within the cap is still found.
        let twice = format!("{},5", list(MAX_GPUS - 1));
        let e = assignment_of(&annotations(&[(GPU, &twice)])).expect_err("twice");
        assert!(e.message.contains("names GPU 5 twice"), "{e}");
    }

    #[test]
    fn an_error_quotes_a_long_annotation_clipped() {
        let long = "9".repeat(100 << 10);
        let e = job_of(&annotations(&[(OBJECTIVE, &long)])).expect_err("not a speed");
        assert_eq!(e.annotation, OBJECTIVE);
        assert!(e.message.len() < 400, "{} bytes", e.message.len());
        assert!(e.message.contains("bytes more"), "{}", e.message);
        assert!(
            e.message.ends_with("is not a speed in (0, 1]"),
            "{}",
            e.message
        );
        // A character is never cut.
        assert!(quote(&"é".repeat(300)).starts_with(&"é".repeat(100)));
    }
}
