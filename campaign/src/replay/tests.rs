//! The replay's tests: small synthetic datasets through every part of it.

use duet_core::dataset::Mode;
use duet_core::progress::Lines;

use super::*;
use crate::choose::{Rule, Select};
use crate::replay::probes::without_workloads;
use crate::settings::{Setting, SettingKey};
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
            let prefix: BTreeSet<&SettingKey> = chosen[..p.settings - p.audited].iter().collect();
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
    // Written with its probe curves, and without any (no plot of nothing).
    let tmp = tempfile::tempdir().expect("tmp");
    let no_probes = Replay {
        probes: Vec::new(),
        ..r.clone()
    };
    for (replayed, name, plotted) in [(&r, "with", true), (&no_probes, "without", false)] {
        let out = tmp.path().join(name);
        crate::report::write(replayed, &out).expect("written");
        let mut files: Vec<String> = std::fs::read_dir(&out)
            .expect("listed")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut expected = vec!["budget.svg", "report.json", "report.md"];
        if plotted {
            expected.insert(1, crate::report::PROBES_PLOT);
        }
        assert_eq!(files, expected, "{name} probe curves");
        let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
        assert_eq!(md.contains(crate::report::PROBES_PLOT), plotted, "{name}");
    }
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
    // A dataset that leaves out some of its grid is said to, mode by mode.
    let p = std::path::Path::new("p");
    assert_eq!(oracle::coverage_line(p, &one[0].1), None);
    let mut some = one[0].1.clone();
    some.pairs.pop();
    let line = oracle::coverage_line(p, &some).expect("said");
    assert!(
        line.contains("of the 10 pairs its 4 workloads make in a mode (self-pairs included), its rows hold 9 of 10 in space"),
        "{line}"
    );
    // A stopped campaign's partial dataset holds part of its grid.
    let mut partial = one[0].1.clone();
    partial.meta.description = format!(
        "PARTIAL (3 of 10 measurements): {}",
        partial.meta.description
    );
    let e = replay(
        &[(PathBuf::from("p"), partial)],
        &ReplayOptions::new(vec![Budget::Settings(2)], vec![7]),
        &mut Lines(|_: &str| {}),
    )
    .expect_err("refused");
    assert!(
        e.to_string().contains(
            "--data p: a stopped campaign's partial dataset (\"PARTIAL (3 of 10 measurements)\")"
        ),
        "{e}"
    );
    assert_eq!("25%".parse::<Budget>(), Ok(Budget::Fraction(0.25)));
    assert_eq!("60".parse::<Budget>(), Ok(Budget::Settings(60)));
    for bad in ["0%", "120%", "0", "x", "-3"] {
        assert!(bad.parse::<Budget>().is_err(), "{bad}");
    }
    assert_eq!(Budget::Fraction(0.25).to_string(), "25%");
}
