//! A ClusterOperation fixture for the commit-status tests: cluster `prod-bj`, id `name`, on `commit`.

use kok::api::ClusterOperation;

/// Namespace of the fixture.
pub const NS: &str = "kok-system";

/// The ClusterOperation `name` (also its id) of cluster `prod-bj`, introduced by `commit`.
pub fn operation(name: &str, commit: &str) -> ClusterOperation {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kok.dev/v1alpha1",
        "kind": "ClusterOperation",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "cluster": "prod-bj",
            "id": name,
            "digest": "0123abcd",
            "action": "scale.yml",
            "image": "quay.io/kubespray/kubespray:v2.27.0",
            "hostsConfRef": {"name": "prod-bj-hosts-01234567"},
            "varsConfRef": {"name": "prod-bj-vars-01234567"},
            "source": {"commit": commit, "revision": format!("main@sha1:{commit}"), "path": "clusters/prod-bj"},
            "queuePosition": "0000",
        },
    }))
    .unwrap()
}
