//! A large prediction body parsed over the cores. One pass reads its outline: the top-level
//! fields, with each item of `pairs` and `groups` kept as the JSON text it is (counted against
//! the pairs limit as it is read, so the outline of a body past the limit stops at the item past
//! it); then the items are parsed in parts, one thread each, every part a run of items of about
//! the same length in bytes. A part may hold nested items (a group's jobs) up to its share of
//! what the limit leaves, in proportion to its bytes, so the parts together never hold more
//! than the one-pass parse may.
//!
//! The outcome is exactly the one-pass parse's: the same types parse the same items, and a body
//! the parts do not parse whole (malformed, over the limit, or with one part over its share) is
//! answered `None`, for the one-pass parse to parse again and say why.

use duet_core::api::feature_map;
use duet_core::api::{GroupQuery, PairQuery, PredictRequest};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::bounded;

/// The body's outline: its fields as `wire::PredictRequest` has them, its items unparsed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Outline<'a> {
    #[serde(default)]
    gpu: Option<String>,
    #[serde(default, borrow, deserialize_with = "bounded::vec")]
    pairs: Vec<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "bounded::vec")]
    groups: Vec<&'a RawValue>,
}

/// One part's items: a run of the pairs and a run of the groups (either may be empty).
struct Part<'a> {
    pairs: &'a [&'a RawValue],
    groups: &'a [&'a RawValue],
    bytes: usize,
}

/// `body` parsed in up to `parts` parts over the cores (`duet_core::parallel::each`), with at
/// most `budget` items in its bounded arrays (`bounded::parse`'s count); `None` where the
/// one-pass parse must answer (see the module's doc).
pub fn parse(body: &[u8], budget: usize, parts: usize) -> Option<PredictRequest> {
    // An object only, as `duet_core::object_only` has it: serde's derive would also read an
    // array of the fields.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let (outline, left) = bounded::parse_borrowed::<Outline>(body, budget)?;
    let split = split(&outline.pairs, &outline.groups, parts.max(1));
    let total: usize = split.iter().map(|p| p.bytes).sum::<usize>().max(1);
    // The feature maps' limit of the calling thread, carried to each part's.
    let entries = feature_map::entry_limit();
    let parsed = duet_core::parallel::each(split.len(), |k| {
        let part = &split[k];
        // The part's share of the items left, in proportion to its bytes.
        let share = left.saturating_mul(part.bytes) / total;
        let parse = || bounded::within(share, || parse_part(part));
        match entries {
            Some(limit) => feature_map::with_entry_limit(limit, parse),
            None => parse(),
        }
    });
    let mut request = PredictRequest {
        gpu: outline.gpu,
        pairs: Vec::with_capacity(outline.pairs.len()),
        groups: Vec::with_capacity(outline.groups.len()),
    };
    for part in parsed {
        let (pairs, groups) = part.ok().flatten()?;
        request.pairs.extend(pairs);
        request.groups.extend(groups);
    }
    Some(request)
}

/// The items of one part, each parsed as the one-pass parse parses an item of its array.
fn parse_part(part: &Part) -> Option<(Vec<PairQuery>, Vec<GroupQuery>)> {
    let pairs = part
        .pairs
        .iter()
        .map(|raw| serde_json::from_str::<PairQuery>(raw.get()).ok())
        .collect::<Option<Vec<_>>>()?;
    let groups = part
        .groups
        .iter()
        .map(|raw| {
            serde_json::from_str::<super::wire::GroupQuery>(raw.get())
                .ok()
                .map(super::wire::GroupQuery::into_api)
        })
        .collect::<Option<Vec<_>>>()?;
    Some((pairs, groups))
}

/// `pairs` then `groups` cut into at most `parts` runs of about the same length in bytes.
fn split<'a>(pairs: &'a [&'a RawValue], groups: &'a [&'a RawValue], parts: usize) -> Vec<Part<'a>> {
    let len = |raw: &&RawValue| raw.get().len() + 1;
    let total: usize = pairs.iter().chain(groups).map(len).sum();
    let target = total.div_ceil(parts).max(1);
    let mut out = Vec::with_capacity(parts);
    let (mut p, mut g) = (0, 0);
    while p < pairs.len() || g < groups.len() {
        let (p0, g0) = (p, g);
        let mut bytes = 0;
        while bytes < target && p < pairs.len() {
            bytes += len(&pairs[p]);
            p += 1;
        }
        while bytes < target && g < groups.len() {
            bytes += len(&groups[g]);
            g += 1;
        }
        out.push(Part {
            pairs: &pairs[p0..p],
            groups: &groups[g0..g],
            bytes,
        });
    }
    out
}

#[cfg(test)]
mod tests;
