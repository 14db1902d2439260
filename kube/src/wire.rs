//! The kube-scheduler extender protocol's bodies (`k8s.io/kube-scheduler/extender/v1`), with
//! Go's field names on the wire. A malformed body is refused naming the field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// `ExtenderArgs`: the pod and its candidate nodes, by name (`nodeCacheCapable`) or whole.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod")]
    pub pod: Option<Pod>,
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList` as the scheduler sends it without `nodeCacheCapable`: its nodes are passed
/// back as they came.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct NodeList {
    #[serde(default)]
    pub items: Vec<serde_json::Value>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none", default)]
    pub nodes: Option<serde_json::Value>,
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none", default)]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    #[serde(rename = "Error", default)]
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
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// A body duet cannot read: what is wrong, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct BadBody {
    pub field: Option<String>,
    pub error: String,
}

/// Reads a JSON body; an error names the field by its path (`Pod.metadata.name`).
pub fn read<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, BadBody> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        BadBody {
            field: (path != ".").then_some(path),
            error: e.into_inner().to_string(),
        }
    })
}

/// The pod and the candidate node names of an `ExtenderArgs`, or what is missing.
pub fn pod_and_nodes(args: ExtenderArgs) -> Result<(Pod, Vec<String>, Option<NodeList>), BadBody> {
    let missing = |field: &str, error: &str| BadBody {
        field: Some(field.to_string()),
        error: error.to_string(),
    };
    let pod = args.pod.ok_or_else(|| missing("Pod", "required"))?;
    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(missing("Pod.metadata.name", "required"));
    }
    match (args.node_names, args.nodes) {
        (Some(names), _) => Ok((pod, names, None)),
        (None, Some(list)) => {
            let mut names = Vec::with_capacity(list.items.len());
            for (i, item) in list.items.iter().enumerate() {
                let name = item
                    .pointer("/metadata/name")
                    .and_then(serde_json::Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| {
                        missing(&format!("Nodes.items[{i}].metadata.name"), "required")
                    })?;
                names.push(name.to_string());
            }
            Ok((pod, names, Some(list)))
        }
        (None, None) => Err(missing(
            "NodeNames",
            "required (or Nodes, without nodeCacheCapable)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_s_bodies_are_read_with_go_s_names() {
        let body = br#"{"Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c"}]}}, "Nodes": null, "NodeNames": ["a", "b"]}"#;
        let (pod, names, list) = pod_and_nodes(read(body).expect("valid")).expect("valid");
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(names, ["a", "b"]);
        assert!(list.is_none());
        let body = br#"{"Pod": {"metadata": {"name": "p"}},
            "Nodes": {"items": [{"metadata": {"name": "a"}}]}}"#;
        let (_, names, list) = pod_and_nodes(read(body).expect("valid")).expect("valid");
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
                .and_then(pod_and_nodes)
                .expect_err("must be refused");
            assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
        }
        let e = read::<ExtenderArgs>(b"not json").expect_err("must be refused");
        assert!(e.field.is_none() && e.error.contains("expected"), "{e:?}");
    }
}
