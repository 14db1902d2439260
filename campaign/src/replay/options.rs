//! What a replay runs: its budgets, its options, and the checks that refuse what cannot be
//! replayed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use duet_core::dataset::{Dataset, Status};
use duet_model::network::TrainConfig;

use crate::CampaignError;
use crate::audit;
use crate::choose::Select;
use crate::settings::{Setting, SettingKey};

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
    /// The probe curves' fits calibrated as `duet train --final-only` ships them (an ensemble
    /// per calibration fold and the refit instead of one ensemble each), so that each K's p90
    /// coverage is reported beside its MAPE.
    pub probe_coverage: bool,
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
            probe_coverage: false,
            group_by: None,
            priors: Vec::new(),
            workers: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            command: None,
            date: duet_core::timestamp::today(),
        }
    }
}

/// What each budget is in settings: (label, budget, audited).
pub(super) fn resolve_budgets(
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

/// Refuses what cannot be replayed, naming the flag or dataset.
pub(super) fn check(
    data: &[(PathBuf, Dataset)],
    options: &ReplayOptions,
) -> Result<(), CampaignError> {
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
