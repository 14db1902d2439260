//! Binding a pod to a node through its `binding` subresource, with duet's annotations on the
//! binding itself: the API server merges them into the pod in the same write, so a pod is never
//! bound without them nor annotated without being bound. The binding carries the pod's UID, so
//! a pod deleted and created again under the same name is not bound by mistake.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::cluster::PodInfo;

/// Why a binding did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The API server refused it (the pod is gone, already bound, or another UID).
    #[error("the API server refused to bind {pod} to {node}: {message}")]
    Refused {
        pod: String,
        node: String,
        message: String,
    },
    /// The API server could not be reached; the pod stays pending and is tried again.
    #[error("binding {pod} to {node}: {message}")]
    Unreachable {
        pod: String,
        node: String,
        message: String,
    },
}

/// Binds `pod` to `node`, merging `annotations` into it.
pub async fn bind(
    client: &Client,
    pod: &PodInfo,
    node: &str,
    annotations: BTreeMap<String, String>,
) -> Result<(), BindError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()).filter(|u| !u.is_empty()),
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    };
    match api
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            &pod.name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(BindError::Refused {
            pod: pod.key(),
            node: node.to_string(),
            message: status.message.clone(),
        }),
        Err(e) => Err(BindError::Unreachable {
            pod: pod.key(),
            node: node.to_string(),
            message: e.to_string(),
        }),
    }
}
