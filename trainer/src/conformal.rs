//! Conformity scores of held-out rows and the p90 shifts they give, per device and kind of pair.
//!
//! A score is `raw ln p10 - ln measured speed` of one feasible row, scored by a model that
//! neither trained nor early-stopped on it; the shift of a kind is the finite-sample conformal
//! quantile of its scores (`duet_model::calibration::conformal_shift`). Two sources fill them:
//!
//! - split conformal (`Corpus::train`): rows held out inside one fit (`--final-only`);
//! - cross-conformal (`eval`): the out-of-fold scores of the evaluation's refits, where every
//!   measured pair (unseen-pairs folds) and every workload (leave-one-workload-out folds) is
//!   held out once. Their scores are exchangeable with those of a new pair of the same kind, and
//!   there are many more of them: the shift no longer rests on a few held-out workloads.

use std::collections::{BTreeMap, BTreeSet};

use duet_core::api::Calibration as Kind;
use duet_model::calibration::{ALPHA, Calibration, MIN_FAMILIES, Offset, Shifts, conformal_shift};

/// Scores of one kind, by the held-out group (unordered pair, workload) they come from.
type Groups = BTreeMap<String, Vec<f64>>;

/// Scores by device and kind, grouped by the pairs or workloads they come from.
#[derive(Debug, Clone, Default)]
pub struct Scores {
    by: BTreeMap<(String, usize), Groups>,
}

/// The slot of a calibrated class; `conservative` has no scores of its own (it takes the
/// widest shift).
fn slot(kind: Kind) -> Option<usize> {
    match kind {
        Kind::Known => Some(0),
        Kind::New => Some(1),
        Kind::NewFamily => Some(2),
        Kind::Probed => Some(3),
        Kind::Conservative => None,
    }
}

impl Scores {
    /// One row's score on `gpu`, counted in `kind`, from held-out `group` (a `conservative` row
    /// counts in no class).
    pub fn push(&mut self, gpu: &str, kind: Kind, score: f64, group: &str) {
        let Some(slot) = slot(kind) else { return };
        let groups = self.by.entry((gpu.to_string(), slot)).or_default();
        match groups.get_mut(group) {
            Some(scores) => scores.push(score),
            None => {
                groups.insert(group.to_string(), vec![score]);
            }
        }
    }

    /// Every score of `kind`, all devices pooled, by group.
    fn pooled(&self, kind: usize) -> Groups {
        let mut out = Groups::new();
        for ((_, k), groups) in &self.by {
            if *k == kind {
                for (g, s) in groups {
                    out.entry(g.clone()).or_default().extend(s.iter().copied());
                }
            }
        }
        out
    }

    /// The conformal shifts: pooled over devices, and per device where there are several (each
    /// device's 90% then holds on its own). A kind too thin for a finite bound borrows (see
    /// `borrow`); a device with too few rows of a kind uses the pooled shift. `method` is
    /// recorded as is.
    pub fn calibration(&self, method: &str) -> Calibration {
        let pair = |known: &Groups, new: &Groups| {
            let (mut known, mut new) = (fit(known), fit(new));
            borrow(&mut known, &mut new);
            [known, new]
        };
        let [known, new] = pair(&self.pooled(0), &self.pooled(1));
        let new_family = family_fit(&self.pooled(2));
        let probed = probed_fit(&self.pooled(3), &known);
        let gpus: BTreeSet<&String> = self.by.keys().map(|(g, _)| g).collect();
        let by_device = if gpus.len() > 1 {
            gpus.into_iter()
                .map(|gpu| {
                    let get = |kind| {
                        self.by
                            .get(&(gpu.clone(), kind))
                            .cloned()
                            .unwrap_or_default()
                    };
                    let [mut k, mut n] = pair(&get(0), &get(1));
                    let mut f = family_fit(&get(2));
                    let mut p = probed_fit(&get(3), &k);
                    for (mine, all) in [
                        (&mut k, &known),
                        (&mut n, &new),
                        (&mut f, &new_family),
                        (&mut p, &probed),
                    ] {
                        if mine.thin && !all.offset.is_empty() {
                            mine.offset.shift = all.offset.shift;
                            mine.offset.fallback = Some(format!(
                                "{} calibration rows on this device; uses all devices' shift",
                                mine.offset.rows
                            ));
                        }
                    }
                    for empty in [&mut f, &mut p] {
                        if empty.offset.is_empty() {
                            // Not written to model.json: the device reads back as without one.
                            empty.offset = Offset::default();
                        }
                    }
                    (
                        gpu.clone(),
                        Shifts {
                            known: k.offset,
                            new: n.offset,
                            probed: p.offset,
                            new_family: f.offset,
                        },
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        Calibration {
            known: known.offset,
            new: new.offset,
            probed: probed.offset,
            new_family: new_family.offset,
            by_device,
            method: method.to_string(),
            groups: BTreeMap::new(),
            group_effects: BTreeMap::new(),
            group_network: Default::default(),
            family_prior: None,
        }
    }
}

/// The new-family offset of scores grouped by held-out family. A new family is one draw of a
/// family, not of a row: with at least [`MIN_FAMILIES`] families the shift is the 90% quantile
/// of the scores with every family weighing the same (a family of many workloads, so many more
/// rows, counts no more than one of a single workload). A 90% bound over so few groups cannot
/// carry the finite-sample guarantee (that needs 9), so the evaluation's leave-one-family-out
/// coverage is the evidence that it holds. With fewer families, `fit`'s rule (the widest
/// family's own quantile) and a note that the server answers a new family's pairs with the
/// widest shift, labelled conservative (`Calibration::resolve`).
fn family_fit(groups: &Groups) -> Fit {
    let mut f = fit(groups);
    if f.offset.rows == 0 {
        // No class at all: exactly what a model.json without it reads back as.
        f.offset = Offset::default();
        return f;
    }
    let o = &mut f.offset;
    if o.groups >= MIN_FAMILIES {
        if let Some(q) = balanced_quantile(groups, 1.0 - ALPHA) {
            o.shift = q;
            o.fallback = None;
            f.thin = false;
        }
        return f;
    }
    if f.thin {
        o.shift = f.largest.unwrap_or(0.0).max(0.0);
        o.fallback = Some(format!(
            "{} calibration rows, fewer than the {} a 90% bound needs; the largest of them",
            o.rows,
            min_rows()
        ));
    }
    let note = format!(
        "{} families held out, fewer than the {MIN_FAMILIES} a new-family p90 needs: a new \
         family's pairs are answered with the widest shift, labelled conservative",
        o.groups
    );
    o.fallback = Some(match o.fallback.take() {
        Some(f) => format!("{f}; {note}"),
        None => note,
    });
    f
}

/// The probed offset of scores grouped by held-out workload (or unordered pair): `fit`'s rule;
/// too thin for the 90% bound, the largest of its scores widened to the known-workload shift
/// (`known`, fitted beside it) and never tighter than the learned p10. No score at all: empty,
/// so that the server takes the wider of `known` and `new` (`Calibration::resolve`).
fn probed_fit(groups: &Groups, known: &Fit) -> Fit {
    let mut f = fit(groups);
    if f.offset.rows == 0 {
        f.offset = Offset::default();
        return f;
    }
    if f.thin {
        let widened = (!known.thin).then_some(known.offset.shift);
        let own = f.largest.unwrap_or(0.0);
        let o = &mut f.offset;
        o.shift = own.max(widened.unwrap_or(0.0)).max(0.0);
        #[allow(clippy::cast_precision_loss)]
        let level = o.rows as f64 / (o.rows + 1) as f64;
        o.fallback = Some(format!(
            "{} calibration rows, fewer than the {} a 90% bound needs; the largest of them (a \
             {:.0}% bound), never narrower than the known-workload shift or the learned p10",
            o.rows,
            min_rows(),
            level * 100.0
        ));
    }
    f
}

/// The `level` quantile of grouped scores with every group weighing the same (each row
/// `1 / (groups * its group's rows)`): the smallest score whose cumulative weight reaches
/// `level`. `None` with no finite score.
fn balanced_quantile(groups: &Groups, level: f64) -> Option<f64> {
    let kept: Vec<&Vec<f64>> = groups.values().filter(|g| !g.is_empty()).collect();
    #[allow(clippy::cast_precision_loss)]
    let count = kept.len() as f64;
    let mut weighted: Vec<(f64, f64)> = kept
        .iter()
        .flat_map(|g| {
            #[allow(clippy::cast_precision_loss)]
            let w = 1.0 / (count * g.len() as f64);
            g.iter().map(move |&s| (s, w))
        })
        .filter(|(s, _)| s.is_finite())
        .collect();
    weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    for &(s, w) in &weighted {
        total += w;
        // A hair of tolerance keeps an exact 0.9 from falling to the next score.
        if total >= level - 1e-12 {
            return Some(s);
        }
    }
    weighted.last().map(|&(s, _)| s)
}

/// One kind's offset as it is being fitted.
#[derive(Debug, Clone)]
struct Fit {
    offset: Offset,
    /// The largest score, for a kind too thin for the 90% bound.
    largest: Option<f64>,
    /// Too few rows for the finite-sample 90% bound.
    thin: bool,
}

/// The conformal offset of grouped scores: the finite-sample quantile over rows (NaN when too
/// few rows, `thin`). Rows of one group (every row of a held-out workload) are alike, so the row
/// quantile holds for a new group only when there are enough groups: with fewer than the 9 a 90%
/// bound over groups needs, the shift widens to the widest group's own 90% quantile (its largest
/// score where it has too few rows), a bound over groups at the level the count allows.
fn fit(groups: &Groups) -> Fit {
    let scores: Vec<f64> = groups.values().flatten().copied().collect();
    let largest = scores
        .iter()
        .copied()
        .filter(|s| s.is_finite())
        .max_by(f64::total_cmp);
    let mut offset = Offset {
        shift: conformal_shift(&scores, ALPHA).unwrap_or(f64::NAN),
        rows: scores.len(),
        groups: groups.len(),
        fallback: None,
    };
    let thin = !offset.shift.is_finite();
    if !thin && groups.len() < min_rows() {
        let widest = groups
            .values()
            .filter_map(|g| {
                conformal_shift(g, ALPHA).or_else(|| g.iter().copied().max_by(f64::total_cmp))
            })
            .max_by(f64::total_cmp);
        if let Some(w) = widest.filter(|&w| w > offset.shift) {
            offset.shift = w;
            offset.fallback = Some(format!(
                "{} held-out groups, fewer than the {} a 90% bound over groups needs; the widest \
                 group's own 90% quantile",
                groups.len(),
                min_rows()
            ));
        }
    }
    Fit {
        offset,
        largest,
        thin,
    }
}

/// A kind too thin for the finite-sample 90% bound (fewer than 9 rows) still gets a finite,
/// calibrated p90: the largest of its own scores (a bound that holds with probability
/// `n / (n + 1)` on an exchangeable row), widened to the other kind's shift where that is wider
/// (evidence from other pairs may loosen the p90, never tighten it), and never tighter than the
/// learned p10 (shift at least 0: a few rows are no evidence to narrow it). With no score of its
/// own and none to borrow it stays at the learned p10. `fallback` says which applied.
fn borrow(known: &mut Fit, new: &mut Fit) {
    let finite = [&*known, &*new].map(|f| (!f.thin).then_some(f.offset.shift));
    for (mine, other, other_name) in [(known, finite[1], "new"), (new, finite[0], "known")] {
        if !mine.thin {
            continue;
        }
        let o = &mut mine.offset;
        let mut why = format!(
            "{} calibration rows, fewer than the {} a 90% bound needs",
            o.rows,
            min_rows()
        );
        let mut shift = 0.0_f64;
        if let Some(l) = mine.largest {
            #[allow(clippy::cast_precision_loss)]
            let level = o.rows as f64 / (o.rows + 1) as f64;
            why.push_str(&format!(
                "; the largest of them (a {:.0}% bound)",
                level * 100.0
            ));
            shift = shift.max(l);
        }
        if let Some(b) = other.filter(|&b| b > shift) {
            why.push_str(&format!(", widened to the {other_name}-workload shift"));
            shift = b;
        }
        if mine.largest.is_none() && other.is_none_or(|b| b <= 0.0) {
            why.push_str("; uncalibrated (pinball p10)");
        } else {
            why.push_str(", never tighter than the learned p10");
        }
        o.shift = shift;
        o.fallback = Some(why);
    }
}

/// Rows the finite-sample quantile needs at `ALPHA`.
fn min_rows() -> usize {
    (1..1000)
        .find(|&n| conformal_shift(&vec![0.0; n], ALPHA).is_some())
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each score its own group.
    fn apart(scores: &[f64]) -> Fit {
        fit(&scores
            .iter()
            .enumerate()
            .map(|(k, &s)| (format!("g{k}"), vec![s]))
            .collect())
    }

    #[test]
    fn a_thin_kind_gets_a_finite_p90_that_only_widens() {
        let scores: Vec<f64> = (0..20).map(|k| f64::from(k) / 100.0 - 0.5).collect();
        // Known: 20 rows, a tightening shift (negative); new: 3 rows, all below zero.
        let mut known = apart(&scores);
        let mut new = apart(&scores[..3]);
        assert!(known.offset.shift < 0.0 && new.thin);
        borrow(&mut known, &mut new);
        assert_eq!(
            new.offset.shift, 0.0,
            "neither a few rows nor a tightening shift narrow it"
        );
        let why = new.offset.fallback.clone().unwrap_or_default();
        assert!(why.contains("75% bound"), "{why}");
        assert!(known.offset.fallback.is_none());
        // A thin kind's largest score where it is the widest.
        let mut known = apart(&scores);
        let mut new = apart(&[0.3, 0.9, 0.1]);
        borrow(&mut known, &mut new);
        assert_eq!(new.offset.shift, 0.9);
        // The other kind's shift where that is wider.
        let wide: Vec<f64> = scores.iter().map(|s| s + 2.0).collect();
        let mut known = apart(&wide);
        let mut new = apart(&[0.3, 0.9, 0.1]);
        borrow(&mut known, &mut new);
        assert_eq!(new.offset.shift, known.offset.shift);
        let why = new.offset.fallback.clone().unwrap_or_default();
        assert!(why.contains("widened"), "{why}");
        // Both thin: each its own largest score.
        let (mut known, mut new) = (apart(&[0.2, 0.4]), apart(&[0.5]));
        borrow(&mut known, &mut new);
        assert_eq!((known.offset.shift, new.offset.shift), (0.4, 0.5));
        // Nothing at all: uncalibrated.
        let (mut known, mut new) = (apart(&[]), apart(&[]));
        borrow(&mut known, &mut new);
        assert_eq!((known.offset.shift, new.offset.shift), (0.0, 0.0));
        let why = known.offset.fallback.clone().unwrap_or_default();
        assert!(why.contains("uncalibrated"), "{why}");
    }

    #[test]
    fn few_groups_widen_to_the_widest_group() {
        // Five workloads of 20 rows each; one is much harder than the rest.
        let mut groups = Groups::new();
        for w in 0..5 {
            let base = if w == 4 { 1.0 } else { 0.0 };
            groups.insert(
                format!("w{w}"),
                (0..20).map(|k| base + f64::from(k) / 100.0).collect(),
            );
        }
        let rows: Vec<f64> = groups.values().flatten().copied().collect();
        let row_bound = conformal_shift(&rows, ALPHA).expect("100 rows");
        let f = fit(&groups);
        assert!(!f.thin);
        // The hard workload's own 90% quantile (rank 19 of 20), wider than the row bound.
        assert!((f.offset.shift - 1.18).abs() < 1e-12, "{:?}", f.offset);
        assert!(f.offset.shift > row_bound);
        assert!(f.offset.fallback.is_some());
        // With nine or more groups the row bound stands.
        let many: Groups = (0..9)
            .map(|w| (format!("w{w}"), vec![f64::from(w); 3]))
            .collect();
        let f = fit(&many);
        assert!(f.offset.fallback.is_none());
        assert_eq!(f.offset.groups, 9);
    }

    #[test]
    fn shifts_per_device_and_kind_with_their_groups() {
        let mut s = Scores::default();
        for k in 0..19 {
            let v = f64::from(k) / 100.0;
            s.push("k80", Kind::Known, v, &format!("pair {k}"));
            s.push("v100", Kind::Known, 1.0 + v, &format!("pair {k}"));
            s.push("k80", Kind::New, 2.0 + v, "w1");
            s.push("v100", Kind::New, 3.0 + v, if k < 9 { "w1" } else { "w2" });
        }
        // A device with too few rows of its own uses the pooled shift.
        s.push("p100", Kind::New, 9.0, "w3");
        let c = s.calibration(duet_model::calibration::CROSS_CONFORMAL);
        // Rank ceil(20 * 0.9) = 18 of 19 on each device.
        assert!((c.by_device["k80"].known.shift - 0.17).abs() < 1e-12);
        assert!((c.by_device["v100"].known.shift - 1.17).abs() < 1e-12);
        assert!(c.by_device["k80"].known.fallback.is_none());
        // One workload: its own quantile is the row bound.
        assert!((c.by_device["k80"].new.shift - 2.17).abs() < 1e-12);
        assert!(c.by_device["k80"].new.fallback.is_none());
        // Two workloads, fewer than 9: the wider one's own quantile (rank 10 of its 10 rows),
        // not the row bound 3.17.
        let v100 = &c.by_device["v100"].new;
        assert!((v100.shift - 3.18).abs() < 1e-12, "{v100:?}");
        assert!(v100.fallback.is_some());
        assert_eq!(v100.groups, 2);
        assert_eq!(c.known.rows, 38);
        assert_eq!(c.known.groups, 19);
        assert_eq!(c.new.groups, 3);
        let p100 = &c.by_device["p100"];
        assert_eq!(p100.new.shift, c.new.shift);
        assert!(p100.new.fallback.is_some());
        assert_eq!(c.method, "cross-conformal");
    }

    #[test]
    fn a_new_family_weighs_as_one_family_whatever_its_rows() {
        // Six families: five easy ones of 10 rows, one hard one of 100 rows. By rows the hard
        // family is 2/3 of the scores; by family it is one of six.
        let mut s = Scores::default();
        for f in 0..5 {
            for k in 0..10 {
                s.push(
                    "v100",
                    Kind::NewFamily,
                    f64::from(k) / 100.0,
                    &format!("family f{f}"),
                );
            }
        }
        for k in 0..100 {
            s.push(
                "v100",
                Kind::NewFamily,
                1.0 + f64::from(k) / 100.0,
                "family hard",
            );
        }
        let c = s.calibration(duet_model::calibration::CROSS_CONFORMAL);
        let o = &c.new_family;
        assert_eq!((o.rows, o.groups), (150, 6));
        // Five of six families (83%) lie below 0.1; the 90% point is in the hard family's
        // lowest 40%: its 40th score of 100 (cumulative 5/6 + 40/600 = 0.9).
        assert!((o.shift - 1.39).abs() < 1e-9, "{o:?}");
        assert!(o.fallback.is_none());
        assert!(c.families_calibrated());
        // Four families: not enough to answer with; the note says what the server does.
        let mut s = Scores::default();
        for f in 0..4 {
            for k in 0..10 {
                s.push(
                    "v100",
                    Kind::NewFamily,
                    f64::from(k),
                    &format!("family f{f}"),
                );
            }
        }
        let c = s.calibration(duet_model::calibration::CROSS_CONFORMAL);
        assert!(!c.families_calibrated());
        let why = c.new_family.fallback.clone().unwrap_or_default();
        assert!(
            why.contains("4 families held out") && why.contains("conservative"),
            "{why}"
        );
        // A conservative row counts in no class.
        let mut s = Scores::default();
        s.push("v100", Kind::Conservative, 5.0, "w");
        assert!(s.calibration("x").new_family.is_empty() && s.calibration("x").new.is_empty());
    }
}
