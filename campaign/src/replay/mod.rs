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

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use duet_core::dataset::Dataset;
use duet_core::progress::{Event, Progress};

use crate::CampaignError;
use crate::audit;
use crate::replay::options::{check, resolve_budgets};
use crate::replay::oracle::Oracle;
use crate::replay::probes::family_values;
use crate::replay::seed::run_seed;

mod options;
mod oracle;
mod outcome;
mod probes;
mod seed;

pub use options::{Budget, ReplayOptions};
pub use outcome::{
    Curve, DataInfo, FORMAT, Full, Point, ProbeUnit, Probes, Replay, SeedChoices, SeedPoint, Stat,
};

/// Runs the replay on `data` (each a dataset and where it was read from).
pub fn replay(
    data: &[(PathBuf, Dataset)],
    options: &ReplayOptions,
    progress: &mut dyn Progress,
) -> Result<Replay, CampaignError> {
    let started = Instant::now();
    check(data, options)?;
    let oracle = Oracle::new(data)?;
    for (path, dataset) in data {
        if let Some(line) = oracle::coverage_line(path, dataset) {
            progress.line(&line);
        }
    }
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
            let covered = options.probe_coverage;
            Probes {
                held_out,
                chosen: curve(|u| &u.chosen),
                random: curve(|u| &u.random),
                chosen_coverage: if covered {
                    curve(|u| &u.chosen_coverage)
                } else {
                    Vec::new()
                },
                random_coverage: if covered {
                    curve(|u| &u.random_coverage)
                } else {
                    Vec::new()
                },
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

#[cfg(test)]
mod tests;
