//! The training corpus: datasets loaded as directed examples with every job's raw features, and
//! what training on a subset of its rows produces (a feature spec fitted on those rows, the
//! ensemble, and the split-conformal shifts of its conservative output, fitted on rows no member
//! trained or stopped on).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use burn::backend::{Autodiff, Flex};
use duet_core::api::Calibration as Kind;
use duet_core::dataset::Dataset;
use duet_model::calibration::Calibration;
use duet_model::encoding::{FeatureSpec, IDENTITY, JobFeatures, PROBED_MAX, job_features};
use duet_model::network::{
    Mlp, OUTPUTS, Rng, TrainConfig, TrainDevice, TrainOutcome, ensemble_forward,
};
use duet_model::predict::Decode;
use duet_model::prior::{EffectRow, FamilyPrior, Profile, Profiles, weigh_in};

use crate::rows::{Example, GroupExample, examples, group_examples};
use crate::training::{Batch, TrainError, fit};

/// The pair settings each workload was measured in, by device then workload id
/// (`Corpus::measured`).
pub type Measured = BTreeMap<String, BTreeMap<String, u32>>;

/// Datasets loaded for training: their examples and every job's raw features.
#[derive(Debug)]
pub struct Corpus {
    pub datasets: Vec<Dataset>,
    pub jobs: Vec<BTreeMap<String, JobFeatures>>,
    pub examples: Vec<Example>,
    /// Every job of every measured group of three or more (rows of a network that learns
    /// groups, `fit_with_groups`; no rows of any other fit).
    pub group_examples: Vec<GroupExample>,
    /// The categorical workload feature that names a model family (`--family`), recorded in
    /// every spec fitted on the corpus.
    pub family: Option<String>,
}

impl Corpus {
    pub fn new(datasets: Vec<Dataset>) -> Corpus {
        let jobs = datasets.iter().map(job_features).collect();
        let examples = examples(&datasets);
        let group_examples = group_examples(&datasets);
        Corpus {
            datasets,
            jobs,
            examples,
            group_examples,
            family: None,
        }
    }

    /// Each workload's value of the categorical feature `feature`, by dataset index and id
    /// (workloads without one are absent).
    pub fn values_of(&self, feature: &str) -> Vec<BTreeMap<String, String>> {
        self.datasets
            .iter()
            .map(|d| {
                d.workloads
                    .iter()
                    .filter_map(|w| {
                        let v = w.features.get(feature)?.as_category()?;
                        Some((w.workload.clone(), v.to_string()))
                    })
                    .collect()
            })
            .collect()
    }

    pub fn job(&self, e: &Example, id: &str) -> &JobFeatures {
        &self.jobs[e.dataset][id]
    }

    pub fn encode(&self, spec: &FeatureSpec, rows: &[usize]) -> Batch {
        self.encode_as(spec, rows, true)
    }

    /// The effects prior of a new family's pairs (`duet_model::prior`), fitted on the feasible
    /// rows of `rows`, with every workload's profile as `spec` encodes it (a new job's effects
    /// from its profile, where the families show they transfer); every weight 1 until weighed.
    pub fn family_prior(&self, rows: &[usize], spec: &FeatureSpec) -> FamilyPrior {
        FamilyPrior::fit_with_profiles(
            rows.iter().filter_map(|&i| {
                let e = &self.examples[i];
                Some(EffectRow {
                    gpu: &e.gpu,
                    a: &e.a,
                    b: &e.b,
                    ln_speed: e.speed?.ln(),
                })
            }),
            &self.profiles(rows, spec),
        )
    }

    /// The profile of every workload of `rows` (`FeatureSpec::profile_columns` of its encoding
    /// under `spec`), grouped by its family where the corpus names one (else by its id).
    fn profiles(&self, rows: &[usize], spec: &FeatureSpec) -> Profiles {
        let columns = spec.profile_columns();
        let families = self.family.as_deref().map(|f| self.values_of(f));
        let mut workloads = BTreeMap::new();
        let mut encoded = Vec::new();
        for &i in rows {
            let e = &self.examples[i];
            for id in [&e.a, &e.b] {
                if workloads.contains_key(id) {
                    continue;
                }
                encoded.clear();
                spec.encode_job(self.job(e, id), &mut encoded);
                let x = columns
                    .iter()
                    .map(|&c| encoded.get(c).copied().map_or(f64::NAN, f64::from))
                    .collect();
                let group = families
                    .as_ref()
                    .and_then(|f| f[e.dataset].get(id))
                    .cloned()
                    .unwrap_or_else(|| id.clone());
                workloads.insert(id.clone(), Profile { group, x });
            }
        }
        Profiles { columns, workloads }
    }

    /// The feature spec fitted on the jobs, devices and modes of `rows`.
    pub fn fit_spec(&self, rows: &[usize]) -> FeatureSpec {
        FeatureSpec::fit(
            &self.datasets.iter().collect::<Vec<_>>(),
            rows.iter().flat_map(|&i| {
                let e = &self.examples[i];
                [self.job(e, &e.a), self.job(e, &e.b)]
            }),
            rows.iter().map(|&i| self.examples[i].gpu.clone()),
            rows.iter().map(|&i| self.examples[i].mode),
        )
        .with_family(self.family.as_deref())
        .with_measured_by_device(&self.measured(rows))
    }

    /// The class the shipped model, trained on rows where the workloads have `counts` measured
    /// settings on each device, gives the pair of `e` (on its device) that a fold's model sees
    /// as `kind`. Known and probed are told by `counts`, not by the fold's own: holding rows out
    /// thins every workload, so in a small campaign's folds a fully measured workload would
    /// look probed and its scores would calibrate the wrong class. A row of a workload a probed
    /// fold holds out (`probed`) is probed whatever its count.
    pub fn served_kind(kind: Kind, e: &Example, counts: &Measured, probed: bool) -> Kind {
        if !matches!(kind, Kind::Known | Kind::Probed) {
            return kind;
        }
        let on_device = counts.get(&e.gpu);
        let thin = |id: &String| {
            on_device
                .and_then(|c| c.get(id))
                .is_some_and(|&n| n <= PROBED_MAX)
        };
        if probed || thin(&e.a) || thin(&e.b) {
            Kind::Probed
        } else {
            Kind::Known
        }
    }

    /// The pair settings each workload of `rows` was measured in on each device (a setting
    /// counts once for each of its two jobs, whichever of its rows `rows` holds).
    pub fn measured(&self, rows: &[usize]) -> Measured {
        let mut settings: BTreeMap<&str, BTreeMap<&str, BTreeSet<usize>>> = BTreeMap::new();
        for &i in rows {
            let e = &self.examples[i];
            let on_device = settings.entry(e.gpu.as_str()).or_default();
            for id in [&e.a, &e.b] {
                on_device.entry(id.as_str()).or_default().insert(e.setting);
            }
        }
        settings
            .into_iter()
            .map(|(gpu, ids)| {
                let n = ids
                    .into_iter()
                    .map(|(id, s)| (id.to_string(), u32::try_from(s.len()).unwrap_or(u32::MAX)))
                    .collect();
                (gpu.to_string(), n)
            })
            .collect()
    }

    /// The shares of a probed split of `rows`: the workloads' units (their family by the corpus'
    /// family feature; a workload that declares none, or every workload where no family feature
    /// is named, its own unit), drawn with `rng`, dealt into `folds` shares (none with fewer than
    /// `min_units` units). Each share holds its units' workloads (`.0`), and each of them keeps as
    /// its probes 1 to `PROBED_MAX` (the count drawn) of its pair settings with a partner outside
    /// the share (`.1`, drawn): the evaluation's `probed_workloads` folds and a final-only fit's
    /// probed calibration folds are both these.
    pub fn probed_shares(
        &self,
        rows: &[usize],
        rng: &mut Rng,
        folds: usize,
        min_units: usize,
    ) -> Vec<(BTreeSet<String>, BTreeSet<usize>)> {
        let values = self
            .family
            .as_deref()
            .map(|f| self.values_of(f))
            .unwrap_or_default();
        let unit = |id: &str| -> String {
            values
                .iter()
                .find_map(|d| d.get(id))
                .map_or_else(|| format!("workload {id}"), |v| format!("family {v}"))
        };
        let mut units: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for &i in rows {
            let e = &self.examples[i];
            for id in [e.a.as_str(), e.b.as_str()] {
                units.entry(unit(id)).or_default().insert(id);
            }
        }
        if units.len() < min_units {
            return Vec::new();
        }
        let mut order: Vec<BTreeSet<&str>> = units.into_values().collect();
        rng.shuffle(&mut order);
        let folds = folds.min(order.len());
        (0..folds)
            .map(|f| {
                let held: BTreeSet<String> = order
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| k % folds == f)
                    .flat_map(|(_, ids)| ids.iter().map(|id| (*id).to_string()))
                    .collect();
                let probes = self.draw_probes(rows, &held, rng);
                (held, probes)
            })
            .collect()
    }

    /// The settings of `rows` each of `held` keeps as its probes: for each workload in turn, 1
    /// to `PROBED_MAX` (the count drawn with `rng`) of its pair settings with a partner outside
    /// `held`, drawn.
    fn draw_probes(
        &self,
        rows: &[usize],
        held: &BTreeSet<String>,
        rng: &mut Rng,
    ) -> BTreeSet<usize> {
        let mut probes = BTreeSet::new();
        for w in held {
            let mut settings: Vec<usize> = rows
                .iter()
                .map(|&i| &self.examples[i])
                .filter(|e| {
                    (e.a == *w && !held.contains(&e.b)) || (e.b == *w && !held.contains(&e.a))
                })
                .map(|e| e.setting)
                .collect::<BTreeSet<usize>>()
                .into_iter()
                .collect();
            rng.shuffle(&mut settings);
            let k = 1 + rng.below(PROBED_MAX as usize);
            probes.extend(settings.into_iter().take(k));
        }
        probes
    }

    /// Training rows twice: as known workloads, and with their ids hidden, as a new job would
    /// look; with `family_dropout` where the spec has a family, a third time with the ids and
    /// one job's family or both hidden, as a job of a new family looks. The network learns to
    /// use identities and families without depending on them, and meets the family's unknown
    /// slot in training, which it would otherwise only ever meet when serving.
    pub fn encode_for_training(
        &self,
        spec: &FeatureSpec,
        rows: &[usize],
        family_dropout: bool,
    ) -> Batch {
        let mut batch = self.encode_as(spec, rows, true);
        if !spec.identities.is_empty() {
            batch.extend(&self.encode_as(spec, rows, false));
        }
        if family_dropout && spec.family.is_some() {
            batch.extend(&self.encode_without_families(spec, rows));
        }
        batch
    }

    fn encode_as(&self, spec: &FeatureSpec, rows: &[usize], identity: bool) -> Batch {
        self.encode_rows(spec, rows, identity, |_| [false, false])
    }

    /// `rows` without identities and with families hidden, by the row's index: a's on odd
    /// ones, b's on every other pair of them, both on a quarter; the quarter that would hide
    /// none (the identity-hidden copy already has them) is left out.
    fn encode_without_families(&self, spec: &FeatureSpec, rows: &[usize]) -> Batch {
        let kept: Vec<usize> = rows.iter().copied().filter(|&i| i & 3 != 0).collect();
        self.encode_rows(spec, &kept, false, |i| [i & 1 == 1, i & 2 == 2])
    }

    fn encode_rows(
        &self,
        spec: &FeatureSpec,
        rows: &[usize],
        identity: bool,
        hide_families: impl Fn(usize) -> [bool; 2],
    ) -> Batch {
        let examples = rows.iter().map(|&i| (i, &self.examples[i]));
        self.encode_each(spec, examples, identity, hide_families)
    }

    /// Examples that are no rows of the corpus (a group's pairs, say), as they would be encoded
    /// as rows: with identities; their jobs must be the corpus's.
    pub fn encode_examples(&self, spec: &FeatureSpec, examples: &[Example]) -> Batch {
        self.encode_each(spec, examples.iter().enumerate(), true, |_| [false, false])
    }

    fn encode_each<'e>(
        &self,
        spec: &FeatureSpec,
        examples: impl Iterator<Item = (usize, &'e Example)>,
        identity: bool,
        hide_families: impl Fn(usize) -> [bool; 2],
    ) -> Batch {
        let mut batch = Batch {
            width: spec.pair_width(),
            ..Batch::default()
        };
        let mut buf = Vec::with_capacity(batch.width);
        for (i, e) in examples {
            buf.clear();
            let [hide_a, hide_b] = hide_families(i);
            let family = |hide: bool| spec.family.as_deref().filter(|_| hide);
            let (a, b) = (
                view(self.job(e, &e.a), identity, family(hide_a)),
                view(self.job(e, &e.b), identity, family(hide_b)),
            );
            spec.encode_pair(&a, &b, &e.gpu, e.mode, e.share_a, e.share_b, &mut buf);
            batch.push(&buf, e.speed);
        }
        batch
    }

    /// The jobs of the measured groups numbered in `groups`, one row each
    /// (`FeatureSpec::encode_group_row`), under `spec` (one whose network learns groups), with
    /// their identities or without.
    pub fn encode_group_rows(
        &self,
        spec: &FeatureSpec,
        groups: &BTreeSet<usize>,
        identity: bool,
    ) -> Batch {
        let mut batch = Batch {
            width: spec.pair_width(),
            ..Batch::default()
        };
        let mut rows = Vec::new();
        for members in self.group_examples.chunk_by(|a, b| a.group == b.group) {
            let g = &members[0];
            if !groups.contains(&g.group) {
                continue;
            }
            let encoded: Vec<Vec<f32>> = members
                .iter()
                .map(|m| {
                    let mut out = Vec::with_capacity(spec.job_width());
                    let job = &self.jobs[g.dataset][&m.workload];
                    spec.encode_job(&view(job, identity, None), &mut out);
                    out
                })
                .collect();
            let jobs: Vec<&[f32]> = encoded.iter().map(Vec::as_slice).collect();
            rows.clear();
            spec.encode_group(&jobs, |k| members[k].share, &g.gpu, g.mode, &mut rows);
            for (row, m) in rows.chunks_exact(batch.width).zip(members) {
                batch.push(row, m.speed);
            }
        }
        batch
    }

    /// The feature spec and an ensemble that learns groups too, fitted on the pair `rows` and
    /// every job of the measured groups numbered in `groups` (`FeatureSpec::groups`), each
    /// member holding out its share of the pair settings and of the groups for early stopping;
    /// uncalibrated.
    /// The feature spec and the ensemble fitted on `rows`, uncalibrated (both shifts 0): the
    /// evaluation's per-fold refits, whose held-out scores calibrate cross-conformally, and the
    /// final fit of a full run, which carries those shifts. The same networks as `train_on`'s.
    pub fn fit(
        &self,
        rows: &[usize],
        config: &TrainConfig,
        workers: usize,
    ) -> Result<Trained, TrainError> {
        self.fit_ensembles(&[rows], config, workers)?
            .pop()
            .ok_or(TrainError::Empty)
    }

    /// Fits the feature spec and the ensemble on each of `sets`, each member holding out its
    /// own share of the settings for early stopping; no calibration. The members of all sets
    /// are fitted on `workers` threads and come back in set and member order.
    pub(crate) fn fit_ensembles(
        &self,
        sets: &[&[usize]],
        config: &TrainConfig,
        workers: usize,
    ) -> Result<Vec<Trained>, TrainError> {
        let none = BTreeSet::new();
        let sets: Vec<(&[usize], &BTreeSet<usize>)> = sets.iter().map(|&r| (r, &none)).collect();
        self.fit_with_groups(&sets, config, workers)
    }

    /// `fit_ensembles` where each set also names the measured groups its network learns: the
    /// feature spec and an ensemble fitted on the pair rows and every job of those groups
    /// (`FeatureSpec::groups`; none: a network of pairs alone, its spec without the
    /// co-runners' column), each member holding out its share of the pair settings and of the
    /// groups for early stopping; uncalibrated.
    pub fn fit_with_groups(
        &self,
        sets: &[(&[usize], &BTreeSet<usize>)],
        config: &TrainConfig,
        workers: usize,
    ) -> Result<Vec<Trained>, TrainError> {
        let members = config.ensemble.max(1);
        let specs: Vec<FeatureSpec> = sets
            .iter()
            .map(|(rows, groups)| {
                let mut spec = self.fit_spec(rows);
                if !config.identities {
                    spec.identities.clear();
                    spec.measured.clear();
                    spec.measured_by_device.clear();
                }
                spec.groups = !groups.is_empty();
                spec
            })
            .collect();
        let tasks: Vec<(usize, usize)> = (0..sets.len())
            .flat_map(|s| (0..members).map(move |m| (s, m)))
            .collect();
        let results = run_parallel(&tasks, workers, |&(s, m)| {
            self.fit_member(sets[s].0, sets[s].1, &specs[s], config, m as u64)
        });
        let mut out: Vec<Trained> = specs
            .into_iter()
            .map(|spec| Trained {
                spec,
                nets: Vec::with_capacity(members),
                outcomes: Vec::with_capacity(members),
                calibration: Calibration::default(),
            })
            .collect();
        for (&(s, _), result) in tasks.iter().zip(results) {
            let (net, outcome) = result?;
            out[s].nets.push(net);
            out[s].outcomes.push(outcome);
        }
        Ok(out)
    }

    /// Ensemble member `member` on `rows`: its own seed, and its own share of the settings held
    /// out for early stopping.
    fn fit_member(
        &self,
        rows: &[usize],
        groups: &BTreeSet<usize>,
        spec: &FeatureSpec,
        config: &TrainConfig,
        member: u64,
    ) -> Result<(Mlp<Flex>, TrainOutcome), TrainError> {
        let settings: BTreeSet<usize> = rows.iter().map(|&i| self.examples[i].setting).collect();
        let member_config = TrainConfig {
            seed: config.seed.wrapping_add(member.wrapping_mul(0x9E37_79B9)),
            ..config.clone()
        };
        let mut rng = Rng::new(member_config.seed ^ 0x5EED);
        let held = held_out(&settings, config.validation_fraction, &mut rng);
        let (validation, train): (Vec<usize>, Vec<usize>) = rows
            .iter()
            .partition(|&&i| held.contains(&self.examples[i].setting));
        let mut validation = self.encode_for_training(spec, &validation, config.family_dropout);
        let mut train = self.encode_for_training(spec, &train, config.family_dropout);
        if !groups.is_empty() {
            // The groups' own share for early stopping, drawn after the settings' so that a
            // network of pairs alone draws exactly as before.
            let held = held_out(groups, config.validation_fraction, &mut rng);
            let kept: BTreeSet<usize> = groups.difference(&held).copied().collect();
            for (batch, part) in [(&mut validation, held), (&mut train, kept)] {
                batch.extend(&self.encode_group_rows(spec, &part, true));
                if !spec.identities.is_empty() {
                    batch.extend(&self.encode_group_rows(spec, &part, false));
                }
            }
        }
        match config.device {
            TrainDevice::Cpu => {
                fit::<Autodiff<Flex>>(&train, &validation, &member_config, &Default::default())
            }
            TrainDevice::Cuda(index) => fit_cuda(&train, &validation, &member_config, index),
        }
    }
}

/// `share` of `units` (rounded), drawn by shuffling them with `rng`: what a member holds out
/// for early stopping.
fn held_out(units: &BTreeSet<usize>, share: f64, rng: &mut Rng) -> BTreeSet<usize> {
    let mut order: Vec<usize> = units.iter().copied().collect();
    rng.shuffle(&mut order);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let held = ((order.len() as f64) * share).round() as usize;
    order.into_iter().take(held).collect()
}

/// `job` of every task on `workers` threads (at most one per task); results in task order,
/// whatever the scheduling.
pub fn run_parallel<T: Sync, R: Send>(
    tasks: &[T],
    workers: usize,
    job: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let workers = workers.clamp(1, tasks.len().max(1));
    if workers == 1 {
        return tasks.iter().map(job).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = Vec::new();
    results.resize_with(tasks.len(), || None);
    let done = std::sync::Mutex::new(results);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(task) = tasks.get(i) else { break };
                    let r = job(task);
                    if let Ok(mut d) = done.lock() {
                        d[i] = Some(r);
                    }
                }
            });
        }
    });
    done.into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

#[cfg(feature = "cuda")]
fn fit_cuda(
    train: &Batch,
    validation: &Batch,
    config: &TrainConfig,
    index: usize,
) -> Result<(Mlp<Flex>, TrainOutcome), TrainError> {
    use burn::backend::Cuda;
    use burn::backend::cuda::CudaDevice;

    use duet_model::network::to_cpu;
    // burn-cuda panics where CUDA cannot start (no driver library, no NVRTC, no headers), its
    // device thread's message printed first: the run ends with an error, not a second panic.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let device = CudaDevice::new(index);
        let (net, outcome) = fit::<Autodiff<Cuda>>(train, validation, config, &device)?;
        Ok((to_cpu(&net), outcome))
    }))
    .unwrap_or_else(|payload| {
        Err(TrainError::CudaFailed {
            index,
            said: duet_core::panic::message(payload.as_ref()),
        })
    })
}

#[cfg(not(feature = "cuda"))]
fn fit_cuda(
    _train: &Batch,
    _validation: &Batch,
    _config: &TrainConfig,
    index: usize,
) -> Result<(Mlp<Flex>, TrainOutcome), TrainError> {
    Err(TrainError::NoCuda { index })
}

/// A job's features as the network sees them: as they are, or with the identity hidden, and
/// the family feature `hide` where it names one (only then is a copy needed).
fn view<'a>(job: &'a JobFeatures, identity: bool, hide: Option<&str>) -> Cow<'a, JobFeatures> {
    if identity && hide.is_none() {
        Cow::Borrowed(job)
    } else {
        let mut job = job.clone();
        if !identity {
            job.remove(IDENTITY);
        }
        if let Some(family) = hide {
            job.remove(family);
        }
        Cow::Owned(job)
    }
}

/// A fitted feature spec and network.
#[derive(Debug)]
pub struct Trained {
    pub spec: FeatureSpec,
    /// The ensemble's members.
    pub nets: Vec<Mlp<Flex>>,
    pub outcomes: Vec<TrainOutcome>,
    /// The conformal shifts of the conservative output, per kind of pair.
    pub calibration: Calibration,
}

impl Trained {
    /// Each encoded row's outputs as a server answers them: the network's, weighed with the
    /// model's effects prior where a job is of a new family (`duet_model::predict::Decode`),
    /// and each row's shift of ln(p10 speed).
    pub fn decode(&self, inputs: &[f32], out: &mut [f32]) -> Vec<f64> {
        let width = self.spec.pair_width();
        if width == 0 {
            return Vec::new();
        }
        inputs
            .chunks_exact(width)
            .zip(out.chunks_exact_mut(OUTPUTS))
            .map(|(row, o)| {
                let d = Decode::of_row(&self.spec, &self.calibration, row);
                if let Some((prior, weight)) = d.prior[0] {
                    weigh_in(o, weight, prior);
                }
                d.shift
            })
            .collect()
    }

    /// Network outputs for `rows` of the corpus.
    pub fn outputs(&self, corpus: &Corpus, rows: &[usize]) -> Vec<f32> {
        let batch = corpus.encode(&self.spec, rows);
        self.forward(&batch.inputs)
    }

    /// The ensemble's mean output for encoded rows.
    pub fn forward(&self, inputs: &[f32]) -> Vec<f32> {
        ensemble_forward(
            &self.nets,
            inputs.to_vec(),
            self.spec.pair_width(),
            &Default::default(),
        )
    }
}
