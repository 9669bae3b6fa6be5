//! Persistence of the store: a snapshot plus a write-ahead log, each write fsync'd before it is acknowledged.
//!
//! Layout of the data directory:
//! - `lock`: held (an exclusive advisory lock) while a server uses the directory, so two
//!   processes never share one store.
//! - `snapshot`: the magic `KOKSNAP1`, then one frame holding
//!   `{"format": 1, "resourceVersion": N, "objects": [{"group", "resource", "object"}]}`.
//! - `wal.log`: the magic `KOKWAL01`, a header frame `{"format": 1, "base": N}` naming the snapshot
//!   resourceVersion it follows, then one frame per write, in resourceVersion order:
//!   `{"op": "put", "rv", "group", "resource", "object"}` or
//!   `{"op": "remove", "rv", "group", "resource", "namespace", "name"}`.
//!
//! A frame is `[u32 little-endian length][first 8 bytes of the SHA-256 of the JSON][JSON]`, so a
//! cut or damaged file is detected. [`Store::put`](crate::store::Store::put) and
//! [`Store::remove`](crate::store::Store::remove) append a frame and `fsync` it before the change is
//! visible or acknowledged; if that fails, the change is dropped and the server answers every
//! later request with 503 (restarting replays what was acknowledged).
//!
//! Start ([`open`]): lock, read the snapshot, replay the log (every record must carry the next
//! resourceVersion), serve the stored CRDs again, then write a fresh snapshot atomically (temporary
//! file, fsync, rename, fsync of the directory) and an empty log after it. The log is checkpointed
//! the same way when it grows past 64 MiB. A stop between the two renames leaves the new snapshot
//! beside the old log, whose records it already holds: they are skipped. A missing directory is a
//! first start (empty store). A
//! truncated or corrupt file, or records that do not follow each other, stop the start with an
//! error naming the file, the byte offset and what to do; nothing is reset or rewritten then.
//!
//! After a restart the resourceVersion continues from where it was, uids stay (new ones are random
//! v4 UUIDs, so they do not repeat), and the watch event window starts empty: a watch from a
//! resourceVersion before the restart gets 410 Gone and must list again.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::State;
use crate::resources::{Registry, ResourceKey};
use crate::store::object_key;

/// Name of the snapshot file in the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot";
/// Name of the write-ahead log in the data directory.
pub const WAL_FILE: &str = "wal.log";
/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "lock";

const SNAPSHOT_MAGIC: &[u8; 8] = b"KOKSNAP1";
const WAL_MAGIC: &[u8; 8] = b"KOKWAL01";
const FORMAT: u64 = 1;
const CHECKSUM_LEN: usize = 8;
const FRAME_HEADER: usize = 4 + CHECKSUM_LEN;
/// Frames longer than this are damage, not data.
const MAX_FRAME: usize = 1 << 30;
/// The log is folded into a new snapshot once it is this long.
const CHECKPOINT_BYTES: u64 = 64 << 20;

/// What to do about damage: nothing was changed, so restoring or moving the directory aside is safe.
fn start_empty(path: &Path) -> String {
    let dir = path.parent().unwrap_or(path).display();
    format!(
        "nothing was changed: restore {dir} from a backup, or move it aside (`mv {dir} {dir}.damaged`) to \
         start with an empty store"
    )
}

/// What to do about a log cut inside its last record, which was never acknowledged if the process
/// stopped while writing it.
fn cut_tail(path: &Path, offset: u64) -> String {
    format!(
        "nothing was changed. If the process stopped while writing this last record, that write was never \
         acknowledged and `truncate -s {offset} {}` keeps every earlier one; otherwise {}",
        path.display(),
        start_empty(path).replacen("nothing was changed: ", "", 1)
    )
}

/// Failure to open, replay or write the data directory.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Another process holds the lock.
    #[error(
        "the data directory {dir} is in use by another process (lock {} is held); stop that process or \
         choose another directory",
        dir.join(LOCK_FILE).display()
    )]
    Locked {
        /// The data directory.
        dir: PathBuf,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was attempted.
        what: &'static str,
        /// On which file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file ends in the middle of a record.
    #[error("{}: truncated at byte {offset}: {detail}; {advice}", path.display())]
    Truncated {
        /// The damaged file.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        detail: String,
        /// What to do.
        advice: String,
    },
    /// A record fails its checksum or does not parse.
    #[error("{}: corrupt at byte {offset}: {detail}; {advice}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        detail: String,
        /// What to do.
        advice: String,
    },
    /// Records do not follow each other or the snapshot (files of different stores, or a lost file).
    #[error("{}: version mismatch at byte {offset}: {detail}; {advice}", path.display())]
    Mismatch {
        /// The file whose records do not fit.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What does not fit.
        detail: String,
        /// What to do.
        advice: String,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PersistError + 'a {
    move |source| PersistError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// One write, as appended to the log.
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Record<'a> {
    /// An object was created or replaced.
    Put {
        /// resourceVersion of the write.
        rv: u64,
        /// API group of the resource.
        group: &'a str,
        /// Plural resource.
        resource: &'a str,
        /// The stored object.
        object: &'a Value,
    },
    /// An object was removed.
    Remove {
        /// resourceVersion of the removal.
        rv: u64,
        /// API group of the resource.
        group: &'a str,
        /// Plural resource.
        resource: &'a str,
        /// Namespace ("" for cluster-scoped objects).
        namespace: &'a str,
        /// Name.
        name: &'a str,
    },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
enum Replayed {
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

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WalHeader {
    format: u64,
    base: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotOut<'a> {
    format: u64,
    resource_version: u64,
    objects: Vec<EntryOut<'a>>,
}

#[derive(Debug, Serialize)]
struct EntryOut<'a> {
    group: &'a str,
    resource: &'a str,
    object: &'a Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotIn {
    format: u64,
    resource_version: u64,
    objects: Vec<EntryIn>,
}

#[derive(Debug, Deserialize)]
struct EntryIn {
    group: String,
    resource: String,
    object: Value,
}

fn checksum(bytes: &[u8]) -> [u8; CHECKSUM_LEN] {
    let digest = Sha256::digest(bytes);
    let mut out = [0u8; CHECKSUM_LEN];
    out.copy_from_slice(&digest[..CHECKSUM_LEN]);
    out
}

/// A frame around JSON bytes: length, checksum, bytes.
fn frame(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + json.len());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(json));
    out.extend_from_slice(json);
    out
}

/// What went wrong reading frames, before it is given a file and advice.
enum FrameError {
    Truncated(u64, String),
    Corrupt(u64, String),
}

/// Reads frames from `bytes`, starting at `start`; each item is the frame's offset and JSON.
fn frames(bytes: &[u8], start: usize) -> impl Iterator<Item = Result<(u64, &[u8]), FrameError>> {
    let mut at = start;
    let mut done = false;
    std::iter::from_fn(move || {
        if done || at == bytes.len() {
            return None;
        }
        let offset = at as u64;
        let rest = &bytes[at..];
        if rest.len() < FRAME_HEADER {
            done = true;
            return Some(Err(FrameError::Truncated(
                offset,
                format!(
                    "a record header needs {FRAME_HEADER} bytes but only {} remain",
                    rest.len()
                ),
            )));
        }
        let mut len_bytes = [0u8; 4];
        len_bytes.copy_from_slice(&rest[..4]);
        let len = u32::from_le_bytes(len_bytes) as usize;
        if len > MAX_FRAME {
            done = true;
            return Some(Err(FrameError::Corrupt(
                offset,
                format!("the record length {len} is implausible"),
            )));
        }
        if rest.len() - FRAME_HEADER < len {
            done = true;
            return Some(Err(FrameError::Truncated(
                offset,
                format!(
                    "the record needs {len} bytes after its header but only {} remain",
                    rest.len() - FRAME_HEADER
                ),
            )));
        }
        let json = &rest[FRAME_HEADER..FRAME_HEADER + len];
        if checksum(json)[..] != rest[4..FRAME_HEADER] {
            done = true;
            return Some(Err(FrameError::Corrupt(
                offset,
                "the record does not match its checksum".into(),
            )));
        }
        at += FRAME_HEADER + len;
        Some(Ok((offset, json)))
    })
}

/// Reads a whole file; `None` when it does not exist.
fn read_file(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("opening", path)(e)),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(io("reading", path))?;
    Ok(Some(bytes))
}

/// Writes a file atomically: temporary file, fsync, rename, fsync of the directory.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<File, PersistError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    {
        let mut f = File::create(&tmp).map_err(io("creating", &tmp))?;
        f.write_all(bytes).map_err(io("writing", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io("renaming into place", &path))?;
    sync_dir(dir)?;
    OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(io("opening", &path))
}

fn sync_dir(dir: &Path) -> Result<(), PersistError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing the directory", dir))
}

/// The open write-ahead log of a data directory (and its lock, released on drop or [`Wal::close`]).
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    file: Option<File>,
    lock: Option<File>,
    len: u64,
    failure: Option<String>,
}

impl Wal {
    /// Appends one record and waits until it is on disk. After a failure every append is refused.
    pub fn append(&mut self, record: &Record<'_>) -> Result<(), String> {
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        let path = self.dir.join(WAL_FILE);
        let result = serde_json::to_vec(record)
            .map_err(|e| format!("encoding a record for {}: {e}", path.display()))
            .and_then(|json| {
                let bytes = frame(&json);
                let file = self
                    .file
                    .as_mut()
                    .ok_or_else(|| format!("{} is closed", path.display()))?;
                file.write_all(&bytes)
                    .and_then(|()| file.sync_data())
                    .map_err(|e| format!("appending to {}: {e}", path.display()))?;
                self.len += bytes.len() as u64;
                Ok(())
            });
        if let Err(e) = &result {
            self.fail(format!(
                "the API server could not persist a write ({e}); it refuses every request until restarted, \
                 and a restart keeps every acknowledged write"
            ));
        }
        result
    }

    /// Whether the log is long enough to be folded into a snapshot.
    pub fn wants_checkpoint(&self) -> bool {
        self.failure.is_none() && self.len >= CHECKPOINT_BYTES
    }

    /// Writes a snapshot of `objects` at `rv` and starts an empty log after it.
    pub fn checkpoint<'a>(
        &mut self,
        rv: u64,
        objects: impl Iterator<Item = (&'a ResourceKey, &'a Arc<Value>)>,
    ) -> Result<(), String> {
        let result = write_snapshot(&self.dir, rv, objects).and_then(|()| new_log(&self.dir, rv));
        match result {
            Ok((file, len)) => {
                self.file = Some(file);
                self.len = len;
                Ok(())
            }
            Err(e) => {
                let msg = format!(
                    "the API server could not checkpoint its store ({e}); it refuses every request until \
                     restarted, and a restart keeps every acknowledged write"
                );
                self.fail(msg.clone());
                Err(msg)
            }
        }
    }

    /// Why writes are refused, if they are.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn fail(&mut self, why: String) {
        self.failure = Some(why);
        self.file = None;
    }

    /// Closes the log and releases the directory's lock; later writes are refused.
    pub fn close(&mut self) {
        if self.failure.is_none() {
            self.failure = Some("the API server has stopped".into());
        }
        self.file = None;
        self.lock = None;
    }
}

fn write_snapshot<'a>(
    dir: &Path,
    rv: u64,
    objects: impl Iterator<Item = (&'a ResourceKey, &'a Arc<Value>)>,
) -> Result<(), PersistError> {
    let snap = SnapshotOut {
        format: FORMAT,
        resource_version: rv,
        objects: objects
            .map(|(rk, o)| EntryOut {
                group: &rk.group,
                resource: &rk.resource,
                object: o,
            })
            .collect(),
    };
    let path = dir.join(SNAPSHOT_FILE);
    let json = serde_json::to_vec(&snap).map_err(|e| PersistError::Io {
        what: "encoding the snapshot",
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    let mut bytes = SNAPSHOT_MAGIC.to_vec();
    bytes.extend_from_slice(&frame(&json));
    write_atomic(dir, SNAPSHOT_FILE, &bytes)?;
    Ok(())
}

/// Replaces the log with an empty one following the snapshot at `base`.
fn new_log(dir: &Path, base: u64) -> Result<(File, u64), PersistError> {
    let path = dir.join(WAL_FILE);
    let header = serde_json::to_vec(&WalHeader { format: FORMAT, base }).map_err(|e| PersistError::Io {
        what: "encoding the log header",
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    let mut bytes = WAL_MAGIC.to_vec();
    bytes.extend_from_slice(&frame(&header));
    let file = write_atomic(dir, WAL_FILE, &bytes)?;
    Ok((file, bytes.len() as u64))
}

fn lock(dir: &Path) -> Result<File, PersistError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("opening the lock file", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(PersistError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io("locking", &path)(e)),
    }
}

/// The error of damaged frames; `tail` when a cut record may be an unacknowledged last write.
fn damage(path: &Path, e: FrameError, tail: bool) -> PersistError {
    match e {
        FrameError::Truncated(offset, detail) => PersistError::Truncated {
            path: path.to_path_buf(),
            offset,
            detail,
            advice: if tail {
                cut_tail(path, offset)
            } else {
                start_empty(path)
            },
        },
        FrameError::Corrupt(offset, detail) => corrupt(path, offset, detail),
    }
}

fn corrupt(path: &Path, offset: u64, detail: String) -> PersistError {
    PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        detail,
        advice: start_empty(path),
    }
}

fn mismatch(path: &Path, offset: u64, detail: String) -> PersistError {
    PersistError::Mismatch {
        path: path.to_path_buf(),
        offset,
        detail,
        advice: start_empty(path),
    }
}

/// Checks the magic at the start of a file.
fn check_magic(path: &Path, bytes: &[u8], magic: &[u8; 8]) -> Result<(), PersistError> {
    if bytes.len() < magic.len() && magic.starts_with(bytes) {
        return Err(damage(
            path,
            FrameError::Truncated(
                0,
                format!("the file has {} bytes, fewer than its 8-byte header", bytes.len()),
            ),
            false,
        ));
    }
    if !bytes.starts_with(magic) {
        return Err(corrupt(
            path,
            0,
            format!(
                "the file does not start with {:?}; it is not a file of this store or of this format",
                String::from_utf8_lossy(magic)
            ),
        ));
    }
    Ok(())
}

/// Loads the snapshot into `state`; returns its resourceVersion.
fn load_snapshot(dir: &Path, bytes: &[u8], state: &mut State) -> Result<u64, PersistError> {
    let path = dir.join(SNAPSHOT_FILE);
    check_magic(&path, bytes, SNAPSHOT_MAGIC)?;
    let mut it = frames(bytes, SNAPSHOT_MAGIC.len());
    let (offset, json) = match it.next() {
        None => {
            return Err(damage(
                &path,
                FrameError::Truncated(8, "the snapshot record is missing".into()),
                false,
            ))
        }
        Some(r) => r.map_err(|e| damage(&path, e, false))?,
    };
    if let Some(extra) = it.next() {
        let offset = match extra {
            Ok((o, _)) => o,
            Err(FrameError::Truncated(o, _) | FrameError::Corrupt(o, _)) => o,
        };
        return Err(corrupt(
            &path,
            offset,
            "unexpected data after the snapshot record".into(),
        ));
    }
    let snap: SnapshotIn = serde_json::from_slice(json)
        .map_err(|e| corrupt(&path, offset, format!("the snapshot record does not parse: {e}")))?;
    if snap.format != FORMAT {
        return Err(mismatch(
            &path,
            offset,
            format!("format {} is not the supported format {FORMAT}", snap.format),
        ));
    }
    for entry in snap.objects {
        let rk = ResourceKey {
            group: entry.group,
            resource: entry.resource,
        };
        let key = object_key(&entry.object);
        let rv: Option<u64> = entry
            .object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok());
        if key.1.is_empty() || rv.is_none_or(|rv| rv > snap.resource_version) {
            return Err(corrupt(
                &path,
                offset,
                format!(
                    "object {}/{} of {} has no name or a resourceVersion beyond the snapshot's {}",
                    key.0, key.1, rk.resource, snap.resource_version
                ),
            ));
        }
        if state.store.get(&rk, &key).is_some() {
            return Err(corrupt(
                &path,
                offset,
                format!("object {}/{} of {} appears twice", key.0, key.1, rk.resource),
            ));
        }
        state.store.load(&rk, entry.object);
    }
    state.store.restore_resource_version(snap.resource_version);
    Ok(snap.resource_version)
}

/// Replays the log over the snapshot at `snapshot_rv`.
fn replay_log(dir: &Path, bytes: &[u8], snapshot_rv: u64, state: &mut State) -> Result<(), PersistError> {
    let path = dir.join(WAL_FILE);
    check_magic(&path, bytes, WAL_MAGIC)?;
    let mut it = frames(bytes, WAL_MAGIC.len());
    let (offset, json) = match it.next() {
        None => {
            return Err(damage(
                &path,
                FrameError::Truncated(8, "the log header record is missing".into()),
                false,
            ))
        }
        Some(r) => r.map_err(|e| damage(&path, e, false))?,
    };
    let header: WalHeader = serde_json::from_slice(json)
        .map_err(|e| corrupt(&path, offset, format!("the log header does not parse: {e}")))?;
    if header.format != FORMAT {
        return Err(mismatch(
            &path,
            offset,
            format!("format {} is not the supported format {FORMAT}", header.format),
        ));
    }
    if header.base > snapshot_rv {
        return Err(mismatch(
            &path,
            offset,
            format!(
                "the log follows a snapshot at resourceVersion {} but {} is at {snapshot_rv}",
                header.base,
                dir.join(SNAPSHOT_FILE).display()
            ),
        ));
    }
    for item in it {
        let (offset, json) = item.map_err(|e| damage(&path, e, true))?;
        let record: Replayed = serde_json::from_slice(json)
            .map_err(|e| corrupt(&path, offset, format!("the record does not parse: {e}")))?;
        let (rv, group, resource) = match &record {
            Replayed::Put {
                rv, group, resource, ..
            }
            | Replayed::Remove {
                rv, group, resource, ..
            } => (*rv, group.clone(), resource.clone()),
        };
        let current = state.store.resource_version();
        if rv <= snapshot_rv && current == snapshot_rv && header.base < snapshot_rv {
            // Written before the snapshot was taken (a stop between snapshot and new log).
            continue;
        }
        if rv != current + 1 {
            return Err(mismatch(
                &path,
                offset,
                format!(
                    "the record has resourceVersion {rv} where {} comes next",
                    current + 1
                ),
            ));
        }
        let rk = ResourceKey { group, resource };
        match record {
            Replayed::Put { object, .. } => {
                if object_key(&object).1.is_empty() {
                    return Err(corrupt(
                        &path,
                        offset,
                        "the record stores an object without a name".into(),
                    ));
                }
                state.store.put(&rk, object);
            }
            Replayed::Remove { namespace, name, .. } => {
                let key = (namespace, name);
                if state.store.remove(&rk, &key).is_none() {
                    return Err(mismatch(
                        &path,
                        offset,
                        format!(
                            "the record removes {}/{} of {}, which does not exist",
                            key.0, key.1, rk.resource
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Serves every stored CRD again, as creating them did.
fn restore_registry(state: &mut State) {
    let mut registry = Registry::builtin();
    let crds = ResourceKey {
        group: "apiextensions.k8s.io".into(),
        resource: "customresourcedefinitions".into(),
    };
    for crd in state.store.list(&crds, None) {
        registry.install_crd(crd);
    }
    state.registry = registry;
}

/// Opens (or creates) a data directory: locks it, restores `state` from it, writes a fresh
/// snapshot and log, and attaches the log to the store so every later write is persisted.
pub fn open(dir: &Path, state: &mut State) -> Result<(), PersistError> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io("creating the data directory", dir))?;
        // The new directory's entry must be durable too, or a crash could lose every write in it.
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    let lock = lock(dir)?;
    let snapshot = read_file(&dir.join(SNAPSHOT_FILE))?;
    let log = read_file(&dir.join(WAL_FILE))?;
    let snapshot_rv = match (&snapshot, &log) {
        (Some(bytes), _) => load_snapshot(dir, bytes, state)?,
        (None, Some(_)) => {
            return Err(mismatch(
                &dir.join(WAL_FILE),
                0,
                format!(
                    "the log has no snapshot to follow ({} is missing)",
                    dir.join(SNAPSHOT_FILE).display()
                ),
            ))
        }
        (None, None) => state.store.resource_version(),
    };
    if let Some(bytes) = &log {
        replay_log(dir, bytes, snapshot_rv, state)?;
    }
    restore_registry(state);
    state.store.forget_events();
    let rv = state.store.resource_version();
    write_snapshot(dir, rv, state.store.iter_all())?;
    let (file, len) = new_log(dir, rv)?;
    state.store.attach_wal(Wal {
        dir: dir.to_path_buf(),
        file: Some(file),
        lock: Some(lock),
        len,
        failure: None,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_log_is_folded_into_a_snapshot_that_a_restart_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(10);
        open(dir.path(), &mut state).unwrap();
        let rk = ResourceKey {
            group: String::new(),
            resource: "configmaps".into(),
        };
        state
            .store
            .put(&rk, json!({"metadata": {"name": "a", "namespace": "n"}}));
        // Replace the log with one that claims to be long already.
        let (file, _) = new_log(dir.path(), state.store.resource_version()).unwrap();
        state.store.attach_wal(Wal {
            dir: dir.path().to_path_buf(),
            file: Some(file),
            lock: None,
            len: CHECKPOINT_BYTES,
            failure: None,
        });
        state
            .store
            .put(&rk, json!({"metadata": {"name": "b", "namespace": "n"}}));
        let rv = state.store.resource_version();
        let log = std::fs::read(dir.path().join(WAL_FILE)).unwrap();
        let records = frames(&log, WAL_MAGIC.len()).count();
        assert_eq!(records, 1, "the checkpoint left a log with its header only");
        drop(state);

        let mut restored = State::new(10);
        open(dir.path(), &mut restored).unwrap();
        assert_eq!(restored.store.resource_version(), rv);
        assert_eq!(restored.store.count(&rk), 2);
    }

    #[test]
    fn a_write_that_cannot_be_persisted_is_not_stored_and_refuses_later_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WAL_FILE);
        std::fs::write(&path, b"").unwrap();
        let mut store = crate::store::Store::new(10);
        // A read-only handle: every append fails.
        store.attach_wal(Wal {
            dir: dir.path().to_path_buf(),
            file: Some(File::open(&path).unwrap()),
            lock: None,
            len: 0,
            failure: None,
        });
        let mut events = store.subscribe();
        let rk = ResourceKey {
            group: String::new(),
            resource: "configmaps".into(),
        };
        store.put(&rk, json!({"metadata": {"name": "a", "namespace": "n"}}));
        assert_eq!(store.count(&rk), 0, "an unpersisted write is not stored");
        assert_eq!(store.resource_version(), 1);
        assert!(
            events.try_recv().is_err(),
            "an unpersisted write is not announced"
        );
        let refused = store.persist_failure().expect("the failure is reported");
        assert_eq!(refused.code, 503);
        assert!(refused.message.contains(WAL_FILE), "{}", refused.message);
        assert!(refused.message.contains("restart"), "{}", refused.message);
    }

    #[test]
    fn frames_detect_a_cut_and_a_flipped_byte() {
        let mut bytes = frame(br#"{"a":1}"#);
        bytes.extend_from_slice(&frame(br#"{"b":2}"#));
        let ok: Vec<_> = frames(&bytes, 0)
            .collect::<Result<_, _>>()
            .map_err(|_| ())
            .unwrap();
        assert_eq!(ok.len(), 2);
        let cut = &bytes[..bytes.len() - 2];
        assert!(matches!(
            frames(cut, 0).nth(1),
            Some(Err(FrameError::Truncated(offset, _))) if offset == 19
        ));
        let mut flipped = bytes.clone();
        flipped[FRAME_HEADER + 2] ^= 0x20;
        assert!(matches!(
            frames(&flipped, 0).next(),
            Some(Err(FrameError::Corrupt(0, _)))
        ));
    }
}
