//! The kube-scheduler extender protocol's bodies (`k8s.io/kube-scheduler/extender/v1`), with
//! Go's field names on the wire. A malformed body is refused naming the field; the node arrays
//! are counted while they are read (`--max-nodes`), and a node list's items are kept as the
//! text they came as, to be passed back, never parsed into values; the pod is kept as text for
//! `call_args.rs`, which reads what the extender judges it by. A string where an object or an
//! array belongs is refused by its length, never quoted.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use duet_core::api::known_path;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

/// `ExtenderArgs`: the pod and its candidate nodes, by name (`nodeCacheCapable`) or whole.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderArgs {
    /// The pod as the text it came as (`call_args::pod_and_nodes` reads what the extender
    /// judges it by).
    #[serde(rename = "Pod")]
    pub pod: Option<Box<RawValue>>,
    #[serde(rename = "Nodes", default, deserialize_with = "object_or_null")]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", default, deserialize_with = "counted_or_null")]
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList` as the scheduler sends it without `nodeCacheCapable`: its nodes are passed
/// back as they came (Go's `NodeList` has no fields beyond these four).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct NodeList {
    #[serde(rename = "kind", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "counted_or_empty")]
    pub items: Vec<Box<RawValue>>,
    /// Each item's `metadata.name`, in order (filled by `call_args::pod_and_nodes`).
    #[serde(skip)]
    pub names: Vec<String>,
}

impl NodeList {
    /// Keeps the items whose name `keep` accepts (all of them where the names were not read).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        if self.names.len() != self.items.len() {
            return;
        }
        let keeps: Vec<bool> = self.names.iter().map(|n| keep(n)).collect();
        let mut each = keeps.iter();
        self.items.retain(|_| each.next().copied().unwrap_or(false));
        let mut each = keeps.iter();
        self.names.retain(|_| each.next().copied().unwrap_or(false));
    }
}

impl PartialEq for NodeList {
    /// The same text, item by item.
    fn eq(&self, other: &NodeList) -> bool {
        let text = |r: &Option<Box<RawValue>>| r.as_ref().map(|r| r.get().to_string());
        self.kind == other.kind
            && self.api_version == other.api_version
            && text(&self.metadata) == text(&other.metadata)
            && self.items.len() == other.items.len()
            && self
                .items
                .iter()
                .zip(&other.items)
                .all(|(a, b)| a.get() == b.get())
    }
}

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none", default)]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none", default)]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes", default, serialize_with = "clipped_values")]
    pub failed_nodes: BTreeMap<String, String>,
    #[serde(
        rename = "FailedAndUnresolvableNodes",
        default,
        serialize_with = "clipped_values"
    )]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    #[serde(rename = "Error", default, serialize_with = "clipped_text")]
    pub error: String,
}

/// `HostPriority`; a prioritize answers a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    #[serde(rename = "Host")]
    pub host: String,
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderBindingArgs {
    #[serde(rename = "PodName")]
    pub pod_name: String,
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "Node")]
    pub node: String,
}

/// `ExtenderBindingResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    #[serde(rename = "Error", default, serialize_with = "clipped_text")]
    pub error: String,
}

/// An error text as an answer carries it (`duet_core::api::clipped`).
fn clipped_text<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    if text.len() <= duet_core::api::ERROR_TEXT_BYTES {
        s.serialize_str(text)
    } else {
        s.serialize_str(&duet_core::api::clipped_at(
            text,
            duet_core::api::ERROR_TEXT_BYTES,
        ))
    }
}

/// Reasons by node, each clipped.
fn clipped_values<S: Serializer>(map: &BTreeMap<String, String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut out = s.serialize_map(Some(map.len()))?;
    for (node, why) in map {
        out.serialize_key(node)?;
        out.serialize_value(&Clipped(why))?;
    }
    out.end()
}

struct Clipped<'a>(&'a str);

impl Serialize for Clipped<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        clipped_text(self.0, s)
    }
}

/// A body duet cannot read: what is wrong, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct BadBody {
    pub field: Option<String>,
    pub error: String,
    /// It passes a limit (413) rather than being malformed (400).
    pub too_large: bool,
}

impl BadBody {
    pub(crate) fn malformed(field: Option<String>, error: String) -> BadBody {
        BadBody {
            field,
            error,
            too_large: false,
        }
    }
}

thread_local! {
    /// Node items the body being read may still hold (`None`: no limit).
    static NODES_LEFT: Cell<Option<usize>> = const { Cell::new(None) };
    /// Whether the body being read holds more.
    static OVER: Cell<bool> = const { Cell::new(false) };
}

/// Reads a JSON body whole (bytes after its value are refused); an error names the field by
/// its path (`Pod.metadata.name`).
pub fn read<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, BadBody> {
    // Every body of the protocol is an object; anything else is refused unquoted.
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(BadBody::malformed(
            None,
            "expected a JSON object (the body is not one)".into(),
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        // Written no further than the clip: serde's message may quote the whole body.
        let error = duet_core::api::clipped_display("", &e.into_inner());
        BadBody::malformed(known_path(&path).map(str::to_string), error)
    })?;
    de.end()
        .map_err(|e| BadBody::malformed(None, format!("{e} after the JSON value")))?;
    Ok(value)
}

/// [`read`] of an `ExtenderArgs` whose node arrays hold at most `max_nodes` items between them
/// (`--max-nodes`): the read stops at the first item past it.
pub fn read_args(bytes: &[u8], max_nodes: usize) -> Result<ExtenderArgs, BadBody> {
    struct Scope(Option<usize>);
    impl Drop for Scope {
        fn drop(&mut self) {
            NODES_LEFT.set(self.0);
            OVER.set(false);
        }
    }
    OVER.set(false);
    let _scope = Scope(NODES_LEFT.replace(Some(max_nodes)));
    read(bytes).map_err(|bad| {
        if OVER.get() {
            BadBody {
                field: bad
                    .field
                    .map(|f| f.split('[').next().unwrap_or_default().to_string()),
                error: format!(
                    "more than {max_nodes} nodes: over the extender's limit of {max_nodes} per \
                     call (--max-nodes)"
                ),
                too_large: true,
            }
        } else {
            bad
        }
    })
}

/// A node array counted against the body's `--max-nodes`; `null` is absent.
fn counted_or_null<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_option(Counted(PhantomData))
}

/// A node array counted against the body's `--max-nodes`; `null` is empty (Go's nil slice).
fn counted_or_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    counted_or_null(d).map(Option::unwrap_or_default)
}

struct Counted<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Counted<T> {
    type Value = Option<Vec<T>>;

    null_or!('de, None, "an array or null");

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<T>()? {
            if let Some(left) = NODES_LEFT.get() {
                if left == 0 {
                    OVER.set(true);
                    return Err(serde::de::Error::custom("more nodes than --max-nodes"));
                }
                NODES_LEFT.set(Some(left - 1));
            }
            out.push(item);
        }
        Ok(Some(out))
    }
}

/// `text` (a part of a body) read by `seed`, a malformed field named by its path under
/// `prefix`.
pub(crate) fn read_under<'de, S: DeserializeSeed<'de>>(
    prefix: &str,
    text: &'de str,
    seed: S,
) -> Result<S::Value, BadBody> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let mut track = serde_path_to_error::Track::new();
    let read = seed.deserialize(serde_path_to_error::Deserializer::new(de, &mut track));
    read.map_err(|e| {
        let path = track.path().to_string();
        let field = match known_path(&path) {
            None => prefix.to_string(),
            Some(p) if p.starts_with('[') => format!("{prefix}{p}"),
            Some(p) => format!("{prefix}.{p}"),
        };
        // serde's position counts from the start of `text`, not of the body: the path says
        // where, so the position is left off.
        let error = duet_core::api::clipped_display("", &e);
        let at = format!(" at line {} column {}", e.line(), e.column());
        let error = match error.strip_suffix(&at) {
            Some(message) => message.to_string(),
            None => error,
        };
        BadBody::malformed(Some(field), error)
    })
}

/// The methods of a visitor that reads `null` (or nothing) as `$none`, anything else by what
/// the deserializer finds (`deserialize_any`: the visitor's own `visit_seq` or `visit_map`), and
/// refuses a string by its length ([`string_refused`]), `$expected` saying what it takes.
macro_rules! null_or {
    ($de:lifetime, $none:expr, $expected:literal) => {
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str($expected)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_some<D: Deserializer<$de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err($crate::wire::string_refused(v, $expected))
        }
    };
}
pub(crate) use null_or;

/// A JSON object read as `T`, `null` as none; a string is refused without quoting it (serde's
/// own message would hold all of it).
pub(crate) fn object_or_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Object<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Object<T> {
        type Value = Option<T>;
        null_or!('de, None, "an object or null");
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_any(Object(PhantomData))
}

/// A string where one was not expected, refused by its length alone.
pub(crate) fn string_refused<E: serde::de::Error>(v: &str, expected: &str) -> E {
    E::custom(format_args!(
        "invalid type: a string of {} bytes, expected {expected}",
        v.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call_args::pod_and_nodes;

    const GPU: &str = "nvidia.com/gpu";

    #[test]
    fn the_scheduler_s_bodies_are_read_with_go_s_names() {
        let body = br#"{"Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c"}]}}, "Nodes": null, "NodeNames": ["a", "b"]}"#;
        let (pod, names, list) = pod_and_nodes(read(body).expect("valid"), GPU).expect("valid");
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(names, ["a", "b"]);
        assert!(list.is_none());
        let body = br#"{"Pod": {"metadata": {"name": "p"}},
            "Nodes": {"items": [{"metadata": {"name": "a"}}]}}"#;
        let (_, names, list) = pod_and_nodes(read(body).expect("valid"), GPU).expect("valid");
        assert_eq!(names, ["a"]);
        assert_eq!(list.expect("list").items.len(), 1);
        let out = serde_json::to_value(ExtenderFilterResult {
            node_names: Some(vec!["a".into()]),
            failed_nodes: [("b".to_string(), "why".to_string())].into(),
            ..ExtenderFilterResult::default()
        })
        .expect("serialise");
        assert_eq!(out["NodeNames"][0], "a");
        assert_eq!(out["FailedNodes"]["b"], "why");
        assert_eq!(
            serde_json::to_value(HostPriority {
                host: "a".into(),
                score: 7
            })
            .expect("serialise"),
            serde_json::json!({"Host": "a", "Score": 7})
        );
    }

    #[test]
    fn a_malformed_body_names_the_field() {
        for (body, field) in [
            (
                &br#"{"Pod": {"metadata": {"name": 5}}}"#[..],
                "Pod.metadata.name",
            ),
            (br#"{"Pod": {}, "NodeNames": ["a"]}"#, "Pod.metadata.name"),
            (br#"{"NodeNames": ["a"]}"#, "Pod"),
            (br#"{"Pod": {"metadata": {"name": "p"}}}"#, "NodeNames"),
            (
                br#"{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}"#,
                "NodeNames[0]",
            ),
            (
                br#"{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}"#,
                "Nodes.items[0].metadata.name",
            ),
        ] {
            let e = read::<ExtenderArgs>(body)
                .and_then(|a| pod_and_nodes(a, GPU))
                .expect_err("must be refused");
            assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
        }
        let e = read::<ExtenderArgs>(b"not json").expect_err("must be refused");
        assert!(e.field.is_none() && e.error.contains("expected"), "{e:?}");
    }

    #[test]
    fn bytes_after_the_json_are_refused() {
        let body = br#"{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a"]} trailing"#;
        let e = read_args(body, 10).expect_err("must be refused");
        assert!(!e.too_large && e.field.is_none(), "{e:?}");
        assert!(e.error.contains("trailing"), "{e:?}");
        // Whitespace after it is fine.
        let body = b"{\"Pod\": {\"metadata\": {\"name\": \"p\"}}, \"NodeNames\": [\"a\"]}\n ";
        assert!(read_args(body, 10).is_ok());
    }

    #[test]
    fn nodes_past_the_limit_are_refused_where_they_are_read() {
        let names = br#"{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "b", "c"]}"#;
        assert_eq!(
            read_args(names, 3)
                .expect("at the limit")
                .node_names
                .map(|n| n.len()),
            Some(3)
        );
        // What follows the item past the limit is never read: not even a syntax error there.
        for body in [
            &names[..],
            br#"{"NodeNames": ["a", "b", "c", oops"#,
            br#"{"Nodes": {"items": [{}, {}, {}, [oops"#,
            br#"{"Nodes": {"items": [{}, {}]}, "NodeNames": ["a", "b"]}"#,
        ] {
            let e = read_args(body, 2).expect_err("over the limit");
            assert!(e.too_large, "{e:?}");
            assert!(e.error.contains("--max-nodes"), "{e:?}");
            assert!(
                matches!(e.field.as_deref(), Some("NodeNames" | "Nodes.items")),
                "{e:?}"
            );
        }
        // Without a limit (`read`), nothing is counted.
        assert!(read::<ExtenderArgs>(names).is_ok());
    }

    #[test]
    fn a_node_list_is_passed_back_as_it_came() {
        let list = r#"{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a","labels":{"x":"1"}},"status":{"capacity":{"cpu":"4"}}},{"metadata":{"name":"b"}}]}"#;
        let body = format!(r#"{{"Pod": {{"metadata": {{"name": "p"}}}}, "Nodes": {list}}}"#);
        let (_, names, list_read) =
            pod_and_nodes(read_args(body.as_bytes(), 10).expect("valid"), GPU).expect("valid");
        assert_eq!(names, ["a", "b"]);
        let mut list_read = list_read.expect("a list");
        assert_eq!(serde_json::to_string(&list_read).expect("serialise"), list);
        list_read.retain(|n| n == "b");
        let kept = serde_json::to_value(ExtenderFilterResult {
            nodes: Some(list_read),
            ..ExtenderFilterResult::default()
        })
        .expect("serialise");
        assert_eq!(
            kept["Nodes"],
            serde_json::json!({"kind": "NodeList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "b"}}]})
        );
        // Go's nil slice.
        let body = br#"{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": null}}"#;
        let (_, names, _) = pod_and_nodes(read_args(body, 10).expect("valid"), GPU).expect("valid");
        assert!(names.is_empty());
    }

    #[test]
    fn error_texts_in_answers_are_clipped() {
        let long = "x".repeat(100_000);
        let filter = serde_json::to_value(ExtenderFilterResult {
            failed_nodes: [("a".to_string(), long.clone())].into(),
            error: long.clone(),
            ..ExtenderFilterResult::default()
        })
        .expect("serialise");
        let bind = serde_json::to_value(ExtenderBindingResult { error: long }).expect("serialise");
        for text in [
            &filter["FailedNodes"]["a"],
            &filter["Error"],
            &bind["Error"],
        ] {
            let text = text.as_str().expect("a string");
            assert!(
                text.len() < 1100 && text.ends_with("bytes more)"),
                "{}",
                text.len()
            );
        }
    }
}
