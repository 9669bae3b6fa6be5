//! Import of a data directory kept in the earlier release's format (a `snapshot` plus a write-ahead
//! log `wal.log`) into SQLite, once.
//!
//! Both files are sequences of frames, `[u32 little-endian length][first 8 bytes of the SHA-256 of
//! the JSON][JSON]`, after an 8-byte magic: the snapshot (`KOKSNAP1`) holds one frame
//! `{"format": 1, "resourceVersion": N, "objects": [{"group", "resource", "object"}]}`, the log
//! (`KOKWAL01`) a header `{"format": 1, "base": N}` and then one frame per write after the snapshot,
//! `{"op": "put", "rv", "group", "resource", "object"}` or
//! `{"op": "remove", "rv", "group", "resource", "namespace", "name"}`.
//!
//! [`import`] reads them into an empty store, writes every object to the database in one
//! transaction, and then renames the files to `snapshot.imported` and `wal.log.imported`, so a later
//! start does not import again (a start that finds the files beside a database already holding
//! objects only renames them). Damage stops the start naming the file, the byte offset and what to
//! do; nothing is changed then.

use std::path::Path;

use rusqlite::{params, Connection};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::State;
use crate::persist::PersistError;
use crate::resources::ResourceKey;

/// The earlier release's snapshot file in the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot";
/// The earlier release's write-ahead log in the data directory.
pub const WAL_FILE: &str = "wal.log";
/// What an imported file is renamed to: `<name>.imported`.
pub const IMPORTED_SUFFIX: &str = ".imported";

const SNAPSHOT_MAGIC: &[u8; 8] = b"KOKSNAP1";
const WAL_MAGIC: &[u8; 8] = b"KOKWAL01";
const FORMAT: u64 = 1;
const CHECKSUM_LEN: usize = 8;
const FRAME_HEADER: usize = 4 + CHECKSUM_LEN;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Snapshot {
    format: u64,
    resource_version: u64,
    objects: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    group: String,
    resource: String,
    object: Value,
}

#[derive(Deserialize)]
struct WalHeader {
    format: u64,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Write {
    Put {
        rv: u64,
        group: String,
        resource: String,
        object: Value,
    },
    Remove {
        rv: u64,
        group: String,
        resource: String,
        namespace: String,
        name: String,
    },
}

/// Damage at `offset` of `path`; nothing was changed.
fn damaged(path: &Path, offset: usize, detail: impl std::fmt::Display) -> PersistError {
    let dir = path.parent().unwrap_or(path).display();
    PersistError::Damaged {
        path: path.to_path_buf(),
        detail: format!("the earlier release's store cannot be imported: at byte {offset}, {detail}"),
        advice: format!(
            "nothing was changed. If the process stopped while writing the last record, \
             `truncate -s {offset} {}` keeps every earlier write and the next start imports them; \
             otherwise move the directory aside (`mv {dir} {dir}.old`) to start with an empty store",
            path.display()
        ),
    }
}

/// The JSON of every frame after the magic, with its offset.
fn frames<'a>(path: &Path, bytes: &'a [u8], magic: &[u8; 8]) -> Result<Vec<(usize, &'a [u8])>, PersistError> {
    if !bytes.starts_with(magic) {
        return Err(damaged(path, 0, "the file does not start with its magic"));
    }
    let mut out = Vec::new();
    let mut at = magic.len();
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < FRAME_HEADER {
            return Err(damaged(path, at, "the last record is cut inside its header"));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(json) = rest.get(FRAME_HEADER..FRAME_HEADER + len) else {
            return Err(damaged(path, at, "the last record is cut"));
        };
        if Sha256::digest(json)[..CHECKSUM_LEN] != rest[4..FRAME_HEADER] {
            return Err(damaged(path, at, "the record does not match its checksum"));
        }
        out.push((at, json));
        at += FRAME_HEADER + len;
    }
    Ok(out)
}

fn read(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PersistError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    path: &Path,
    (offset, json): (usize, &[u8]),
) -> Result<T, PersistError> {
    serde_json::from_slice(json).map_err(|e| damaged(path, offset, format!("the record does not parse: {e}")))
}

/// Loads the snapshot into the (empty) store.
fn load_snapshot(path: &Path, bytes: &[u8], state: &mut State) -> Result<(), PersistError> {
    let frames = frames(path, bytes, SNAPSHOT_MAGIC)?;
    let [first] = frames[..] else {
        return Err(damaged(path, 8, "the snapshot must hold exactly one record"));
    };
    let snap: Snapshot = parse(path, first)?;
    if snap.format != FORMAT {
        return Err(damaged(
            path,
            first.0,
            format!("format {} is not format {FORMAT}", snap.format),
        ));
    }
    for e in snap.objects {
        let rk = ResourceKey {
            group: e.group,
            resource: e.resource,
        };
        state.store.load(&rk, e.object);
    }
    state.store.restore_resource_version(snap.resource_version);
    Ok(())
}

/// Replays the log's writes after the snapshot, each of which must carry the next resourceVersion.
fn replay(path: &Path, bytes: &[u8], state: &mut State) -> Result<(), PersistError> {
    let frames = frames(path, bytes, WAL_MAGIC)?;
    let Some((&header, writes)) = frames.split_first() else {
        return Err(damaged(path, 8, "the log header is missing"));
    };
    let h: WalHeader = parse(path, header)?;
    if h.format != FORMAT {
        return Err(damaged(
            path,
            header.0,
            format!("format {} is not format {FORMAT}", h.format),
        ));
    }
    for &frame in writes {
        let write: Write = parse(path, frame)?;
        let current = state.store.resource_version();
        let rv = match &write {
            Write::Put { rv, .. } | Write::Remove { rv, .. } => *rv,
        };
        if rv <= current {
            // Already in the snapshot (the earlier release stopped between snapshot and new log).
            continue;
        }
        if rv != current + 1 {
            return Err(damaged(
                path,
                frame.0,
                format!(
                    "the record has resourceVersion {rv} where {} comes next",
                    current + 1
                ),
            ));
        }
        match write {
            Write::Put {
                group,
                resource,
                object,
                ..
            } => {
                state.store.put(&ResourceKey { group, resource }, object);
            }
            Write::Remove {
                group,
                resource,
                namespace,
                name,
                ..
            } => {
                let rk = ResourceKey { group, resource };
                if state.store.remove(&rk, &(namespace, name)).is_none() {
                    return Err(damaged(
                        path,
                        frame.0,
                        "the record removes an object that does not exist",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Writes every object of the store and its resourceVersion in one transaction.
fn write_all(db: &Path, conn: &mut Connection, state: &State) -> Result<(), PersistError> {
    let failed = |e: rusqlite::Error| PersistError::Io {
        what: "writing the imported store to",
        path: db.to_path_buf(),
        source: std::io::Error::other(e),
    };
    let tx = conn.transaction().map_err(failed)?;
    for (rk, (namespace, name), stored) in state.store.iter_all() {
        let obj = stored.value();
        let rv: i64 = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        tx.execute(
            "INSERT OR REPLACE INTO objects (grp, resource, namespace, name, rv, object) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![rk.group, rk.resource, namespace, name, rv, obj.to_string()],
        )
        .map_err(failed)?;
    }
    tx.execute(
        "UPDATE meta SET value = ?1 WHERE key = 'resourceVersion'",
        params![state.store.resource_version() as i64],
    )
    .map_err(failed)?;
    tx.commit().map_err(failed)
}

/// Imports the earlier release's files in `dir`, if there are any, into the database at `db` and the
/// store; returns how many objects were imported (`None`: nothing was imported).
pub fn import(
    dir: &Path,
    db: &Path,
    conn: &mut Connection,
    state: &mut State,
) -> Result<Option<usize>, PersistError> {
    let snapshot_path = dir.join(SNAPSHOT_FILE);
    let wal_path = dir.join(WAL_FILE);
    let (snapshot, wal) = (read(&snapshot_path)?, read(&wal_path)?);
    if snapshot.is_none() && wal.is_none() {
        return Ok(None);
    }
    let fresh = state.store.iter_all().next().is_none();
    let mut count = None;
    if fresh {
        if let Some(bytes) = &snapshot {
            load_snapshot(&snapshot_path, bytes, state)?;
        }
        if let Some(bytes) = &wal {
            replay(&wal_path, bytes, state)?;
        }
        write_all(db, conn, state)?;
        count = Some(state.store.iter_all().count());
    }
    for path in [snapshot_path, wal_path].iter().filter(|p| p.exists()) {
        let mut to = path.clone().into_os_string();
        to.push(IMPORTED_SUFFIX);
        std::fs::rename(path, &to).map_err(|source| PersistError::Io {
            what: "renaming the imported file",
            path: path.clone(),
            source,
        })?;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(v: &Value) -> Vec<u8> {
        let json = serde_json::to_vec(v).unwrap();
        let mut out = (json.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&Sha256::digest(&json)[..CHECKSUM_LEN]);
        out.extend_from_slice(&json);
        out
    }

    fn cm(name: &str, rv: u64) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "n", "resourceVersion": rv.to_string()}})
    }

    /// A directory as the earlier release left it: a snapshot at resourceVersion 2 and a log of two
    /// more writes.
    fn earlier_release(dir: &Path) -> Vec<u8> {
        let snapshot = [
            SNAPSHOT_MAGIC.to_vec(),
            frame(&json!({"format": 1, "resourceVersion": 2, "objects": [
                {"group": "", "resource": "configmaps", "object": cm("a", 1)},
                {"group": "", "resource": "configmaps", "object": cm("b", 2)}]})),
        ]
        .concat();
        std::fs::write(dir.join(SNAPSHOT_FILE), snapshot).unwrap();
        let wal = [
            WAL_MAGIC.to_vec(),
            frame(&json!({"format": 1, "base": 2})),
            frame(
                &json!({"op": "put", "rv": 3, "group": "", "resource": "configmaps", "object": cm("c", 0)}),
            ),
            frame(
                &json!({"op": "remove", "rv": 4, "group": "", "resource": "configmaps",
                "namespace": "n", "name": "a"}),
            ),
        ]
        .concat();
        std::fs::write(dir.join(WAL_FILE), &wal).unwrap();
        wal
    }

    fn names(state: &State) -> Vec<String> {
        let mut names: Vec<String> = state
            .store
            .iter_all()
            .map(|(_, (_, name), _)| name.clone())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_earlier_store_is_imported_once_and_its_files_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        earlier_release(dir.path());
        let mut state = State::new(10);
        crate::persist::open(dir.path(), None, &mut state).unwrap();
        assert_eq!(names(&state), ["b", "c"]);
        assert_eq!(state.store.resource_version(), 4);
        assert!(!dir.path().join(SNAPSHOT_FILE).exists());
        assert!(dir.path().join("snapshot.imported").exists());
        assert!(dir.path().join("wal.log.imported").exists());
        drop(state);

        // The next start reads SQLite only.
        let mut state = State::new(10);
        crate::persist::open(dir.path(), None, &mut state).unwrap();
        assert_eq!(names(&state), ["b", "c"]);
        assert_eq!(state.store.resource_version(), 4);
    }

    #[test]
    fn a_cut_log_stops_the_start_naming_the_offset_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let wal = earlier_release(dir.path());
        std::fs::write(dir.path().join(WAL_FILE), &wal[..wal.len() - 3]).unwrap();
        let mut state = State::new(10);
        let e = crate::persist::open(dir.path(), None, &mut state)
            .unwrap_err()
            .to_string();
        let path = dir.path().join(WAL_FILE);
        assert!(e.contains("truncate -s "), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("the last record is cut"), "{e}");
        assert!(path.exists(), "the log was left in place");
    }
}
