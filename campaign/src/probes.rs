//! New workloads onto an earlier dataset (`duet profile --catalog new.toml --onto DIR
//! --probes K`): each workload of the catalog that `DIR` lacks is measured alone, then with K
//! co-runners, workloads of `DIR` that the catalog also lists (it must, to run them). The
//! probes come in K rounds, one per new workload each round, chosen by [`choose_with`] from the
//! model fitted between rounds on `DIR`, the new solo runs and the probes measured so far
//! (every new workload short of K pairs: the coverage rule, ranked by the same expected
//! variance reduction as a budgeted campaign). The co-runners' solo rows are copied from `DIR`
//! unless `--remeasure-solo`.
//!
//! The dataset written merges with `DIR` under `duet dataset merge`'s shard rules: the same
//! device and feature columns (checked once the new workloads have run alone, before any
//! probe), the co-runners' rows identical (or pooled, when measured again), no setting in both.
//! Choices are journalled in `choices.jsonl` before they are measured, as in a budgeted
//! campaign, so a killed campaign resumes with the same probes.

use std::path::PathBuf;

use duet_core::dataset::{CAMPAIGN_FILE, Dataset, FeatureValue, Mode};
use duet_core::progress::{Event, Progress};
use duet_model::network::TrainConfig;
use duet_profiler::campaign::Campaign;

use crate::CampaignError;
use crate::budgeted::{Choices, Entry, Measuring, invalid, mix, profiler, solo_tasks, tasks};
use crate::choose::{Select, choose_with};
use crate::record::{CampaignRecord, FORMAT, OntoRecord, RecordedChoice};
use crate::scoring::Scorer;
use crate::settings::{self, Setting, open_candidates};

/// The default K: every new workload in three measured pairs. A model trained with them answers
/// its pairs as `probed` (`duet_model::encoding::PROBED_MAX`, the same count: checked below).
pub const DEFAULT_PROBES: usize = 3;
const _: () = assert!(DEFAULT_PROBES == duet_model::encoding::PROBED_MAX as usize);

/// What `--onto` runs with, beside the measurement settings of its [`Campaign`].
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The earlier dataset, with its folder (for messages and the record).
    pub onto: (PathBuf, Dataset),
    /// Co-runners per new workload.
    pub probes: usize,
    pub select: Select,
    /// Measure the co-runners alone again rather than copying their rows from `onto`.
    pub remeasure_solo: bool,
    /// More earlier datasets the model also learns from.
    pub priors: Vec<(PathBuf, Dataset)>,
    pub config: TrainConfig,
    pub workers: usize,
}

/// What a finished probe campaign gives.
#[derive(Debug)]
pub struct Outcome {
    pub dataset: Dataset,
    pub record: CampaignRecord,
    /// Where the written dataset will not merge with `onto`, why (a warning, not an error:
    /// the measurements are kept).
    pub merge_warning: Option<String>,
}

/// The new workloads (in the catalog, not in `onto`) and the co-runners (in both), in catalog
/// order.
pub fn split(campaign: &Campaign, onto: &Dataset) -> (Vec<String>, Vec<String>) {
    campaign
        .catalog
        .workloads
        .iter()
        .map(|w| w.name.clone())
        .partition(|name| onto.workload(name).is_none())
}

/// Checks a probe campaign before anything runs (nothing is written), and gives the campaign
/// to measure: `campaign` with the co-runners' solo rows taken from `onto` (unless
/// `--remeasure-solo`).
pub fn prepare(campaign: &Campaign, options: &ProbeOptions) -> Result<Campaign, CampaignError> {
    let (dir, onto) = &options.onto;
    let dir = dir.display();
    if let Some((i, n)) = campaign.shard {
        return Err(invalid(format!(
            "--shard {i}/{n} with --onto: new workloads' probes are chosen from all that is \
             measured, so they run as one process; run it without --shard"
        )));
    }
    if options.probes == 0 {
        return Err(invalid("--probes: at least 1".into()));
    }
    if onto.meta.provenance.gpu != campaign.gpu {
        return Err(invalid(format!(
            "--onto {dir}: its pairs are measured on `{}` but this campaign measures on `{}` \
             (--gpu); probes must be measured on the same device to merge with it",
            onto.meta.provenance.gpu, campaign.gpu
        )));
    }
    let other: Vec<String> = campaign
        .modes
        .iter()
        .filter(|m| !onto.meta.modes.contains(m))
        .map(ToString::to_string)
        .collect();
    if !other.is_empty() {
        return Err(invalid(format!(
            "--modes {}: --onto {dir} has no pairs in {} (its modes: {}); the model cannot \
             place a new workload in a mode it has never seen",
            campaign
                .modes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            other.join(", "),
            onto.meta
                .modes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let (new, known) = split(campaign, onto);
    if new.is_empty() {
        return Err(invalid(format!(
            "--catalog {}: every workload in it is already in --onto {dir}; add the new ones \
             (the catalog lists the new workloads and the co-runners to run them with)",
            campaign.catalog.path.display()
        )));
    }
    if known.is_empty() {
        return Err(invalid(format!(
            "--catalog {}: none of its workloads is in --onto {dir}, so there is no co-runner \
             to probe the new ones with; list some of {dir}'s workloads ({}) with their \
             commands",
            campaign.catalog.path.display(),
            onto.workloads
                .iter()
                .take(5)
                .map(|w| w.workload.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // A co-runner is the workload `onto` measured: a catalog that defines it otherwise (another
    // built-in, other sizes or kind) would pair the new workloads with something else under its
    // name, and its rows copied from `onto` would describe what did not run.
    for spec in campaign
        .catalog
        .workloads
        .iter()
        .filter(|w| known.contains(&w.name))
    {
        let Some(row) = onto.workload(&spec.name) else {
            continue;
        };
        let differs = |what: String, catalog: String, there: String| {
            invalid(format!(
                "--catalog {}: workload `{}` is defined with {what} {catalog}, but --onto {dir} \
                 measured it with {there}; a co-runner must be the workload measured there (give \
                 the new definition another name)",
                campaign.catalog.path.display(),
                spec.name
            ))
        };
        if spec.kind != row.kind {
            return Err(differs(
                "kind".into(),
                spec.kind.to_string(),
                row.kind.to_string(),
            ));
        }
        // A command's features are not the catalog's to define (`onto` may describe it
        // otherwise, as an imported dataset does); a built-in's are.
        if matches!(spec.source, duet_profiler::catalog::Source::Command { .. }) {
            continue;
        }
        let shown = |v: &FeatureValue| match v {
            FeatureValue::Number(Some(x)) => x.to_string(),
            FeatureValue::Category(Some(c)) => c.clone(),
            FeatureValue::Number(None) | FeatureValue::Category(None) => "none".into(),
        };
        for (name, value) in spec.defined_features() {
            if let Some(there) = row.features.get(&name)
                && *there != value
            {
                return Err(differs(format!("`{name}`"), shown(&value), shown(there)));
            }
        }
    }
    let mut measured = campaign.clone();
    if !options.remeasure_solo {
        measured.known_solos = known
            .iter()
            .filter_map(|name| onto.workload(name).cloned())
            .collect();
    }
    Ok(measured)
}

/// The probe candidates of the new workloads: each with every co-runner in every mode and
/// share the session measures.
fn candidates(
    new: &[String],
    known: &[String],
    gpu: &str,
    modes: &[Mode],
    shares: &[f64],
) -> Vec<Setting> {
    let mut out = Vec::new();
    for h in new {
        for c in known {
            for &mode in modes {
                for share in settings::shares_of(mode, shares) {
                    out.push(Setting::new(h, c, gpu, mode, share, share));
                }
            }
        }
    }
    out
}

/// `onto` with what this campaign measured: its workloads' rows (new ones added, remeasured
/// ones replaced) and its pairs, what the model between rounds is fitted on.
fn combined(onto: &Dataset, measured: &Dataset) -> Dataset {
    let mut out = onto.clone();
    for w in &measured.workloads {
        match out.workloads.iter_mut().find(|x| x.workload == w.workload) {
            Some(x) => *x = w.clone(),
            None => out.workloads.push(w.clone()),
        }
    }
    out.pairs.extend(measured.pairs.iter().cloned());
    out
}

/// What `--resume` compares beside the measurement settings.
fn plan(options: &ProbeOptions) -> String {
    format!(
        "onto {}, probes {}, select {}, remeasure solo {}, priors {:?}, training {}",
        options.onto.0.display(),
        options.probes,
        options.select,
        options.remeasure_solo,
        options
            .priors
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>(),
        serde_json::to_string(&options.config).unwrap_or_default()
    )
}

/// Names of feature columns in `a` and not in `b`.
fn missing(a: &Dataset, b: &Dataset) -> Vec<String> {
    a.meta
        .workload_features
        .iter()
        .filter(|c| !b.meta.workload_features.contains(c))
        .map(|c| c.name.clone())
        .collect()
}

/// Runs (or resumes) a probe campaign and writes its dataset with `campaign.json`.
pub fn run(
    campaign: &Campaign,
    options: &ProbeOptions,
    progress: &mut dyn Progress,
) -> Result<Outcome, CampaignError> {
    let campaign = &prepare(campaign, options)?;
    let (dir, onto) = &options.onto;
    let (new, known) = split(campaign, onto);
    let mut session = campaign.open(&plan(options), progress).map_err(profiler)?;
    let grid = candidates(
        &new,
        &known,
        &campaign.gpu,
        session.modes(),
        &campaign.shares,
    );
    let probes = options.probes.min(grid.len() / new.len());
    let reps = campaign.repetitions as usize;
    let alone: Vec<&String> = if options.remeasure_solo {
        new.iter().chain(&known).collect()
    } else {
        new.iter().collect()
    };
    let solos = solo_tasks(campaign, alone.iter().copied());
    let total = solos.len() + probes * new.len() * reps;
    progress.line(&format!(
        "onto {}: {} new workloads ({}), each alone and with {probes} of {} co-runners chosen \
         by {}; {}",
        dir.display(),
        new.len(),
        new.join(", "),
        known.len(),
        options.select,
        if options.remeasure_solo {
            "the co-runners measured alone again"
        } else {
            "the co-runners' solo rows from there"
        }
    ));
    progress.event(Event::Start {
        stage: "profile",
        total: total as u64,
        unit: "settings",
    });
    let mut measuring = Measuring::new(total);
    measuring.measure(&mut session, solos, progress)?;
    session.require_solos().map_err(profiler)?;
    // The new rows must carry the earlier dataset's feature columns, or neither the model nor
    // `duet dataset merge` can use them together: checked before any probe is measured.
    let alone_now = session.dataset().map_err(profiler)?;
    if alone_now.meta.workload_features != onto.meta.workload_features {
        let (only_new, only_old) = (missing(&alone_now, onto), missing(onto, &alone_now));
        return Err(profiler(session.stop(format!(
            "--onto {}: the new workloads' feature columns differ from its \
             workload_features (here only: {}; there only: {}); measure on the same kind of \
             machine and counters as the earlier campaign",
            dir.display(),
            if only_new.is_empty() {
                "none, the same names described differently".into()
            } else {
                only_new.join(", ")
            },
            if only_old.is_empty() {
                "none".into()
            } else {
                only_old.join(", ")
            }
        ))));
    }

    let (mut journal, entries) = Choices::open(campaign)?;
    let mut chosen: Vec<RecordedChoice> = Vec::new();
    for entry in entries {
        if let Entry::Round { round, choices, .. } = entry {
            progress.line(&format!(
                "round {round}: {} probes chosen before the interruption",
                choices.len()
            ));
            let settings: Vec<Setting> = choices.iter().map(|c| c.setting.clone()).collect();
            measuring.measure(&mut session, tasks(campaign, &settings), progress)?;
            chosen.extend(choices);
        }
    }
    let priors: Vec<Dataset> = options.priors.iter().map(|(_, d)| d.clone()).collect();
    let mut round = chosen.last().map_or(0, |c| c.round + 1);
    while round < probes {
        if session.interrupted() {
            return Err(profiler(session.stop_interrupted()));
        }
        let known_data = [combined(onto, &session.dataset().map_err(profiler)?)];
        let open = open_candidates(&grid, chosen.iter().map(|c| &c.setting));
        let scorer = if options.select == Select::Uncertainty {
            Scorer::fit(
                &known_data,
                &priors,
                &options.config,
                false,
                options.workers,
            )?
        } else {
            None
        };
        if session.interrupted() {
            return Err(profiler(session.stop_interrupted()));
        }
        // Every new workload is short of `probes` pairs: each round gives each one more.
        let picks = choose_with(
            scorer.as_ref(),
            &known_data,
            &open,
            new.len(),
            options.select,
            mix(campaign.seed, 3, round as u64),
            probes,
        );
        if picks.is_empty() {
            break;
        }
        let choices: Vec<RecordedChoice> = picks
            .into_iter()
            .map(|c| RecordedChoice::of(round, c))
            .collect();
        journal.append(&Entry::Round {
            round,
            choices: choices.clone(),
            predicted: vec![None; choices.len()],
        })?;
        progress.line(&format!(
            "round {round}: {}, chose {} probes:",
            if scorer.is_some() {
                format!("fitted on {} pair settings", known_data[0].pairs.len())
            } else {
                format!("no model ({})", options.select)
            },
            choices.len()
        ));
        for c in &choices {
            progress.line(&c.line());
        }
        let settings: Vec<Setting> = choices.iter().map(|c| c.setting.clone()).collect();
        measuring.measure(&mut session, tasks(campaign, &settings), progress)?;
        chosen.extend(choices);
        round += 1;
    }
    progress.event(Event::Finish);

    let record = CampaignRecord {
        format: FORMAT.to_string(),
        select: options.select,
        seed: campaign.seed,
        settings: grid.len(),
        budget: probes * new.len(),
        min_pairs: probes,
        choices: chosen,
        audit: None,
        onto: Some(OntoRecord {
            dataset: dir.display().to_string(),
            probes,
            new_workloads: new.clone(),
            remeasured_solo: options.remeasure_solo,
        }),
    };
    let dataset = session
        .finish(&[(CAMPAIGN_FILE, record.to_json())], progress)
        .map_err(profiler)?;
    let merge_warning = (dataset.meta.pair_counters != onto.meta.pair_counters).then(|| {
        format!(
            "the pair counter columns differ from {}'s (counters this machine reads and the \
             earlier one did not, or the reverse): `duet dataset merge` will refuse the two",
            dir.display()
        )
    });
    Ok(Outcome {
        dataset,
        record,
        merge_warning,
    })
}

/// The lines printed at the end: each new workload's probes.
pub fn summary(outcome: &Outcome) -> Vec<String> {
    let r = &outcome.record;
    let mut out = Vec::new();
    if let Some(onto) = &r.onto {
        for h in &onto.new_workloads {
            let with: Vec<String> = r
                .choices
                .iter()
                .filter(|c| c.setting.touches(h))
                .map(|c| {
                    let s = &c.setting;
                    let mut t = format!("{} ({}", s.partner(h), s.mode);
                    if let Some(x) = s.share_a {
                        t.push_str(&format!(" {x}"));
                    }
                    t.push_str(&format!(", {})", c.rule.as_str()));
                    t
                })
                .collect();
            out.push(format!("{h}: probed with {}", with.join(", ")));
        }
    }
    if let Some(w) = &outcome.merge_warning {
        out.push(format!("warning: {w}"));
    }
    out
}
