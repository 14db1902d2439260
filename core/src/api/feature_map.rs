//! A job's features by name: a vector of `(name, value)` kept in the order of the names, one
//! value per name. It reads like the `BTreeMap` it replaces (looked up by name, iterated in the
//! order of the names, serialized as a JSON object, a repeated name's last value kept) and holds
//! a job's features in one block of their own size: a map of one feature takes 64 bytes where a
//! B-tree took a whole node of eleven (640 bytes), so a request of jobs with one feature each
//! parses into a third of the memory, and requests of inline jobs are answered a few percent
//! sooner (BENCHMARKS.md, "What a JSON prediction parses into").

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{FeatureInput, FeatureName};

/// A feature and its value, as the map holds them.
type Entry = (FeatureName, FeatureInput);

/// The map's names and values, borrowed, in the order of the names.
pub type Iter<'a> =
    std::iter::Map<std::slice::Iter<'a, Entry>, fn(&Entry) -> (&FeatureName, &FeatureInput)>;

/// Entries of scratch a thread keeps between maps.
const SCRATCH_KEPT: usize = 1024;

thread_local! {
    /// The entries of the map being read on this thread (`Deserialize`).
    static SCRATCH: std::cell::RefCell<Vec<Entry>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Entries a map read on this thread may hold (`None`: no limit); see [`with_entry_limit`].
    static ENTRY_LIMIT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Runs `read` with every map it reads on this thread refused at its first entry past `limit`,
/// the limit before restored however `read` ends. A reader that accepts a known number of
/// names (a model's features) sets it at that number and some: a map with more entries holds
/// names it does not accept or names given again, and is refused as it is read, before a
/// hostile client's millions of tiny entries are held.
pub fn with_entry_limit<T>(limit: usize, read: impl FnOnce() -> T) -> T {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENTRY_LIMIT.set(self.0);
        }
    }
    let _restore = Restore(ENTRY_LIMIT.replace(Some(limit)));
    read()
}

/// The limit [`with_entry_limit`] set on this thread, for a reader that carries it to threads
/// of its own.
pub fn entry_limit() -> Option<usize> {
    ENTRY_LIMIT.get()
}

/// A job's features by name, in the order of their names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Features(Vec<(FeatureName, FeatureInput)>);

impl Features {
    pub fn new() -> Features {
        Features(Vec::new())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where `name` is, or where it would go.
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }

    pub fn get(&self, name: &str) -> Option<&FeatureInput> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut FeatureInput> {
        self.find(name).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// `value` under `name`; the value it replaces, where `name` had one.
    pub fn insert(&mut self, name: FeatureName, value: FeatureInput) -> Option<FeatureInput> {
        match self.find(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (name, value));
                None
            }
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<FeatureInput> {
        self.find(name).ok().map(|i| self.0.remove(i).1)
    }

    /// Names and values, in the order of the names.
    pub fn iter(&self) -> Iter<'_> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &FeatureName> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &FeatureInput> + ExactSizeIterator {
        self.0.iter().map(|(_, v)| v)
    }

    /// `entries` in the order of their names, the last value of a repeated name kept.
    fn from_entries(mut entries: Vec<(FeatureName, FeatureInput)>) -> Features {
        if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
            // Stable: a repeated name's values stay in the order given; the last is kept.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut kept: Vec<(FeatureName, FeatureInput)> = Vec::with_capacity(entries.len());
            for entry in entries {
                match kept.last_mut() {
                    Some(last) if last.0 == entry.0 => *last = entry,
                    _ => kept.push(entry),
                }
            }
            entries = kept;
            entries.shrink_to_fit();
        }
        Features(entries)
    }
}

impl FromIterator<(FeatureName, FeatureInput)> for Features {
    fn from_iter<I: IntoIterator<Item = (FeatureName, FeatureInput)>>(iter: I) -> Features {
        Features::from_entries(iter.into_iter().collect())
    }
}

impl<const N: usize> From<[(FeatureName, FeatureInput); N]> for Features {
    fn from(entries: [(FeatureName, FeatureInput); N]) -> Features {
        Features::from_entries(entries.into())
    }
}

impl Extend<(FeatureName, FeatureInput)> for Features {
    /// The entries appended and sorted once (a name given again keeps its last value), not
    /// inserted one by one, each shifting the entries after it.
    fn extend<I: IntoIterator<Item = (FeatureName, FeatureInput)>>(&mut self, iter: I) {
        let mut entries = std::mem::take(&mut self.0);
        entries.extend(iter);
        *self = Features::from_entries(entries);
    }
}

impl IntoIterator for Features {
    type Item = (FeatureName, FeatureInput);
    type IntoIter = std::vec::IntoIter<(FeatureName, FeatureInput)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Features {
    type Item = (&'a FeatureName, &'a FeatureInput);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl std::ops::Index<&str> for Features {
    type Output = FeatureInput;
    /// The value of `name`; a name the map does not hold panics, as a `BTreeMap`'s index does
    /// (for tests and names known to be there).
    fn index(&self, name: &str) -> &FeatureInput {
        #[allow(clippy::expect_used)]
        self.get(name).expect("no feature of that name")
    }
}

impl Serialize for Features {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k.as_str(), v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Features {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Features, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Features;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Features, A::Error> {
                // Read into the thread's scratch vector, then moved into one block of their
                // number: no growth, no shrinking, for each job of a large request.
                let limit = ENTRY_LIMIT.get();
                SCRATCH.with_borrow_mut(|scratch| {
                    scratch.clear();
                    while let Some(entry) = map.next_entry::<FeatureName, FeatureInput>()? {
                        if let Some(limit) = limit.filter(|&l| scratch.len() >= l) {
                            scratch.clear();
                            return Err(serde::de::Error::custom(format!(
                                "more than {limit} entries in one job's features: more than \
                                 the names this server accepts"
                            )));
                        }
                        scratch.push(entry);
                    }
                    // Collected, not taken: a block of exactly their number, the scratch's
                    // own larger one kept for the next map.
                    #[allow(clippy::drain_collect)]
                    let entries: Vec<Entry> = scratch.drain(..).collect();
                    // A map far larger than a job's keeps no large scratch behind it.
                    scratch.shrink_to(SCRATCH_KEPT);
                    Ok(Features::from_entries(entries))
                })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> Features {
        serde_json::from_str(json).expect("a map")
    }

    #[test]
    fn a_limit_refuses_a_map_at_its_first_entry_past_it() {
        let read = |json: &str| serde_json::from_str::<Features>(json);
        let three = r#"{"a": 1, "b": 2, "a": 3}"#;
        let m = with_entry_limit(3, || read(three)).expect("three entries");
        assert_eq!(m.len(), 2);
        let error = with_entry_limit(2, || read(three)).expect_err("a third entry");
        assert!(error.to_string().contains("more than 2 entries"), "{error}");
        // Refused where the entry past the limit is: what follows it is not read.
        let cut = with_entry_limit(2, || read(r#"{"a": 1, "b": 2, "c": 3, oops"#));
        assert!(cut.expect_err("past the limit").is_data());
        // The limit ends with its reader, however it ended.
        assert_eq!(entry_limit(), None);
        assert_eq!(read(three).expect("no limit").len(), 2);
        assert_eq!(with_entry_limit(7, entry_limit), Some(7));
    }

    #[test]
    fn reads_and_writes_as_the_map_of_its_names() {
        let m = map(r#"{"b": 2, "a": "x", "c": null, "b": 3}"#);
        assert_eq!(m.len(), 3);
        assert_eq!(m.get("b"), Some(&FeatureInput::Number(3.0)));
        assert_eq!(m["a"], FeatureInput::Text("x".into()));
        assert_eq!(m.get("z"), None);
        assert_eq!(
            serde_json::to_string(&m).expect("json"),
            r#"{"a":"x","b":3.0,"c":null}"#
        );
        let names: Vec<&str> = m.keys().map(FeatureName::as_str).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let as_btree: std::collections::BTreeMap<String, FeatureInput> =
            serde_json::from_str(r#"{"b": 2, "a": "x", "c": null, "b": 3}"#).expect("map");
        assert!(
            m.iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .eq(as_btree)
        );
        assert!(serde_json::from_str::<Features>("[1]").is_err());
        assert_eq!(map("{}"), Features::new());
    }

    #[test]
    fn a_map_given_up_midway_leaves_nothing_to_the_next() {
        assert!(serde_json::from_str::<Features>(r#"{"a": 1, "b": true}"#).is_err());
        let m = map(r#"{"c": 1}"#);
        let names: Vec<&str> = m.keys().map(FeatureName::as_str).collect();
        assert_eq!(names, ["c"]);
        // A map far larger than a job's, then a small one: the same answers.
        let large: String = (0..5_000).map(|k| format!(r#""f{k:05}": {k},"#)).collect();
        let m = map(&format!("{{{}\"z\": 1}}", large));
        assert_eq!(
            (m.len(), m.get("f04999")),
            (5_001, Some(&FeatureInput::Number(4999.0)))
        );
        // Held in a block of exactly its entries.
        assert_eq!(m.0.capacity(), m.0.len());
        assert_eq!(map(r#"{"y": 2}"#).len(), 1);
        SCRATCH.with_borrow(|scratch| assert!(scratch.capacity() <= SCRATCH_KEPT));
    }

    #[test]
    fn inserts_and_removes_in_order() {
        let mut m = Features::new();
        for (k, v) in [("m", 1.0), ("a", 2.0), ("z", 3.0), ("m", 4.0)] {
            m.insert(k.into(), FeatureInput::Number(v));
        }
        assert_eq!(m.len(), 3);
        assert_eq!(m.get("m"), Some(&FeatureInput::Number(4.0)));
        assert_eq!(m.remove("a"), Some(FeatureInput::Number(2.0)));
        assert!(!m.contains_key("a"));
        let collected: Features = [("y", 1.0), ("x", 2.0), ("y", 3.0)]
            .into_iter()
            .map(|(k, v)| (FeatureName::from(k), FeatureInput::Number(v)))
            .collect();
        let names: Vec<&str> = collected.keys().map(FeatureName::as_str).collect();
        assert_eq!(names, ["x", "y"]);
        assert_eq!(collected["y"], FeatureInput::Number(3.0));
        // Extended: a name given again keeps its last value, the order kept.
        let mut extended = collected.clone();
        extended.extend([("w", 4.0), ("y", 5.0)].map(|(k, v)| (k.into(), FeatureInput::Number(v))));
        let names: Vec<&str> = extended.keys().map(FeatureName::as_str).collect();
        assert_eq!(names, ["w", "x", "y"]);
        assert_eq!(extended["y"], FeatureInput::Number(5.0));
    }
}
