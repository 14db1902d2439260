//! What `duet train --final-only` ships (and every budgeted campaign's and probe's own fit):
//! one ensemble on every row, its p90 calibrated cross-conformally over folds of its own rows
//! (every workload, every unordered pair and, where the corpus names a family feature, every
//! family held out once, and every family again held out but for 1 to 3 probes), or
//! split-conformally where no fold leaves anything to train on.

use std::collections::{BTreeMap, BTreeSet};

use duet_core::api::Calibration as Kind;
use duet_model::calibration::{Calibration, FOLDED_CONFORMAL, MIN_FAMILIES, SPLIT_CONFORMAL};
use duet_model::encoding::FeatureSpec;
use duet_model::network::{OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS, Rng, TrainConfig};
use duet_model::prior::{Basis, Candidate, Weights, weigh_in};

use crate::conformal::Scores;
use crate::corpus::{Corpus, Measured, Trained};
use crate::rows::Example;
use crate::training::TrainError;

impl Corpus {
    /// Splits `rows` into calibration rows and the rest (training and early stopping), as
    /// `train` does with `seed`:
    ///
    /// - new-workload calibration: every row touching one of `ceil(15%)` of the workloads
    ///   (drawn; none when fewer than `MIN_WORKLOADS_FOR_NEW` workloads), so these workloads are
    ///   absent from the model's spec, exactly like a job it never saw;
    /// - known-workload calibration: of the remaining rows, those of 10% of the unordered pairs
    ///   (the same two workloads on every device, mode and share leave together), as an
    ///   unmeasured pair of known workloads.
    ///
    /// Calibration rows are used for nothing else: no member trains or early-stops on them.
    pub fn calibration_split(&self, rows: &[usize], seed: u64) -> CalibrationSplit {
        let mut rng = Rng::new(seed ^ 0xCA1B_0A7E);
        let ids = self.shuffled_workloads(rows, &mut rng);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let held = if ids.len() >= MIN_WORKLOADS_FOR_NEW {
            ((ids.len() as f64) * CALIBRATION_WORKLOADS).ceil() as usize
        } else {
            0
        };
        let held: BTreeSet<String> = ids.iter().take(held).map(|s| s.to_string()).collect();
        let (new, rest): (Vec<usize>, Vec<usize>) = rows.iter().partition(|&&i| {
            let e = &self.examples[i];
            held.contains(&e.a) || held.contains(&e.b)
        });
        let pairs = self.shuffled_pairs(&rest, &mut rng);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let known_pairs = ((pairs.len() as f64) * CALIBRATION_PAIRS).ceil() as usize;
        // Never all of them: training needs rows.
        let known_pairs: BTreeSet<usize> = pairs
            .into_iter()
            .take(known_pairs.min(rest.len().saturating_sub(1) / 2))
            .collect();
        let (known, train): (Vec<usize>, Vec<usize>) = rest
            .into_iter()
            .partition(|&i| known_pairs.contains(&self.examples[i].pair));
        CalibrationSplit {
            held_workloads: held,
            held_families: BTreeMap::new(),
            probed: false,
            known_pairs: known_pairs.len(),
            calibration: new.into_iter().chain(known).collect(),
            train,
        }
    }

    /// The workloads of `rows`, in `rng`'s order: the draw both calibrations hold out from.
    fn shuffled_workloads(&self, rows: &[usize], rng: &mut Rng) -> Vec<&str> {
        let mut ids: Vec<&str> = rows
            .iter()
            .flat_map(|&i| [self.examples[i].a.as_str(), self.examples[i].b.as_str()])
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .collect();
        rng.shuffle(&mut ids);
        ids
    }

    /// The unordered pairs of `rows`, in `rng`'s order.
    fn shuffled_pairs(&self, rows: &[usize], rng: &mut Rng) -> Vec<usize> {
        let mut pairs: Vec<usize> = rows
            .iter()
            .map(|&i| self.examples[i].pair)
            .collect::<BTreeSet<usize>>()
            .into_iter()
            .collect();
        rng.shuffle(&mut pairs);
        pairs
    }

    /// The calibration folds of `rows` with `seed`: in fold `f`, every row touching a workload
    /// of the `f`-th share of them (drawn; none when fewer than `MIN_WORKLOADS_FOR_NEW`), and
    /// of the other rows those of the `f`-th share of the unordered pairs; so every workload and
    /// every pair is held out once over the `folds` folds. Where the corpus names a family
    /// feature and `rows` hold at least [`MIN_FAMILIES`] families, `folds` more folds follow
    /// (`family_folds`), each holding out every row touching a share of the families: a new
    /// family's calibration, which the workload folds cannot give (a held-out workload's
    /// siblings stay in training). Then, where the rows hold at least [`MIN_FAMILIES`] families
    /// (or workloads, where no family is named), `folds` probed folds (`probed_folds`): a new
    /// family probed 1 to `PROBED_MAX` times, `probed`'s hardest case. A fold that would
    /// leave nothing to train on is left out.
    pub fn calibration_folds(
        &self,
        rows: &[usize],
        seed: u64,
        folds: usize,
    ) -> Vec<CalibrationSplit> {
        let folds = folds.max(2);
        let mut rng = Rng::new(seed ^ 0xCA1B_0A7E);
        let ids = self.shuffled_workloads(rows, &mut rng);
        let pairs = self.shuffled_pairs(rows, &mut rng);
        let pair_fold: std::collections::HashMap<usize, usize> = pairs
            .iter()
            .enumerate()
            .map(|(k, &p)| (p, k % folds))
            .collect();
        let hold_workloads = ids.len() >= MIN_WORKLOADS_FOR_NEW;
        let workload_folds: Vec<CalibrationSplit> = (0..folds)
            .filter_map(|f| {
                let held: BTreeSet<String> = if hold_workloads {
                    ids.iter()
                        .enumerate()
                        .filter(|(k, _)| k % folds == f)
                        .map(|(_, id)| (*id).to_string())
                        .collect()
                } else {
                    BTreeSet::new()
                };
                let (new, rest): (Vec<usize>, Vec<usize>) = rows.iter().partition(|&&i| {
                    let e = &self.examples[i];
                    held.contains(&e.a) || held.contains(&e.b)
                });
                let (known, train): (Vec<usize>, Vec<usize>) = rest
                    .into_iter()
                    .partition(|&i| pair_fold.get(&self.examples[i].pair) == Some(&f));
                let known_pairs = known
                    .iter()
                    .map(|&i| self.examples[i].pair)
                    .collect::<BTreeSet<usize>>()
                    .len();
                (!train.is_empty()).then(|| CalibrationSplit {
                    held_workloads: held,
                    held_families: BTreeMap::new(),
                    probed: false,
                    known_pairs,
                    calibration: new.into_iter().chain(known).collect(),
                    train,
                })
            })
            .collect();
        let families = self.family_folds(rows, &mut rng, folds);
        let probed = self.probed_folds(rows, &mut rng, folds);
        workload_folds
            .into_iter()
            .chain(families)
            .chain(probed)
            .collect()
    }

    /// The probed folds of `rows` (none with fewer than [`MIN_FAMILIES`] units): the
    /// workloads' families (the corpus' family feature; each workload its own unit where there
    /// is none, or it declares none), drawn with `rng`, in `folds` shares; in fold `f` every
    /// workload of the `f`-th share keeps 1 to `PROBED_MAX` of its pair settings with a
    /// partner outside the share in training (the count and the settings drawn) and its other
    /// rows calibrate: a new job probed after its whole family was new, as the evaluation's
    /// `probed_workloads` folds hold it. Without them a final-only fit calibrates `probed` only
    /// on thin workloads of well-measured families, and its p90 for a job probed once is too
    /// narrow.
    fn probed_folds(&self, rows: &[usize], rng: &mut Rng, folds: usize) -> Vec<CalibrationSplit> {
        self.probed_shares(rows, rng, folds, MIN_FAMILIES)
            .into_iter()
            .filter_map(|(held, probes)| {
                let (train, calibration): (Vec<usize>, Vec<usize>) = rows.iter().partition(|&&i| {
                    let e = &self.examples[i];
                    !(held.contains(&e.a) || held.contains(&e.b)) || probes.contains(&e.setting)
                });
                (!train.is_empty() && !calibration.is_empty()).then(|| CalibrationSplit {
                    held_workloads: held,
                    held_families: BTreeMap::new(),
                    probed: true,
                    known_pairs: 0,
                    calibration,
                    train,
                })
            })
            .collect()
    }

    /// The new-family folds of `rows` (none without a family feature or with fewer than
    /// [`MIN_FAMILIES`] families among the workloads that declare one): the families, drawn
    /// with `rng`, in `folds` shares (at most one family each); fold `f` calibrates on every row
    /// touching a workload of the `f`-th share and trains on the rest, so every family is held
    /// out once, whole, as a family the model never saw.
    fn family_folds(&self, rows: &[usize], rng: &mut Rng, folds: usize) -> Vec<CalibrationSplit> {
        let Some(feature) = self.family.as_deref() else {
            return Vec::new();
        };
        let values = self.values_of(feature);
        let family = |e: &Example, id: &str| values[e.dataset].get(id).cloned();
        let mut families: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for &i in rows {
            let e = &self.examples[i];
            for id in [&e.a, &e.b] {
                if let Some(v) = family(e, id) {
                    families.entry(v).or_default().insert(id.clone());
                }
            }
        }
        if families.len() < MIN_FAMILIES {
            return Vec::new();
        }
        let mut order: Vec<(String, BTreeSet<String>)> = families.into_iter().collect();
        rng.shuffle(&mut order);
        let folds = folds.min(order.len());
        (0..folds)
            .filter_map(|f| {
                let held: BTreeMap<String, String> = order
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| k % folds == f)
                    .flat_map(|(_, (v, ids))| ids.iter().map(|id| (id.clone(), v.clone())))
                    .collect();
                let (calibration, train): (Vec<usize>, Vec<usize>) = rows.iter().partition(|&&i| {
                    let e = &self.examples[i];
                    held.contains_key(&e.a) || held.contains_key(&e.b)
                });
                (!train.is_empty()).then(|| CalibrationSplit {
                    held_workloads: held.keys().cloned().collect(),
                    held_families: held,
                    probed: false,
                    known_pairs: 0,
                    calibration,
                    train,
                })
            })
            .collect()
    }

    /// Calibrates cross-conformally over its own folds, then refits (what `--final-only`
    /// ships): for each of [`CALIBRATION_FOLDS`] folds (`calibration_folds`) an ensemble trained
    /// without the fold's rows scores them, so every measured pair and every workload calibrates
    /// once; the returned ensemble is refitted on all of `rows` with the same configuration (the
    /// networks `fit` gives) and carries the shifts of every fold's scores pooled. The refit
    /// sees more data than any fold's ensemble, so its errors are no larger in expectation.
    /// Where no fold leaves anything to train on, it calibrates split-conformally. One thread.
    pub fn train(&self, rows: &[usize], config: &TrainConfig) -> Result<Trained, TrainError> {
        self.train_on(rows, config, 1)
    }

    /// `train` with the members of both ensembles (the calibrated one and the refit do not
    /// depend on each other) fitted on `workers` threads. Every member has its own seed and
    /// rows, and results are collected in member order, so the model is the same for any
    /// number of workers.
    pub fn train_on(
        &self,
        rows: &[usize],
        config: &TrainConfig,
        workers: usize,
    ) -> Result<Trained, TrainError> {
        let folds = self.calibration_folds(rows, config.seed, CALIBRATION_FOLDS);
        // The shipped fit's counts: every split below partitions `rows`.
        let counts = self.measured(rows);
        if folds.is_empty() {
            let split = self.calibration_split(rows, config.seed);
            let mut fitted = self
                .fit_ensembles(&[&split.train, rows], config, workers)?
                .into_iter();
            let (Some(held), Some(mut trained)) = (fitted.next(), fitted.next()) else {
                return Err(TrainError::Empty);
            };
            let mut scores = Scores::default();
            let inputs = self.encode(&held.spec, &split.calibration).inputs;
            let out = held.forward(&inputs);
            self.score(&held, &split, (&inputs, &out), &counts, &mut scores);
            trained.calibration = scores.calibration(SPLIT_CONFORMAL);
            return Ok(trained);
        }
        let sets: Vec<&[usize]> = folds
            .iter()
            .map(|f| f.train.as_slice())
            .chain(std::iter::once(rows))
            .collect();
        let mut fitted = self.fit_ensembles(&sets, config, workers)?;
        let mut trained = fitted.pop().ok_or(TrainError::Empty)?;
        trained.calibration =
            self.folded_calibration(&fitted, &folds, rows, &trained.spec, &counts);
        Ok(trained)
    }

    /// The cross-conformal calibration of `fitted`, one ensemble per fold of `folds` trained
    /// without the fold's calibration rows. A workload fold's rows are scored as the network
    /// answers them. A family fold's rows are first weighed with the fold's effects prior, as
    /// the shipped model answers a new family (`duet_model::prior`), by the network's weight
    /// chosen on the other family folds' rows that touch none of the fold's families (nested,
    /// as the evaluation weighs `unseen_<family>`); a probed fold's probed rows likewise with
    /// the probed weight chosen on the other probed folds' rows, and a probed row of a workload
    /// fold with the weight every probed fold's rows chose. The shipped model's prior is fitted
    /// on `rows` and weighed on every family and probed fold's rows. `counts`: the shipped
    /// fit's.
    fn folded_calibration(
        &self,
        fitted: &[Trained],
        folds: &[CalibrationSplit],
        rows: &[usize],
        spec: &FeatureSpec,
        counts: &Measured,
    ) -> Calibration {
        let mut scores = Scores::default();
        let (mut plain, mut family, mut probed) = (Vec::new(), Vec::new(), Vec::new());
        for (held, fold) in fitted.iter().zip(folds) {
            let inputs = self.encode(&held.spec, &fold.calibration).inputs;
            let out = held.forward(&inputs);
            let scored = Weighed {
                held,
                fold,
                rows: self.prior_rows(held, fold, &inputs, &out),
                inputs,
                out,
            };
            if !fold.held_families.is_empty() {
                family.push(scored);
            } else if fold.probed {
                probed.push(scored);
            } else {
                plain.push(scored);
            }
        }
        let family_rows = Self::weigh_nested(&mut family, Basis::NewFamily);
        let probed_rows = Self::weigh_nested(&mut probed, Basis::Probed);
        let pooled = Weights::choose(&probed_rows);
        for w in &mut plain {
            w.weigh(Basis::Probed, &pooled);
        }
        for w in plain.iter().chain(&family).chain(&probed) {
            self.score(w.held, w.fold, (&w.inputs, &w.out), counts, &mut scores);
        }
        let mut calibration = scores.calibration(FOLDED_CONFORMAL);
        if !family_rows.is_empty() || !probed_rows.is_empty() {
            let mut prior = self.family_prior(rows, spec);
            prior.weigh(&family_rows);
            prior.weigh_probed(&probed_rows);
            calibration.family_prior = Some(prior);
        }
        calibration
    }

    /// The measured calibration rows of `fold` that have a prior (`FamilyPrior::lookup`, the
    /// prior fitted on the fold's training rows), each as a weight is chosen on it: weighing as
    /// its held family (a family fold), its held workload (a probed fold) or its pair.
    fn prior_rows(
        &self,
        held: &Trained,
        fold: &CalibrationSplit,
        inputs: &[f32],
        out: &[f32],
    ) -> Vec<PriorRow> {
        let prior = self.family_prior(&fold.train, &held.spec);
        let width = held.spec.pair_width();
        let mut rows = Vec::new();
        for (k, &i) in fold.calibration.iter().enumerate() {
            let e = &self.examples[i];
            let row = &inputs[k * width..(k + 1) * width];
            let (Some((ln, basis, _)), Some(speed)) = (prior.lookup(&held.spec, row), e.speed)
            else {
                continue;
            };
            let unit = [&e.a, &e.b]
                .into_iter()
                .find_map(|id| {
                    fold.held_families.get(id.as_str()).cloned().or_else(|| {
                        fold.held_workloads
                            .contains(id.as_str())
                            .then(|| format!("workload {id}"))
                    })
                })
                .unwrap_or_else(|| format!("pair {}", e.pair));
            let candidate = Candidate {
                family: unit,
                gpu: e.gpu.clone(),
                network: f64::from(out[k * OUTPUTS + OUT_LOG_SPEED]),
                prior: ln,
                ln_speed: speed.ln(),
            };
            rows.push(PriorRow {
                at: k,
                example: i,
                basis,
                candidate,
            });
        }
        rows
    }

    /// Weighs each of `folds`' rows on `basis` by the weights chosen on the other folds' rows
    /// on it that touch none of the fold's held workloads; returns every one of those rows.
    fn weigh_nested(folds: &mut [Weighed], basis: Basis) -> Vec<Candidate> {
        let on_basis = |w: &Weighed| -> Vec<(usize, Candidate)> {
            w.rows
                .iter()
                .filter(|r| r.basis == basis)
                .map(|r| (r.example, r.candidate.clone()))
                .collect()
        };
        let per_fold: Vec<Vec<(usize, Candidate)>> = folds.iter().map(on_basis).collect();
        let held: Vec<BTreeSet<usize>> = folds
            .iter()
            .map(|w| w.fold.calibration.iter().copied().collect())
            .collect();
        for (j, w) in folds.iter_mut().enumerate() {
            // A row of another fold that this one also calibrates on touches its held ones.
            let others: Vec<Candidate> = per_fold
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != j)
                .flat_map(|(_, rows)| rows.iter())
                .filter(|(i, _)| !held[j].contains(i))
                .map(|(_, c)| c.clone())
                .collect();
            w.weigh(basis, &Weights::choose(&others));
        }
        per_fold.into_iter().flatten().map(|(_, c)| c).collect()
    }

    /// Scores `split`'s calibration rows with `trained` (which never saw them) into `scores`.
    /// `counts` are the shipped fit's (`served_kind`). `(inputs, out)`: the calibration rows
    /// encoded with `trained`'s spec and its outputs for them (a new family's weighed with the
    /// fold's effects prior, as the shipped model answers).
    fn score(
        &self,
        trained: &Trained,
        split: &CalibrationSplit,
        (inputs, out): (&[f32], &[f32]),
        counts: &Measured,
        scores: &mut Scores,
    ) {
        let width = trained.spec.pair_width();
        for (k, &i) in split.calibration.iter().enumerate() {
            let e = &self.examples[i];
            let Some(speed) = e.speed else {
                continue;
            };
            let row = &inputs[k * width..(k + 1) * width];
            let seen = trained.spec.calibration_kind(row);
            let (kind, group) = if split.held_families.is_empty() {
                // Rows held out here stand for new workloads of known families (in a probed
                // fold, for probed workloads of a family known by their probes). A row the
                // encoder sees as a new family (a workload alone in its family, or declaring
                // none) stands for no such job and calibrates nothing here, as in the
                // evaluation (the family folds, where there are enough families, count it); one
                // out of range neither (such pairs are answered with the widest shift).
                let held = [&e.a, &e.b]
                    .into_iter()
                    .find(|id| split.held_workloads.contains(id.as_str()));
                let kind = match seen {
                    Kind::NewFamily => continue,
                    k => Self::served_kind(k, e, counts, split.probed && held.is_some()),
                };
                // A probed fold's rows stand for a probed job only (one its model has no
                // identity for, where every setting was a probe's partner's, counts nowhere).
                if split.probed && kind != Kind::Probed {
                    continue;
                }
                let group = match held {
                    Some(id) if split.probed => format!("probed {id}"),
                    Some(id) => id.clone(),
                    None => format!("pair {}", e.pair),
                };
                (kind, group)
            } else {
                // A new-family fold's rows count only as what they stand for (one out of range
                // is answered with the widest shift, and calibrates nothing).
                let Some(family) = [&e.a, &e.b]
                    .into_iter()
                    .find_map(|id| split.held_families.get(id.as_str()))
                else {
                    continue;
                };
                if seen != Kind::NewFamily {
                    continue;
                }
                (seen, format!("family {family}"))
            };
            scores.push(
                &e.gpu,
                kind,
                f64::from(out[k * OUTPUTS + OUT_LOG_SPEED_P10]) - speed.ln(),
                &group,
            );
        }
    }
}

/// One calibration row with an effects prior.
struct PriorRow {
    /// Its position among the fold's calibration rows.
    at: usize,
    /// Its example.
    example: usize,
    basis: Basis,
    candidate: Candidate,
}

/// One fold's ensemble, its calibration rows encoded, their outputs, and those with a prior.
struct Weighed<'a> {
    held: &'a Trained,
    fold: &'a CalibrationSplit,
    rows: Vec<PriorRow>,
    inputs: Vec<f32>,
    out: Vec<f32>,
}

impl Weighed<'_> {
    /// Its rows on `basis` weighed in place with their prior by `weights`.
    fn weigh(&mut self, basis: Basis, weights: &Weights) {
        for r in self.rows.iter().filter(|r| r.basis == basis) {
            let (w, _) = weights.of(&r.candidate.gpu);
            weigh_in(
                &mut self.out[r.at * OUTPUTS..(r.at + 1) * OUTPUTS],
                w,
                r.candidate.prior,
            );
        }
    }
}

/// Folds of a final-only fit's own cross-conformal calibration.
pub const CALIBRATION_FOLDS: usize = 5;
/// Share of workloads held out for the new-workload calibration.
pub const CALIBRATION_WORKLOADS: f64 = 0.15;
/// Share of the remaining unordered pairs held out for the known-workload calibration.
pub const CALIBRATION_PAIRS: f64 = 0.10;
/// Fewer workloads than this leave none out for the new-workload calibration (it then borrows
/// the known one's shift): with so few, holding some out would leave too little to learn from.
pub const MIN_WORKLOADS_FOR_NEW: usize = 6;

/// The rows `train` calibrates on and those it trains and early-stops on.
#[derive(Debug, Clone)]
pub struct CalibrationSplit {
    /// Workloads whose every row went to calibration (absent from the spec).
    pub held_workloads: BTreeSet<String>,
    /// In a new-family fold, the held-out workloads' families by workload (empty in the
    /// others): its rows calibrate `new_family`, grouped by family.
    pub held_families: BTreeMap<String, String>,
    /// A probed fold: `held_workloads` keep 1 to `PROBED_MAX` settings each in training (as
    /// the only measurements of their family) and their other rows calibrate `probed`.
    pub probed: bool,
    /// Unordered pairs held out for the known-workload calibration.
    pub known_pairs: usize,
    pub calibration: Vec<usize>,
    pub train: Vec<usize>,
}
