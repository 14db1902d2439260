//! One seed of a replay: the test set drawn, every selection method's run to the largest
//! budget, the audit and the scores at each budget, the full data's fit, and the seed's probe
//! curves.

use std::collections::{BTreeMap, BTreeSet};

use duet_core::dataset::Dataset;
use duet_core::progress::{Event, Progress};
use duet_core::rng::Rng;
use duet_model::accuracy::Metrics;
use duet_model::network::TrainConfig;

use crate::CampaignError;
use crate::audit;
use crate::choose::{ChooseOptions, Select, choose};
use crate::record::RecordedChoice;
use crate::replay::options::ReplayOptions;
use crate::replay::oracle::{Oracle, mix, scored, test_metrics};
use crate::replay::outcome::{ProbeUnit, SeedChoices, SeedPoint};
use crate::replay::probes::probe;
use crate::scoring::Scorer;

/// Everything one seed gives.
#[derive(Debug)]
pub(super) struct SeedRun {
    pub(super) points: BTreeMap<Select, Vec<SeedPoint>>,
    pub(super) full: SeedPoint,
    pub(super) choices: Vec<SeedChoices>,
    pub(super) probes: Vec<(String, ProbeUnit)>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_seed(
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
pub(super) fn select_run(
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
