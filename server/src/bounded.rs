//! Request bodies parsed against their limits: the items of a bounded array (a prediction's
//! pairs, an observation batch, a tensor's values) are counted while they are parsed, and the
//! parse stops at the first item over the limit. A body then never costs more memory than its
//! limit allows, whatever it holds after that item.
//!
//! A bounded field names `bounded::vec` as its `deserialize_with`; `parse` sets the budget that
//! the bounded fields of one body share, for the thread that parses it. Outside `parse` (a
//! test, the OpenAPI document) a bounded field has no limit.

use std::cell::Cell;
use std::marker::PhantomData;

use duet_core::api::{MAX_STRING_BYTES, long_string};
use serde::de::{DeserializeOwned, Deserializer, SeqAccess, Visitor};

use crate::error::{Failure, long_string_failure, parse_json_tracked};

/// Entries a job's feature map may hold past the names the served model accepts, each a name
/// it does not know or one given again: a few are refused once parsed, each named (`unknown
/// feature ...`); more are refused while they are read
/// (`duet_core::api::feature_map::with_entry_limit`), in a prediction and an observation alike.
pub const FEATURE_ENTRIES_PAST_ACCEPTED: usize = 8;

thread_local! {
    /// Items the bounded fields of the body being parsed may still hold (`None`: no limit).
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
    /// Whether the body being parsed has gone over its budget.
    static OVER: Cell<bool> = const { Cell::new(false) };
}

/// Why a body was not parsed.
#[derive(Debug)]
pub enum Refused {
    /// Its bounded fields hold more than the budget; the caller names the limit.
    OverLimit,
    /// Malformed, or a field of the wrong type: the parse's own error.
    Invalid(Failure),
}

/// Restores the thread's budget when a parse ends, however it ends.
struct Scope(Option<usize>);

impl Scope {
    fn enter(budget: usize) -> Scope {
        OVER.set(false);
        Scope(BUDGET.replace(Some(budget)))
    }

    fn reset(budget: usize) {
        OVER.set(false);
        BUDGET.set(Some(budget));
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        BUDGET.set(self.0);
        OVER.set(false);
    }
}

/// Parses `bytes` as a `T` whose bounded fields hold at most `budget` items between them. The
/// error of a malformed body names its field's path, as `error::parse_json`'s does.
pub fn parse<T: DeserializeOwned>(bytes: &[u8], budget: usize) -> Result<T, Refused> {
    if let Some(refused) = long_string_failure(bytes) {
        return Err(Refused::Invalid(refused));
    }
    parse_scanned(bytes, budget)
}

/// [`parse`] for a body its caller has already read for a string longer than any field takes
/// (`error::long_string_failure`), or one made from such a body without adding strings.
pub(crate) fn parse_scanned<T: DeserializeOwned>(
    bytes: &[u8],
    budget: usize,
) -> Result<T, Refused> {
    let _scope = Scope::enter(budget);
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(_) if OVER.get() => Err(Refused::OverLimit),
        Err(_) => {
            // Parsed again, tracking paths, to say where: it stops where the first parse did.
            Scope::reset(budget);
            let tracked = parse_json_tracked(bytes);
            if OVER.get() {
                Err(Refused::OverLimit)
            } else {
                tracked.map_err(Refused::Invalid)
            }
        }
    }
}

/// `parse` for a `T` that borrows from `bytes`, where the caller needs no error of its own (it
/// parses again with `parse` to say why): `None` on any failure, else the value and the items
/// of the budget it left.
pub fn parse_borrowed<'de, T: serde::Deserialize<'de>>(
    bytes: &'de [u8],
    budget: usize,
) -> Option<(T, usize)> {
    if long_string(bytes, MAX_STRING_BYTES).is_some() {
        return None;
    }
    let _scope = Scope::enter(budget);
    let value = serde_json::from_slice(bytes).ok()?;
    Some((value, BUDGET.get().unwrap_or(budget)))
}

/// Runs `parse` with `budget` items for the bounded arrays it reads on this thread, the whole
/// run one budget: `None` where they held more (or `parse` gave `None`).
pub fn within<T>(budget: usize, parse: impl FnOnce() -> Option<T>) -> Option<T> {
    let _scope = Scope::enter(budget);
    let value = parse();
    if OVER.get() { None } else { value }
}

/// A JSON array whose items are taken from the budget of the body being parsed; the item past
/// the budget ends the parse.
pub fn vec<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    deserializer.deserialize_seq(Items(PhantomData, Cost::Each))
}

/// A group's jobs, counted in the pairs they add: the first two nothing (the group's own item,
/// taken by the array of groups, stands for their pair), the job at index `k` from the third on
/// `k` (its pairs with the jobs before it). A group of `n >= 2` jobs then takes exactly its
/// `n (n - 1) / 2` pairs from the budget, as `--max-pairs` counts them, and every item taken
/// holds at most a group and two jobs.
pub fn group_jobs<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    deserializer.deserialize_seq(Items(PhantomData, Cost::PairsWithEarlier))
}

/// What an array's item at an index takes from the budget.
#[derive(Clone, Copy)]
enum Cost {
    /// One item each.
    Each,
    /// Its pairs with the items before it, the first pair given ([`group_jobs`]).
    PairsWithEarlier,
}

impl Cost {
    fn of(self, index: usize) -> usize {
        match self {
            Cost::Each => 1,
            Cost::PairsWithEarlier if index < 2 => 0,
            Cost::PairsWithEarlier => index,
        }
    }
}

/// `vec` for a field that may be absent (with `#[serde(default)]`): present, it is a bounded
/// array.
pub fn some_vec<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    vec(deserializer).map(Some)
}

struct Items<T>(PhantomData<T>, Cost);

impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for Items<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let budget = BUDGET.get();
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        let mut left = budget.unwrap_or(usize::MAX);
        // The budget is given back to the thread whether this array ends well or not: an item
        // of it may hold bounded arrays of its own (a tensor's values), which take from it too.
        let cost = self.1;
        while let Some(item) = {
            BUDGET.set(budget.map(|_| left));
            let next = seq.next_element::<T>();
            if let Some(b) = BUDGET.get().filter(|_| budget.is_some()) {
                left = b;
            }
            next?
        } {
            let Some(rest) = left.checked_sub(cost.of(out.len())) else {
                OVER.set(true);
                return Err(serde::de::Error::custom(
                    "more items than the server's limit",
                ));
            };
            left = rest;
            out.push(item);
        }
        BUDGET.set(budget.map(|_| left));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[serde(deserialize_with = "vec")]
        items: Vec<u32>,
    }

    #[test]
    fn counts_items_and_stops_past_the_budget() {
        let ok: Body = parse(br#"{"items": [1, 2, 3]}"#, 3).expect("within");
        assert_eq!(ok.items, [1, 2, 3]);
        assert!(matches!(
            parse::<Body>(br#"{"items": [1, 2, 3, 4]}"#, 3),
            Err(Refused::OverLimit)
        ));
        // What follows the item past the budget is never read: not even a syntax error there.
        assert!(matches!(
            parse::<Body>(br#"{"items": [1, 2, 3, 4, oops"#, 3),
            Err(Refused::OverLimit)
        ));
        match parse::<Body>(br#"{"items": [1, "x"]}"#, 3) {
            Err(Refused::Invalid(f)) => assert_eq!(f.field.as_deref(), Some("items[1]")),
            other => panic!("{other:?}"),
        }
        // Outside a parse, no limit; a parse leaves none behind.
        let free: Body = serde_json::from_str(r#"{"items": [1, 2, 3, 4]}"#).expect("free");
        assert_eq!(free.items.len(), 4);
    }

    #[derive(Debug, serde::Deserialize)]
    struct Groups {
        #[serde(deserialize_with = "vec")]
        groups: Vec<Group>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Group {
        #[serde(deserialize_with = "group_jobs")]
        jobs: Vec<u32>,
    }

    #[test]
    fn a_groups_jobs_take_its_pairs() {
        let body = |sizes: &[usize]| {
            let groups: Vec<String> = sizes
                .iter()
                .map(|&n| format!(r#"{{"jobs": [{}]}}"#, vec!["1"; n].join(", ")))
                .collect();
            format!(r#"{{"groups": [{}]}}"#, groups.join(", "))
        };
        // Groups of 2, 3, 5 and 8 jobs: 1, 3, 10 and 28 pairs.
        for (sizes, pairs) in [
            (&[2][..], 1),
            (&[3], 3),
            (&[5], 10),
            (&[8], 28),
            (&[3, 5, 8], 41),
        ] {
            let text = body(sizes);
            let within: Groups = parse(text.as_bytes(), pairs).expect("exactly its pairs");
            let read: Vec<usize> = within.groups.iter().map(|g| g.jobs.len()).collect();
            assert_eq!(read, sizes);
            assert!(
                matches!(
                    parse::<Groups>(text.as_bytes(), pairs - 1),
                    Err(Refused::OverLimit)
                ),
                "{sizes:?} within {}",
                pairs - 1
            );
        }
        // A group of fewer than two jobs still takes its own item.
        assert!(matches!(
            parse::<Groups>(body(&[0, 1]).as_bytes(), 1),
            Err(Refused::OverLimit)
        ));
    }

    #[derive(Debug, serde::Deserialize)]
    struct Nested {
        #[serde(deserialize_with = "vec")]
        outer: Vec<Body>,
    }

    #[test]
    fn nested_arrays_share_one_budget() {
        let within: Nested =
            parse(br#"{"outer": [{"items": [1, 2]}, {"items": [3]}]}"#, 5).expect("5 in all");
        assert_eq!(within.outer.len(), 2);
        // 2 + 2 items and 2 tensors: 6 > 5.
        assert!(matches!(
            parse::<Nested>(br#"{"outer": [{"items": [1, 2]}, {"items": [3, 4]}]}"#, 5),
            Err(Refused::OverLimit)
        ));
    }
}
