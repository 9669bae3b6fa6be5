//! What a cluster's runs keep between them: Secret `<cluster>-credentials` (kubespray's `credentials/`),
//! Secret `<cluster>-kubeconfig` (the new cluster's `artifacts/admin.conf`, key `value`), and the
//! ServiceAccount, Role and RoleBinding that let that cluster's Jobs, and no others, read and patch them.
//!
//! Before each Job kok makes sure they exist ([`ensure`]): the Secrets are created empty when missing and
//! never overwritten (their content is the runs'); the RBAC objects are applied. The pod restores
//! `credentials/` from the Secret (mounted read-only) into its writable inventory, and on exit saves what it
//! created or changed with [`SAVE_SCRIPT`]. The Secrets outlive the cluster's directory: deleting them is the
//! operator's call, since a regenerated certificate key breaks joining control-plane nodes.

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;

use crate::api::{common_labels, FIELD_MANAGER};

/// The script the entry script writes into the pod as `kok_credentials.py` and runs on exit.
pub const SAVE_SCRIPT: &str = include_str!("kok_credentials.py");
pub use crate::api::{kubeconfig_secret, KUBECONFIG_KEY};

/// What the name of a cluster's credentials Secret ends with.
pub const CREDENTIALS_SUFFIX: &str = "-credentials";

/// Name of the Secret holding a cluster's `credentials/`.
pub fn credentials_secret(cluster: &str) -> String {
    format!("{cluster}{CREDENTIALS_SUFFIX}")
}

/// Name of the ServiceAccount a cluster's Jobs run as when the operation names none.
pub fn runner_service_account(cluster: &str) -> String {
    format!("kok-{cluster}")
}

/// Name of the Role (and RoleBinding) granting a cluster's Jobs its two Secrets.
pub fn credentials_role(cluster: &str) -> String {
    format!("kok-{cluster}-credentials")
}

fn meta(name: String, namespace: &str, cluster: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(common_labels(cluster)),
        ..ObjectMeta::default()
    }
}

/// An empty Opaque Secret named `name` for `cluster`.
pub fn empty_secret(name: String, namespace: &str, cluster: &str) -> Secret {
    Secret {
        metadata: meta(name, namespace, cluster),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    }
}

/// The Role letting a Job read and patch its cluster's two Secrets, by name and nothing else.
pub fn credentials_role_object(namespace: &str, cluster: &str) -> Role {
    Role {
        metadata: meta(credentials_role(cluster), namespace, cluster),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".to_string()]),
            resource_names: Some(vec![credentials_secret(cluster), kubeconfig_secret(cluster)]),
            verbs: vec!["get".to_string(), "patch".to_string()],
            ..PolicyRule::default()
        }]),
    }
}

/// The RoleBinding of [`credentials_role_object`] to `service_account`.
pub fn credentials_role_binding(namespace: &str, cluster: &str, service_account: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(credentials_role(cluster), namespace, cluster),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: credentials_role(cluster),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: service_account.to_string(),
            namespace: Some(namespace.to_string()),
            ..Subject::default()
        }]),
    }
}

/// Makes sure the Secrets and RBAC objects of `cluster` exist for a Job running as `service_account`
/// (`None`: the cluster's own [`runner_service_account`], created here).
pub async fn ensure(
    client: &Client,
    namespace: &str,
    cluster: &str,
    service_account: Option<&str>,
) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for name in [credentials_secret(cluster), kubeconfig_secret(cluster)] {
        match secrets
            .create(&PostParams::default(), &empty_secret(name, namespace, cluster))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let own_account = runner_service_account(cluster);
    let account = service_account.unwrap_or(&own_account);
    if service_account.is_none() {
        let sa = ServiceAccount {
            metadata: meta(own_account.clone(), namespace, cluster),
            ..ServiceAccount::default()
        };
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .patch(
                &own_account,
                &apply,
                &Patch::Apply(&with_kind(sa, "v1", "ServiceAccount")),
            )
            .await?;
    }
    let role = credentials_role_object(namespace, cluster);
    Api::<Role>::namespaced(client.clone(), namespace)
        .patch(
            &credentials_role(cluster),
            &apply,
            &Patch::Apply(&with_kind(role, "rbac.authorization.k8s.io/v1", "Role")),
        )
        .await?;
    let binding = credentials_role_binding(namespace, cluster, account);
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .patch(
            &credentials_role(cluster),
            &apply,
            &Patch::Apply(&with_kind(binding, "rbac.authorization.k8s.io/v1", "RoleBinding")),
        )
        .await?;
    Ok(())
}

/// `obj` as JSON with its apiVersion and kind, as server-side apply needs them.
fn with_kind(obj: impl serde::Serialize, api_version: &str, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(obj).unwrap_or_default();
    value["apiVersion"] = api_version.into();
    value["kind"] = kind.into();
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_names_exactly_the_clusters_two_secrets_and_only_reads_and_patches() {
        let role = credentials_role_object("kok-system", "prod-bj");
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(
                &[
                    "prod-bj-credentials".to_string(),
                    "prod-bj-kubeconfig".to_string()
                ][..]
            )
        );
        assert_eq!(rules[0].verbs, ["get", "patch"]);
        let binding = credentials_role_binding("kok-system", "prod-bj", "kok-prod-bj");
        assert_eq!(binding.role_ref.name, "kok-prod-bj-credentials");
        assert_eq!(binding.subjects.unwrap()[0].name, "kok-prod-bj");
    }
}
