//! The last reconciled commit, persisted in the meta-cluster (ConfigMap `kok-state`) so a restart resumes.
//!
//! The repository URL is stored without the password of a `user:password@` in it ([`without_password`]):
//! whoever may read ConfigMaps in kok's namespace must not learn a git credential from it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;

use crate::api::{FIELD_MANAGER, LABEL_MANAGED_BY, MANAGED_BY, STATE_CONFIG_MAP};

/// What kok last reconciled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileState {
    /// Repository URL, as given to `kok run`; the ConfigMap stores it [`without_password`].
    pub repo: String,
    /// Branch or tag reconciled.
    pub ref_name: String,
    /// Full sha of the last commit reconciled.
    pub commit: String,
    /// When it was reconciled (RFC 3339).
    pub time: String,
}

/// Failures of reading or writing the state ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading the ConfigMap failed.
    #[error("reading ConfigMap {STATE_CONFIG_MAP} in namespace {namespace} failed: {source}")]
    Load {
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// Writing the ConfigMap failed.
    #[error(
        "writing ConfigMap {STATE_CONFIG_MAP} in namespace {namespace} failed: {source}; check kok's RBAC"
    )]
    Save {
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
}

const KEYS: [&str; 4] = ["repo", "ref", "commit", "time"];

/// `url` with the password of its `user:password@` dropped and the user kept
/// (`https://bob:hunter2@git.example/r.git` is `https://bob@git.example/r.git`); any other URL, an
/// scp-like `git@host:path` or a local path as it is.
pub fn without_password(url: &str) -> String {
    crate::source::replace_password(url, None)
}

/// Whether the repository of a stored state is `url`, the repository kok follows now (a state stored with
/// the password, before kok dropped it, still is).
pub fn same_repo(stored: &str, url: &str) -> bool {
    without_password(stored) == without_password(url)
}

/// The ConfigMap holding `state`, its repository URL [`without_password`].
pub fn state_config_map(namespace: &str, state: &ReconcileState) -> ConfigMap {
    let repo = without_password(&state.repo);
    let values = [&repo, &state.ref_name, &state.commit, &state.time];
    let data: BTreeMap<String, String> = KEYS
        .iter()
        .zip(values)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut cm = ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    };
    cm.metadata.name = Some(STATE_CONFIG_MAP.to_string());
    cm.metadata.namespace = Some(namespace.to_string());
    cm.metadata.labels = Some([(LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string())].into());
    cm
}

/// Reads the state back from its ConfigMap; `None` when the ConfigMap is absent or lacks the commit.
pub fn state_from(cm: &ConfigMap) -> Option<ReconcileState> {
    let data = cm.data.as_ref()?;
    let get = |k: &str| data.get(k).cloned().unwrap_or_default();
    let commit = get("commit");
    if commit.is_empty() {
        return None;
    }
    Some(ReconcileState {
        repo: get("repo"),
        ref_name: get("ref"),
        commit,
        time: get("time"),
    })
}

/// Loads the last reconciled state of `namespace`; `None` on a fresh install.
pub async fn load_state(client: &Client, namespace: &str) -> Result<Option<ReconcileState>, StateError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(STATE_CONFIG_MAP)
        .await
        .map_err(|source| StateError::Load {
            namespace: namespace.to_string(),
            source,
        })?;
    Ok(cm.as_ref().and_then(state_from))
}

/// Saves `state` with server-side apply (one write).
pub async fn save_state(client: &Client, namespace: &str, state: &ReconcileState) -> Result<(), StateError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut cm = state_config_map(namespace, state);
    cm.metadata.namespace = None;
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": cm.metadata, "data": cm.data});
    api.patch(
        STATE_CONFIG_MAP,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .map_err(|source| StateError::Save {
        namespace: namespace.to_string(),
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_its_config_map() {
        let s = ReconcileState {
            repo: "https://git.example/infra.git".into(),
            ref_name: "main".into(),
            commit: "a".repeat(40),
            time: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(state_from(&state_config_map("kok-system", &s)), Some(s));
        assert_eq!(state_from(&ConfigMap::default()), None);
    }

    #[test]
    fn the_stored_url_keeps_the_user_and_drops_the_password() {
        let s = ReconcileState {
            repo: "https://bob:hunter2@git.example:8443/infra.git".into(),
            ref_name: "main".into(),
            commit: "a".repeat(40),
            time: "2026-01-01T00:00:00Z".into(),
        };
        let cm = state_config_map("kok-system", &s);
        let data = cm.data.as_ref().unwrap();
        assert_eq!(data["repo"], "https://bob@git.example:8443/infra.git");
        assert!(!serde_json::to_string(&cm).unwrap().contains("hunter2"));
        let stored = state_from(&cm).unwrap().repo;
        assert!(same_repo(&stored, &s.repo), "a restart still resumes from it");
        assert!(
            same_repo(&s.repo, &s.repo),
            "and from a state stored before, with the password"
        );
        assert!(!same_repo(&stored, "https://bob@git.example:8443/other.git"));
        for kept in [
            "https://git.example/infra.git",
            "https://x-access-token@git.example/infra.git",
            "git@github.com:org/infra.git",
            "ssh://git@git.example:2222/infra.git",
            "/srv/git/infra.git",
        ] {
            assert_eq!(without_password(kept), kept);
        }
    }
}
