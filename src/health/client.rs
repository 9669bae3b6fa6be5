//! A workload cluster's kubeconfig and client: read from one Secret of kok's namespace, refused when it
//! would make kok run a program or read a file, and made afresh for each check.
//!
//! The Secret is the one `kubeconfigSecret` names (cluster.yml / kok.yml), else `<cluster>-kubeconfig`
//! once a run saved the cluster's `artifacts/admin.conf` into it; the kubeconfig is under key `value`.
//! kok prepares that Secret empty before a cluster's first run: empty means "no kubeconfig yet". TLS is
//! verified as the kubeconfig says (its CA data, `insecure-skip-tls-verify`). The tokens, passwords and
//! keys it holds are registered with [`crate::redact`], and no error here quotes the kubeconfig.
//!
//! No client outlives its check. A kube client is a connection pool with its own TLS set-up, request
//! buffer and task, and it keeps its connections (up to three per cluster, one per concurrent list,
//! with their read buffers) open after a check: one kept per cluster grew kok's peak RSS by 65 MiB at
//! 1,000 clusters (debug build), against 7 MiB with a client per check. Dropping the client closes its
//! connections, so a health round holds only the clients of the checks under way.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

use crate::api::{kubeconfig_secret, KUBECONFIG_KEY};

/// Longest a request to a workload cluster may take to connect, and to answer once connected.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How kok can reach a cluster.
#[derive(Clone)]
pub enum Access {
    /// The cluster has no kubeconfig yet (no Secret, or kok's own empty one): nothing to verify.
    NoKubeconfig,
    /// A client made from its kubeconfig, and where the kubeconfig says its certificates are.
    Client(Client, super::certificates::Sources),
}

/// Why a cluster's kubeconfig cannot be used. No variant quotes the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// `kubeconfigSecret` names a Secret that does not exist.
    #[error(
        "Secret {name} named by kubeconfigSecret does not exist in namespace {namespace}: create it with the \
         cluster's kubeconfig under key `value`"
    )]
    MissingSecret {
        /// The Secret.
        name: String,
        /// kok's namespace.
        namespace: String,
    },
    /// `kubeconfigSecret` names a Secret without key `value`.
    #[error("Secret {name} has no key `value`: put the cluster's kubeconfig under key `value`")]
    NoValue {
        /// The Secret.
        name: String,
    },
    /// The kubeconfig is not YAML of a kubeconfig's shape.
    #[error("the kubeconfig in Secret {name} does not parse{at}: write a kubeconfig (apiVersion: v1, kind: Config)")]
    Unparsable {
        /// The Secret.
        name: String,
        /// ` (line L, column C)` when known.
        at: String,
    },
    /// The kubeconfig names a program to run or a file to read.
    #[error(
        "the kubeconfig in Secret {name} is refused: {entry} {what}; kok never runs programs or reads files a \
         Secret names: give it a token, or a client certificate and key as data"
    )]
    Refused {
        /// The Secret.
        name: String,
        /// `user "admin"` or `cluster "prod"`.
        entry: String,
        /// What it asks for, e.g. `runs a program (exec)`.
        what: String,
    },
    /// The kubeconfig parses but makes no client (no current context, a bad certificate, ...).
    #[error("the kubeconfig in Secret {name} cannot be used: {reason}")]
    Unusable {
        /// The Secret.
        name: String,
        /// Why, scrubbed of the secrets it holds.
        reason: String,
    },
    /// Reading the Secret from the meta-cluster failed.
    #[error("reading Secret {name} in namespace {namespace} failed: {source}")]
    ReadSecret {
        /// The Secret.
        name: String,
        /// kok's namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
}

/// How kok reaches `cluster` now: through the Secret `named` (its `kubeconfigSecret`), else through
/// `<cluster>-kubeconfig` once it holds a kubeconfig. The client is the caller's, for one check.
pub async fn access(
    meta: &Client,
    namespace: &str,
    cluster: &str,
    named: Option<&str>,
) -> Result<Access, AccessError> {
    let name = named.map_or_else(|| kubeconfig_secret(cluster), str::to_string);
    let secrets: Api<Secret> = Api::namespaced(meta.clone(), namespace);
    let secret = secrets
        .get_opt(&name)
        .await
        .map_err(|source| AccessError::ReadSecret {
            name: name.clone(),
            namespace: namespace.to_string(),
            source,
        })?;
    let value = secret
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .map(|v| v.0.as_slice())
        .filter(|v| !v.is_empty());
    let text = match (value, named) {
        (Some(v), _) => String::from_utf8_lossy(v).into_owned(),
        (None, None) => return Ok(Access::NoKubeconfig),
        (None, Some(_)) if secret.is_none() => {
            return Err(AccessError::MissingSecret {
                name,
                namespace: namespace.to_string(),
            })
        }
        (None, Some(_)) => return Err(AccessError::NoValue { name }),
    };
    let (client, certificates) = client_from(&name, &text).await?;
    Ok(Access::Client(client, certificates))
}

/// A client from the kubeconfig `text` of Secret `name`, after [`refusal`] found nothing to refuse, and
/// where its certificates are read.
pub async fn client_from(
    name: &str,
    text: &str,
) -> Result<(Client, super::certificates::Sources), AccessError> {
    let kubeconfig = read_kubeconfig(name, text)?;
    if let Some((entry, what)) = refusal(&kubeconfig) {
        return Err(AccessError::Refused {
            name: name.to_string(),
            entry,
            what,
        });
    }
    let unusable = |e: &dyn std::fmt::Display| AccessError::Unusable {
        name: name.to_string(),
        reason: crate::redact::scrub(&e.to_string()),
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| unusable(&e))?;
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    // Without CA data kube reads the whole system trust store into each client (about 190 KiB per
    // client at 1,000 clusters); a plain-HTTP server never uses it.
    if config.root_cert.is_none() && config.cluster_url.scheme_str() == Some("http") {
        config.root_cert = Some(Vec::new());
    }
    let certificates = super::certificates::Sources::of(&config);
    let client = Client::try_from(config).map_err(|e| unusable(&e))?;
    Ok((client, certificates))
}

/// Registers with [`crate::redact`] the credentials of every user of a kubeconfig (`token`, `password`,
/// `client-key-data`), parsed as YAML: what a kubeconfig holds that must never be shown.
pub fn register_credentials(kubeconfig: &serde_yaml::Value) {
    let users = kubeconfig
        .get("users")
        .and_then(|u| u.as_sequence())
        .into_iter()
        .flatten();
    for user in users.filter_map(|u| u.get("user")) {
        for key in ["token", "password", "client-key-data"] {
            if let Some(secret) = user.get(key).and_then(|v| v.as_str()) {
                crate::redact::register(secret);
            }
        }
    }
}

/// Parses `text`, registering every token, password and key it holds with [`crate::redact`] first.
fn read_kubeconfig(name: &str, text: &str) -> Result<Kubeconfig, AccessError> {
    let unparsable = |at: String| AccessError::Unparsable {
        name: name.to_string(),
        at,
    };
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        unparsable(
            e.location()
                .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                .unwrap_or_default(),
        )
    })?;
    register_credentials(&value);
    // The parser's own message may quote a value: only say that the shape is wrong.
    serde_yaml::from_value(value).map_err(|_| unparsable(String::new()))
}

/// What in `kubeconfig` kok refuses, and where: a user that runs a program (`exec`, `auth-provider`) or
/// an entry that names a file on kok's host (which could hand kok's own credentials to the cluster).
pub fn refusal(kubeconfig: &Kubeconfig) -> Option<(String, String)> {
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else { continue };
        let entry = format!("user \"{}\"", named.name);
        let what = if user.exec.is_some() {
            Some("runs a program (exec)")
        } else if user.auth_provider.is_some() {
            Some("runs an auth-provider plugin")
        } else if user.token_file.is_some() {
            Some("reads a file (tokenFile)")
        } else if user.client_certificate.is_some() || user.client_key.is_some() {
            Some("reads files (client-certificate / client-key)")
        } else {
            None
        };
        if let Some(what) = what {
            return Some((entry, what.to_string()));
        }
    }
    kubeconfig.clusters.iter().find_map(|named| {
        let cluster = named.cluster.as_ref()?;
        cluster.certificate_authority.as_ref().map(|_| {
            (
                format!("cluster \"{}\"", named.name),
                "reads a file (certificate-authority)".to_string(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n\
                         contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n";

    fn refused(user: &str) -> String {
        let text = format!("{PLAIN}- name: u\n  user:\n{user}");
        match read_kubeconfig("k", &text).map(|k| refusal(&k)) {
            Ok(Some((entry, what))) => format!("{entry} {what}"),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn users_that_run_programs_or_read_files_are_refused() {
        assert_eq!(
            refused("    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}\n"),
            "user \"u\" runs a program (exec)"
        );
        assert_eq!(
            refused("    auth-provider: {name: gcp, config: {}}\n"),
            "user \"u\" runs an auth-provider plugin"
        );
        assert_eq!(
            refused("    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"),
            "user \"u\" reads a file (tokenFile)"
        );
        assert_eq!(
            refused("    client-certificate: /etc/kubernetes/pki/admin.crt\n    client-key: /k\n"),
            "user \"u\" reads files (client-certificate / client-key)"
        );
    }

    #[test]
    fn a_token_user_is_accepted_and_its_token_registered_for_scrubbing() {
        let text = format!("{PLAIN}- name: u\n  user:\n    token: kubeconfig-unit-token-1\n");
        let kubeconfig = read_kubeconfig("k", &text).unwrap();
        assert_eq!(refusal(&kubeconfig), None);
        assert_eq!(
            crate::redact::scrub("Bearer kubeconfig-unit-token-1"),
            "Bearer <redacted>"
        );
    }

    #[test]
    fn a_kubeconfig_that_does_not_parse_is_named_without_its_content() {
        let err = read_kubeconfig("prod-kubeconfig", "users: [\n  token: hunter2-secret\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("the kubeconfig in Secret prod-kubeconfig does not parse (line"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        let err = read_kubeconfig("k", "users: {token: hunter2-secret}\n").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[tokio::test]
    async fn an_unusable_kubeconfig_is_named_without_the_credentials_it_holds() {
        let text = format!(
            "{PLAIN}- name: u\n  user:\n    token: unusable-unit-token-7\n    client-certificate-data: bm90LWEtY2VydA==\n    \
             client-key-data: bm90LWEta2V5\n"
        );
        let text = text.replace("current-context: c", "current-context: nowhere");
        let err = client_from("prod-reader", &text).await.err().expect("refused");
        let shown = err.to_string();
        assert!(
            shown.starts_with("the kubeconfig in Secret prod-reader cannot be used: "),
            "{shown}"
        );
        for secret in ["unusable-unit-token-7", "bm90LWEta2V5"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn a_cluster_with_a_ca_file_is_refused() {
        let text = PLAIN.replace(
            "    server:",
            "    certificate-authority: /etc/ca.crt\n    server:",
        );
        let kubeconfig = read_kubeconfig("k", &text).unwrap();
        assert_eq!(
            refusal(&kubeconfig),
            Some((
                "cluster \"c\"".to_string(),
                "reads a file (certificate-authority)".to_string()
            ))
        );
    }
}
