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

/// The oracle: every setting of the datasets and what measuring it gives.
#[derive(Debug)]
struct Oracle {
    truth: Vec<Dataset>,
    settings: Vec<Candidate>,
    /// `settings[i]` is row `rows[i]` of its dataset.
    rows: Vec<usize>,
    index: HashMap<(usize, SettingKey), usize>,
}

impl Oracle {
    fn new(data: &[(PathBuf, Dataset)]) -> Result<Oracle, CampaignError> {
        let mut owner: BTreeMap<String, &PathBuf> = BTreeMap::new();
        let mut settings = Vec::new();
        let mut rows = Vec::new();
        let mut index = HashMap::new();
        for (d, (path, dataset)) in data.iter().enumerate() {
            for gpu in dataset
                .pairs
                .iter()
                .map(|p| &p.gpu)
                .collect::<BTreeSet<_>>()
            {
                if let Some(other) = owner.insert(gpu.clone(), path)
                    && other != path
                {
                    return Err(CampaignError::Invalid(format!(
                        "--data {} and --data {} both hold settings on `{gpu}`: give one \
                         dataset per device (merge shards of one campaign first with `duet \
                         dataset merge`)",
                        other.display(),
                        path.display()
                    )));
                }
            }
            for (r, p) in dataset.pairs.iter().enumerate() {
                let setting = Setting::of(p);
                index.insert((d, setting.key()), settings.len());
                settings.push(Candidate {
                    dataset: d,
                    setting,
                });
                rows.push(r);
            }
        }
        Ok(Oracle {
            truth: data.iter().map(|(_, d)| d.clone()).collect(),
            settings,
            rows,
            index,
        })
    }

    /// The datasets as measured with `noise` (seeded): every throughput times exp(noise z).
    fn measured_world(&self, noise: f64, seed: u64) -> Vec<Dataset> {
        let mut rng = Rng::new(seed ^ 0x4E01_5E00);
        let mut normal = move || {
            // Box-Muller.
            let u = rng.unit().max(f64::MIN_POSITIVE);
            let v = rng.unit();
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let mut out = self.truth.clone();
        if noise > 0.0 {
            for d in &mut out {
                for w in &mut d.workloads {
                    w.solo_throughput *= (noise * normal()).exp();
                }
                for p in &mut d.pairs {
                    p.throughput_a *= (noise * normal()).exp();
                    p.throughput_b *= (noise * normal()).exp();
                }
            }
        }
        out
    }

    /// The known datasets after measuring `chosen` (setting indices) in `world`: every solo
    /// run, and those settings' rows in the datasets' own order.
    fn known(&self, world: &[Dataset], chosen: &[usize]) -> Vec<Dataset> {
        let mut by_dataset: Vec<Vec<usize>> = vec![Vec::new(); world.len()];
        for &i in chosen {
            by_dataset[self.settings[i].dataset].push(self.rows[i]);
        }
        world
            .iter()
            .zip(by_dataset)
            .map(|(d, mut rows)| {
                rows.sort_unstable();
                let pairs: Vec<_> = rows.iter().map(|&r| d.pairs[r].clone()).collect();
                let mut meta = d.meta.clone();
                meta.modes = modes_present(&pairs);
                Dataset {
                    meta,
                    workloads: d.workloads.clone(),
                    pairs,
                }
            })
            .collect()
    }

    /// Both directions' speeds of setting `i` in `world` (None: not feasible), and whether
    /// the setting says anything about speed or feasibility (a crash or timeout does not).
    fn speeds(&self, world: &[Dataset], i: usize) -> Option<[Option<f64>; 2]> {
        let c = &self.settings[i];
        let d = &world[c.dataset];
        let p = &d.pairs[self.rows[i]];
        match p.status {
            Status::Ok => {}
            Status::Oom => return Some([None, None]),
            Status::Crash | Status::Timeout => return None,
        }
        let solo = |id: &str| d.workload(id).map(|w| w.solo_throughput);
        let (sa, sb) = (solo(&p.a)?, solo(&p.b)?);
        let (fa, fb) = (speed(p.throughput_a, sa), speed(p.throughput_b, sb));
        // In the setting's own order (`a <= b`).
        Some(if p.a == c.setting.a {
            [Some(fa), Some(fb)]
        } else {
            [Some(fb), Some(fa)]
        })
    }

    fn candidates(&self, indices: &[usize]) -> Vec<Candidate> {
        indices.iter().map(|&i| self.settings[i].clone()).collect()
    }

    fn index_of(&self, c: &Candidate) -> Option<usize> {
        self.index.get(&(c.dataset, c.setting.key())).copied()
    }
}

/// The scored rows of `predictions` (of `indices`) against the truth.
fn scored(
    oracle: &Oracle,
    indices: &[usize],
    predictions: &[Prediction],
    world: &[Dataset],
) -> Vec<Scored> {
    let mut out = Vec::new();
    for (&i, p) in indices.iter().zip(predictions) {
        let Some(speeds) = oracle.speeds(world, i) else {
            continue;
        };
        for (direction, s) in p.directions.iter().zip(speeds) {
            out.push(direction.scored(s));
        }
    }
    out
}

/// Test-set MAPE and p90 coverage of `scorer`.
fn test_metrics(
    oracle: &Oracle,
    scorer: Option<&Scorer>,
    test: &[usize],
) -> (Option<f64>, Option<f64>) {
    let Some(scorer) = scorer else {
        return (None, None);
    };
    let predictions = scorer.predict(&oracle.candidates(test));
    let m = Metrics::of(&scored(oracle, test, &predictions, &oracle.truth));
    (
        m.mape_speed.is_finite().then_some(m.mape_speed),
        m.p90_coverage,
    )
}

/// Mixes a seed with a stream label and a counter.
fn mix(seed: u64, stream: u64, n: u64) -> u64 {
    let mut r = Rng::new(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.rotate_left(32));
    r.next_u64()
}

/// Everything one seed gives.
#[derive(Debug)]
struct SeedRun {
    points: BTreeMap<Select, Vec<SeedPoint>>,
    full: SeedPoint,
    choices: Vec<SeedChoices>,
    probes: Vec<(String, ProbeUnit)>,
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

#[allow(clippy::too_many_arguments)]
fn run_seed(
    oracle: &Oracle,
    options: &ReplayOptions,
    seed: u64,
    test_n: usize,
    budgets: &[(String, usize, usize)],
    groups: &BTreeMap<String, BTreeSet<String>>,
    (probe_units, families): (usize, usize),
    progress: &mut dyn Progress,
    step: &mut u64,
) -> Result<SeedRun, CampaignError> {
    let n = oracle.settings.len();
    let mut test = audit::draw(n, test_n, mix(seed, 1, 0));
    test.sort_unstable();
    let in_test: BTreeSet<usize> = test.iter().copied().collect();
    let selectable: Vec<usize> = (0..n).filter(|i| !in_test.contains(i)).collect();
    let world = oracle.measured_world(options.noise, mix(seed, 2, 0));
    let config = TrainConfig {
        seed,
        ..options.config.clone()
    };
    let priors: Vec<Dataset> = options.priors.iter().map(|(_, d)| d.clone()).collect();
    let fit = |chosen: &[usize], calibrated: bool| {
        Scorer::fit(
            &oracle.known(&world, chosen),
            &priors,
            &config,
            calibrated,
            options.workers,
        )
    };
    let mut done = |progress: &mut dyn Progress, line: String| {
        *step += 1;
        progress.event(Event::Step {
            done: *step,
            now: &line,
        });
        progress.line(&line);
    };
    let percent = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.2}%", 100.0 * x));

    let mut points = BTreeMap::new();
    let mut choices = Vec::new();
    let chosen_max = budgets.last().map_or(0, |(_, b, a)| b - a);
    for &select in &options.selects {
        let (picks, picked) = select_run(
            oracle,
            options,
            (&world, &priors),
            &config,
            seed,
            select,
            &selectable,
            chosen_max,
        )?;
        done(
            progress,
            format!(
                "seed {seed}: {select} chose {} settings in {} rounds",
                picks.len(),
                picks.last().map_or(0, |p| p.round + 1)
            ),
        );
        choices.push(SeedChoices {
            seed,
            select,
            test: test
                .iter()
                .map(|&i| oracle.settings[i].setting.clone())
                .collect(),
            choices: picks,
        });
        let mut at_budgets = Vec::new();
        for (j, (label, budget, audited)) in budgets.iter().enumerate() {
            let chosen_n = (budget - audited).min(picked.len());
            let chosen = &picked[..chosen_n];
            let chosen_set: BTreeSet<usize> = chosen.iter().copied().collect();
            let unchosen: Vec<usize> = selectable
                .iter()
                .copied()
                .filter(|i| !chosen_set.contains(i))
                .collect();
            // The model of the chosen settings, audited and judged on everything not chosen.
            let selection_model = fit(chosen, false)?;
            let audit_rows: Vec<usize> = audit::draw(
                unchosen.len(),
                *audited,
                mix(seed, 3, ((j as u64) << 8) | select as u64),
            )
            .into_iter()
            .map(|k| unchosen[k])
            .collect();
            let (estimate, truth) = match &selection_model {
                Some(m) => {
                    let errors = audit::errors(m, &world, &oracle.candidates(&audit_rows));
                    let predictions = m.predict(&oracle.candidates(&unchosen));
                    let m = Metrics::of(&scored(oracle, &unchosen, &predictions, &oracle.truth));
                    (
                        audit::estimate(&errors, unchosen.len()),
                        m.mape_speed.is_finite().then_some(m.mape_speed),
                    )
                }
                None => (None, None),
            };
            let mut measured = chosen.to_vec();
            measured.extend(&audit_rows);
            let final_model = fit(&measured, true)?;
            let (mape, p90) = test_metrics(oracle, final_model.as_ref(), &test);
            done(
                progress,
                format!(
                    "seed {seed}: {select} at {label} ({budget} settings, {audited} audited): \
                     test MAPE {}; audit {} [{}, {}] against {}",
                    percent(mape),
                    percent(estimate.as_ref().map(|e| e.mape)),
                    percent(estimate.as_ref().and_then(|e| e.low)),
                    percent(estimate.as_ref().and_then(|e| e.high)),
                    percent(truth)
                ),
            );
            at_budgets.push(SeedPoint {
                seed,
                mape,
                p90_coverage: p90,
                audit: estimate,
                truth,
                audited: audit_rows
                    .iter()
                    .map(|&i| oracle.settings[i].setting.clone())
                    .collect(),
            });
        }
        points.insert(select, at_budgets);
    }
    let full_model = fit(&selectable, true)?;
    let (mape, p90) = test_metrics(oracle, full_model.as_ref(), &test);
    done(
        progress,
        format!(
            "seed {seed}: full data ({} settings): test MAPE {}",
            selectable.len(),
            percent(mape)
        ),
    );
    let full = SeedPoint {
        seed,
        mape,
        p90_coverage: p90,
        audit: None,
        truth: None,
        audited: Vec::new(),
    };

    // Probe curves: a sample of workloads, and of families.
    let mut probes = Vec::new();
    let mut ids: Vec<String> =
        crate::settings::workloads_of(selectable.iter().map(|&i| &oracle.settings[i].setting))
            .into_iter()
            .map(str::to_string)
            .collect();
    Rng::new(mix(seed, 4, 0)).shuffle(&mut ids);
    let mut units: Vec<(String, String, BTreeSet<String>)> = ids
        .into_iter()
        .take(probe_units)
        .map(|id| ("workload".to_string(), id.clone(), BTreeSet::from([id])))
        .collect();
    if let Some(feature) = &options.group_by {
        let mut values: Vec<(&String, &BTreeSet<String>)> = groups.iter().collect();
        Rng::new(mix(seed, 5, 0)).shuffle(&mut values);
        units.extend(
            values
                .into_iter()
                .take(families)
                .map(|(v, held)| (feature.clone(), v.clone(), held.clone())),
        );
    }
    for (kind, unit, held) in units {
        let outcome = probe(
            oracle,
            options,
            &world,
            &config,
            seed,
            &selectable,
            &test,
            &unit,
            &held,
        )?;
        done(
            progress,
            format!(
                "seed {seed}: {kind} {unit} held out ({} scored settings): MAPE at K = 0..{} chosen [{}], random [{}]",
                outcome.scored,
                options.max_probes,
                outcome
                    .chosen
                    .iter()
                    .map(|x| percent(*x))
                    .collect::<Vec<_>>()
                    .join(", "),
                outcome
                    .random
                    .iter()
                    .map(|x| percent(*x))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        );
        probes.push((kind, outcome));
    }
    Ok(SeedRun {
        points,
        full,
        choices,
        probes,
    })
}

/// One selection method's choices up to `chosen_max` settings, round by round, as a real
/// campaign makes them: the first round before any pair is known (as many settings as there
/// are workloads, so each appears about twice), then `rounds` rounds of equal size. Returns the
/// record and the settings' indices, in choice order.
#[allow(clippy::too_many_arguments)]
fn select_run(
    oracle: &Oracle,
    options: &ReplayOptions,
    (world, priors): (&[Dataset], &[Dataset]),
    config: &TrainConfig,
    seed: u64,
    select: Select,
    selectable: &[usize],
    chosen_max: usize,
) -> Result<(Vec<RecordedChoice>, Vec<usize>), CampaignError> {
    let workloads: BTreeSet<(usize, &str)> = selectable
        .iter()
        .flat_map(|&i| {
            let c = &oracle.settings[i];
            [
                (c.dataset, c.setting.a.as_str()),
                (c.dataset, c.setting.b.as_str()),
            ]
        })
        .collect();
    let first = workloads.len().min(chosen_max);
    let size = (chosen_max - first).div_ceil(options.rounds).max(1);
    let mut chosen: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    let mut round = 0;
    while chosen.len() < chosen_max {
        let k = if round == 0 { first } else { size }.min(chosen_max - chosen.len());
        let taken: BTreeSet<usize> = chosen.iter().copied().collect();
        let left: Vec<usize> = selectable
            .iter()
            .copied()
            .filter(|i| !taken.contains(i))
            .collect();
        let known = oracle.known(world, &chosen);
        let choose_options = ChooseOptions {
            select,
            seed: mix(seed, 6, round as u64),
            min_pairs: options.min_pairs,
            config: config.clone(),
            workers: options.workers,
        };
        let picks = choose(
            &known,
            priors,
            &oracle.candidates(&left),
            k,
            &choose_options,
        )?;
        if picks.is_empty() {
            break;
        }
        for c in picks {
            if let Some(i) = oracle.index_of(&c.candidate) {
                chosen.push(i);
            }
            out.push(RecordedChoice {
                round,
                setting: c.candidate.setting,
                rule: c.rule,
                score: c.score,
            });
        }
        round += 1;
    }
    Ok((out, chosen))
}

/// `d` without the workloads of `held`: their solo rows and every pair with one of them.
fn without_workloads(d: &Dataset, held: &BTreeSet<String>) -> Dataset {
    let pairs: Vec<_> = d
        .pairs
        .iter()
        .filter(|p| !held.contains(&p.a) && !held.contains(&p.b))
        .cloned()
        .collect();
    let mut meta = d.meta.clone();
    meta.modes = modes_present(&pairs);
    Dataset {
        meta,
        workloads: d
            .workloads
            .iter()
            .filter(|w| !held.contains(&w.workload))
            .cloned()
            .collect(),
        pairs,
    }
}

/// A held-out unit's probe curves: every setting of `held` leaves the known ones; each held
/// workload then gets K = 1..max probes (settings with a known workload), chosen by the
/// ensemble's disagreement (the same `choose`, one fit per K) or drawn at random.
#[allow(clippy::too_many_arguments)]
fn probe(
    oracle: &Oracle,
    options: &ReplayOptions,
    world: &[Dataset],
    config: &TrainConfig,
    seed: u64,
    selectable: &[usize],
    test: &[usize],
    unit: &str,
    held: &BTreeSet<String>,
) -> Result<ProbeUnit, CampaignError> {
    let holds = |i: usize| {
        let s = &oracle.settings[i].setting;
        held.contains(&s.a) || held.contains(&s.b)
    };
    let base: Vec<usize> = selectable.iter().copied().filter(|&i| !holds(i)).collect();
    // Each held workload's probe candidates: with one known workload.
    let candidates_of = |h: &str| -> Vec<usize> {
        selectable
            .iter()
            .copied()
            .filter(|&i| {
                let s = &oracle.settings[i].setting;
                s.touches(h) && !held.contains(s.partner(h))
            })
            .collect()
    };
    let all: Vec<usize> = {
        let mut v: Vec<usize> = selectable
            .iter()
            .chain(test)
            .copied()
            .filter(|&i| holds(i))
            .collect();
        v.sort_unstable();
        v
    };
    let all_candidates = oracle.candidates(&all);
    // A new job is in no earlier dataset either: the held workloads leave the priors too.
    let priors: Vec<Dataset> = options
        .priors
        .iter()
        .map(|(_, d)| without_workloads(d, held))
        .collect();
    let fit = |probes: &[usize]| {
        let mut rows = base.clone();
        rows.extend(probes);
        Scorer::fit(
            &oracle.known(world, &rows),
            &priors,
            config,
            false,
            options.workers,
        )
    };
    let max = options.max_probes;
    // Chosen: one fit per K; the fit that scores K probes also chooses the next ones.
    let mut chosen: Vec<usize> = Vec::new();
    let mut chosen_predictions = Vec::new();
    for k in 0..=max {
        let scorer = fit(&chosen)?;
        chosen_predictions.push(scorer.as_ref().map(|s| s.predict(&all_candidates)));
        if k == max {
            break;
        }
        let mut rows = base.clone();
        rows.extend(&chosen);
        let known = oracle.known(world, &rows);
        for h in held {
            let taken: BTreeSet<usize> = chosen.iter().copied().collect();
            let left: Vec<usize> = candidates_of(h)
                .into_iter()
                .filter(|i| !taken.contains(i))
                .collect();
            let picks = choose_with(
                scorer.as_ref(),
                &known,
                &oracle.candidates(&left),
                1,
                Select::Uncertainty,
                mix(seed, 7, k as u64),
                options.min_pairs,
            );
            chosen.extend(picks.iter().filter_map(|c| oracle.index_of(&c.candidate)));
        }
    }
    // Random: each held workload's candidates in a seeded order, the first K.
    let mut rng = Rng::new(mix(seed, 8, 0));
    let orders: Vec<Vec<usize>> = held
        .iter()
        .map(|h| {
            let mut c = candidates_of(h);
            rng.shuffle(&mut c);
            c
        })
        .collect();
    let random_at = |k: usize| -> Vec<usize> {
        orders
            .iter()
            .flat_map(|o| o.iter().take(k).copied())
            .collect()
    };
    let mut random_predictions = vec![chosen_predictions[0].clone()];
    for k in 1..=max {
        let scorer = fit(&random_at(k))?;
        random_predictions.push(scorer.as_ref().map(|s| s.predict(&all_candidates)));
    }
    let random = random_at(max);
    let probed: BTreeSet<usize> = chosen.iter().chain(&random).copied().collect();
    let keep: Vec<bool> = all.iter().map(|i| !probed.contains(i)).collect();
    let scored_indices: Vec<usize> = all
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(i, _)| *i)
        .collect();
    let mape = |predictions: &Option<Vec<Prediction>>| {
        let p = predictions.as_ref()?;
        let kept: Vec<Prediction> = p
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(p, _)| p.clone())
            .collect();
        let m = Metrics::of(&scored(oracle, &scored_indices, &kept, &oracle.truth));
        m.mape_speed.is_finite().then_some(m.mape_speed)
    };
    let settings_of = |v: &[usize]| -> Vec<Setting> {
        v.iter()
            .map(|&i| oracle.settings[i].setting.clone())
            .collect()
    };
    Ok(ProbeUnit {
        seed,
        unit: unit.to_string(),
        held: held.iter().cloned().collect(),
        scored: scored_indices.len(),
        chosen: chosen_predictions.iter().map(mape).collect(),
        random: random_predictions.iter().map(mape).collect(),
        chosen_probes: settings_of(&chosen),
        random_probes: settings_of(&random),
    })
}

#[cfg(test)]
mod tests {
    use duet_core::dataset::Mode;
    use duet_core::progress::Lines;

    use super::*;
    use crate::choose::Rule;
    use crate::testdata::{quick, synthetic};

    #[test]
    fn a_replay_keeps_its_sets_apart_and_its_full_budget_is_the_full_data() {
        let data = vec![(
            PathBuf::from("synthetic"),
            synthetic(8, &[Mode::Timeslice, Mode::Mps]),
        )];
        let mut options = ReplayOptions::new(
            vec![
                Budget::Fraction(1.0),
                Budget::Fraction(0.4),
                Budget::Settings(20),
            ],
            vec![7, 8],
        );
        options.config = quick();
        options.workers = 1;
        options.rounds = 3;
        options.audit = 6;
        options.probe_units = 1;
        options.max_probes = 2;
        options.group_by = Some("model".to_string());
        let mut lines = Vec::new();
        let r = replay(
            &data,
            &options,
            &mut Lines(|l: &str| lines.push(l.to_string())),
        )
        .expect("replayed");
        // 72 settings: 14 in each test set, 58 selectable.
        assert_eq!((r.settings, r.test, r.selectable), (72, 14, 58));
        for c in &r.curves {
            let budgets: Vec<usize> = c.points.iter().map(|p| p.settings).collect();
            assert_eq!(budgets, [20, 23, 58], "sorted by size");
            let last = c.points.last().expect("points");
            for (s, full) in last.seeds.iter().zip(&r.full.seeds) {
                assert_eq!(s.mape, full.mape, "{}: 100% is the full data", c.select);
                assert_eq!(s.p90_coverage, full.p90_coverage);
                assert!(s.mape.is_some());
            }
        }
        for s in &r.choices {
            let test: BTreeSet<SettingKey> = s.test.iter().map(Setting::key).collect();
            assert_eq!(test.len(), 14);
            let chosen: Vec<SettingKey> = s.choices.iter().map(|c| c.setting.key()).collect();
            assert_eq!(chosen.len(), 58 - 6, "the largest budget's choices");
            assert_eq!(chosen.iter().collect::<BTreeSet<_>>().len(), chosen.len());
            assert!(
                chosen.iter().all(|k| !test.contains(k)),
                "a test setting was chosen"
            );
            let curve = r
                .curves
                .iter()
                .find(|c| c.select == s.select)
                .expect("curve");
            for p in &curve.points {
                let at = p.seeds.iter().find(|x| x.seed == s.seed).expect("seed");
                assert_eq!(at.audited.len(), p.audited);
                let prefix: BTreeSet<&SettingKey> =
                    chosen[..p.settings - p.audited].iter().collect();
                for a in &at.audited {
                    assert!(!prefix.contains(&a.key()), "an audited setting was chosen");
                    assert!(!test.contains(&a.key()), "a test setting was audited");
                }
            }
            if s.select == Select::Uncertainty {
                assert!(s.choices[..8].iter().all(|c| c.rule == Rule::Design));
                assert!(s.choices[8..].iter().all(|c| c.rule != Rule::Design));
            }
        }
        assert_eq!(r.probes.len(), 2, "a workload and a family held out");
        for p in &r.probes {
            assert_eq!(p.units.len(), 2, "one unit per seed");
            for u in &p.units {
                assert_eq!(u.chosen.len(), 3);
                assert_eq!(u.random.len(), 3);
                assert_eq!(u.chosen[0], u.random[0], "K = 0 is one fit");
                assert_eq!(u.chosen_probes.len(), 2 * u.held.len());
                for s in u.chosen_probes.iter().chain(&u.random_probes) {
                    let held = |w: &String| u.held.contains(w);
                    assert!(
                        held(&s.a) != held(&s.b),
                        "a probe pairs a held workload with a known one"
                    );
                }
            }
        }
        assert!(lines.iter().any(|l| l.contains("full data")), "{lines:?}");
        // The same seeds replay the same.
        let again = replay(&data, &options, &mut Lines(|_: &str| {})).expect("replayed");
        assert_eq!(again.curves, r.curves);
    }

    /// `d` as measured on another device, `gpu`.
    fn on_device(d: &Dataset, gpu: &str) -> Dataset {
        let mut d = d.clone();
        d.meta.name = format!("synthetic-{gpu}");
        d.meta.provenance.gpu = gpu.to_string();
        for p in &mut d.pairs {
            p.gpu = gpu.to_string();
        }
        d
    }

    #[test]
    fn a_prior_joins_every_fit_scores_the_first_round_and_never_holds_the_answers() {
        let d = synthetic(6, &[Mode::Space]);
        let data = vec![(PathBuf::from("synthetic"), d.clone())];
        let mut options = ReplayOptions::new(vec![Budget::Settings(12)], vec![7]);
        options.config = quick();
        options.workers = 1;
        options.rounds = 2;
        options.audit = 3;
        options.probe_units = 1;
        options.max_probes = 1;
        // The oracle's own settings as a prior are refused, by name.
        options.priors = vec![(PathBuf::from("same"), d.clone())];
        let e = replay(&data, &options, &mut Lines(|_: &str| {})).expect_err("refused");
        assert!(
            e.to_string().contains("--prior same: it holds setting"),
            "{e}"
        );
        // A prior in a mode the oracle lacks is refused too.
        options.priors = vec![(
            PathBuf::from("mps"),
            on_device(&synthetic(6, &[Mode::Mps]), "h"),
        )];
        let e = replay(&data, &options, &mut Lines(|_: &str| {})).expect_err("refused");
        assert!(e.to_string().contains("--prior mps"), "{e}");
        // Another device's measurements of the same workloads: no design round (the prior's
        // model scores it), reported, and a probe curve's held workload is not in it.
        options.priors = vec![(PathBuf::from("other"), on_device(&d, "h"))];
        let r = replay(&data, &options, &mut Lines(|_: &str| {})).expect("replayed");
        assert_eq!(r.priors.len(), 1);
        assert_eq!(r.priors[0].gpus, ["h"]);
        let uncertainty = r
            .choices
            .iter()
            .find(|c| c.select == Select::Uncertainty)
            .expect("choices");
        assert!(
            uncertainty.choices.iter().all(|c| c.rule != Rule::Design),
            "{:?}",
            uncertainty.choices
        );
        assert!(uncertainty.choices.iter().all(|c| c.setting.gpu == "g"));
        assert!(crate::report::markdown(&r).contains("`synthetic-h` (h, 21 settings)"));
        let held: BTreeSet<String> = BTreeSet::from(["w1".to_string()]);
        let without = without_workloads(&on_device(&d, "h"), &held);
        assert_eq!((without.workloads.len(), without.pairs.len()), (5, 15));
        // Without the prior, the same replay starts with the design.
        options.priors.clear();
        let plain = replay(&data, &options, &mut Lines(|_: &str| {})).expect("replayed");
        let first = plain
            .choices
            .iter()
            .find(|c| c.select == Select::Uncertainty)
            .expect("choices");
        assert_eq!(first.choices[0].rule, Rule::Design);
    }

    #[test]
    fn bad_replays_are_refused_by_name() {
        let d = synthetic(4, &[Mode::Space]);
        let data = vec![(PathBuf::from("a"), d.clone()), (PathBuf::from("b"), d)];
        let options = ReplayOptions::new(vec![Budget::Fraction(0.5)], vec![7]);
        let e = replay(&data, &options, &mut Lines(|_: &str| {})).expect_err("refused");
        assert!(e.to_string().contains("both hold settings on `g`"), "{e}");
        let one = &data[..1];
        let e = replay(
            one,
            &ReplayOptions::new(vec![Budget::Settings(500)], vec![7]),
            &mut Lines(|_: &str| {}),
        )
        .expect_err("refused");
        assert!(e.to_string().contains("--budget 500"), "{e}");
        let e = replay(
            one,
            &ReplayOptions::new(vec![Budget::Settings(2)], vec![7, 7]),
            &mut Lines(|_: &str| {}),
        )
        .expect_err("refused");
        assert!(e.to_string().contains("--seeds"), "{e}");
        assert_eq!("25%".parse::<Budget>(), Ok(Budget::Fraction(0.25)));
        assert_eq!("60".parse::<Budget>(), Ok(Budget::Settings(60)));
        for bad in ["0%", "120%", "0", "x", "-3"] {
            assert!(bad.parse::<Budget>().is_err(), "{bad}");
        }
        assert_eq!(Budget::Fraction(0.25).to_string(), "25%");
    }
}
