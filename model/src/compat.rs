//! Whether a model can replace the one serving: every request the serving model answers must
//! stay one the new model answers. Clients send the serving model's features (its inputs
//! required, numbers and text where it reads them), on its devices, in its modes; a new model
//! that requires another feature, reads one as another kind, does not know a feature clients
//! send, or drops a device or a mode would answer them 422 (or, for a device, fall back to its
//! unknown-device slot). `duet model check` reports these before a rollout moves `current`.

use crate::artifact::ModelMeta;
use crate::encoding::{FeatureSpec, SOLO_THROUGHPUT};

/// The features a model requires of every job, `solo_throughput` first.
pub fn feature_names(spec: &FeatureSpec) -> Vec<String> {
    feature_name_refs(spec).map(str::to_string).collect()
}

/// [`feature_names`] without copying them.
pub fn feature_name_refs(spec: &FeatureSpec) -> impl Iterator<Item = &str> {
    std::iter::once(SOLO_THROUGHPUT)
        .chain(
            spec.numeric
                .iter()
                .map(|f| f.name.as_str())
                .filter(|n| *n != SOLO_THROUGHPUT),
        )
        .chain(spec.categorical.iter().map(|f| f.name.as_str()))
}

/// The feature names a client may send: the model's inputs, and dataset columns the trainer
/// found no signal in (accepted, unused).
pub fn knows_feature(spec: &FeatureSpec, name: &str) -> bool {
    Accepted::of(spec).role(name).is_some()
}

/// How a model reads a feature name a client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// A required number (`solo_throughput` and the numeric inputs).
    Numeric,
    /// A required category.
    Categorical,
    /// A dataset column the trainer found no signal in: accepted, unused.
    Unused,
}

/// Every feature name a client may send with its [`Role`] (the one place that says which),
/// sorted by name as a job's feature map is, so that a job's features are checked in one pass
/// over both.
#[derive(Debug, Clone, Default)]
pub struct Accepted {
    names: Vec<(String, Role)>,
    /// How many of them are required (numeric or categorical).
    required: usize,
}

impl Accepted {
    pub fn of(spec: &FeatureSpec) -> Accepted {
        let mut names: Vec<(String, Role)> = std::iter::once((SOLO_THROUGHPUT, Role::Numeric))
            .chain(
                spec.numeric
                    .iter()
                    .map(|f| (f.name.as_str(), Role::Numeric)),
            )
            .chain(
                spec.categorical
                    .iter()
                    .map(|f| (f.name.as_str(), Role::Categorical)),
            )
            .chain(
                spec.dropped
                    .iter()
                    .filter_map(|d| d.split(':').next())
                    .map(|n| (n, Role::Unused)),
            )
            .map(|(n, r)| (n.to_string(), r))
            .collect();
        // A name listed twice keeps its first role in the order numeric, categorical, unused.
        names.sort();
        names.dedup_by(|later, first| later.0 == first.0);
        let required = names.iter().filter(|(_, r)| *r != Role::Unused).count();
        Accepted { names, required }
    }

    /// How many names it accepts.
    pub fn count(&self) -> usize {
        self.names.len()
    }

    /// The roles of `names`, which come in ascending order each once (a feature map's keys):
    /// `None` for a name the model does not accept. Walks both lists once.
    pub fn roles<'a, I>(&'a self, names: I) -> impl Iterator<Item = (&'a str, Option<Role>)> + 'a
    where
        I: IntoIterator<Item = &'a str>,
        I::IntoIter: 'a,
    {
        let mut at = 0;
        names.into_iter().map(move |name| {
            while self.names.get(at).is_some_and(|(n, _)| n.as_str() < name) {
                at += 1;
            }
            let role = self
                .names
                .get(at)
                .filter(|(n, _)| n == name)
                .map(|(_, r)| *r);
            (name, role)
        })
    }

    /// The role of one name; `None` for a name the model does not accept.
    pub fn role(&self, name: &str) -> Option<Role> {
        self.names
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|at| self.names[at].1)
    }

    /// How many names are required (numeric or categorical).
    pub fn required(&self) -> usize {
        self.required
    }
}

/// `numeric`, `categorical`, or `None` for a feature the model accepts unused (or not at all).
fn kind(accepted: &Accepted, name: &str) -> Option<&'static str> {
    match accepted.role(name)? {
        Role::Numeric => Some("numeric"),
        Role::Categorical => Some("categorical"),
        Role::Unused => None,
    }
}

/// What keeps `new` from replacing `serving`, one sentence each; empty when nothing does.
pub fn replacement_problems(new: &ModelMeta, serving: &ModelMeta) -> Vec<String> {
    let (n, s) = (&new.spec, &serving.spec);
    let mut problems = Vec::new();
    for gpu in &s.gpus {
        if !n.gpus.contains(gpu) {
            problems.push(format!(
                "device `{gpu}`: the serving model was trained on it, this one never saw it \
                 (its predictions there would come from the unknown-device slot)"
            ));
        }
    }
    for mode in &s.modes {
        if !n.modes.contains(mode) {
            problems.push(format!(
                "mode `{mode}`: the serving model predicts it, this one would refuse it"
            ));
        }
    }
    let sent = feature_names(s);
    for name in feature_names(n) {
        if !sent.contains(&name) {
            problems.push(format!(
                "feature `{name}`: this model requires it of every job, and clients of the \
                 serving model do not send it (registered workloads lack it)"
            ));
        }
    }
    let (accepted_new, accepted_serving) = (Accepted::of(n), Accepted::of(s));
    for name in &sent {
        if accepted_new.role(name).is_none() {
            problems.push(format!(
                "feature `{name}`: clients of the serving model send it, and this model does \
                 not know it (it would refuse them)"
            ));
        } else if let (Some(was), Some(is)) =
            (kind(&accepted_serving, name), kind(&accepted_new, name))
            && was != is
        {
            problems.push(format!(
                "feature `{name}`: {was} for the serving model, {is} for this one"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{CategoricalFeature, NumericFeature};
    use duet_core::dataset::Mode;

    fn spec() -> FeatureSpec {
        FeatureSpec {
            numeric: vec![NumericFeature {
                name: "batch_size".into(),
                log: false,
                mean: 1.0,
                std: 1.0,
                lo: None,
                hi: None,
            }],
            categorical: vec![CategoricalFeature {
                name: "model".into(),
                vocabulary: vec!["a".into()],
            }],
            identities: Vec::new(),
            gpus: vec!["k80".into(), "v100".into()],
            modes: vec![Mode::Space],
            dropped: vec!["flops: constant".into()],
            measured: Vec::new(),
            measured_by_device: std::collections::BTreeMap::new(),
            family: None,
            groups: false,
        }
    }

    #[test]
    fn a_spec_replaces_itself() {
        assert!(feature_names(&spec()).contains(&"solo_throughput".to_string()));
        assert!(knows_feature(&spec(), "flops"));
        let accepted = Accepted::of(&spec());
        let asked = [
            "batch_size",
            "flops",
            "memory",
            "model",
            "solo_throughput",
            "zeta",
        ];
        let roles: Vec<_> = accepted.roles(asked).collect();
        for (name, role) in &roles {
            assert_eq!(*role, accepted.role(name), "{name}");
        }
        assert_eq!(roles[0].1, Some(Role::Numeric));
        assert_eq!(roles[1].1, Some(Role::Unused));
        assert_eq!(roles[3].1, Some(Role::Categorical));
        assert_eq!(roles[4].1, Some(Role::Numeric));
        assert_eq!(accepted.required(), feature_names(&spec()).len());
        assert!(!knows_feature(&spec(), "memory"));
        let meta = |spec: FeatureSpec| {
            let mut m: ModelMeta = serde_json::from_str(
                &std::fs::read_to_string(
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../models/default/model.json"),
                )
                .expect("the shipped model.json"),
            )
            .expect("parses");
            m.spec = spec;
            m
        };
        assert!(replacement_problems(&meta(spec()), &meta(spec())).is_empty());
        let mut fewer = spec();
        fewer.gpus.retain(|g| g != "v100");
        fewer.numeric.clear();
        fewer.categorical.push(CategoricalFeature {
            name: "framework".into(),
            vocabulary: Vec::new(),
        });
        let problems = replacement_problems(&meta(fewer), &meta(spec()));
        let text = problems.join("\n");
        assert_eq!(problems.len(), 3, "{text}");
        assert!(text.contains("device `v100`"), "{text}");
        assert!(
            text.contains("feature `framework`: this model requires"),
            "{text}"
        );
        assert!(text.contains("feature `batch_size`: clients"), "{text}");
        let mut recast = spec();
        recast.numeric.clear();
        recast.categorical.push(CategoricalFeature {
            name: "batch_size".into(),
            vocabulary: Vec::new(),
        });
        let problems = replacement_problems(&meta(recast), &meta(spec()));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("numeric for the serving model, categorical")),
            "{problems:?}"
        );
    }
}
