//! What the extender reads of a call's `ExtenderArgs`: the pod, for what the extender judges it by
//! and nothing more (its other fields, however many, are skipped, never built into values), and
//! the candidate nodes' names (a node list's items read for `metadata.name` alone).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::cluster::{GpuAsks, PodInfo};
use crate::wire::{
    BadBody, ExtenderArgs, NodeList, null_or, object_or_null, read_args, read_under, string_refused,
};

/// A `/filter` or `/prioritize` body read whole (`wire::read_args`, at most `max_nodes` nodes):
/// the pod as duet knows it, the candidate node names and, without `nodeCacheCapable`, the node
/// list to pass back.
pub fn read(
    body: &[u8],
    max_nodes: usize,
    resource: &str,
) -> Result<(PodInfo, Vec<String>, Option<NodeList>), BadBody> {
    let (pod, names, list) = pod_and_nodes(read_args(body, max_nodes)?, resource)?;
    Ok((PodInfo::read(&pod, resource), names, list))
}

/// The pod and the candidate node names of an `ExtenderArgs`, or what is missing; `resource`
/// is the extended resource GPUs are asked for by (the pod is read as [`read_pod`] says).
pub fn pod_and_nodes(
    args: ExtenderArgs,
    resource: &str,
) -> Result<(Pod, Vec<String>, Option<NodeList>), BadBody> {
    let missing =
        |field: &str, error: &str| BadBody::malformed(Some(field.to_string()), error.to_string());
    let pod = args.pod.ok_or_else(|| missing("Pod", "required"))?;
    let pod = read_pod(&pod, resource)?;
    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(missing("Pod.metadata.name", "required"));
    }
    match (args.node_names, args.nodes) {
        (Some(names), _) => Ok((pod, names, None)),
        (None, Some(mut list)) => {
            let mut names = Vec::with_capacity(list.items.len());
            for (i, item) in list.items.iter().enumerate() {
                let at = format!("Nodes.items[{i}]");
                // Anything but an object is refused unquoted (serde's message would hold it).
                if !item.get().trim_start().starts_with('{') {
                    return Err(missing(&at, "expected a node object"));
                }
                let named: Named = read_under(&at, item.get(), PhantomData)?;
                let name = named
                    .metadata
                    .and_then(|m| m.name)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| missing(&format!("{at}.metadata.name"), "required"))?;
                names.push(name);
            }
            list.names.clone_from(&names);
            Ok((pod, names, Some(list)))
        }
        (None, None) => Err(missing(
            "NodeNames",
            "required (or Nodes, without nodeCacheCapable)",
        )),
    }
}

/// A call's pod as far as the extender reads it: its name, namespace, UID, creation and
/// deletion times, the contract's annotations (`contract::ANNOTATIONS`), its node, scheduler and
/// phase, and what its containers and init containers ask of `resource`, folded as they are
/// read (`cluster::GpuAsks`, as `PodInfo::read` counts a whole pod) into one container asking
/// the pod's count. Nothing else of it becomes a value, so a pod of a million empty
/// containers, volumes or annotations costs its text and no more (as k8s-openapi's types it cost
/// hundreds of times its text); its other fields are not checked either: the kube-scheduler sends
/// pods the API server has taken. A field of those read that is malformed is named
/// (`Pod.spec.containers[3].resources.limits`).
pub fn read_pod(text: &RawValue, resource: &str) -> Result<Pod, BadBody> {
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    // Anything but an object is refused without quoting it (serde's message would hold it all).
    if !text.get().trim_start().starts_with('{') {
        return Err(BadBody::malformed(
            Some("Pod".into()),
            "expected a pod object".into(),
        ));
    }
    let fields: PodFields = read_under("Pod", text.get(), PhantomData)?;
    let spec = match fields.spec {
        None => None,
        Some(spec) => {
            let mut gpus = GpuAsks::default();
            for (raw, field, init) in [
                (spec.containers, "Pod.spec.containers", false),
                (spec.init_containers, "Pod.spec.initContainers", true),
            ] {
                if let Some(raw) = raw {
                    let into = &mut gpus;
                    read_under(
                        field,
                        raw.get(),
                        Asks {
                            resource,
                            into,
                            init,
                        },
                    )?;
                }
            }
            // The pod's whole count, as one container asking it.
            let asking = |gpus: u32| Container {
                name: "asking".into(),
                resources: Some(ResourceRequirements {
                    limits: Some([(resource.to_string(), Quantity(gpus.to_string()))].into()),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            };
            Some(PodSpec {
                containers: Some(gpus.total())
                    .filter(|&n| n > 0)
                    .map(asking)
                    .into_iter()
                    .collect(),
                node_name: spec.node_name,
                scheduler_name: spec.scheduler_name,
                ..PodSpec::default()
            })
        }
    };
    let meta = fields.metadata.unwrap_or_default();
    Ok(Pod {
        metadata: ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            annotations: (!meta.annotations.is_empty()).then_some(meta.annotations),
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            ..ObjectMeta::default()
        },
        spec,
        status: fields.status.map(|s| PodStatus {
            phase: s.phase,
            ..PodStatus::default()
        }),
    })
}

/// A node item's name, read without the rest of it.
#[derive(Deserialize)]
struct Named {
    #[serde(default, deserialize_with = "object_or_null")]
    metadata: Option<NamedMeta>,
}

#[derive(Deserialize)]
struct NamedMeta {
    #[serde(default)]
    name: Option<String>,
}

/// The fields of a pod the extender reads; the containers stay text until they are folded.
#[derive(Deserialize)]
struct PodFields<'a> {
    #[serde(default, deserialize_with = "object_or_null")]
    metadata: Option<MetaFields>,
    #[serde(default, borrow, deserialize_with = "object_or_null")]
    spec: Option<SpecFields<'a>>,
    #[serde(default, deserialize_with = "object_or_null")]
    status: Option<StatusFields>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default, deserialize_with = "contract_annotations")]
    annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "timestamp")]
    creation_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "timestamp")]
    deletion_timestamp: Option<Time>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFields<'a> {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    scheduler_name: Option<String>,
    #[serde(default, borrow)]
    containers: Option<&'a RawValue>,
    #[serde(default, borrow)]
    init_containers: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct StatusFields {
    #[serde(default)]
    phase: Option<String>,
}

/// An RFC 3339 time (`metav1.Time`), `null` as none; one that is not is refused unquoted.
fn timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    match text.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(t) => Ok(Some(Time(t))),
        Err(_) => Err(serde::de::Error::custom(format_args!(
            "not an RFC 3339 time (a string of {} bytes)",
            text.len()
        ))),
    }
}

/// A pod's annotations, keeping the contract's alone (`null` is none).
fn contract_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct Keep;
    impl<'de> Visitor<'de> for Keep {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of strings or null")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(string_refused(v, "an object of strings or null"))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if crate::contract::ANNOTATIONS.contains(&key.as_str()) {
                    kept.insert(key, map.next_value::<String>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(kept)
        }
    }
    d.deserialize_any(Keep)
}

/// What each container of a list (`init`: the init containers, in order) asks of `resource`,
/// folded into `into` as the list is read (`cluster::GpuAsks`): no container is kept.
struct Asks<'r, 'g> {
    resource: &'r str,
    into: &'g mut GpuAsks,
    init: bool,
}

impl<'de> DeserializeSeed<'de> for Asks<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for Asks<'_, '_> {
    type Value = ();
    null_or!('de, (), "an array of containers or null");
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some((gpus, sidecar)) = seq.next_element_seed(ContainerAsk(self.resource))? {
            if self.init {
                self.into.init_container(gpus, sidecar);
            } else {
                self.into.container(gpus);
            }
        }
        Ok(())
    }
}

/// The GPUs one container asks for (`cluster::gpus_asked` of its limit and request), and
/// whether it restarts (`restartPolicy: Always`: an init container that is a sidecar).
struct ContainerAsk<'r>(&'r str);

impl<'de> DeserializeSeed<'de> for ContainerAsk<'_> {
    type Value = (u32, bool);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ContainerAsk<'_> {
    type Value = (u32, bool);
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a container object")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Err(string_refused(v, "a container object"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut asked, mut restarts) = ((None, None), false);
        // Keys are read as text (not into an enum) so that an error's path names them.
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "resources" => asked = map.next_value_seed(ResourcesAsk(self.0))?,
                "restartPolicy" => {
                    restarts = map.next_value::<Option<String>>()?.as_deref() == Some("Always");
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let gpus = crate::cluster::gpus_asked(asked.0.as_deref(), asked.1.as_deref());
        Ok((gpus, restarts))
    }
}

/// A container's `resources`: its limit and its request of the resource.
struct ResourcesAsk<'r>(&'r str);

type LimitAndRequest = (Option<String>, Option<String>);

impl<'de> DeserializeSeed<'de> for ResourcesAsk<'_> {
    type Value = LimitAndRequest;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ResourcesAsk<'_> {
    type Value = LimitAndRequest;
    null_or!('de, (None, None), "a resources object or null");
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut asked = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "limits" => asked.0 = map.next_value_seed(QuantityOf(self.0))?,
                "requests" => asked.1 = map.next_value_seed(QuantityOf(self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(asked)
    }
}

/// The quantity a resource list (`limits`, `requests`) gives the resource, if any.
struct QuantityOf<'r>(&'r str);

impl<'de> DeserializeSeed<'de> for QuantityOf<'_> {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for QuantityOf<'_> {
    type Value = Option<String>;
    null_or!('de, None, "an object of quantities or null");
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut quantity = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                quantity = Some(map.next_value::<String>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(quantity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = "nvidia.com/gpu";

    /// A pod as the extender reads it from a call is what `PodInfo::read` makes of the whole
    /// pod (k8s-openapi's types), but for the node selector and tolerations, which only
    /// `duet schedule` judges by.
    #[test]
    fn a_pod_read_for_its_asks_is_read_as_the_whole_pod() {
        use crate::cluster::PodInfo;
        let text = r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                "creationTimestamp": "2026-12-07T03:00:00Z", "labels": {"app": "x"},
                "annotations": {"duet.io/workload": "resnet-50-bs64", "duet.io/priority": "2",
                    "other.io/note": "n"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"schedulerName": "duet", "nodeSelector": {"zone": "a"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [
                    {"name": "a", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2",
                        "cpu": "1"}}, "env": [{"name": "X", "value": "1"}]},
                    {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "x"},
                        "requests": {"nvidia.com/gpu": "5"}}},
                    {"name": "d", "resources": {"limits": {"other.io/gpu": "7"}}},
                    {"name": "e", "resources": null},
                    {"name": "f"}],
                "initContainers": [
                    {"name": "s", "restartPolicy": "Always",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
                    {"name": "j", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": []}}"#;
        let whole: Pod = serde_json::from_str(text).expect("a pod");
        let raw = RawValue::from_string(text.to_string()).expect("JSON");
        let read = read_pod(&raw, GPU).expect("read");
        let expected = PodInfo {
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            ..PodInfo::read(&whole, GPU)
        };
        assert_eq!(PodInfo::read(&read, GPU), expected);
        assert_eq!(
            expected.gpus, 5,
            "an init container's 4 beside the sidecar's 1, over the containers' 3 and the 1"
        );
        assert!(expected.job.is_ok(), "{:?}", expected.job);
        // Containers alone: summed.
        for (spec, gpus) in [
            (
                r#"{"containers": [{"resources": {"limits": {"nvidia.com/gpu": "3"}}}, {}]}"#,
                3,
            ),
            (r#"{"containers": null, "initContainers": null}"#, 0),
            (r#"{}"#, 0),
            (
                r#"{"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4294967295"}}},
                    {"resources": {"limits": {"nvidia.com/gpu": "4294967295"}}}]}"#,
                u32::MAX,
            ),
        ] {
            let text = format!(r#"{{"metadata": {{"name": "p"}}, "spec": {spec}}}"#);
            let raw = RawValue::from_string(text.clone()).expect("JSON");
            let whole: Pod = serde_json::from_str(&text).expect("a pod");
            let read = read_pod(&raw, GPU).expect("read");
            assert_eq!(PodInfo::read(&read, GPU).gpus, gpus, "{spec}");
            assert_eq!(PodInfo::read(&whole, GPU).gpus, gpus, "{spec}");
        }
    }

    #[test]
    fn a_malformed_field_of_the_pod_is_named() {
        for (pod, field) in [
            (r#""a string""#, "Pod"),
            (r#"[]"#, "Pod"),
            (r#"{"metadata": {"name": 5}}"#, "Pod.metadata.name"),
            (
                r#"{"metadata": {"annotations": {"duet.io/workload": 5}}}"#,
                "Pod.metadata.annotations.duet.io/workload",
            ),
            (r#"{"spec": {"containers": {}}}"#, "Pod.spec.containers"),
            (
                r#"{"spec": {"containers": [{}, null]}}"#,
                "Pod.spec.containers[1]",
            ),
            (
                r#"{"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}}"#,
                "Pod.spec.containers[0].resources.limits.nvidia.com/gpu",
            ),
            (
                r#"{"spec": {"initContainers": [{"resources": []}]}}"#,
                "Pod.spec.initContainers[0].resources",
            ),
            (r#"{"status": {"phase": 1}}"#, "Pod.status.phase"),
            // A key that is not text (a lone surrogate): the object that holds it.
            (
                r#"{"spec": {"containers": [{"\ud800": 1}]}}"#,
                "Pod.spec.containers[0]",
            ),
        ] {
            let body = format!(r#"{{"Pod": {pod}, "NodeNames": ["a"]}}"#);
            let e = read_args(body.as_bytes(), 10)
                .and_then(|a| pod_and_nodes(a, GPU))
                .expect_err(pod);
            assert_eq!(e.field.as_deref(), Some(field), "{pod}: {e:?}");
            assert!(!e.too_large, "{e:?}");
        }
    }
}
