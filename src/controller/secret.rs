//! The checks of a cluster's Secrets, the ssh key's and the ansible-vault password's: each exists and has its
//! key (the ssh key's also the right type); and the registration with the redactor of what a Job mounts.
//!
//! The controller watches the Secrets of its namespace into a cache that keeps key names only
//! ([`strip_values`]); operations and Clusters waiting for a Secret are woken when it appears or changes,
//! so waiting costs no requests. Before the values are dropped, what a Job may print of them is handed to
//! [`crate::redact`] ([`register_values`]), so no request is made for it either.

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};

use super::credentials::CREDENTIALS_SUFFIX;
use crate::api::{
    KUBECONFIG_KEY, LABEL_MANAGED_BY, MANAGED_BY, SSH_AUTH_SECRET_TYPE, SSH_PRIVATE_KEY, VAULT_PASSWORD_KEY,
};

/// Why a Secret cannot be used as an ssh key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretProblem {
    /// No Secret of that name in the namespace.
    NotFound,
    /// The Secret's type is neither `kubernetes.io/ssh-auth` nor `Opaque`.
    WrongType(String),
    /// The Secret has no `ssh-privatekey` key.
    KeyMissing,
}

impl SecretProblem {
    /// Condition reason: `SecretNotFound`, `SecretWrongType` or `SecretKeyMissing`.
    pub fn reason(&self) -> &'static str {
        match self {
            SecretProblem::NotFound => "SecretNotFound",
            SecretProblem::WrongType(_) => "SecretWrongType",
            SecretProblem::KeyMissing => "SecretKeyMissing",
        }
    }

    /// What is wrong with Secret `name` in `namespace` and how to fix it.
    pub fn message(&self, name: &str, namespace: &str) -> String {
        let create = format!(
            "kubectl -n {namespace} create secret generic {name} --type={SSH_AUTH_SECRET_TYPE} \
             --from-file={SSH_PRIVATE_KEY}=PATH"
        );
        match self {
            SecretProblem::NotFound => {
                format!("Secret {name} (sshAuthSecret) does not exist in namespace {namespace}; create it: {create}")
            }
            SecretProblem::WrongType(t) => format!(
                "Secret {name} in namespace {namespace} has type {t}, not {SSH_AUTH_SECRET_TYPE}; \
                 recreate it: kubectl -n {namespace} delete secret {name} && {create}"
            ),
            SecretProblem::KeyMissing => format!(
                "Secret {name} in namespace {namespace} has no key {SSH_PRIVATE_KEY}; \
                 recreate it: kubectl -n {namespace} delete secret {name} && {create}"
            ),
        }
    }
}

/// Judges a Secret: its type and whether the key is present. Only key names are looked at.
pub fn judge(secret: &Secret) -> Result<(), SecretProblem> {
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != SSH_AUTH_SECRET_TYPE && type_ != "Opaque" {
        return Err(SecretProblem::WrongType(type_.to_string()));
    }
    if has_key(secret, SSH_PRIVATE_KEY) {
        Ok(())
    } else {
        Err(SecretProblem::KeyMissing)
    }
}

/// Judges Secret `name` in `namespace` from the watch cache: no request to the API server.
pub fn check_cached(secrets: &Store<Secret>, namespace: &str, name: &str) -> Result<(), SecretProblem> {
    match secrets.get(&ObjectRef::new(name).within(namespace)) {
        None => Err(SecretProblem::NotFound),
        Some(secret) => judge(&secret),
    }
}

/// Judges the vault password Secret `name` (`vaultPasswordSecret`) from the watch cache: it exists and has
/// the key `password`. `Err` is what is wrong and how to fix it.
pub fn check_vault_cached(secrets: &Store<Secret>, namespace: &str, name: &str) -> Result<(), String> {
    let create = format!(
        "kubectl -n {namespace} create secret generic {name} --from-file={VAULT_PASSWORD_KEY}=./vault-pass"
    );
    match secrets.get(&ObjectRef::new(name).within(namespace)) {
        None => Err(format!(
            "Secret {name} (vaultPasswordSecret) does not exist in namespace {namespace}; create it with the \
             ansible-vault password: {create}"
        )),
        Some(secret) if !has_key(&secret, VAULT_PASSWORD_KEY) => Err(format!(
            "Secret {name} (vaultPasswordSecret) in namespace {namespace} has no key {VAULT_PASSWORD_KEY}; \
             recreate it: kubectl -n {namespace} delete secret {name} && {create}"
        )),
        Some(_) => Ok(()),
    }
}

/// True when `secret` has `key` in its data or stringData.
fn has_key(secret: &Secret, key: &str) -> bool {
    secret.data.as_ref().is_some_and(|d| d.contains_key(key))
        || secret.string_data.as_ref().is_some_and(|d| d.contains_key(key))
}

/// The values `key` holds in `secret` (`None`: every key), as text.
fn values_of<'a>(secret: &'a Secret, key: Option<&'a str>) -> impl Iterator<Item = String> + 'a {
    let wanted = move |k: &String| key.is_none_or(|key| k == key);
    let data = secret.data.iter().flatten().filter(move |(k, _)| wanted(k));
    let strings = secret
        .string_data
        .iter()
        .flatten()
        .filter(move |(k, _)| wanted(k));
    data.map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned())
        .chain(strings.map(|(_, v)| v.clone()))
}

/// Registers with [`crate::redact`] what `secret` holds that a Job may print, as the Secret watch sees it
/// (its first listing after a start included) and before its values are dropped: an ssh key
/// (`ssh-privatekey`), an ansible-vault password (`password`), every value of a cluster's
/// `<cluster>-credentials` (kok's label), and the users' credentials of a kubeconfig (`value`), such as
/// the `admin.conf` a run saves. So every status, Event, note and log kok makes of a run is scrubbed of
/// them with no read of its own; a value a run saves arrives by the same watch.
pub fn register_values(secret: &Secret) {
    for key in [SSH_PRIVATE_KEY, VAULT_PASSWORD_KEY] {
        values_of(secret, Some(key)).for_each(|v| crate::redact::register_secret_file(&v));
    }
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let kok_owned = secret
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY));
    if kok_owned && name.ends_with(CREDENTIALS_SUFFIX) {
        values_of(secret, None).for_each(|v| crate::redact::register_secret_file(&v));
    }
    for text in values_of(secret, Some(KUBECONFIG_KEY)) {
        if let Ok(kubeconfig) = serde_yaml::from_str::<serde_yaml::Value>(&text) {
            crate::health::client::register_credentials(&kubeconfig);
        }
    }
}

/// What the watch cache keeps of a Secret: its metadata, type and key names. Values are dropped as the
/// object arrives, so no key material stays in kok's memory.
pub fn strip_values(secret: &mut Secret) {
    // Emptied with their buffers given back: a cleared Vec keeps its allocation.
    if let Some(data) = secret.data.as_mut() {
        for value in data.values_mut() {
            value.0 = Vec::new();
        }
    }
    if let Some(data) = secret.string_data.as_mut() {
        for value in data.values_mut() {
            *value = String::new();
        }
    }
    secret.metadata.managed_fields = None;
    secret.metadata.annotations = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(type_: &str, key: &str) -> Secret {
        Secret {
            type_: Some(type_.into()),
            data: Some([(key.to_string(), ByteString(b"k".to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_cache_keeps_key_names_and_drops_values() {
        let mut s = secret(SSH_AUTH_SECRET_TYPE, SSH_PRIVATE_KEY);
        s.string_data = Some([("other".to_string(), "value".to_string())].into());
        strip_values(&mut s);
        assert_eq!(judge(&s), Ok(()), "the key is still there");
        assert!(s.data.unwrap().values().all(|v| v.0.is_empty()));
        assert!(s.string_data.unwrap().values().all(String::is_empty));
    }

    #[test]
    fn ssh_auth_and_opaque_secrets_with_the_key_are_accepted() {
        assert_eq!(judge(&secret(SSH_AUTH_SECRET_TYPE, SSH_PRIVATE_KEY)), Ok(()));
        assert_eq!(judge(&secret("Opaque", SSH_PRIVATE_KEY)), Ok(()));
    }

    #[test]
    fn wrong_types_and_missing_keys_are_refused_with_a_way_out() {
        let p = judge(&secret("kubernetes.io/tls", "tls.key")).unwrap_err();
        assert_eq!(p.reason(), "SecretWrongType");
        assert_eq!(judge(&secret("Opaque", "id_rsa")), Err(SecretProblem::KeyMissing));
        let msg = SecretProblem::NotFound.message("prod-ssh", "kok-system");
        assert!(msg.contains("prod-ssh") && msg.contains("kok-system"));
        assert!(msg.contains(
            "kubectl -n kok-system create secret generic prod-ssh --type=kubernetes.io/ssh-auth \
             --from-file=ssh-privatekey=PATH"
        ));
    }
}
