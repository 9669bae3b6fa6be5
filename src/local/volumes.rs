//! A Job's volumes on the host: ConfigMap, Secret, projected and emptyDir volumes written into a private
//! directory, and the mapping from in-container paths onto it.
//!
//! The kubelet would mount each volume at its `mountPath` (`/conf`, `/auth`); without root the local runner
//! cannot, so it writes each volume to `<private dir>/volumes/<volume name>/` instead and rewrites what points
//! into a mount: an argument or env value that is a mount path, or starts with one followed by `/`, optionally
//! behind `@` (`-e @/conf/extra.yml`) or after the first `=` (`--private-key=/auth/ssh-privatekey`), is
//! rewritten to the host directory. Text inside a script is left alone: kok's entry script reads the
//! directories from `KOK_CONF_DIR` and `KOK_AUTH_DIR`, which the runner points at the host directories.
//!
//! The private directory is created with mode 0700 inside the run's directory ([`super::rundir`]) and removed
//! when the [`Materialized`] value is dropped, unless it is kept for the run's directory to remove. Files keep the mode the Job asks for
//! (`defaultMode`, item `mode`); files from Secrets additionally lose every group and other permission bit.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, PodSpec, Secret, Volume};
use k8s_openapi::ByteString;

/// Mode of files from ConfigMaps and Secrets when the Job sets none (the API server's default).
const DEFAULT_FILE_MODE: u32 = 0o644;

/// Errors while preparing a Job's volumes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A volume mount names a volume the pod does not declare.
    #[error("volume mount {mount_path} names volume {volume:?}, which the pod does not declare")]
    UnknownVolume {
        /// The mount's path in the container.
        mount_path: String,
        /// The missing volume's name.
        volume: String,
    },
    /// A volume of a kind the local runner cannot provide.
    #[error("volume {volume:?} is of a kind the local runner does not support ({kind}); use configMap, secret, projected (configMap and secret sources) or emptyDir")]
    Unsupported {
        /// The volume's name.
        volume: String,
        /// What it is.
        kind: String,
    },
    /// A referenced ConfigMap or Secret does not exist and is not optional.
    #[error("volume {volume:?} needs {kind} {name:?}, which does not exist in the Job's namespace")]
    MissingObject {
        /// The volume's name.
        volume: String,
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's name.
        name: String,
    },
    /// An item names a key its object lacks.
    #[error("volume {volume:?} needs key {key:?} of {kind} {name:?}, which has no such key")]
    MissingKey {
        /// The volume's name.
        volume: String,
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// A file path inside a volume leaves the volume (absolute or `..`).
    #[error("volume {volume:?} asks for file path {path:?}, which is not a relative path inside the volume")]
    BadPath {
        /// The volume's name.
        volume: String,
        /// The offending path.
        path: String,
    },
    /// Writing the private directory failed.
    #[error("could not write {path} while preparing the Job's volumes: {source}")]
    Write {
        /// What was being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The ConfigMaps and Secrets a Job needs, fetched from its namespace; absent names did not exist.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Secret>,
}

/// Names of the ConfigMaps and Secrets a pod refers to from its volumes and its containers' env.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
    /// Secret names.
    pub secrets: BTreeSet<String>,
}

/// Collects the ConfigMaps and Secrets `pod` refers to (volumes, `env[].valueFrom`).
pub fn references(pod: &PodSpec) -> References {
    let mut refs = References::default();
    for volume in pod.volumes.iter().flatten() {
        if let Some(cm) = &volume.config_map {
            refs.config_maps.insert(cm.name.clone());
        }
        if let Some(name) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            refs.secrets.insert(name);
        }
        for source in volume.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &source.config_map {
                refs.config_maps.insert(cm.name.clone());
            }
            if let Some(secret) = &source.secret {
                refs.secrets.insert(secret.name.clone());
            }
        }
    }
    for var in pod.containers.iter().flat_map(|c| c.env.iter().flatten()) {
        if let Some(from) = &var.value_from {
            if let Some(r) = &from.config_map_key_ref {
                refs.config_maps.insert(r.name.clone());
            }
            if let Some(r) = &from.secret_key_ref {
                refs.secrets.insert(r.name.clone());
            }
        }
    }
    refs
}

/// One file to write, relative to the private directory.
#[derive(Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Path relative to the private directory (`volumes/<volume>/<path>`).
    pub path: PathBuf,
    /// Content.
    pub content: Vec<u8>,
    /// Unix permission bits.
    pub mode: u32,
    /// True when the content comes from a Secret.
    pub secret: bool,
}

impl std::fmt::Debug for PlannedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The content may be key material: never print it.
        f.debug_struct("PlannedFile")
            .field("path", &self.path)
            .field("bytes", &self.content.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .field("secret", &self.secret)
            .finish()
    }
}

/// A container path mapped onto the private directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// `mountPath` in the container, without a trailing `/`.
    pub mount_path: String,
    /// Directory (or file, with `subPath`) relative to the private directory.
    pub host_path: PathBuf,
}

/// Everything to write for a Job's volumes (pure result of [`plan`]).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Volume directories to create, relative to the private directory.
    pub dirs: Vec<PathBuf>,
    /// Files to write.
    pub files: Vec<PlannedFile>,
    /// Mounts of the container.
    pub mounts: Vec<Mount>,
}

fn relative_file(volume: &str, path: &str) -> Result<PathBuf, Error> {
    let p = Path::new(path);
    let ok = !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(p.to_path_buf())
    } else {
        Err(Error::BadPath {
            volume: volume.to_string(),
            path: path.to_string(),
        })
    }
}

fn file_mode(mode: Option<i32>, default_mode: Option<i32>, secret: bool) -> u32 {
    let bits = mode
        .or(default_mode)
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(DEFAULT_FILE_MODE)
        & 0o777;
    if secret {
        bits & 0o700
    } else {
        bits
    }
}

/// Source data of one ConfigMap or Secret, as raw bytes per key.
struct Data<'a> {
    kind: &'static str,
    name: &'a str,
    entries: BTreeMap<String, Vec<u8>>,
    secret: bool,
}

/// The data of the ConfigMap `name` among `sources`: `data`, then `binaryData`.
fn config_map_data<'a>(sources: &Sources, name: &'a str) -> Option<Data<'a>> {
    let cm = sources.config_maps.get(name)?;
    Some(Data::from_maps(
        "ConfigMap",
        name,
        false,
        cm.data.as_ref(),
        cm.binary_data.as_ref(),
    ))
}

/// The data of the Secret `name` among `sources`: `stringData`, then `data` over it.
fn secret_data<'a>(sources: &Sources, name: &'a str) -> Option<Data<'a>> {
    let secret = sources.secrets.get(name)?;
    Some(Data::from_maps(
        "Secret",
        name,
        true,
        secret.string_data.as_ref(),
        secret.data.as_ref(),
    ))
}

impl<'a> Data<'a> {
    /// The data of one object from its text entries and, over them, its byte entries.
    fn from_maps(
        kind: &'static str,
        name: &'a str,
        secret: bool,
        text: Option<&BTreeMap<String, String>>,
        bytes: Option<&BTreeMap<String, ByteString>>,
    ) -> Data<'a> {
        let mut entries: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (k, v) in text.into_iter().flatten() {
            entries.insert(k.clone(), v.clone().into_bytes());
        }
        for (k, v) in bytes.into_iter().flatten() {
            entries.insert(k.clone(), v.0.clone());
        }
        Data {
            kind,
            name,
            entries,
            secret,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn plan_source(
    out: &mut Vec<PlannedFile>,
    volume: &str,
    dir: &Path,
    data: Option<Data<'_>>,
    kind: &'static str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<(), Error> {
    let Some(data) = data else {
        if optional {
            return Ok(());
        }
        return Err(Error::MissingObject {
            volume: volume.to_string(),
            kind,
            name: name.to_string(),
        });
    };
    match items {
        Some(items) => {
            for item in items {
                let Some(content) = data.entries.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(Error::MissingKey {
                        volume: volume.to_string(),
                        kind: data.kind,
                        name: data.name.to_string(),
                        key: item.key.clone(),
                    });
                };
                out.push(PlannedFile {
                    path: dir.join(relative_file(volume, &item.path)?),
                    content: content.clone(),
                    mode: file_mode(item.mode, default_mode, data.secret),
                    secret: data.secret,
                });
            }
        }
        None => {
            for (key, content) in &data.entries {
                out.push(PlannedFile {
                    path: dir.join(relative_file(volume, key)?),
                    content: content.clone(),
                    mode: file_mode(None, default_mode, data.secret),
                    secret: data.secret,
                });
            }
        }
    }
    Ok(())
}

fn plan_volume(volume: &Volume, sources: &Sources, files: &mut Vec<PlannedFile>) -> Result<PathBuf, Error> {
    let name = volume.name.as_str();
    let dir = Path::new("volumes").join(relative_file(name, name)?);
    if let Some(cm) = &volume.config_map {
        plan_source(
            files,
            name,
            &dir,
            config_map_data(sources, &cm.name),
            "ConfigMap",
            &cm.name,
            cm.items.as_ref(),
            cm.default_mode,
            cm.optional.unwrap_or(false),
        )?;
    } else if let Some(secret) = &volume.secret {
        let secret_name = secret.secret_name.clone().unwrap_or_default();
        plan_source(
            files,
            name,
            &dir,
            secret_data(sources, &secret_name),
            "Secret",
            &secret_name,
            secret.items.as_ref(),
            secret.default_mode,
            secret.optional.unwrap_or(false),
        )?;
    } else if let Some(projected) = &volume.projected {
        for source in projected.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                plan_source(
                    files,
                    name,
                    &dir,
                    config_map_data(sources, &cm.name),
                    "ConfigMap",
                    &cm.name,
                    cm.items.as_ref(),
                    projected.default_mode,
                    cm.optional.unwrap_or(false),
                )?;
            } else if let Some(secret) = &source.secret {
                plan_source(
                    files,
                    name,
                    &dir,
                    secret_data(sources, &secret.name),
                    "Secret",
                    &secret.name,
                    secret.items.as_ref(),
                    projected.default_mode,
                    secret.optional.unwrap_or(false),
                )?;
            } else {
                return Err(Error::Unsupported {
                    volume: name.to_string(),
                    kind: "a projected source other than configMap or secret".to_string(),
                });
            }
        }
    } else if volume.empty_dir.is_none() {
        let kind = serde_json::to_value(volume)
            .ok()
            .and_then(|v| {
                v.as_object()
                    .and_then(|o| o.keys().find(|k| *k != "name").cloned())
            })
            .unwrap_or_else(|| "no source".to_string());
        return Err(Error::Unsupported {
            volume: name.to_string(),
            kind,
        });
    }
    Ok(dir)
}

/// Plans the files and mounts of `container`'s volumes from the fetched `sources` (pure). Only volumes the
/// container mounts are written.
pub fn plan(pod: &PodSpec, container: &Container, sources: &Sources) -> Result<Plan, Error> {
    let mut plan = Plan::default();
    let mut planned: BTreeMap<String, PathBuf> = BTreeMap::new();
    for mount in container.volume_mounts.iter().flatten() {
        let dir = match planned.get(&mount.name) {
            Some(dir) => dir.clone(),
            None => {
                let volume = pod
                    .volumes
                    .iter()
                    .flatten()
                    .find(|v| v.name == mount.name)
                    .ok_or_else(|| Error::UnknownVolume {
                        mount_path: mount.mount_path.clone(),
                        volume: mount.name.clone(),
                    })?;
                let dir = plan_volume(volume, sources, &mut plan.files)?;
                plan.dirs.push(dir.clone());
                planned.insert(mount.name.clone(), dir.clone());
                dir
            }
        };
        let host_path = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => dir.join(relative_file(&mount.name, sub)?),
            None => dir,
        };
        let mount_path = mount.mount_path.trim_end_matches('/').to_string();
        plan.mounts.push(Mount {
            mount_path,
            host_path,
        });
    }
    // Longest mount path first, so `/conf/extra` wins over `/conf`.
    plan.mounts.sort_by_key(|m| std::cmp::Reverse(m.mount_path.len()));
    Ok(plan)
}

/// Secret content to redact from output: the fragments of each Secret file, by the redactor's one rule
/// ([`crate::redact::secret_file_fragments`]: a one-line file, such as an ansible-vault password, whole
/// from 4 characters on; else each line of 8 or more).
pub fn redactions(plan: &Plan) -> Vec<String> {
    let out: BTreeSet<String> = plan
        .files
        .iter()
        .filter(|f| f.secret)
        .flat_map(|f| crate::redact::secret_file_fragments(&String::from_utf8_lossy(&f.content)))
        .collect();
    out.into_iter().collect()
}

/// A Job's private directory on the host; removed when dropped.
#[derive(Debug)]
pub struct Materialized {
    root: PathBuf,
    mounts: Vec<Mount>,
}

impl Materialized {
    /// The private directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host path of the container path `mount_path`, when it is mounted.
    pub fn host_dir(&self, mount_path: &str) -> Option<PathBuf> {
        let wanted = mount_path.trim_end_matches('/');
        self.mounts
            .iter()
            .find(|m| m.mount_path == wanted)
            .map(|m| self.root.join(&m.host_path))
    }

    /// Rewrites `value` when it points into a mount (see the module docs); otherwise returns it unchanged.
    pub fn rewrite(&self, value: &str) -> String {
        rewrite(&self.root, &self.mounts, value)
    }

    /// Leaves the directory in place: the run's directory, which holds it, is removed once the run has ended
    /// (by this kok or a restarted one).
    pub fn keep(mut self) {
        self.root = PathBuf::new();
    }

    /// Removes the private directory now, reporting failure.
    pub fn remove(mut self) -> std::io::Result<()> {
        let root = std::mem::take(&mut self.root);
        remove_tree(&root)
    }
}

impl Drop for Materialized {
    fn drop(&mut self) {
        if !self.root.as_os_str().is_empty() {
            if let Err(err) = remove_tree(&self.root) {
                tracing::warn!(path = %self.root.display(), %err, "could not remove a Job's private directory");
            }
        }
    }
}

fn remove_tree(root: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(root) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn rewrite_path(root: &Path, mounts: &[Mount], value: &str) -> Option<String> {
    for m in mounts {
        let Some(rest) = value.strip_prefix(m.mount_path.as_str()) else {
            continue;
        };
        if rest.is_empty() || rest.starts_with('/') {
            return Some(format!("{}{rest}", root.join(&m.host_path).display()));
        }
    }
    None
}

/// Rewrites `value` when it points into one of `mounts` (see the module docs).
pub fn rewrite(root: &Path, mounts: &[Mount], value: &str) -> String {
    if let Some(p) = rewrite_path(root, mounts, value) {
        return p;
    }
    if let Some(rest) = value.strip_prefix('@') {
        if let Some(p) = rewrite_path(root, mounts, rest) {
            return format!("@{p}");
        }
    }
    if let Some((key, rest)) = value.split_once('=') {
        if !key.contains('/') {
            if let Some(p) = rewrite_path(root, mounts, rest) {
                return format!("{key}={p}");
            }
        }
    }
    value.to_string()
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Write {
        path: path.to_path_buf(),
        source,
    }
}

fn private_dir(dir: &Path) -> Result<(), Error> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

/// Creates a fresh private directory (mode 0700) named after `job` under `parent` and writes `plan` into it.
/// On error nothing is left behind.
pub fn materialize(parent: &Path, job: &str, plan: &Plan) -> Result<Materialized, Error> {
    private_dir(parent)?;
    let suffix: u64 = rand::random();
    let root = parent.join(format!("kok-{job}-{suffix:016x}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&root)
        .map_err(io_err(&root))?;
    // From here on, dropping `out` removes the directory.
    let out = Materialized {
        root: root.clone(),
        mounts: plan.mounts.clone(),
    };
    for dir in &plan.dirs {
        private_dir(&root.join(dir))?;
    }
    for file in &plan.files {
        let path = root.join(&file.path);
        if let Some(parent) = path.parent() {
            private_dir(parent)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file.mode)
            .open(&path)
            .map_err(io_err(&path))?;
        f.write_all(&file.content).map_err(io_err(&path))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use k8s_openapi::api::core::v1::{
        ConfigMapProjection, ProjectedVolumeSource, SecretVolumeSource, VolumeMount, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    use super::*;

    fn pod() -> (PodSpec, Container) {
        let projection = |cm: &str, key: &str| VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: cm.to_string(),
                items: Some(vec![KeyToPath {
                    key: key.to_string(),
                    path: key.to_string(),
                    mode: None,
                }]),
                optional: Some(false),
            }),
            ..VolumeProjection::default()
        };
        let volumes = vec![
            Volume {
                name: "conf".to_string(),
                projected: Some(ProjectedVolumeSource {
                    sources: Some(vec![
                        projection("hosts-1", "hosts.yml"),
                        projection("vars-1", "vars.yml"),
                    ]),
                    default_mode: Some(0o444),
                }),
                ..Volume::default()
            },
            Volume {
                name: "auth".to_string(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("ssh".to_string()),
                    default_mode: Some(0o400),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
        ];
        let mount = |name: &str, path: &str| VolumeMount {
            name: name.to_string(),
            mount_path: path.to_string(),
            ..VolumeMount::default()
        };
        let container = Container {
            name: "ansible".to_string(),
            volume_mounts: Some(vec![mount("conf", "/conf"), mount("auth", "/auth/")]),
            ..Container::default()
        };
        (
            PodSpec {
                volumes: Some(volumes),
                containers: vec![container.clone()],
                ..PodSpec::default()
            },
            container,
        )
    }

    fn sources() -> Sources {
        let cm = |name: &str, key: &str, value: &str| {
            (
                name.to_string(),
                ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        ..ObjectMeta::default()
                    },
                    data: Some([(key.to_string(), value.to_string())].into_iter().collect()),
                    ..ConfigMap::default()
                },
            )
        };
        let secret = Secret {
            data: Some(
                [(
                    "ssh-privatekey".to_string(),
                    ByteString(b"-----KEY-----\nsecretsecretsecret\n".to_vec()),
                )]
                .into_iter()
                .collect(),
            ),
            ..Secret::default()
        };
        Sources {
            config_maps: [
                cm("hosts-1", "hosts.yml", "all: {}\n"),
                cm("vars-1", "vars.yml", "a: 1\n"),
            ]
            .into_iter()
            .collect(),
            secrets: [("ssh".to_string(), secret)].into_iter().collect(),
        }
    }

    #[test]
    fn references_name_every_config_map_and_secret_of_the_pod() {
        let (pod, _) = pod();
        let refs = references(&pod);
        assert_eq!(
            refs.config_maps.into_iter().collect::<Vec<_>>(),
            vec!["hosts-1", "vars-1"]
        );
        assert_eq!(refs.secrets.into_iter().collect::<Vec<_>>(), vec!["ssh"]);
    }

    #[test]
    fn secret_files_keep_their_0400_mode_and_config_map_files_their_default_mode() {
        let (pod, container) = pod();
        let plan = plan(&pod, &container, &sources()).unwrap();
        let modes: Vec<_> = plan
            .files
            .iter()
            .map(|f| (f.path.display().to_string(), f.mode))
            .collect();
        assert_eq!(
            modes,
            vec![
                ("volumes/conf/hosts.yml".to_string(), 0o444),
                ("volumes/conf/vars.yml".to_string(), 0o444),
                ("volumes/auth/ssh-privatekey".to_string(), 0o400),
            ]
        );
    }

    #[test]
    fn a_missing_config_map_is_an_error_naming_it() {
        let (pod, container) = pod();
        let mut sources = sources();
        sources.config_maps.remove("vars-1");
        let err = plan(&pod, &container, &sources).unwrap_err().to_string();
        assert!(err.contains("ConfigMap \"vars-1\""), "{err}");
    }

    #[test]
    fn paths_into_mounts_are_rewritten_in_every_accepted_form() {
        let (pod, container) = pod();
        let plan = plan(&pod, &container, &sources()).unwrap();
        let root = Path::new("/tmp/x");
        let r = |v: &str| rewrite(root, &plan.mounts, v);
        assert_eq!(r("/conf/hosts.yml"), "/tmp/x/volumes/conf/hosts.yml");
        assert_eq!(r("@/conf/vars.yml"), "@/tmp/x/volumes/conf/vars.yml");
        assert_eq!(
            r("--private-key=/auth/ssh-privatekey"),
            "--private-key=/tmp/x/volumes/auth/ssh-privatekey"
        );
        assert_eq!(r("/auth"), "/tmp/x/volumes/auth");
        assert_eq!(r("/configuration/x"), "/configuration/x");
        assert_eq!(r("cluster.yml"), "cluster.yml");
    }

    #[test]
    fn secret_lines_become_redactions() {
        let (pod, container) = pod();
        let plan = plan(&pod, &container, &sources()).unwrap();
        assert_eq!(redactions(&plan), vec!["-----KEY-----", "secretsecretsecret"]);
    }

    #[test]
    fn a_one_line_secret_file_such_as_a_vault_password_is_redacted_whole_even_when_short() {
        let file = |content: &[u8]| PlannedFile {
            path: PathBuf::from("volumes/vault/password"),
            content: content.to_vec(),
            mode: 0o400,
            secret: true,
        };
        let plan = Plan {
            files: vec![file(b"hunter\n"), file(b"abc\n")],
            ..Plan::default()
        };
        assert_eq!(
            redactions(&plan),
            vec!["hunter"],
            "three letters hide nothing a guess would not find"
        );
    }

    #[test]
    fn the_private_directory_is_0700_and_disappears_when_dropped() {
        let (pod, container) = pod();
        let plan = plan(&pod, &container, &sources()).unwrap();
        let parent = tempfile::tempdir().unwrap();
        let m = materialize(parent.path(), "job", &plan).unwrap();
        let root = m.root().to_path_buf();
        assert_eq!(
            std::fs::metadata(&root).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let key = m.host_dir("/auth").unwrap().join("ssh-privatekey");
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o400
        );
        assert_eq!(
            std::fs::read_to_string(m.host_dir("/conf").unwrap().join("vars.yml")).unwrap(),
            "a: 1\n"
        );
        drop(m);
        assert!(!root.exists());
    }
}
