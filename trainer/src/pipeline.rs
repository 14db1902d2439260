//! `duet train` end to end: read datasets, evaluate on every split, fit the final model, write
//! the artifact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use duet_core::dataset::{Dataset, DatasetError};
use duet_core::progress::{Event, Lines, Progress};

use crate::corpus::Corpus;
use crate::eval::{
    OutOfFold, Split, check_group_by, evaluate_splits, family_feature, split_definitions,
};
use duet_model::accuracy::mean_and_sd;
use duet_model::artifact::{
    self, ArtifactError, EvaluationInfo, FORMAT, ModelMeta, TrainingData, fingerprint, fnv1a,
};
use duet_model::network::TrainConfig;

use crate::report;
use crate::training::TrainError;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub data: Vec<PathBuf>,
    pub out: PathBuf,
    pub name: String,
    pub config: TrainConfig,
    /// Seeds of the evaluation (each: its own folds and initial weights); metrics are their
    /// mean and standard deviation. Empty: `config.seed` alone. The shipped
    /// networks are trained with the first.
    pub seeds: Vec<u64>,
    /// Date for `model.json`, YYYY-MM-DD.
    pub created: String,
    /// Fit only what the shipped model needs (feature spec, ensemble, p90 calibrations): no
    /// cross-validation and no baselines, for scheduled retraining. `model.json` then has no
    /// metrics and its `evaluation` says so.
    pub final_only: bool,
    /// The command line to record in `model.json` (`command`), if a command trained it.
    pub command: Option<String>,
    /// A categorical workload feature (`--group-by`, for example `model`): the evaluation adds
    /// the `unseen_<feature>` split, every workload with one value of it held out together.
    pub group_by: Option<String>,
    /// The categorical workload feature naming a model family (`--family`; `none`: no family);
    /// absent: `model` where every dataset declares it. Its leave-one-family-out folds
    /// calibrate the new-family p90.
    pub family: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error("{0}")]
    Data(String),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
}

/// What happened, for the command to print.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub meta: ModelMeta,
    pub warnings: Vec<String>,
}

fn check_usable(dir: &Path, d: &Dataset) -> Result<(), PipelineError> {
    let problem = if d.pairs.is_empty() {
        Some("has no pairs: nothing to learn from")
    } else if d.workloads.len() < 2 {
        Some("has a single workload: at least two are needed to learn interference")
    } else if !d.pairs.iter().any(|p| p.status == duet_core::Status::Ok) {
        Some("has no feasible pair (every pair is oom, crash or timeout): no speed to learn")
    } else {
        None
    };
    match problem {
        Some(p) => Err(PipelineError::Data(format!(
            "{}: dataset {p}",
            dir.display()
        ))),
        None => Ok(()),
    }
}

/// Reads and checks the datasets of `paths`; one named twice (the same folder, by any path, or
/// a copy of its files) is refused, as its rows would count twice.
pub fn load(paths: &[PathBuf]) -> Result<(Vec<Dataset>, Vec<TrainingData>), PipelineError> {
    if paths.is_empty() {
        return Err(PipelineError::Data(
            "--data: name at least one dataset".into(),
        ));
    }
    // The same files in another folder (a copy) count twice as surely as the same folder: a
    // row on both sides of a fold made the `random` split's error a third of the truth.
    if let Some((later, first, copied)) = artifact::given_twice(paths) {
        return Err(PipelineError::Data(format!(
            "--data {}: the same dataset as --data {}{}, given twice (its rows would count \
             twice)",
            paths[later].display(),
            paths[first].display(),
            if copied {
                " (the same files, copied)"
            } else {
                ""
            }
        )));
    }
    let mut datasets = Vec::new();
    let mut data = Vec::new();
    for dir in paths {
        let d = Dataset::read(dir)?;
        check_usable(dir, &d)?;
        data.push(TrainingData {
            name: d.meta.name.clone(),
            path: dir.display().to_string(),
            gpu: d.meta.provenance.gpu.clone(),
            fingerprint: fingerprint(dir)
                .map_err(|e| PipelineError::Data(format!("{}: {e}", dir.display())))?,
            workloads: d.workloads.len(),
            pairs: d.pairs.len(),
        });
        datasets.push(d);
    }
    Ok((datasets, data))
}

/// What `model.json`'s metrics are, in its `evaluation.protocol`.
pub const PROTOCOL: &str = "cross-validated: every metric is scored on held-out test rows of \
per-fold refits (spec and ensemble fitted on the fold's training rows only), never on the \
shipped networks, which are trained on every row with the first seed; the p90 is calibrated \
cross-conformally: a fold's test rows are shifted by the conformal quantile of the other folds' \
held-out scores (known pairs: the unseen-pairs folds; new workloads: the leave-one-workload-out \
folds; new families: the leave-one-family-out folds; scores sharing the test fold's setting, \
pair, workload or family left out), the shipped model by that of all of them, over every seed; \
with several seeds, `metrics` is the mean over seeds and `metrics_sd` the sample standard \
deviation";

/// `evaluation.protocol` of a model trained with `--final-only`.
pub const FINAL_ONLY_PROTOCOL: &str = "final-only: no cross-validated evaluation was run, so \
this file holds no accuracy figures; the spec and the ensemble were fitted exactly as in a full \
run (the same networks), and both p90 calibrations split-conformally, on rows held out of a \
second fit (a full run calibrates on the evaluation's out-of-fold scores instead, many more \
rows); score the model with `duet evaluate` on data it did not train on, or judge the procedure \
by a full `duet train` on the same data";

/// Refuses an `--out` the model could not be written to once trained: one whose parent folder
/// does not exist (or is not a folder), one that exists, or one nothing can be written beside.
fn check_out(out: &Path) -> Result<(), PipelineError> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        let why = if parent.exists() {
            "is not a folder"
        } else {
            "does not exist; create it first"
        };
        return Err(PipelineError::Data(format!(
            "--out {}: its parent {} {why}",
            out.display(),
            parent.display()
        )));
    }
    duet_core::atomic::refuse_existing(out, |p, m| {
        PipelineError::Data(format!("{}: {m}", p.display()))
    })
}

/// Trains, evaluates and writes the artifact. `progress` hears one line per step.
pub fn run(
    options: &TrainOptions,
    progress: impl FnMut(&str),
) -> Result<TrainSummary, PipelineError> {
    run_with(options, &mut Lines(progress))
}

/// [`run`], telling `progress` also how many of the plan's ensemble members are fitted (each
/// fold's and the final model's), for a bar with the time left.
pub fn run_with(
    options: &TrainOptions,
    progress: &mut dyn Progress,
) -> Result<TrainSummary, PipelineError> {
    check_out(&options.out)?;
    let (datasets, data) = load(&options.data)?;
    let corpus_groups: usize = datasets.iter().map(|d| d.groups.len()).sum();
    let mut corpus = Corpus::new(datasets);
    let mut warnings = Vec::new();
    progress.line(&format!(
        "{} directed rows from {} dataset(s)",
        corpus.examples.len(),
        data.len()
    ));
    if let Some(feature) = &options.group_by {
        check_group_by(&corpus, feature).map_err(PipelineError::Data)?;
    }
    corpus.family =
        family_feature(&corpus, options.family.as_deref()).map_err(PipelineError::Data)?;
    match &corpus.family {
        Some(f) => progress.line(&format!(
            "model family: the workload feature `{f}` (its leave-one-value-out folds calibrate \
             the new-family p90)"
        )),
        None => {
            progress.line("model family: none (a new workload's family is not told apart)");
        }
    }
    let splits = crate::eval::splits(
        options.group_by.as_deref(),
        (!options.final_only)
            .then_some(corpus.family.as_deref())
            .flatten(),
    );
    let seeds = if options.seeds.is_empty() {
        vec![options.config.seed]
    } else {
        options.seeds.clone()
    };
    // The plan, in ensemble members: every fold's and the final model's (`--final-only`
    // fits one per calibration fold and the refit).
    let members = options.config.ensemble.max(1) as u64;
    let folds: u64 = if options.final_only {
        0
    } else {
        seeds
            .iter()
            .flat_map(|&seed| splits.iter().map(move |&split| (split, seed)))
            .map(|(split, seed)| crate::eval::folds(split, &corpus, seed).len() as u64)
            .sum()
    };
    let final_ensembles = if options.final_only {
        let all: Vec<usize> = (0..corpus.examples.len()).collect();
        let folds = corpus.calibration_folds(
            &all,
            options.config.seed,
            crate::final_fit::CALIBRATION_FOLDS,
        );
        folds.len().max(1) as u64 + 1
    } else {
        1
    };
    let total = folds * members + final_ensembles * members;
    progress.event(Event::Start {
        stage: "train",
        total,
        unit: "members",
    });
    let mut fitted = 0;
    let mut evaluations = Vec::with_capacity(seeds.len());
    if options.final_only {
        progress.line("final only: no cross-validation, no baselines");
    } else {
        for &seed in &seeds {
            let config = TrainConfig {
                seed,
                ..options.config.clone()
            };
            evaluations.push(evaluate_splits(
                &corpus,
                &config,
                &splits,
                |split: Split, done, of| {
                    let line =
                        format!("seed {seed}: evaluated {} fold {done}/{of}", split.as_str());
                    progress.line(&line);
                    fitted += members;
                    progress.event(Event::Step {
                        done: fitted,
                        now: &line,
                    });
                },
            )?);
        }
    }
    let tables: Vec<_> = evaluations.iter().map(|e| e.table.clone()).collect();
    let (metrics, metrics_sd) = if options.final_only {
        (Vec::new(), Vec::new())
    } else {
        mean_and_sd(&tables).ok_or_else(|| {
            PipelineError::Data("the seeds' evaluations scored different groups of rows".into())
        })?
    };
    let final_config = TrainConfig {
        seed: seeds[0],
        ..options.config.clone()
    };
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let started = std::time::Instant::now();
    progress.event(Event::Step {
        done: fitted,
        now: "final model",
    });
    let trained = if options.final_only {
        let trained = corpus.train_on(&all, &final_config, workers)?;
        progress.line(&format!(
            "final model: {final_ensembles} ensembles of {} members (one per calibration fold, \
             each scoring the rows it did not see, then the refit on every row) on {} thread(s) \
             in {:.1} s",
            final_config.ensemble.max(1),
            workers.min(
                usize::try_from(final_ensembles).unwrap_or(usize::MAX)
                    * final_config.ensemble.max(1)
            ),
            started.elapsed().as_secs_f64()
        ));
        trained
    } else {
        let mut trained = corpus.fit(&all, &final_config, workers)?;
        let scores: Vec<&OutOfFold> = evaluations.iter().map(|e| &e.out_of_fold).collect();
        trained.calibration = OutOfFold::pooled(&corpus, &scores);
        let candidates: Vec<_> = evaluations
            .iter()
            .flat_map(|e| e.family_candidates.iter().cloned())
            .collect();
        for (seed, e) in seeds.iter().zip(&evaluations) {
            for (family, w) in &e.family_weights {
                let devices: Vec<String> = w
                    .by_device
                    .iter()
                    .map(|(gpu, (weight, _))| format!("{gpu} {weight:.1}"))
                    .collect();
                let weights = if devices.is_empty() {
                    format!(
                        "{:.1}, every device together (none had {} rows of its own)",
                        w.pooled.0,
                        duet_model::prior::MIN_WEIGHT_ROWS
                    )
                } else {
                    format!(
                        "{} (every device together {:.1})",
                        devices.join(", "),
                        w.pooled.0
                    )
                };
                progress.line(&format!(
                    "seed {seed}: new family {family} scored with the network's weight \
                     {weights}, chosen on the other families' {} rows",
                    w.pooled.1
                ));
            }
        }
        let probed: Vec<_> = evaluations
            .iter()
            .flat_map(|e| e.probed_candidates.iter().cloned())
            .collect();
        if !candidates.is_empty() || !probed.is_empty() {
            let mut prior = corpus.family_prior(&all, &trained.spec);
            prior.weigh(&candidates);
            prior.weigh_probed(&probed);
            for (gpu, d) in &prior.devices {
                let profile = d.profile.as_ref().map_or_else(
                    || "none (the families held out did not agree a fit does better)".to_string(),
                    |p| format!("a ridge of penalty {} a workload", p.penalty),
                );
                progress.line(&format!(
                    "final model on {gpu}: the network's weight beside the effects prior {:.1} \
                     for a new family (chosen on {} held-out rows), {:.1} for a probed job \
                     (chosen on {}); a new job's effects from its profile: {profile}",
                    d.weight, d.chosen_on, d.probed_weight, d.probed_chosen_on
                ));
            }
            trained.calibration.family_prior = Some(prior);
        }
        progress.line(&format!(
            "final model: an ensemble of {} members on every row on {} thread(s) in {:.1} s, \
             its p90 calibrated on the evaluation's out-of-fold scores",
            final_config.ensemble.max(1),
            workers.min(final_config.ensemble.max(1)),
            started.elapsed().as_secs_f64()
        ));
        trained
    };
    let mut trained = trained;
    let composed = crate::groups::calibrate(&corpus, &trained, final_config.seed);
    let started = std::time::Instant::now();
    let (network, network_sizes) =
        crate::groups::network(&corpus, &trained, &composed, &final_config, workers)?;
    if !network_sizes.is_empty() {
        progress.line(&format!(
            "final model: the network that learns groups, {} ensembles of {} members (one per \
             fold of whole groups{}) in {:.1} s",
            crate::groups::FOLDS + usize::from(network.is_some()),
            final_config.ensemble.max(1),
            if network.is_some() {
                ", then the refit on every group"
            } else {
                ""
            },
            started.elapsed().as_secs_f64()
        ));
    }
    let composed = match network {
        // The network that learns groups answers the sizes where it won; the pairs keep the
        // evaluation's calibration, and every other size is composed from its pairs.
        Some(mut learned) => {
            learned.calibration = std::mem::take(&mut trained.calibration);
            trained = learned;
            crate::groups::calibrate(&corpus, &trained, final_config.seed)
        }
        None => composed,
    };
    for s in &network_sizes {
        progress.line(&format!(
            "final model, groups of {}: the network that learns groups {:.2}% MAPE on groups it \
             was not trained on ({}-fold), the composition {:.2}%: {}",
            s.size,
            s.mape_network * 100.0,
            crate::groups::FOLDS,
            s.mape_composed * 100.0,
            if s.chosen {
                format!(
                    "the network answers them, its p90 shift {:+.4} (covers {:.1}% in the \
                     {}-fold)",
                    s.offset.shift,
                    s.coverage * 100.0,
                    crate::groups::FOLDS
                )
            } else if s.groups < crate::groups::MIN_NETWORK_GROUPS
                && final_config.group_network != duet_model::network::GroupNetwork::Always
            {
                format!(
                    "composed ({} measured groups, fewer than the {} the network's p90 needs)",
                    s.groups,
                    crate::groups::MIN_NETWORK_GROUPS
                )
            } else {
                "composed".to_string()
            }
        ));
    }
    for fit in composed {
        if network_sizes.iter().any(|s| s.chosen && s.size == fit.size) {
            continue;
        }
        progress.line(&format!(
            "final model, groups of {}: p90 shift {:+.4} from {} jobs of {} measured groups \
             (covers {:.1}% in {}-fold over the groups; {:.1}% composed alone); composed \
             speed MAPE {:.2}%{}",
            fit.size,
            fit.offset.shift,
            fit.offset.rows,
            fit.offset.groups,
            fit.coverage * 100.0,
            crate::groups::FOLDS,
            fit.coverage_composed * 100.0,
            fit.mape_speed * 100.0,
            fit.offset
                .fallback
                .as_ref()
                .map_or(String::new(), |f| format!("; {f}"))
        ));
        progress.line(&match &fit.effects {
            Some(e) => format!(
                "final model, groups of {}: each workload's group effect (penalty {} jobs) \
                 takes the composed speed's MAPE to {:.2}% on groups it was not fitted on",
                fit.size,
                e.penalty,
                fit.mape_corrected * 100.0
            ),
            None => format!(
                "final model, groups of {}: no group effects (none lowered the composed speed's \
                 MAPE on groups they were not fitted on)",
                fit.size
            ),
        });
        if let Some(e) = &fit.effects {
            trained
                .calibration
                .group_effects
                .insert(fit.size.to_string(), e.clone());
        }
        if let Some(f) = &fit.offset.fallback {
            warnings.push(format!("groups of {}: p90 calibration: {f}", fit.size));
            continue;
        }
        trained
            .calibration
            .groups
            .insert(fit.size.to_string(), fit.offset);
    }
    for s in network_sizes.iter().filter(|s| s.chosen) {
        trained
            .calibration
            .groups
            .insert(s.size.to_string(), s.offset.clone());
        trained.calibration.group_network.insert(s.size.to_string());
    }
    progress.event(Event::Step {
        done: total,
        now: "final model",
    });
    progress.event(Event::Finish);
    for (kind, o) in [
        ("known", &trained.calibration.known),
        ("new", &trained.calibration.new),
        ("new-family", &trained.calibration.new_family),
    ] {
        if o.is_empty() {
            continue;
        }
        progress.line(&format!(
            "final model, {kind}-workload calibration: shift {:+.4} from {} rows ({} groups){}",
            o.shift,
            o.rows,
            o.groups,
            o.fallback
                .as_ref()
                .map_or(String::new(), |f| format!("; {f}"))
        ));
        if let Some(f) = &o.fallback {
            warnings.push(format!("{kind}-workload p90 calibration: {f}"));
        }
    }
    for (k, o) in trained.outcomes.iter().enumerate() {
        progress.line(&format!(
            "final model, member {k}: {} epochs, best {}",
            o.epochs, o.best_epoch
        ));
    }
    warnings.extend(
        trained
            .spec
            .dropped
            .iter()
            .map(|d| format!("feature left out: {d}")),
    );
    if corpus_groups > 0 && trained.calibration.group_network.is_empty() {
        warnings.push(format!(
            "{corpus_groups} groups of three or more jobs are not training rows: the model learns from \
             pairs and answers a group by composing them; the groups calibrate its p90 per group \
             size (`duet evaluate` on other groups scores how well)"
        ));
    }
    warnings.extend(duet_model::accuracy::fit_problems(&metrics));
    if trained.spec.numeric.len() + trained.spec.categorical.len() <= 1 {
        warnings.push(
            "only solo throughput describes the jobs; expect weak unseen-workload accuracy".into(),
        );
    }
    // The version names the model, so it covers everything that makes one: configuration and
    // data, and what training made of them (each member's outcome, the p90 shifts), which also
    // differ between a full run and `--final-only`, or between machines whose floating point
    // differs.
    let config_json = serde_json::to_string(&final_config).unwrap_or_default();
    let mut hash = fnv1a(config_json.as_bytes(), artifact::FNV_OFFSET);
    for d in &data {
        hash = fnv1a(d.fingerprint.as_bytes(), hash);
    }
    for made in [
        serde_json::to_string(&trained.outcomes),
        serde_json::to_string(&trained.calibration),
    ] {
        hash = fnv1a(made.unwrap_or_default().as_bytes(), hash);
    }
    let duet_version = env!("CARGO_PKG_VERSION").to_string();
    let meta = ModelMeta {
        format: FORMAT.to_string(),
        name: options.name.clone(),
        version: format!("{duet_version}+{hash:016x}"),
        duet_version,
        created: options.created.clone(),
        target_transform: "ln(speed)".to_string(),
        outputs: vec![
            "ln(speed of a)".to_string(),
            "ln(p10 speed of a) = -ln(p90 slowdown of a)".to_string(),
            "logit(pair is feasible)".to_string(),
        ],
        config: final_config.clone(),
        spec: trained.spec.clone(),
        data,
        training: trained.outcomes.clone(),
        folds: evaluations
            .first()
            .map(|e| e.folds.clone())
            .unwrap_or_default(),
        metrics,
        calibration: trained.calibration.clone(),
        evaluation: Some(if options.final_only {
            EvaluationInfo {
                protocol: FINAL_ONLY_PROTOCOL.to_string(),
                seeds: vec![seeds[0]],
                splits: BTreeMap::new(),
                final_only: true,
            }
        } else {
            EvaluationInfo {
                protocol: PROTOCOL.to_string(),
                seeds: seeds.clone(),
                splits: split_definitions(&splits),
                final_only: false,
            }
        }),
        metrics_sd: if seeds.len() > 1 {
            metrics_sd
        } else {
            Vec::new()
        },
        command: options.command.clone(),
        files: BTreeMap::new(),
    };
    let files = report::render(
        &meta,
        evaluations.first().map_or(&[][..], |e| &e.held_out[..]),
        Some(&report::matrix(&corpus, &trained.spec, &trained.nets)),
    );
    artifact::write(&options.out, &meta, &trained.nets, &files)?;
    Ok(TrainSummary { meta, warnings })
}
