//! Binding a pod to a node through its `binding` subresource, with duet's annotations on the
//! binding itself: the API server merges them into the pod in the same write, so a pod is never
//! bound without them nor annotated without being bound. The binding carries the pod's UID (a
//! pod without one is not bound), so a pod deleted and created again under the same name is not
//! bound by mistake. Before binding, duet also records where it puts the pod in the pod's status
//! (`record`): its annotations are its owner's to edit, its status is not.
//!
//! The API server checks neither that the node exists nor who asked, so the extender's bind
//! first checks the call against what it knows (`refusal`): the pod it names by namespace, name
//! and UID is that pod, pending, of a scheduler it serves, and the node is one its view holds.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::cluster::{Cluster, PodInfo};
use crate::contract::{self, Assignment, quote};

/// What a bind call asks: the pod by namespace, name and UID, and the node.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub node: &'a str,
}

/// Why `pod` (as the view or the API server has it) is not to be bound as `request` asks, if it
/// is not: another UID, namespace or name than the call's, already bound, finished or being
/// deleted, of a scheduler other than `schedulers` (empty: any), or a node `cluster` does not
/// hold.
pub fn refusal(
    request: Request<'_>,
    pod: &PodInfo,
    cluster: &Cluster,
    schedulers: &[String],
) -> Option<String> {
    // The call's text is quoted clipped: it may be as long as the body.
    let named = quote(&format!("{}/{}", request.namespace, request.name));
    if request.uid.is_empty() {
        return Some(format!("the call names pod {named} without its UID"));
    }
    if pod.uid != request.uid || pod.namespace != request.namespace || pod.name != request.name {
        return Some(format!(
            "the call names pod {named} of UID {}, but that is pod {} of UID {}",
            quote(request.uid),
            pod.key(),
            pod.uid
        ));
    }
    if let Some(node) = &pod.node {
        return Some(format!("pod {named} is already bound to {node}"));
    }
    if pod.finished || pod.deleting {
        return Some(format!("pod {named} has finished or is being deleted"));
    }
    if !schedulers.is_empty() && !schedulers.contains(&pod.scheduler) {
        return Some(format!(
            "pod {named} is for scheduler {}, not {}",
            pod.scheduler,
            schedulers.join(", ")
        ));
    }
    if cluster.node(request.node).is_none() {
        return Some(format!(
            "node {} is not in duet's view of the cluster",
            quote(request.node)
        ));
    }
    None
}

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
    /// The API server could not be reached before the binding was sent (its record not
    /// written); the pod stays pending and is tried again.
    #[error("binding {pod} to {node}: {message}")]
    Unreachable {
        pod: String,
        node: String,
        message: String,
    },
    /// The binding was sent (after its record) and not answered in time, or answered by an
    /// unreachable or overloaded API server: it may yet be made, as recorded.
    #[error("binding {pod} to {node}: {message}; it may still be made")]
    Unanswered {
        pod: String,
        node: String,
        message: String,
    },
}

/// The longest one binding may take, its record included: the client retries an overloaded API
/// server (429, 503) for minutes on its own, and a scheduler waiting that long binds nothing
/// else meanwhile.
pub const TIME_LIMIT: Duration = Duration::from_secs(10);

/// Binds `pod` to `node`, merging `annotations` into it, after recording the GPUs they name in
/// the pod's status (`record`); a pod without a UID is refused; both within [`TIME_LIMIT`].
/// `Ok(false)`: bound without the record, which the API server refused for good (a role without
/// `pods/status`: only the annotations say where the pod is). Where the record could not be
/// written for now (the API server unreachable or overloaded, or no answer in time), the pod is
/// not bound: `Unreachable`, tried again later. A binding sent but not answered is `Unanswered`:
/// it may yet be made, as its record says.
pub async fn bind(
    client: &Client,
    pod: &PodInfo,
    node: &str,
    annotations: BTreeMap<String, String>,
) -> Result<bool, BindError> {
    let deadline = tokio::time::Instant::now() + TIME_LIMIT;
    let late = || format!("no answer within {} s", TIME_LIMIT.as_secs());
    if pod.uid.is_empty() {
        return Err(BindError::Refused {
            pod: pod.key(),
            node: node.to_string(),
            message: "the pod has no UID to bind it by".into(),
        });
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let (recorded, written) = match contract::assignment_of(&annotations) {
        Ok(Some(assignment)) => {
            let written = tokio::time::timeout_at(deadline, record(&api, pod, node, &assignment))
                .await
                .unwrap_or_else(|_| {
                    Err(BindError::Unreachable {
                        pod: pod.key(),
                        node: node.to_string(),
                        message: late(),
                    })
                })?;
            (written, written)
        }
        _ => (true, false),
    };
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()),
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
    let params = PostParams::default();
    let sent = api
        .create_subresource::<Binding, serde_json::Value>("binding", &pod.name, &params, &binding);
    match tokio::time::timeout_at(deadline, sent).await {
        Ok(Ok(_)) => Ok(recorded),
        Ok(Err(e)) => match failed(pod, node, e) {
            e @ BindError::Refused { .. } => {
                if written
                    && tokio::time::timeout_at(deadline, withdraw(&api, pod))
                        .await
                        .is_err()
                {
                    tracing::warn!(
                        "pod {}: duet's record of a binding the API server refused stays (no \
                         answer in time)",
                        pod.key()
                    );
                }
                Err(e)
            }
            BindError::Unreachable { pod, node, message }
            | BindError::Unanswered { pod, node, message } => {
                Err(BindError::Unanswered { pod, node, message })
            }
        },
        Err(_) => Err(BindError::Unanswered {
            pod: pod.key(),
            node: node.to_string(),
            message: late(),
        }),
    }
}

/// Marks the record written for a binding the API server then refused as not standing (its
/// status `False`), so that a binding someone else makes is not read through it. Best effort: a
/// record left standing names the node duet asked for, which the pod is then seldom bound to.
async fn withdraw(api: &Api<Pod>, pod: &PodInfo) {
    if let Err(e) = set_record(api, pod, "False", "NotBound", "").await {
        tracing::warn!(
            "pod {}: duet's record of a binding the API server refused stays ({e})",
            pod.key()
        );
    }
}

/// A refusal (the API server answered no) or, where it could not answer now (a transport
/// error, 429, 5xx), an unreachable API server.
fn failed(pod: &PodInfo, node: &str, error: kube::Error) -> BindError {
    match error {
        kube::Error::Api(status) if status.code != 429 && status.code < 500 => BindError::Refused {
            pod: pod.key(),
            node: node.to_string(),
            message: status.message,
        },
        e => BindError::Unreachable {
            pod: pod.key(),
            node: node.to_string(),
            message: e.to_string(),
        },
    }
}

/// Writes duet's record of where it is about to bind `pod` (`node`, `assignment`) into the pod's
/// status (`contract::RECORD`, by `set_record`), which the pod's owner cannot edit as they can
/// its annotations. Written before the binding, so a binding is never left without it by a crash
/// between the two; a record of a binding that then fails is withdrawn, or names a node the pod
/// is not bound to and is not believed.
/// `Ok(false)` where the API server refuses it for good but the pod may still be bound (a role
/// without `pods/status`: 403), an error where it refuses it otherwise (the pod gone or made
/// again under its name: 404, 409, 422) or cannot take it now.
async fn record(
    api: &Api<Pod>,
    pod: &PodInfo,
    node: &str,
    assignment: &Assignment,
) -> Result<bool, BindError> {
    let message = contract::record_message(node, assignment);
    match set_record(api, pod, "True", "Placed", &message).await {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!(
                "pod {}: duet's record of its GPUs cannot be written to its status ({}); it is \
                 bound without it, and a restarted scheduler will read its annotations instead",
                pod.key(),
                status.message
            );
            Ok(false)
        }
        Err(e) => Err(failed(pod, node, e)),
    }
}

/// Sets duet's record condition of `pod` (`contract::RECORD`) by a strategic merge patch of its
/// status, so the kubelet's and the schedulers' conditions stay as they are; the UID in it is a
/// precondition (a pod made again under the name is not written).
async fn set_record(
    api: &Api<Pod>,
    pod: &PodInfo,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"uid": pod.uid},
        "status": {
            "conditions": [{
                "type": contract::RECORD,
                "status": status,
                "reason": reason,
                "message": message,
            }]
        }
    });
    api.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::{node, pod};

    #[test]
    fn a_bind_is_refused_unless_it_names_a_pending_pod_exactly_and_a_node_duet_holds() {
        let mut cluster = Cluster::default();
        cluster.apply_node(node("gpu-1", 1));
        let waiting = pod("u1", None, 1, "w");
        let ok = Request {
            namespace: "ns",
            name: "u1",
            uid: "u1",
            node: "gpu-1",
        };
        assert_eq!(refusal(ok, &waiting, &cluster, &[]), None);
        let duet = ["duet".to_string()];
        assert_eq!(refusal(ok, &waiting, &cluster, &duet), None);
        let refused = |request: Request<'_>, p: &PodInfo, schedulers: &[String], says: &str| {
            let why = refusal(request, p, &cluster, schedulers).expect("refused");
            assert!(why.contains(says), "{why}");
        };
        refused(
            Request { uid: "u2", ..ok },
            &waiting,
            &[],
            "but that is pod ns/u1 of UID u1",
        );
        refused(Request { uid: "", ..ok }, &waiting, &[], "without its UID");
        refused(
            Request {
                namespace: "kube-system",
                ..ok
            },
            &waiting,
            &[],
            "but that is pod ns/u1",
        );
        refused(
            Request {
                name: "other",
                ..ok
            },
            &waiting,
            &[],
            "but that is pod ns/u1",
        );
        refused(
            Request {
                node: "nowhere",
                ..ok
            },
            &waiting,
            &[],
            "node nowhere is not",
        );
        let default = ["default-scheduler".to_string()];
        refused(ok, &waiting, &default, "for scheduler duet");
        refused(
            ok,
            &pod("u1", Some("gpu-1"), 1, "w"),
            &[],
            "already bound to gpu-1",
        );
        let mut gone = waiting.clone();
        gone.deleting = true;
        refused(ok, &gone, &[], "being deleted");
    }
}
