//! The replay: a complete dataset as the oracle (measuring a setting reads its row, optionally
//! with multiplicative noise on the throughputs), the same choosing loop as a real campaign,
//! and every method scored on a test set no method may select.
//!
//! For each seed: a random share of the settings (`test_fraction`, 20%) is set aside as the
//! test set; every solo run is known; each selection method runs its rounds up to the largest
//! budget (a smaller budget's choices are the first ones of that run: the loop is greedy and its
//! rounds the same, so a campaign stopped earlier chose exactly those). At each budget the audit
//! takes its share of the budget uniformly from the settings selection never chose, the model
//! fitted on the chosen settings is audited (its estimate set against its true MAPE on every
//! setting never chosen), and the model fitted on everything measured (chosen and audited, the
//! trainer's final-only fit) is scored on the test set. The full data is the same fit on every
//! selectable setting. Probe curves hold a workload (or every workload of one value of a
//! categorical feature, a family) out of the known settings and add K probes each, chosen by
//! the same scoring or at random, scoring its other settings.
//!
//! Earlier datasets (`priors`, a real campaign's `--prior`) join every fit as more to learn
//! from, never as candidates; one holding a setting of the oracle is refused (it would hold the
//! answers), and a probe curve's held-out workloads leave them too (a new job is in no earlier
//! dataset). With priors the first round is scored by their model rather than by the design.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Instant;

use duet_core::dataset::{Dataset, FeatureKind, Status, modes_present, speed};
use duet_core::progress::{Event, Progress};
use duet_core::rng::Rng;
use duet_model::accuracy::{Metrics, Scored, mean_of, sd_of};
use duet_model::network::TrainConfig;
use serde::{Deserialize, Serialize};

use crate::CampaignError;
use crate::audit::{self, Estimate};
use crate::choose::{ChooseOptions, Select, choose, choose_with};
use crate::record::RecordedChoice;
use crate::scoring::{Prediction, Scorer};
use crate::settings::{Candidate, Setting, SettingKey};

mod oracle;
mod probes;
mod seed;
#[cfg(test)]
mod tests;

use oracle::*;
use probes::*;
use seed::*;

/// The value of `format` in a replay's `report.json`.
pub const FORMAT: &str = "duet-campaign-replay/1";

/// A budget: a share of the selectable settings or a count of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// 0 < f <= 1.
    Fraction(f64),
    Settings(usize),
}

impl FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let f: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("budget `{s}`: expected a percentage such as 25%"))?;
            if !(f > 0.0 && f <= 100.0) {
                return Err(format!(
                    "budget `{s}`: a percentage above 0 and at most 100"
                ));
            }
            return Ok(Budget::Fraction(f / 100.0));
        }
        match s.parse::<usize>() {
            Ok(0) => Err(format!("budget `{s}`: at least one setting")),
            Ok(n) => Ok(Budget::Settings(n)),
            Err(_) => Err(format!(
                "budget `{s}`: expected a count of settings (60) or a percentage (25%)"
            )),
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Fraction(x) => write!(f, "{}%", (x * 1000.0).round() / 10.0),
            Budget::Settings(n) => write!(f, "{n}"),
        }
    }
}

impl Budget {
    /// The budget in settings, of `selectable`.
    pub fn settings(self, selectable: usize) -> Result<usize, String> {
        match self {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            Budget::Fraction(f) => Ok(((f * selectable as f64).round() as usize).max(1)),
            Budget::Settings(n) if n <= selectable => Ok(n),
            Budget::Settings(n) => Err(format!(
                "--budget {n}: only {selectable} settings are selectable (the test set holds \
                 the rest)"
            )),
        }
    }
}

/// What a replay runs.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub budgets: Vec<Budget>,
    pub selects: Vec<Select>,
    pub seeds: Vec<u64>,
    /// Standard deviation of the log of the multiplicative noise on every measured throughput
    /// (0: the dataset's values exactly).
    pub noise: f64,
    /// Rounds after the first to reach the largest budget.
    pub rounds: usize,
    /// The audit's size ([`audit::audit_size`] caps it at a third of each budget).
    pub audit: usize,
    /// Share of the settings set aside as the test set.
    pub test_fraction: f64,
    pub min_pairs: usize,
    /// The training recipe of every fit (its seed is replaced by the replay's).
    pub config: TrainConfig,
    /// Held-out workloads (and families) per seed for the probe curves; 0: none.
    pub probe_units: usize,
    /// The largest K of the probe curves.
    pub max_probes: usize,
    /// A categorical workload feature whose values are held out as families in the probe curve.
    pub group_by: Option<String>,
    /// Earlier datasets every fit also learns from (`--prior`, as in a real campaign): never
    /// candidates, never scored, and holding none of the oracle's settings.
    pub priors: Vec<(PathBuf, Dataset)>,
    pub workers: usize,
    /// The command line, for the report.
    pub command: Option<String>,
    pub date: String,
}

impl ReplayOptions {
    /// The defaults of `duet campaign replay`, with the shipped training recipe.
    pub fn new(budgets: Vec<Budget>, seeds: Vec<u64>) -> ReplayOptions {
        ReplayOptions {
            budgets,
            selects: Select::ALL.to_vec(),
            seeds,
            noise: 0.0,
            rounds: 8,
            audit: audit::DEFAULT_AUDIT,
            test_fraction: 0.2,
            min_pairs: crate::choose::MIN_PAIRS,
            config: TrainConfig::default(),
            probe_units: 0,
            max_probes: 5,
            group_by: None,
            priors: Vec::new(),
            workers: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            command: None,
            date: duet_core::timestamp::today(),
        }
    }
}

/// A statistic over seeds (or over held-out units and seeds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub mean: f64,
    /// Sample standard deviation (0 for one value).
    pub sd: f64,
    pub n: usize,
}

impl Stat {
    pub fn of(values: &[f64]) -> Stat {
        let xs: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        Stat {
            mean: mean_of(&xs),
            sd: sd_of(&xs),
            n: xs.len(),
        }
    }
}

/// One dataset the oracle reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataInfo {
    pub name: String,
    pub path: String,
    pub gpus: Vec<String>,
    pub workloads: usize,
    pub settings: usize,
}

impl DataInfo {
    fn of((path, d): &(PathBuf, Dataset)) -> DataInfo {
        DataInfo {
            name: d.meta.name.clone(),
            path: path.display().to_string(),
            gpus: d
                .pairs
                .iter()
                .map(|p| p.gpu.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            workloads: d.workloads.len(),
            settings: d.pairs.len(),
        }
    }
}

/// One method at one budget in one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedPoint {
    pub seed: u64,
    /// Test-set MAPE of speed of the model fitted on everything measured (null: nothing
    /// feasible to fit).
    pub mape: Option<f64>,
    pub p90_coverage: Option<f64>,
    /// The audit's estimate for the model fitted on the chosen settings.
    pub audit: Option<Estimate>,
    /// That model's true MAPE on every setting selection never chose.
    pub truth: Option<f64>,
    /// The settings the audit measured (none for the full data).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audited: Vec<Setting>,
}

/// One method at one budget, over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// As given (`25%`, `60`).
    pub budget: String,
    /// Settings measured: chosen plus audited.
    pub settings: usize,
    /// Of the selectable settings.
    pub fraction: f64,
    /// Of them, the audit's.
    pub audited: usize,
    pub mape: Stat,
    pub p90_coverage: Stat,
    pub seeds: Vec<SeedPoint>,
}

/// One selection method's curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub select: Select,
    pub points: Vec<Point>,
    /// Audits whose interval held the truth, of those with an interval.
    pub audit_held: usize,
    pub audits: usize,
}

/// The full data: the same fit on every selectable setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Full {
    pub settings: usize,
    pub mape: Stat,
    pub p90_coverage: Stat,
    pub seeds: Vec<SeedPoint>,
}

/// One held-out unit of a probe curve in one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeUnit {
    pub seed: u64,
    /// The workload, or the feature value of the family.
    pub unit: String,
    pub held: Vec<String>,
    /// Settings scored: every setting of the held workloads but the probes of either method.
    pub scored: usize,
    /// MAPE of speed for K = 0, 1, ... probes per held workload.
    pub chosen: Vec<Option<f64>>,
    pub random: Vec<Option<f64>>,
    pub chosen_probes: Vec<Setting>,
    pub random_probes: Vec<Setting>,
}

/// A probe curve: `workload` (one workload held out) or `<feature>` (a family).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probes {
    pub held_out: String,
    /// Mean and sd over units and seeds, for K = 0, 1, ...
    pub chosen: Vec<Stat>,
    pub random: Vec<Stat>,
    pub units: Vec<ProbeUnit>,
}

/// The choices of one method in one seed, up to the largest budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedChoices {
    pub seed: u64,
    pub select: Select,
    /// The seed's test set.
    pub test: Vec<Setting>,
    pub choices: Vec<RecordedChoice>,
}

/// What a replay found: report.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub format: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub date: String,
    pub data: Vec<DataInfo>,
    /// The earlier datasets every fit also learned from (`--prior`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priors: Vec<DataInfo>,
    pub settings: usize,
    /// Settings in each seed's test set.
    pub test: usize,
    pub selectable: usize,
    pub seeds: Vec<u64>,
    pub noise: f64,
    pub rounds: usize,
    pub audit: usize,
    pub min_pairs: usize,
    pub config: TrainConfig,
    pub interval: String,
    pub curves: Vec<Curve>,
    pub full: Full,
    pub probes: Vec<Probes>,
    pub choices: Vec<SeedChoices>,
    pub wall_seconds: f64,
}

/// Mixes a seed with a stream label and a counter.
fn mix(seed: u64, stream: u64, n: u64) -> u64 {
    let mut r = Rng::new(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.rotate_left(32));
    r.next_u64()
}

/// What each budget is in settings: (label, budget, audited).
fn resolve_budgets(
    budgets: &[Budget],
    selectable: usize,
    audit_n: usize,
) -> Result<Vec<(String, usize, usize)>, CampaignError> {
    let mut out = Vec::new();
    for b in budgets {
        let n = b.settings(selectable).map_err(CampaignError::Invalid)?;
        out.push((b.to_string(), n, audit::audit_size(n, audit_n, selectable)));
    }
    out.sort_by_key(|(_, n, _)| *n);
    out.dedup_by_key(|(_, n, _)| *n);
    Ok(out)
}

/// Runs the replay on `data` (each a dataset and where it was read from).
pub fn replay(
    data: &[(PathBuf, Dataset)],
    options: &ReplayOptions,
    progress: &mut dyn Progress,
) -> Result<Replay, CampaignError> {
    let started = Instant::now();
    check(data, options)?;
    let oracle = Oracle::new(data)?;
    let n = oracle.settings.len();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let test_n = ((options.test_fraction * n as f64).round() as usize).clamp(1, n - 1);
    let selectable = n - test_n;
    let budgets = resolve_budgets(&options.budgets, selectable, options.audit)?;
    let groups = match &options.group_by {
        Some(f) => family_values(&oracle, f)?,
        None => BTreeMap::new(),
    };
    let probe_units = if options.max_probes == 0 {
        0
    } else {
        options.probe_units
    };
    let families = if options.group_by.is_some() {
        probe_units.min(groups.len())
    } else {
        0
    };
    let workloads: BTreeSet<&str> = oracle
        .settings
        .iter()
        .flat_map(|c| [c.setting.a.as_str(), c.setting.b.as_str()])
        .collect();
    let per_seed = options.selects.len() * (1 + budgets.len())
        + 1
        + probe_units.min(workloads.len())
        + families;
    progress.event(Event::Start {
        stage: "replay",
        total: (per_seed * options.seeds.len()) as u64,
        unit: "steps",
    });
    progress.line(&format!(
        "{n} settings: {test_n} in each seed's test set, {selectable} selectable; budgets {}",
        budgets
            .iter()
            .map(|(l, b, a)| format!("{l} = {b} ({a} audited)"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut step = 0u64;
    let mut runs = Vec::new();
    for &seed in &options.seeds {
        runs.push(run_seed(
            &oracle,
            options,
            seed,
            test_n,
            &budgets,
            &groups,
            (probe_units, families),
            progress,
            &mut step,
        )?);
    }
    progress.event(Event::Finish);

    let curves = options
        .selects
        .iter()
        .map(|&select| {
            let points: Vec<Point> = budgets
                .iter()
                .enumerate()
                .map(|(j, (label, b, a))| {
                    let seeds: Vec<SeedPoint> =
                        runs.iter().map(|r| r.points[&select][j].clone()).collect();
                    point(label, *b, *a, selectable, seeds)
                })
                .collect();
            let outcomes: Vec<bool> = points
                .iter()
                .flat_map(|p| &p.seeds)
                .filter_map(|s| s.audit.as_ref()?.holds(s.truth?))
                .collect();
            Curve {
                select,
                audit_held: outcomes.iter().filter(|h| **h).count(),
                audits: outcomes.len(),
                points,
            }
        })
        .collect();
    let full_seeds: Vec<SeedPoint> = runs.iter().map(|r| r.full.clone()).collect();
    let full = Full {
        settings: selectable,
        mape: Stat::of(&full_seeds.iter().filter_map(|s| s.mape).collect::<Vec<_>>()),
        p90_coverage: Stat::of(
            &full_seeds
                .iter()
                .filter_map(|s| s.p90_coverage)
                .collect::<Vec<_>>(),
        ),
        seeds: full_seeds,
    };
    let mut probes: BTreeMap<String, Vec<ProbeUnit>> = BTreeMap::new();
    let mut choices = Vec::new();
    for r in runs {
        for (kind, unit) in r.probes {
            probes.entry(kind).or_default().push(unit);
        }
        choices.extend(r.choices);
    }
    let probes = probes
        .into_iter()
        .map(|(held_out, units)| {
            let curve = |f: fn(&ProbeUnit) -> &Vec<Option<f64>>| {
                (0..=options.max_probes)
                    .map(|k| {
                        Stat::of(
                            &units
                                .iter()
                                .filter_map(|u| f(u).get(k).copied().flatten())
                                .collect::<Vec<_>>(),
                        )
                    })
                    .collect()
            };
            Probes {
                held_out,
                chosen: curve(|u| &u.chosen),
                random: curve(|u| &u.random),
                units,
            }
        })
        .collect();
    Ok(Replay {
        format: FORMAT.to_string(),
        command: options.command.clone(),
        date: options.date.clone(),
        data: data.iter().map(DataInfo::of).collect(),
        priors: options.priors.iter().map(DataInfo::of).collect(),
        settings: n,
        test: test_n,
        selectable,
        seeds: options.seeds.clone(),
        noise: options.noise,
        rounds: options.rounds,
        audit: options.audit,
        min_pairs: options.min_pairs,
        config: options.config.clone(),
        interval: audit::INTERVAL.to_string(),
        curves,
        full,
        probes,
        choices,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

fn point(
    label: &str,
    budget: usize,
    audited: usize,
    selectable: usize,
    seeds: Vec<SeedPoint>,
) -> Point {
    #[allow(clippy::cast_precision_loss)]
    let fraction = budget as f64 / selectable as f64;
    Point {
        budget: label.to_string(),
        settings: budget,
        fraction,
        audited,
        mape: Stat::of(&seeds.iter().filter_map(|s| s.mape).collect::<Vec<_>>()),
        p90_coverage: Stat::of(
            &seeds
                .iter()
                .filter_map(|s| s.p90_coverage)
                .collect::<Vec<_>>(),
        ),
        seeds,
    }
}

/// Refuses what cannot be replayed, naming the flag or dataset.
fn check(data: &[(PathBuf, Dataset)], options: &ReplayOptions) -> Result<(), CampaignError> {
    let invalid = |m: String| Err(CampaignError::Invalid(m));
    if data.is_empty() {
        return invalid("--data: name at least one complete dataset".into());
    }
    if options.seeds.is_empty() {
        return invalid("--seeds: give at least one seed".into());
    }
    let mut distinct = options.seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != options.seeds.len() {
        return invalid("--seeds: each seed once".into());
    }
    if options.budgets.is_empty() {
        return invalid("--budget: give at least one budget, for example 25%".into());
    }
    if options.selects.is_empty() {
        return invalid("--select: give at least one of uncertainty, random".into());
    }
    if !(options.noise.is_finite() && options.noise >= 0.0) {
        return invalid(format!(
            "--noise {}: the standard deviation of the log noise, 0 or more (0.03: about 3%)",
            options.noise
        ));
    }
    if !(options.test_fraction > 0.0 && options.test_fraction < 1.0) {
        return invalid(format!(
            "the test set's share {} must be above 0 and below 1",
            options.test_fraction
        ));
    }
    if options.rounds == 0 {
        return invalid("--rounds: at least 1".into());
    }
    let oracle_settings: BTreeMap<SettingKey, &PathBuf> = data
        .iter()
        .flat_map(|(path, d)| d.pairs.iter().map(move |p| (Setting::of(p).key(), path)))
        .collect();
    let modes: BTreeSet<_> = data
        .iter()
        .flat_map(|(_, d)| d.pairs.iter().map(|p| p.mode))
        .collect();
    for (dir, prior) in &options.priors {
        if let Some((p, path)) = prior
            .pairs
            .iter()
            .find_map(|p| oracle_settings.get(&Setting::of(p).key()).map(|d| (p, d)))
        {
            return invalid(format!(
                "--prior {}: it holds setting {} of --data {}; a prior that holds the oracle's \
                 settings hands the replay the answers it is judged on (give an earlier \
                 dataset of other devices, modes or workloads)",
                dir.display(),
                Setting::of(p),
                path.display()
            ));
        }
        if let Some(p) = prior.pairs.iter().find(|p| !modes.contains(&p.mode)) {
            return invalid(format!(
                "--prior {}: its pairs are measured in {} but --data holds no pair in that \
                 mode; an earlier dataset must be in the replayed modes (as with `duet \
                 profile --prior`)",
                dir.display(),
                p.mode
            ));
        }
    }
    for (path, d) in data {
        let feasible = d.pairs.iter().filter(|p| p.status == Status::Ok).count();
        if d.workloads.len() < 2 || feasible < 5 {
            return invalid(format!(
                "{}: a replay needs a complete dataset with at least two workloads and five \
                 feasible settings (this one has {} workloads and {feasible} feasible settings)",
                path.display(),
                d.workloads.len()
            ));
        }
    }
    Ok(())
}

/// Each value of the categorical feature `feature` and the workloads holding it (by id, across
/// the datasets).
fn family_values(
    oracle: &Oracle,
    feature: &str,
) -> Result<BTreeMap<String, BTreeSet<String>>, CampaignError> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in &oracle.truth {
        match d.meta.workload_features.iter().find(|f| f.name == feature) {
            Some(f) if f.kind == FeatureKind::Categorical => {}
            Some(_) => {
                return Err(CampaignError::Invalid(format!(
                    "--group-by {feature}: `{feature}` is numeric in dataset `{}`; families \
                     need a categorical feature such as `model`",
                    d.meta.name
                )));
            }
            None => {
                return Err(CampaignError::Invalid(format!(
                    "--group-by {feature}: dataset `{}` declares no workload feature \
                     `{feature}`",
                    d.meta.name
                )));
            }
        }
        for w in &d.workloads {
            if let Some(v) = w.features.get(feature).and_then(|v| v.as_category()) {
                out.entry(v.to_string())
                    .or_default()
                    .insert(w.workload.clone());
            }
        }
    }
    if out.len() < 2 {
        return Err(CampaignError::Invalid(format!(
            "--group-by {feature}: the workloads have {} value(s) of `{feature}`; holding a \
             family out needs at least 2",
            out.len()
        )));
    }
    Ok(out)
}
