//! Reading a pinned inventory directory back from its content-addressed ConfigMaps (pure).
//!
//! A Cluster or ClusterOperation names its inputs ([`PinnedInventory`]); whoever needs the files again
//! (verification, health, the web view) fetches those ConfigMaps and gets the directory from
//! [`inventory_dir`], gzip-compressed files inflated.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::api::{file_list, PinnedFile, PinnedInventory, FILES_KEY, FILE_GZIP_KEY, FILE_KEY, VARS_KEY};
use crate::layout::InventoryDir;

/// Why a pinned directory could not be read back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PinnedError {
    /// A ConfigMap the spec names is not among those given.
    #[error("ConfigMap {name} is missing")]
    Missing {
        /// Its name.
        name: String,
    },
    /// A ConfigMap lacks the key its file is under, or its compressed file does not inflate as text.
    #[error("ConfigMap {name} has no readable key {key}")]
    Unreadable {
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
}

/// `bytes` gzip-compressed, the same bytes for the same input (no time or name in the header).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing into a Vec cannot fail.
    let _ = out.write_all(bytes);
    out.finish().unwrap_or_default()
}

/// `bytes` inflated from gzip, as UTF-8 text; `None` when they are not gzip or not text.
pub fn gunzip_text(bytes: &[u8]) -> Option<String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The text under `key` of `cm`'s data.
fn text(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref()?.get(key).cloned()
}

/// The group_vars/ and host_vars/ files `spec` pins: those it lists itself, or those of the file list it
/// names (`varsFilesRef`), read from `config_maps` (by name).
pub fn vars_files(
    spec: &dyn PinnedInventory,
    config_maps: &BTreeMap<String, ConfigMap>,
) -> Result<Vec<PinnedFile>, PinnedError> {
    let Some(list) = spec.vars_files_ref() else {
        return Ok(spec.vars_files().to_vec());
    };
    let cm = config_maps.get(&list.name).ok_or_else(|| PinnedError::Missing {
        name: list.name.clone(),
    })?;
    file_list(cm).ok_or_else(|| PinnedError::Unreadable {
        name: list.name.clone(),
        key: FILES_KEY.to_string(),
    })
}

/// The inventory directory `spec` pins, from `config_maps` (by name, holding at least every ConfigMap the
/// spec names, and the files its file list names).
pub fn inventory_dir(
    spec: &dyn PinnedInventory,
    config_maps: &BTreeMap<String, ConfigMap>,
) -> Result<InventoryDir, PinnedError> {
    let get = |name: &str| {
        config_maps.get(name).ok_or_else(|| PinnedError::Missing {
            name: name.to_string(),
        })
    };
    let unreadable = |name: &str, key: &str| PinnedError::Unreadable {
        name: name.to_string(),
        key: key.to_string(),
    };
    let hosts = &spec.hosts_ref().name;
    let file = spec.inventory_file();
    let hosts_yml = text(get(hosts)?, file).ok_or_else(|| unreadable(hosts, file))?;
    let vars_yml = match spec.vars_ref() {
        Some(r) => Some(text(get(&r.name)?, VARS_KEY).ok_or_else(|| unreadable(&r.name, VARS_KEY))?),
        None => None,
    };
    let listed = vars_files(spec, config_maps)?;
    let mut vars_files = Vec::with_capacity(listed.len());
    for pinned in &listed {
        let cm = get(&pinned.config_map)?;
        let content = if pinned.gzip {
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(FILE_GZIP_KEY))
                .and_then(|bytes| gunzip_text(&bytes.0))
                .ok_or_else(|| unreadable(&pinned.config_map, FILE_GZIP_KEY))?
        } else {
            text(cm, FILE_KEY).ok_or_else(|| unreadable(&pinned.config_map, FILE_KEY))?
        };
        vars_files.push((pinned.path.clone(), content));
    }
    Ok(InventoryDir {
        inventory_file: file.to_string(),
        hosts_yml,
        vars_yml,
        vars_files,
    })
}
