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

use serde::de::{DeserializeOwned, Deserializer, SeqAccess, Visitor};

use crate::error::{Failure, parse_json_tracked};

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
    deserializer.deserialize_seq(Items(PhantomData))
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

struct Items<T>(PhantomData<T>);

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
        while let Some(item) = {
            BUDGET.set(budget.map(|_| left));
            let next = seq.next_element::<T>();
            if let Some(b) = BUDGET.get().filter(|_| budget.is_some()) {
                left = b;
            }
            next?
        } {
            if left == 0 {
                OVER.set(true);
                return Err(serde::de::Error::custom(
                    "more items than the server's limit",
                ));
            }
            left -= 1;
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
