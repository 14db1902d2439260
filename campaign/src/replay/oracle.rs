//! The oracle a replay measures from (a complete dataset: measuring a setting reads its row,
//! with optional noise), how a fit is scored on the settings it did not see, and the seeded
//! streams of the replay's draws.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use duet_core::dataset::{CAMPAIGN_FILE, Dataset, Status, speed};
use duet_core::rng::Rng;
use duet_model::accuracy::{Metrics, Scored};

use crate::CampaignError;
use crate::record::CampaignRecord;
use crate::scoring::{Prediction, Scorer};
use crate::settings::{Candidate, Setting, SettingKey};

/// The oracle: every setting of the datasets and what measuring it gives.
#[derive(Debug)]
pub(super) struct Oracle {
    pub(super) truth: Vec<Dataset>,
    pub(super) settings: Vec<Candidate>,
    /// `settings[i]` is row `rows[i]` of its dataset.
    pub(super) rows: Vec<usize>,
    pub(super) index: HashMap<(usize, SettingKey), usize>,
}

/// Refuses a dataset that says it holds only part of its grid: a budgeted campaign's whose
/// `campaign.json` says its budget was below the grid, or a stopped campaign's partial one. A
/// replay of it would report a budget's figures as a share of a grid it never saw whole.
fn check_whole(path: &Path, dataset: &Dataset) -> Result<(), CampaignError> {
    let why = match CampaignRecord::read(path)? {
        Some(r) if r.budget < r.settings => format!(
            "a budgeted campaign's dataset ({CAMPAIGN_FILE}: {} of its {} pair settings measured)",
            r.budget, r.settings
        ),
        _ if dataset.meta.is_partial() => format!(
            "a stopped campaign's partial dataset (\"{}\")",
            dataset
                .meta
                .description
                .split(':')
                .next()
                .unwrap_or_default()
        ),
        _ => return Ok(()),
    };
    Err(CampaignError::Invalid(format!(
        "--data {}: {why}, not its whole grid; a replay measures from a whole grid (a full \
         campaign's or an import's dataset)",
        path.display()
    )))
}

/// Where `dataset`'s pairs leave out some of its workloads' pairs in a mode (self-pairs
/// included; a merged budgeted campaign's, an import of some pairs): a line saying so, since the
/// replay's shares are then shares of what it holds.
pub(super) fn coverage_line(path: &Path, dataset: &Dataset) -> Option<String> {
    let n = dataset.workloads.len();
    let grid = n * (n + 1) / 2;
    let mut by_mode: BTreeMap<String, BTreeSet<(&str, &str)>> = BTreeMap::new();
    for p in &dataset.pairs {
        let key = if p.a <= p.b {
            (p.a.as_str(), p.b.as_str())
        } else {
            (p.b.as_str(), p.a.as_str())
        };
        by_mode.entry(p.mode.to_string()).or_default().insert(key);
    }
    let short: Vec<String> = by_mode
        .iter()
        .filter(|(_, pairs)| pairs.len() < grid)
        .map(|(mode, pairs)| format!("{} of {grid} in {mode}", pairs.len()))
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "--data {}: of the {grid} pairs its {n} workloads make in a mode (self-pairs \
             included), its rows hold {}; the budgets are shares of what it holds",
            path.display(),
            short.join(", ")
        )
    })
}

impl Oracle {
    pub(super) fn new(data: &[(PathBuf, Dataset)]) -> Result<Oracle, CampaignError> {
        let mut owner: BTreeMap<String, &PathBuf> = BTreeMap::new();
        let mut settings = Vec::new();
        let mut rows = Vec::new();
        let mut index = HashMap::new();
        for (d, (path, dataset)) in data.iter().enumerate() {
            check_whole(path, dataset)?;
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
    pub(super) fn measured_world(&self, noise: f64, seed: u64) -> Vec<Dataset> {
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
    pub(super) fn known(&self, world: &[Dataset], chosen: &[usize]) -> Vec<Dataset> {
        let mut by_dataset: Vec<Vec<usize>> = vec![Vec::new(); world.len()];
        for &i in chosen {
            by_dataset[self.settings[i].dataset].push(self.rows[i]);
        }
        world
            .iter()
            .zip(by_dataset)
            .map(|(d, mut rows)| {
                rows.sort_unstable();
                d.with_pairs(rows.iter().map(|&r| d.pairs[r].clone()).collect())
            })
            .collect()
    }

    /// Both directions' speeds of setting `i` in `world` (None: not feasible), and whether
    /// the setting says anything about speed or feasibility (a crash or timeout does not).
    pub(super) fn speeds(&self, world: &[Dataset], i: usize) -> Option<[Option<f64>; 2]> {
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

    pub(super) fn candidates(&self, indices: &[usize]) -> Vec<Candidate> {
        indices.iter().map(|&i| self.settings[i].clone()).collect()
    }

    pub(super) fn index_of(&self, c: &Candidate) -> Option<usize> {
        self.index.get(&(c.dataset, c.setting.key())).copied()
    }
}

/// The scored rows of `predictions` (of `indices`) against the truth.
pub(super) fn scored(
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
pub(super) fn test_metrics(
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
pub(super) fn mix(seed: u64, stream: u64, n: u64) -> u64 {
    let mut r = Rng::new(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.rotate_left(32));
    r.next_u64()
}
