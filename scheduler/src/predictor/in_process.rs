//! duet's model in this process (`duet simulate`, `duet schedule`, the extender with the model
//! in process): the server's own engine, registry and encoder, without HTTP.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use duet_core::api::{JobRef, WorkloadBody};
use duet_model::{EngineKind, LoadedModel, Registry, group, predict};

use super::{
    GroupOutlook, GroupQuery, InlineJobs, Outlook, Predictor, Query, distinct_pairs, outlooks,
    request,
};

/// duet's model loaded in this process: the server's own engine and registry, without HTTP.
#[derive(Debug)]
pub struct ModelPredictor {
    pub(super) model: LoadedModel,
    pub(super) registry: Registry,
}

impl ModelPredictor {
    pub fn load(dir: &Path, engine: EngineKind) -> Result<ModelPredictor> {
        ModelPredictor::load_with(dir, engine, &BTreeMap::new())
    }

    /// The model in `dir` with `workloads` registered over its datasets' (as clients register
    /// them with the server).
    pub fn load_with(
        dir: &Path,
        engine: EngineKind,
        workloads: &BTreeMap<String, Option<WorkloadBody>>,
    ) -> Result<ModelPredictor> {
        let model = LoadedModel::load(dir, engine).map_err(|e| anyhow!("{e}"))?;
        let (registry, _warnings) = Registry::build(&model, workloads.clone());
        Ok(ModelPredictor { model, registry })
    }
}

impl Predictor for ModelPredictor {
    fn describe(&self) -> String {
        format!(
            "duet model {} in process ({}, {} engine)",
            self.model.version(),
            self.model.dir.display(),
            self.model.engine.kind().as_str()
        )
    }

    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let request = request(gpu, queries, &InlineJobs::new());
        let predictions = predict::predict(&self.model, &self.registry, &request, None)
            .map_err(|e| anyhow!("model {}: {e}", self.model.dir.display()))?;
        Ok(outlooks(&predictions))
    }

    /// Groups as the server answers them: those of a size the model's network learned by the
    /// network (`duet_model::predict::predict_network_groups`), the others from the model's
    /// pairs (each distinct pair predicted once) composed by `duet_model::group::compose`, each
    /// job moved by its group effect and the p90 shifted by the model's calibration for the
    /// group's size.
    fn predict_groups(
        &mut self,
        gpu: &str,
        groups: &[GroupQuery<'_>],
    ) -> Result<Vec<GroupOutlook>> {
        let calibration = &self.model.meta.calibration;
        let learned = |g: &GroupQuery<'_>| calibration.network_answers(g.jobs.len());
        if !groups.iter().any(learned) {
            return self.composed_groups(gpu, groups);
        }
        let asked: Vec<duet_core::api::GroupQuery> = groups
            .iter()
            .filter(|g| learned(g))
            .map(|g| duet_core::api::GroupQuery {
                jobs: g.jobs.iter().map(|&id| JobRef::workload(id)).collect(),
                mode: g.mode,
                shares: g.shares.clone(),
                gpu: Some(gpu.to_string()),
            })
            .collect();
        let refs: Vec<&duet_core::api::GroupQuery> = asked.iter().collect();
        let mut answered = predict::predict_network_groups(
            &self.model,
            &self.registry,
            &refs,
            Some(gpu),
            &|k| format!("groups[{k}]."),
            false,
        )
        .map_err(|e| anyhow!("model {}: {e}", self.model.dir.display()))?
        .into_iter()
        .map(|p| GroupOutlook::of(&p));
        let rest: Vec<GroupQuery<'_>> = groups.iter().filter(|g| !learned(g)).cloned().collect();
        let mut composed = self.composed_groups(gpu, &rest)?.into_iter();
        groups
            .iter()
            .map(|g| {
                if learned(g) {
                    answered.next()
                } else {
                    composed.next()
                }
                .ok_or_else(|| anyhow!("a group of {} jobs: no answer", g.jobs.len()))
            })
            .collect()
    }
}

impl ModelPredictor {
    /// Groups answered from the model's pairs, composed as the server composes them.
    fn composed_groups(&self, gpu: &str, groups: &[GroupQuery<'_>]) -> Result<Vec<GroupOutlook>> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let (queries, asked) = distinct_pairs(groups);
        if queries.is_empty() {
            return Ok(groups
                .iter()
                .map(|g| GroupOutlook::infeasible(g.jobs.len()))
                .collect());
        }
        let request = request(gpu, &queries, &InlineJobs::new());
        let predictions = predict::predict(&self.model, &self.registry, &request, None)
            .map_err(|e| anyhow!("model {}: {e}", self.model.dir.display()))?;
        let calibration = &self.model.meta.calibration;
        let (mut pairs, mut effects) = (Vec::new(), Vec::new());
        groups
            .iter()
            .zip(asked)
            .map(|(g, own)| {
                let size = g.jobs.len();
                pairs.clear();
                pairs.extend(own.iter().map(|&k| predictions[k]));
                effects.clear();
                if let Some(of_size) = calibration.group_effects_of(size) {
                    effects.extend(g.jobs.iter().map(|id| of_size.of(gpu, id)));
                }
                group::compose(size, &pairs, calibration.group_shift(size), &effects)
                    .map(|p| GroupOutlook::of(&p))
                    .ok_or_else(|| anyhow!("a group of {size} jobs: not composed from its pairs"))
            })
            .collect()
    }
}
