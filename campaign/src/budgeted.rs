//! The budgeted campaign of `duet profile --budget`: every workload alone first (not counted),
//! then pairs in rounds chosen by [`choose_with`] from the model fitted between rounds (never
//! while a window is measured), then the audit, all measured through the profiler's
//! [`Session`] so that its journal, signals and partial dataset work as in a full campaign.
//!
//! Every round's choices (round, rule, score, settings, and the model's predicted speeds of
//! them) and the audit's draw are appended to `choices.jsonl` in the campaign's journal folder
//! and synced before any of them is measured: a killed campaign resumes with the same choices,
//! measures only what the journal lacks, and writes the dataset an uninterrupted one would.
//!
//! `--target-mape` is checked between rounds on the settings of the round just measured: the
//! model fitted before the round predicted them, so their error is the error of that model on
//! settings it had not seen. Uncertainty selection picks the settings the model is least sure
//! of, so this estimate leans high (a conservative stop); the audit's uniform estimate at the
//! end is the one reported.

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use duet_core::dataset::{CAMPAIGN_FILE, Dataset, Mode, Status, speed};
use duet_core::progress::{Event, Progress};
use duet_model::network::TrainConfig;
use duet_profiler::campaign::{Campaign, Session, Task};
use serde::{Deserialize, Serialize};

use crate::CampaignError;
use crate::audit::{self, Estimate};
use crate::choose::{Rule, Select, choose_with};
use crate::record::{AuditRecord, AuditedSetting, CampaignRecord, FORMAT, RecordedChoice};
use crate::replay::Budget;
use crate::scoring::{MIN_FEASIBLE_SETTINGS, Scorer};
use crate::settings::{self, Candidate, Setting, SettingKey, open_candidates};

/// Rounds after the first that share the selection budget when `--round-size` is not given.
pub const DEFAULT_ROUNDS: usize = 4;

/// The speeds a model predicted for chosen settings, both directions (none without a model).
type Predicted = Vec<Option<[f64; 2]>>;

/// The file of choices in the campaign's journal folder.
pub const CHOICES_FILE: &str = "choices.jsonl";

/// What a budgeted campaign runs with, beside the measurement settings of its [`Campaign`].
#[derive(Debug, Clone)]
pub struct BudgetOptions {
    pub budget: Budget,
    pub select: Select,
    /// Pair settings per round after the first (default: the selection budget left after the
    /// first round over [`DEFAULT_ROUNDS`]).
    pub round_size: Option<usize>,
    /// The audit's size; `None`: [`audit::DEFAULT_AUDIT`], at most a third of the budget.
    pub audit: Option<usize>,
    /// Stop choosing once the estimated MAPE of speed (a fraction) is below this.
    pub target_mape: Option<f64>,
    /// Earlier datasets the model also learns from, with their folders (for messages).
    pub priors: Vec<(PathBuf, Dataset)>,
    pub config: TrainConfig,
    pub min_pairs: usize,
    pub workers: usize,
}

/// What a finished budgeted campaign gives.
#[derive(Debug)]
pub struct Outcome {
    pub dataset: Dataset,
    pub record: CampaignRecord,
    /// Why selection stopped before its budget (the target reached), if it did.
    pub stopped: Option<String>,
}

/// One entry of `choices.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "lowercase")]
pub(crate) enum Entry {
    /// A round's choices, before any of them is measured.
    Round {
        round: usize,
        choices: Vec<RecordedChoice>,
        /// The predicted speeds of each choice in its two directions by the model that chose
        /// it (none before a model could be fitted).
        #[serde(default)]
        predicted: Vec<Option<[f64; 2]>>,
    },
    /// The audit's draw, after selection ended.
    Audit {
        settings: Vec<Setting>,
        /// Why selection ended before the budget.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stopped: Option<String>,
    },
}

/// The campaign's sizes, from its grid and options.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sizes {
    grid: usize,
    budget: usize,
    audit: usize,
    selection: usize,
}

pub(crate) fn invalid(message: String) -> CampaignError {
    CampaignError::Invalid(message)
}

fn sizes(options: &BudgetOptions, grid: usize) -> Result<Sizes, CampaignError> {
    let budget = match options.budget {
        Budget::Settings(n) if n > grid => {
            return Err(invalid(format!(
                "--budget {n}: the catalog's grid has only {grid} pair settings (every pair, \
                 itself included, in every mode and share); give at most {grid}, or a percentage"
            )));
        }
        b => b.settings(grid).map_err(invalid)?,
    };
    let audit = match options.audit {
        Some(n) if n >= budget => {
            return Err(invalid(format!(
                "--audit {n}: the audit is measured inside the budget, and --budget leaves \
                 {budget} pair settings; give at most {} so that selection has at least one",
                budget - 1
            )));
        }
        Some(n) => n,
        None => audit::audit_size(budget, audit::DEFAULT_AUDIT, grid),
    };
    Ok(Sizes {
        grid,
        budget,
        audit,
        selection: budget - audit,
    })
}

/// Checks a budgeted campaign before anything runs (nothing is written): no shards, a budget
/// and audit that fit the grid, earlier datasets in the campaign's modes.
pub fn check(campaign: &Campaign, options: &BudgetOptions) -> Result<(), CampaignError> {
    if let Some((i, n)) = campaign.shard {
        return Err(invalid(format!(
            "--shard {i}/{n} with --budget: a budgeted campaign chooses every round from all \
             that it has measured, so it runs as one process; run one budgeted campaign, or \
             shards without --budget"
        )));
    }
    if options.round_size == Some(0) {
        return Err(invalid("--round-size: at least 1".into()));
    }
    if let Some(t) = options.target_mape
        && !(t > 0.0 && t.is_finite())
    {
        return Err(invalid(format!(
            "--target-mape {}: a percentage above 0",
            t * 100.0
        )));
    }
    for (dir, prior) in &options.priors {
        let other: BTreeSet<Mode> = prior
            .pairs
            .iter()
            .map(|p| p.mode)
            .filter(|m| !campaign.modes.contains(m))
            .collect();
        if !other.is_empty() {
            return Err(invalid(format!(
                "--prior {}: its pairs are measured in {} but this campaign measures {} \
                 (--modes); an earlier dataset must be in the campaign's modes",
                dir.display(),
                other
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                campaign
                    .modes
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    sizes(options, grid(campaign, &campaign.modes).len()).map(|_| ())
}

fn grid(campaign: &Campaign, modes: &[Mode]) -> Vec<Setting> {
    let names: Vec<String> = campaign
        .catalog
        .workloads
        .iter()
        .map(|w| w.name.clone())
        .collect();
    settings::grid(&names, &campaign.gpu, modes, &campaign.shares)
}

/// What `--resume` compares beside the measurement settings.
fn plan(options: &BudgetOptions) -> String {
    format!(
        "budget {}, select {}, round size {:?}, audit {:?}, target {:?}, min pairs {}, priors \
         {:?}, training {}",
        options.budget,
        options.select,
        options.round_size,
        options.audit,
        options.target_mape,
        options.min_pairs,
        options
            .priors
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>(),
        serde_json::to_string(&options.config).unwrap_or_default()
    )
}

/// The measuring of a budgeted or probe campaign: the planned total and what was scheduled
/// so far, for the `[n/total]` of the progress lines.
pub(crate) struct Measuring {
    scheduled: Vec<Task>,
    total: usize,
}

impl Measuring {
    pub(crate) fn new(total: usize) -> Measuring {
        Measuring {
            scheduled: Vec::new(),
            total,
        }
    }

    /// Measures what `batch` holds that the journal does not.
    pub(crate) fn measure(
        &mut self,
        session: &mut Session<'_>,
        batch: Vec<Task>,
        progress: &mut dyn Progress,
    ) -> Result<(), CampaignError> {
        self.scheduled.extend(batch.iter().cloned());
        let already = self.scheduled.iter().filter(|t| session.is_done(t)).count();
        session
            .measure(&batch, already, self.total, progress)
            .map_err(profiler)
    }
}

/// `choices.jsonl` in the campaign's journal folder, open for appending.
pub(crate) struct Choices {
    path: PathBuf,
    file: fs::File,
}

impl Choices {
    /// Opens (or creates) the file; the entries it already holds, for a resumed campaign.
    pub(crate) fn open(campaign: &Campaign) -> Result<(Choices, Vec<Entry>), CampaignError> {
        let path = campaign.journal_dir().join(CHOICES_FILE);
        let entries = read_entries(&path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| CampaignError::Io {
                path: path.clone(),
                message: e.to_string(),
            })?;
        Ok((Choices { path, file }, entries))
    }

    /// Appends `entry`, synced before anything it names is measured.
    pub(crate) fn append(&mut self, entry: &Entry) -> Result<(), CampaignError> {
        let mut line = serde_json::to_string(entry).map_err(|e| invalid(e.to_string()))?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| CampaignError::Io {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }
}

/// Every repetition of each of `workloads` alone.
pub(crate) fn solo_tasks<'a>(
    campaign: &Campaign,
    workloads: impl Iterator<Item = &'a String> + Clone,
) -> Vec<Task> {
    (0..campaign.solo_repetitions)
        .flat_map(|repetition| {
            workloads.clone().map(move |w| Task::Solo {
                workload: w.clone(),
                repetition,
            })
        })
        .collect()
}

/// The group measurements of a campaign with `--group-size` 3 or more (the groups
/// `--group-budget` chooses, or every one), in the modes the session measures.
fn group_tasks(campaign: &Campaign, modes: &[Mode]) -> Vec<Task> {
    campaign
        .tasks()
        .into_iter()
        .filter(|t| matches!(t, Task::Group { .. }) && t.mode().is_some_and(|m| modes.contains(&m)))
        .collect()
}

/// Each round's own seed.
pub(crate) fn mix(seed: u64, stream: u64, n: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ stream.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ n.wrapping_mul(0x94D0_49BB_1331_11EB)
}

pub(crate) fn tasks(campaign: &Campaign, settings: &[Setting]) -> Vec<Task> {
    let mut out = Vec::new();
    for s in settings {
        for repetition in 0..campaign.repetitions {
            out.push(Task::Pair {
                a: s.a.clone(),
                b: s.b.clone(),
                mode: s.mode,
                share_a: s.share_a,
                share_b: s.share_b,
                repetition,
            });
        }
    }
    out
}

pub(crate) fn profiler(e: duet_profiler::campaign::CampaignError) -> CampaignError {
    CampaignError::Invalid(e.0)
}

/// The entries of `choices.jsonl`; a last line cut short by a kill was never acted on.
fn read_entries(path: &std::path::Path) -> Result<Vec<Entry>, CampaignError> {
    let Ok(text) = fs::read_to_string(path) else {
        return Ok(Vec::new());
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Entry>(line) {
            Ok(e) => out.push(e),
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => {
                return Err(CampaignError::Io {
                    path: path.to_path_buf(),
                    message: format!("line {}: {e}", i + 1),
                });
            }
        }
    }
    Ok(out)
}

/// The relative errors of `predicted` speeds against the measured rows of `known`, per setting
/// in its feasible directions.
fn errors_of(
    known: &Dataset,
    settings: &[Setting],
    predicted: &[Option<[f64; 2]>],
) -> Vec<Vec<f64>> {
    settings
        .iter()
        .zip(predicted)
        .filter_map(|(s, p)| {
            let p = (*p)?;
            let row = known
                .pairs
                .iter()
                .find(|r| Setting::of(r).key() == s.key() && r.status == Status::Ok)?;
            let sa = known.workload(&row.a)?.solo_throughput;
            let sb = known.workload(&row.b)?.solo_throughput;
            let (fa, fb) = (speed(row.throughput_a, sa), speed(row.throughput_b, sb));
            let truth = if row.a == s.a { [fa, fb] } else { [fb, fa] };
            Some(
                p.iter()
                    .zip(truth)
                    .filter(|(x, t)| x.is_finite() && *t > 0.0)
                    .map(|(x, t)| (x - t).abs() / t)
                    .collect(),
            )
        })
        .collect()
}

/// Runs (or resumes) a budgeted campaign and writes its dataset with `campaign.json`.
pub fn run(
    campaign: &Campaign,
    options: &BudgetOptions,
    progress: &mut dyn Progress,
) -> Result<Outcome, CampaignError> {
    check(campaign, options)?;
    let mut session = campaign.open(&plan(options), progress).map_err(profiler)?;
    let grid = grid(campaign, session.modes());
    let sizes = sizes(options, grid.len())?;
    let first = campaign.catalog.workloads.len().min(sizes.selection);
    let round_size = options
        .round_size
        .unwrap_or_else(|| (sizes.selection - first).div_ceil(DEFAULT_ROUNDS))
        .max(1);
    let priors: Vec<Dataset> = options.priors.iter().map(|(_, d)| d.clone()).collect();
    let reps = campaign.repetitions as usize;
    let names: Vec<String> = campaign
        .catalog
        .workloads
        .iter()
        .map(|w| w.name.clone())
        .collect();
    let solos = solo_tasks(campaign, names.iter());
    let groups = group_tasks(campaign, session.modes());
    let total = solos.len() + sizes.budget * reps + groups.len();
    progress.line(&format!(
        "budget: {} of {} pair settings ({} chosen in rounds by {}, {} audited), every \
         workload alone first",
        sizes.budget, sizes.grid, sizes.selection, options.select, sizes.audit
    ));
    if !groups.is_empty() {
        progress.line(&format!(
            "then {} group measurements ({}), after the audit",
            groups.len(),
            campaign
                .group_budget
                .map_or_else(|| "every group".to_string(), |b| b.describe())
        ));
    }
    if session.measurements() > 0 {
        progress.line(&format!(
            "resuming: {} measurements already in the journal",
            session.measurements()
        ));
    }
    progress.event(Event::Start {
        stage: "profile",
        total: total as u64,
        unit: "settings",
    });
    let mut measuring = Measuring::new(total);
    measuring.measure(&mut session, solos, progress)?;
    session.require_solos().map_err(profiler)?;
    let (mut journal, entries) = Choices::open(campaign)?;

    let mut chosen: Vec<RecordedChoice> = Vec::new();
    let mut last: Option<(Vec<Setting>, Predicted)> = None;
    let mut audit_draw: Option<(Vec<Setting>, Option<String>)> = None;
    // The recorded rounds first, as they were chosen.
    for entry in entries {
        match entry {
            Entry::Round {
                round,
                choices,
                predicted,
            } => {
                progress.line(&format!(
                    "round {round}: {} settings chosen before the interruption",
                    choices.len()
                ));
                let settings: Vec<Setting> = choices.iter().map(|c| c.setting.clone()).collect();
                measuring.measure(&mut session, tasks(campaign, &settings), progress)?;
                chosen.extend(choices);
                last = Some((settings, predicted));
            }
            Entry::Audit { settings, stopped } => audit_draw = Some((settings, stopped)),
        }
    }
    let mut round = chosen.last().map_or(0, |c| c.round + 1);
    let mut stopped = None;
    while audit_draw.is_none() && chosen.len() < sizes.selection {
        if session.interrupted() {
            return Err(profiler(session.stop_interrupted()));
        }
        let known = session.dataset().map_err(profiler)?;
        if let (Some(target), Some((settings, predicted))) = (options.target_mape, &last) {
            let errors = errors_of(&known, settings, predicted);
            if let Some(e) = audit::estimate(&errors, sizes.grid - chosen.len())
                && e.n >= 2
            {
                progress.line(&format!(
                    "round {}: the model before it erred by {:.2}% on its {} settings \
                     (--target-mape {:.2}%)",
                    round - 1,
                    e.mape * 100.0,
                    e.n,
                    target * 100.0
                ));
                if e.mape < target {
                    stopped = Some(format!(
                        "the estimated MAPE {:.2}% is below --target-mape {:.2}% after round {}",
                        e.mape * 100.0,
                        target * 100.0,
                        round - 1
                    ));
                    break;
                }
            }
        }
        let candidates = open_candidates(&grid, chosen.iter().map(|c| &c.setting));
        let k = if round == 0 { first } else { round_size }.min(sizes.selection - chosen.len());
        let known = [known];
        // One fit serves the choice and the next round's check of --target-mape.
        let scorer = if options.select == Select::Uncertainty || options.target_mape.is_some() {
            Scorer::fit(&known, &priors, &options.config, false, options.workers)?
        } else {
            None
        };
        if session.interrupted() {
            return Err(profiler(session.stop_interrupted()));
        }
        let picks = choose_with(
            scorer
                .as_ref()
                .filter(|_| options.select == Select::Uncertainty),
            &known,
            &candidates,
            k,
            options.select,
            mix(campaign.seed, 1, round as u64),
            options.min_pairs,
        );
        if picks.is_empty() {
            break;
        }
        let picked: Vec<Candidate> = picks.iter().map(|c| c.candidate.clone()).collect();
        let predicted: Vec<Option<[f64; 2]>> = match &scorer {
            Some(s) => s
                .predict(&picked)
                .iter()
                .map(|p| {
                    let [x, y] = &p.directions;
                    (!x.members.is_empty()).then(|| [x.speed(), y.speed()])
                })
                .collect(),
            None => vec![None; picks.len()],
        };
        let choices: Vec<RecordedChoice> = picks
            .into_iter()
            .map(|c| RecordedChoice::of(round, c))
            .collect();
        journal.append(&Entry::Round {
            round,
            choices: choices.clone(),
            predicted: predicted.clone(),
        })?;
        let basis = match (&scorer, priors.len()) {
            (None, _) => {
                format!("no model yet (fewer than {MIN_FEASIBLE_SETTINGS} measured pair settings)")
            }
            (Some(_), 0) => format!("fitted on {} pair settings", known[0].pairs.len()),
            (Some(_), n) => format!(
                "fitted on {} pair settings and {n} earlier datasets",
                known[0].pairs.len()
            ),
        };
        progress.line(&format!("round {round}: {basis}, chose {}:", choices.len()));
        for c in &choices {
            progress.line(&c.line());
        }
        let settings: Vec<Setting> = choices.iter().map(|c| c.setting.clone()).collect();
        measuring.measure(&mut session, tasks(campaign, &settings), progress)?;
        chosen.extend(choices);
        last = Some((settings, predicted));
        round += 1;
    }

    // The audit: drawn uniformly from what selection never chose, recorded before measured.
    let (audited, stopped) = match audit_draw {
        Some(draw) => draw,
        None => {
            let taken: BTreeSet<SettingKey> = chosen.iter().map(|c| c.setting.key()).collect();
            let left: Vec<&Setting> = grid.iter().filter(|s| !taken.contains(&s.key())).collect();
            let settings: Vec<Setting> = audit::draw(
                left.len(),
                sizes.audit.min(left.len()),
                mix(campaign.seed, 2, 0),
            )
            .into_iter()
            .map(|i| left[i].clone())
            .collect();
            journal.append(&Entry::Audit {
                settings: settings.clone(),
                stopped: stopped.clone(),
            })?;
            (settings, stopped)
        }
    };
    if !audited.is_empty() {
        progress.line(&format!(
            "audit: {} settings drawn uniformly from the {} never chosen",
            audited.len(),
            sizes.grid - chosen.len()
        ));
    }
    measuring.measure(&mut session, tasks(campaign, &audited), progress)?;
    // The groups (`--group-size` 3 or more): chosen by no model, so they wait for nothing; last,
    // so that the pairs' budget is spent first.
    let group_count = groups.len();
    measuring.measure(&mut session, groups, progress)?;
    progress.event(Event::Step {
        done: scheduled_len(&chosen, &audited, campaign) + group_count as u64,
        now: "audit and dataset",
    });
    progress.event(Event::Finish);

    let audit = if audited.is_empty() {
        None
    } else {
        let all = session.dataset().map_err(profiler)?;
        let audited_keys: BTreeSet<SettingKey> = audited.iter().map(Setting::key).collect();
        let mut selected = all.clone();
        selected
            .pairs
            .retain(|p| !audited_keys.contains(&Setting::of(p).key()));
        let scorer = Scorer::fit(
            &[selected],
            &priors,
            &options.config,
            false,
            options.workers,
        )?;
        let candidates = Candidate::of_one(audited.iter().cloned());
        let errors = match &scorer {
            Some(s) => audit::errors(s, std::slice::from_ref(&all), &candidates),
            None => vec![Vec::new(); candidates.len()],
        };
        let estimate = audit::estimate(&errors, sizes.grid - chosen.len());
        let measurement_noise = audit::measurement_noise(&all, &audited);
        Some(AuditRecord {
            interval: audit::INTERVAL.to_string(),
            settings: audited
                .iter()
                .cloned()
                .zip(errors)
                .map(|(setting, errors)| AuditedSetting { setting, errors })
                .collect(),
            estimate,
            measurement_noise,
        })
    };
    let record = CampaignRecord {
        format: FORMAT.to_string(),
        select: options.select,
        seed: campaign.seed,
        settings: sizes.grid,
        budget: sizes.budget,
        min_pairs: options.min_pairs,
        choices: chosen,
        audit,
        onto: None,
    };
    let dataset = session
        .finish(&[(CAMPAIGN_FILE, record.to_json())], progress)
        .map_err(profiler)?;
    Ok(Outcome {
        dataset,
        record,
        stopped,
    })
}

fn scheduled_len(chosen: &[RecordedChoice], audited: &[Setting], campaign: &Campaign) -> u64 {
    let reps = campaign.repetitions as usize;
    let solo_reps = campaign.solo_repetitions as usize;
    (campaign.catalog.workloads.len() * solo_reps + (chosen.len() + audited.len()) * reps) as u64
}

/// The lines printed at the end: the choices by round and rule, and the audit's estimate.
pub fn summary(outcome: &Outcome) -> Vec<String> {
    let r = &outcome.record;
    let mut out = Vec::new();
    let rounds = r.choices.last().map_or(0, |c| c.round + 1);
    let by_rule = |choices: &mut dyn Iterator<Item = &RecordedChoice>| {
        let all: Vec<Rule> = choices.map(|c| c.rule).collect();
        [
            Rule::Design,
            Rule::Coverage,
            Rule::Uncertainty,
            Rule::Random,
        ]
        .into_iter()
        .filter_map(|rule| {
            let n = all.iter().filter(|x| **x == rule).count();
            (n > 0).then(|| format!("{n} {}", rule.as_str()))
        })
        .collect::<Vec<_>>()
        .join(", ")
    };
    out.push(format!(
        "chosen: {} of {} pair settings in {rounds} rounds by {} ({}); budget {}",
        r.choices.len(),
        r.settings,
        r.select,
        by_rule(&mut r.choices.iter()),
        r.budget
    ));
    for round in 0..rounds {
        let n = r.choices.iter().filter(|c| c.round == round).count();
        out.push(format!(
            "  round {round}: {n} ({})",
            by_rule(&mut r.choices.iter().filter(|c| c.round == round))
        ));
    }
    if let Some(why) = &outcome.stopped {
        out.push(format!("selection stopped early: {why}"));
    }
    match r.audit.as_ref() {
        None => out.push("audit: none (--audit 0)".into()),
        Some(AuditRecord {
            estimate: Some(e), ..
        }) => out.push(describe(e)),
        Some(a) => out.push(format!(
            "audit: {} settings, none feasible with a model to score; no estimate",
            a.settings.len()
        )),
    }
    if let Some(noise) = r.audit.as_ref().and_then(|a| a.measurement_noise) {
        out.push(format!(
            "audit: the audited speeds themselves are measured to {:.2}% (mean relative \
             standard error of their windows): an error near this is the measurement's",
            noise * 100.0
        ));
    }
    out
}

fn describe(e: &Estimate) -> String {
    let interval = match (e.low, e.high) {
        (Some(l), Some(h)) => format!(", 90% interval {:.2}% to {:.2}%", l * 100.0, h * 100.0),
        _ => ", no interval (one audited setting)".into(),
    };
    format!(
        "audit: estimated MAPE of speed on the {} unmeasured settings {:.2}%{interval} ({} \
         audited settings, {} directed rows)",
        e.population,
        e.mape * 100.0,
        e.n,
        e.rows
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(budget: Budget, audit: Option<usize>) -> BudgetOptions {
        BudgetOptions {
            budget,
            select: Select::Uncertainty,
            round_size: None,
            audit,
            target_mape: None,
            priors: Vec::new(),
            config: TrainConfig::default(),
            min_pairs: crate::choose::MIN_PAIRS,
            workers: 1,
        }
    }

    #[test]
    fn the_audit_is_inside_the_budget() {
        // 25% of 120: 30 settings, a third of them audited by default.
        let s = sizes(&options(Budget::Fraction(0.25), None), 120).expect("sizes");
        assert_eq!((s.budget, s.audit, s.selection), (30, 10, 20));
        // A large budget: the default audit of 30.
        let s = sizes(&options(Budget::Settings(300), None), 1000).expect("sizes");
        assert_eq!((s.audit, s.selection), (30, 270));
        // Given, any audit below the budget; selection keeps at least one setting.
        let s = sizes(&options(Budget::Settings(10), Some(9)), 10).expect("sizes");
        assert_eq!((s.audit, s.selection), (9, 1));
        let e = sizes(&options(Budget::Settings(10), Some(10)), 20).expect_err("refused");
        assert!(e.to_string().contains("--audit 10"), "{e}");
        let e = sizes(&options(Budget::Settings(21), None), 20).expect_err("refused");
        assert!(e.to_string().contains("--budget 21"), "{e}");
    }

    #[test]
    fn a_choice_cut_short_by_a_kill_was_never_made() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(CHOICES_FILE);
        let round = Entry::Round {
            round: 0,
            choices: vec![RecordedChoice {
                round: 0,
                setting: Setting::new("b", "a", "cpu", Mode::Cpu, None, None),
                rule: Rule::Design,
                score: None,
            }],
            predicted: vec![None],
        };
        let audit = Entry::Audit {
            settings: vec![Setting::new("a", "a", "cpu", Mode::Cpu, None, None)],
            stopped: Some("target".into()),
        };
        let line = |e: &Entry| serde_json::to_string(e).expect("json");
        fs::write(&path, format!("{}\n{}", line(&round), &line(&audit)[..20])).expect("write");
        assert_eq!(read_entries(&path).expect("read"), vec![round.clone()]);
        fs::write(&path, format!("{}\n{}\n", line(&round), line(&audit))).expect("write");
        assert_eq!(
            read_entries(&path).expect("read"),
            vec![round.clone(), audit]
        );
        // A damaged line before the last is an error naming the file and line.
        fs::write(&path, format!("{{\n{}\n", line(&round))).expect("write");
        let e = read_entries(&path).expect_err("refused").to_string();
        assert!(e.contains(CHOICES_FILE) && e.contains("line 1"), "{e}");
    }
}
