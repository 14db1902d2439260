//! What duet's identity may do, asked of the API server when `duet extender` or `duet schedule`
//! starts (a SelfSubjectAccessReview, which every signed-in identity may make): each permission
//! of deploy/k8s/kube-rbac.yaml that it needs and lacks is named in a warning with what its
//! absence costs, and in `/metrics` (`duet_kube_permission_missing{permission}`, 1 each), so an
//! installation that kept an older role learns it at start rather than from the first binding.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::metrics::Metrics;

/// One permission of duet's role, and what lacking it costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: &'static str,
    pub verb: &'static str,
    pub without: &'static str,
}

impl Permission {
    /// `verb resource[/subresource][.group]`, as `kubectl auth can-i` takes it.
    pub fn name(&self) -> String {
        let mut out = format!("{} {}", self.verb, self.resource);
        if !self.subresource.is_empty() {
            out.push('/');
            out.push_str(self.subresource);
        }
        if !self.group.is_empty() {
            out.push('.');
            out.push_str(self.group);
        }
        out
    }
}

/// Watching pods and nodes: what both need for their view of the cluster.
pub const VIEW: [Permission; 2] = [
    Permission {
        group: "",
        resource: "pods",
        subresource: "",
        verb: "watch",
        without: "the view of the cluster never syncs: nothing is placed",
    },
    Permission {
        group: "",
        resource: "nodes",
        subresource: "",
        verb: "watch",
        without: "the view of the cluster never syncs: nothing is placed",
    },
];

/// Binding pods, after recording where in their status: what binding needs.
pub const BIND: [Permission; 2] = [
    Permission {
        group: "",
        resource: "pods",
        subresource: "binding",
        verb: "create",
        without: "no pod is bound",
    },
    Permission {
        group: "",
        resource: "pods",
        subresource: "status",
        verb: "patch",
        without: "pods are bound without duet's record in their status, so a restarted \
                  scheduler believes their annotations, which their owners can edit \
                  (duet_kube_record_failures_total counts them)",
    },
];

/// Telling pods why they wait: what `duet schedule` needs besides.
pub const TELL: Permission = Permission {
    group: "events.k8s.io",
    resource: "events",
    subresource: "",
    verb: "create",
    without: "pods are not told why they wait (no FailedScheduling Events)",
};

/// Asks the API server which of `needed` the client's identity may not do (in any namespace);
/// warns of each, and sets `duet_kube_permission_missing` for each of `needed` (1 where it is
/// missing, 0 where it is granted). A review that fails (an API server down at start) is
/// warned of and assumes nothing.
pub async fn check(client: &Client, needed: &[Permission], metrics: &Metrics) -> Vec<Permission> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for p in needed {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(p.group.to_string()),
                    resource: Some(p.resource.to_string()),
                    subresource: Some(p.subresource.to_string()).filter(|s| !s.is_empty()),
                    verb: Some(p.verb.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        match api.create(&PostParams::default(), &review).await {
            Ok(answer) => {
                let allowed = answer.status.is_some_and(|s| s.allowed);
                metrics.permission_missing(&p.name(), !allowed);
                if !allowed {
                    tracing::warn!(
                        "duet's identity may not {} (deploy/k8s/kube-rbac.yaml grants it): {}",
                        p.name(),
                        p.without
                    );
                    missing.push(*p);
                }
            }
            Err(e) => tracing::warn!("could not ask whether duet may {}: {e}", p.name()),
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_is_named_as_kubectl_auth_can_i_takes_it() {
        assert_eq!(BIND[1].name(), "patch pods/status");
        assert_eq!(VIEW[1].name(), "watch nodes");
        assert_eq!(TELL.name(), "create events.events.k8s.io");
    }

    /// Every permission checked is one the shipped role grants (the role is what it checks
    /// against, so a permission added to duet's needs is added to the role too).
    #[test]
    fn every_permission_checked_is_in_the_shipped_role() {
        let role = include_str!("../../deploy/k8s/kube-rbac.yaml");
        for p in VIEW.iter().chain(&BIND).chain([&TELL]) {
            let resource = if p.subresource.is_empty() {
                p.resource.to_string()
            } else {
                format!("{}/{}", p.resource, p.subresource)
            };
            let rule = role.split("- apiGroups:").find(|rule| {
                rule.starts_with(&format!(" [\"{}\"]", p.group))
                    && rule.contains(&format!("\"{resource}\""))
            });
            let rule = rule.unwrap_or_else(|| panic!("no rule for {}", p.name()));
            assert!(rule.contains(&format!("\"{}\"", p.verb)), "{}", p.name());
        }
    }
}
