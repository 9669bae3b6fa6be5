//! Persistence of the store in SQLite (bundled, WAL journal).
//!
//! Layout of the data directory:
//! - `lock`: held (an exclusive advisory lock) while a server uses the directory, so two
//!   processes never share one store. Within one process a registry of held directories refuses a
//!   second server at once, and a start right after a clean stop in the same process waits out the
//!   moment a child process forked meanwhile still shares the lock's descriptor.
//! - `store.db` (with SQLite's `store.db-wal` and `store.db-shm` beside it): the table `objects`,
//!   one row per object (`grp`, `resource`, `namespace`, `name`, `rv`, the object's JSON), and the
//!   table `meta` with the store's latest `resourceVersion`.
//!
//! [`Store::put`](crate::store::Store::put) and [`Store::remove`](crate::store::Store::remove) write
//! the row and the new resourceVersion in one transaction, committed to the WAL before the change
//! is applied in memory. Syncing the WAL to disk is grouped: a thread of its own ([`Durability`])
//! syncs it once for every write committed meanwhile, off the store lock, and no answer and no watch
//! event shows a change before it is synced. So every acknowledged write survives a kill -9 and a
//! power cut (as with `synchronous = FULL`), while concurrent writers share one sync instead of
//! taking turns. If a commit or a sync fails (a full disk), the change is never acknowledged and the
//! server answers every later request with 503 until it is restarted; what was acknowledged stays.
//!
//! Start ([`open`]): lock, open the database, check it (`PRAGMA quick_check`), load every row, import
//! a store of the earlier release's snapshot-and-log format once ([`crate::legacy`]), serve the stored
//! CRDs again. A damaged database stops the start with an error naming the file and what to
//! do; nothing is reset or rewritten then. A missing directory is a first start (empty store).
//!
//! After a restart the resourceVersion continues from where it was, uids stay (new ones are random
//! v4 UUIDs, so they do not repeat), and the watch event window starts empty: a watch from a
//! resourceVersion before the restart gets 410 Gone and must list again.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OpenFlags};
use serde_json::Value;
use tokio::sync::watch;

use crate::api::State;
use crate::resources::{Registry, ResourceKey};

/// Name of the database file in the data directory.
pub const DB_FILE: &str = "store.db";
/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "lock";

/// The schema version `meta.format` records.
const FORMAT: i64 = 1;

/// What to do about damage: nothing was changed, so restoring or moving the directory aside is safe.
fn start_empty(path: &Path) -> String {
    let dir = path.parent().unwrap_or(path).display();
    format!(
        "nothing was changed: restore {dir} from a backup, or move it aside (`mv {dir} {dir}.damaged`) to \
         start with an empty store"
    )
}

/// Failure to open, load or write the data directory.
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
    /// Another API server of this same process uses the directory.
    #[error(
        "the data directory {dir} is in use by another API server of this process; stop that server \
         (`ApiServer::shutdown`) before starting one on the same directory"
    )]
    InUseHere {
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
    /// The database cannot be read as kok's store.
    #[error("{}: damaged: {detail}; {advice}", path.display())]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// What is wrong.
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

fn damaged(path: &Path, detail: impl std::fmt::Display) -> PersistError {
    PersistError::Damaged {
        path: path.to_path_buf(),
        detail: detail.to_string(),
        advice: start_empty(path),
    }
}

/// One write, as stored.
#[derive(Debug)]
pub enum Record<'a> {
    /// An object was created or replaced.
    Put {
        /// resourceVersion of the write.
        rv: u64,
        /// API group of the resource.
        group: &'a str,
        /// Plural resource.
        resource: &'a str,
        /// Namespace ("" for cluster-scoped objects).
        namespace: &'a str,
        /// Name.
        name: &'a str,
        /// The stored object, as JSON.
        json: &'a str,
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

/// The open database of a data directory (and its lock, released on drop or [`Db::close`]).
#[derive(Debug)]
pub struct Db {
    path: PathBuf,
    conn: Option<Connection>,
    lock: Option<DirLock>,
    failure: Option<String>,
    /// Announces the failure that stopped writes (not a normal close).
    failed: watch::Sender<Option<String>>,
    durability: Durability,
}

/// How far the WAL is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Synced {
    /// Every write up to this resourceVersion is on disk.
    rv: u64,
    /// Syncing failed: nothing later will be synced.
    failed: bool,
}

#[derive(Debug)]
struct Pending {
    /// The newest committed resourceVersion.
    committed: u64,
    /// The database was closed: the sync thread ends.
    stopped: bool,
}

#[derive(Debug)]
struct SyncState {
    pending: Mutex<Pending>,
    wake: Condvar,
    synced: watch::Sender<Synced>,
}

/// The group sync of a database's WAL: a thread that syncs the WAL once for all the writes committed
/// since its last sync, and tells who waits how far it got.
#[derive(Debug, Clone)]
pub struct Durability(Arc<SyncState>);

impl Durability {
    /// Starts the sync thread for a store whose writes up to `rv` are on disk; a failed sync is
    /// announced on `failed`.
    fn start(
        wal: File,
        wal_path: PathBuf,
        rv: u64,
        failed: watch::Sender<Option<String>>,
    ) -> std::io::Result<Durability> {
        let state = Arc::new(SyncState {
            pending: Mutex::new(Pending {
                committed: rv,
                stopped: false,
            }),
            wake: Condvar::new(),
            synced: watch::Sender::new(Synced { rv, failed: false }),
        });
        let syncing = state.clone();
        std::thread::Builder::new()
            .name("testkit-wal-sync".into())
            .spawn(move || sync_loop(&wal, &wal_path, &syncing, &failed))?;
        Ok(Durability(state))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest committed resourceVersion (not necessarily synced yet).
    pub fn committed(&self) -> u64 {
        self.pending().committed
    }

    fn commit(&self, rv: u64) {
        self.pending().committed = rv;
        self.0.wake.notify_one();
    }

    fn stop(&self) {
        self.pending().stopped = true;
        self.0.wake.notify_one();
    }

    /// Waits until every write up to `rv` is on disk, or syncing failed or stopped (the store then
    /// refuses every request, which callers check after waiting).
    pub async fn synced(&self, rv: u64) {
        if self.0.synced.borrow().rv >= rv {
            return;
        }
        let mut rx = self.0.synced.subscribe();
        let _ = rx.wait_for(|s| s.rv >= rv || s.failed).await;
    }

    /// Waits until everything committed so far is on disk (see [`Durability::synced`]).
    pub async fn all_synced(&self) {
        self.synced(self.committed()).await;
    }
}

/// Syncs the WAL whenever writes were committed since the last sync, until the database closes or a
/// sync fails.
fn sync_loop(wal: &File, wal_path: &Path, state: &SyncState, failed: &watch::Sender<Option<String>>) {
    let mut synced = state.synced.borrow().rv;
    loop {
        let target = {
            let mut pending = state.pending.lock().unwrap_or_else(|p| p.into_inner());
            while pending.committed <= synced && !pending.stopped {
                pending = state.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
            }
            if pending.stopped {
                state.synced.send_modify(|s| s.failed = true);
                return;
            }
            pending.committed
        };
        if let Err(e) = wal.sync_data() {
            failed.send_replace(Some(refusal(&format!("syncing {}: {e}", wal_path.display()))));
            state.synced.send_modify(|s| s.failed = true);
            return;
        }
        synced = target;
        state.synced.send_modify(|s| s.rv = target);
    }
}

/// The message of every refused request once a write could not be persisted.
fn refusal(error: &str) -> String {
    format!(
        "the API server could not persist a write ({error}); it refuses every request until restarted \
         (free disk space first if the disk is full), and a restart keeps every acknowledged write"
    )
}

impl Db {
    /// Commits one record and its resourceVersion in one transaction (to the WAL; the sync thread
    /// syncs it). After a failure every write is refused.
    pub fn write(&mut self, record: &Record<'_>) -> Result<(), String> {
        if let Some(f) = self.failure() {
            return Err(f);
        }
        let path = self.path.display().to_string();
        let result = match self.conn.as_mut() {
            None => Err(format!("{path} is closed")),
            Some(conn) => commit(conn, record).map_err(|e| format!("writing to {path}: {e}")),
        };
        match &result {
            Ok(()) => self.durability.commit(record.rv()),
            Err(e) => self.fail(refusal(e)),
        }
        result
    }

    /// Why writes are refused, if they are.
    pub fn failure(&self) -> Option<String> {
        self.failure.clone().or_else(|| self.failed.borrow().clone())
    }

    /// The group sync of this database's WAL.
    pub fn durability(&self) -> &Durability {
        &self.durability
    }

    fn fail(&mut self, why: String) {
        self.failed.send_replace(Some(why.clone()));
        self.failure = Some(why);
        self.conn = None;
    }

    /// Follows the failure that stopped writes: `None` until a write could not be persisted.
    pub fn failed(&self) -> watch::Receiver<Option<String>> {
        self.failed.subscribe()
    }

    /// Closes the database and releases the directory's lock; later writes are refused.
    pub fn close(&mut self) {
        if self.failure.is_none() {
            self.failure = Some("the API server has stopped".into());
        }
        self.durability.stop();
        self.conn = None;
        self.lock = None;
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.durability.stop();
    }
}

impl Record<'_> {
    /// The resourceVersion of the write.
    fn rv(&self) -> u64 {
        match self {
            Record::Put { rv, .. } | Record::Remove { rv, .. } => *rv,
        }
    }
}

/// Commits one record; its statements are prepared once and kept by the connection.
fn commit(conn: &mut Connection, record: &Record<'_>) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let rv = match record {
        Record::Put {
            rv,
            group,
            resource,
            namespace,
            name,
            json,
        } => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO objects (grp, resource, namespace, name, rv, object) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![group, resource, namespace, name, *rv as i64, json])?;
            *rv
        }
        Record::Remove {
            rv,
            group,
            resource,
            namespace,
            name,
        } => {
            tx.prepare_cached(
                "DELETE FROM objects WHERE grp = ?1 AND resource = ?2 AND namespace = ?3 AND name = ?4",
            )?
            .execute(params![group, resource, namespace, name])?;
            *rv
        }
    };
    tx.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'resourceVersion'")?
        .execute(params![rv as i64])?;
    tx.commit()
}

/// How long a start in this process waits for a lock it released itself: a child process forked
/// while the lock was held shares its descriptor until it execs (or exits), which takes moments, not
/// seconds, even on a loaded machine.
const RELEASED_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The data directories of this process: `true` while a server holds one, `false` once it released it.
static DIRS: Mutex<BTreeMap<PathBuf, bool>> = Mutex::new(BTreeMap::new());

fn dirs() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, bool>> {
    DIRS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The exclusive lock of a data directory, held until dropped.
///
/// An advisory lock belongs to the open file, and a child process forked in the meantime (any
/// `Command::spawn` of the process, from any thread) holds a copy of the descriptor until it execs: so
/// a lock this process has just released can look held by "another process" for a moment. Such a lock
/// is waited for ([`RELEASED_LOCK_WAIT`]), while a lock held by a live server of this process is
/// refused at once and one held by another process is refused at once.
#[derive(Debug)]
struct DirLock {
    key: PathBuf,
    _file: File,
}

impl DirLock {
    fn acquire(dir: &Path) -> Result<DirLock, PersistError> {
        let key = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let released_here = match dirs().get(&key) {
            Some(true) => {
                return Err(PersistError::InUseHere {
                    dir: dir.to_path_buf(),
                })
            }
            Some(false) => true,
            None => false,
        };
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("opening the lock file", &path))?;
        let deadline = Instant::now() + RELEASED_LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if released_here && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(PersistError::Locked {
                        dir: dir.to_path_buf(),
                    })
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io("locking", &path)(e)),
            }
        }
        let mut dirs = dirs();
        if dirs.get(&key) == Some(&true) {
            return Err(PersistError::InUseHere {
                dir: dir.to_path_buf(),
            });
        }
        dirs.insert(key.clone(), true);
        Ok(DirLock { key, _file: file })
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        dirs().insert(self.key.clone(), false);
    }
}

/// Opens the database, creating its tables on a first start, and checks it.
fn connect(path: &Path) -> Result<Connection, PersistError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| damaged(path, e))?;
    // Synced commits while starting (an import); `open` then leaves syncing to the sync thread.
    let setup = "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS objects (grp TEXT NOT NULL, resource TEXT NOT NULL,
            namespace TEXT NOT NULL, name TEXT NOT NULL, rv INTEGER NOT NULL, object TEXT NOT NULL,
            PRIMARY KEY (grp, resource, namespace, name));
        INSERT OR IGNORE INTO meta (key, value) VALUES ('resourceVersion', 0);";
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| damaged(path, e))?;
    if check != "ok" {
        return Err(damaged(path, format!("SQLite's quick_check reports: {check}")));
    }
    conn.execute_batch(setup).map_err(|e| damaged(path, e))?;
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?1)",
        params![FORMAT],
    )
    .map_err(|e| damaged(path, e))?;
    let format: i64 = conn
        .query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| r.get(0))
        .map_err(|e| damaged(path, e))?;
    if format != FORMAT {
        return Err(damaged(
            path,
            format!("the store has format {format}, this testkit reads format {FORMAT}"),
        ));
    }
    Ok(conn)
}

/// Loads every row into the store; every row must parse and be no newer than the store's resourceVersion.
/// `events.k8s.io` Events that an earlier testkit stored apart are moved into the `v1` Events' storage.
fn load(path: &Path, conn: &mut Connection, state: &mut State) -> Result<(), PersistError> {
    let mut moved = Vec::new();
    let rv: i64 = conn
        .query_row("SELECT value FROM meta WHERE key = 'resourceVersion'", [], |r| {
            r.get(0)
        })
        .map_err(|e| damaged(path, e))?;
    let mut statement = conn
        .prepare("SELECT grp, resource, namespace, name, rv, object FROM objects")
        .map_err(|e| damaged(path, e))?;
    let rows = statement
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, String>(5)?,
            ))
        })
        .map_err(|e| damaged(path, e))?;
    for row in rows {
        let (group, resource, namespace, name, row_rv, json) = row.map_err(|e| damaged(path, e))?;
        let what = format!("the row of {resource} {namespace}/{name}");
        let object: Value =
            serde_json::from_str(&json).map_err(|e| damaged(path, format!("{what} is not JSON: {e}")))?;
        let stored_rv = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if row_rv > rv || stored_rv != Some(row_rv.to_string().as_str()) {
            return Err(damaged(
                path,
                format!("{what} has resourceVersion {row_rv}, which does not fit the store's {rv}"),
            ));
        }
        let object = match crate::events::Api::of(&group, &resource) {
            Some(crate::events::Api::EventsV1) => {
                let converted = crate::events::convert(&object, "v1")
                    .ok_or_else(|| damaged(path, format!("{what} is not an Event")))?;
                moved.push((namespace, name, row_rv, converted.to_string()));
                state.store.load(&events_key(), converted);
                continue;
            }
            _ => object,
        };
        state.store.load(&ResourceKey { group, resource }, object);
    }
    state.store.restore_resource_version(rv.max(0) as u64);
    drop(statement);
    move_events(conn, &moved).map_err(|e| damaged(path, e))
}

fn events_key() -> ResourceKey {
    ResourceKey {
        group: String::new(),
        resource: "events".into(),
    }
}

/// Rewrites the rows of `events.k8s.io` Events as rows of `v1` Events (`(namespace, name, rv, json)`).
fn move_events(conn: &mut Connection, moved: &[(String, String, i64, String)]) -> rusqlite::Result<()> {
    if moved.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction()?;
    for (namespace, name, rv, json) in moved {
        tx.execute(
            "DELETE FROM objects WHERE grp = ?1 AND resource = 'events' AND namespace = ?2 AND name = ?3",
            params![crate::events::GROUP, namespace, name],
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO objects (grp, resource, namespace, name, rv, object) \
             VALUES ('', 'events', ?1, ?2, ?3, ?4)",
            params![namespace, name, rv, json],
        )?;
    }
    tx.commit()
}

/// Serves every stored CRD again, as creating them did.
fn restore_registry(state: &mut State) {
    let mut registry = Registry::builtin();
    let crds = ResourceKey {
        group: "apiextensions.k8s.io".into(),
        resource: "customresourcedefinitions".into(),
    };
    for (_, crd) in state.store.list(&crds, None) {
        registry.install_crd(&crd.value());
    }
    state.registry = registry;
}

/// Opens (or creates) a data directory: locks it, restores `state` from its database, and attaches the
/// database to the store so every later write is persisted. `page_limit` caps the database's size in
/// pages (4 KiB each), as a nearly full disk would.
pub fn open(dir: &Path, page_limit: Option<u64>, state: &mut State) -> Result<(), PersistError> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io("creating the data directory", dir))?;
    }
    let lock = DirLock::acquire(dir)?;
    let path = dir.join(DB_FILE);
    let mut conn = connect(&path)?;
    load(&path, &mut conn, state)?;
    if let Some(count) = crate::legacy::import(dir, &path, &mut conn, state)? {
        tracing::info!(
            dir = %dir.display(),
            count,
            "imported the store of the earlier snapshot-and-log format into SQLite"
        );
    }
    if let Some(pages) = page_limit {
        conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            .map_err(|e| damaged(&path, e))?;
    }
    // Whatever an earlier run committed is synced before anything is served; from now on commits
    // write the WAL without syncing it, and the sync thread syncs it before anything is acknowledged.
    let wal_path = PathBuf::from(format!("{}-wal", path.display()));
    let wal = File::open(&wal_path).map_err(io("opening the WAL", &wal_path))?;
    wal.sync_data().map_err(io("syncing the WAL", &wal_path))?;
    conn.execute_batch("PRAGMA synchronous = NORMAL")
        .map_err(|e| damaged(&path, e))?;
    restore_registry(state);
    state.store.forget_events();
    let failed = watch::Sender::new(None);
    let durability = Durability::start(
        wal,
        wal_path.clone(),
        state.store.resource_version(),
        failed.clone(),
    )
    .map_err(io("starting the thread that syncs the WAL", &wal_path))?;
    state.store.attach_db(Db {
        path,
        conn: Some(conn),
        lock: Some(lock),
        failure: None,
        failed,
        durability,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configmaps() -> ResourceKey {
        ResourceKey {
            group: String::new(),
            resource: "configmaps".into(),
        }
    }

    #[test]
    fn each_write_is_one_row_with_its_resource_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(10);
        open(dir.path(), None, &mut state).unwrap();
        let rk = configmaps();
        state
            .store
            .put(&rk, json!({"metadata": {"name": "a", "namespace": "n"}}));
        state
            .store
            .put(&rk, json!({"metadata": {"name": "b", "namespace": "n"}}));
        state.store.remove(&rk, &("n".into(), "a".into()));
        let rv = state.store.resource_version();
        drop(state);

        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let rows: Vec<(String, i64)> = conn
            .prepare("SELECT name, rv FROM objects")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, vec![("b".to_string(), 2)]);
        let stored: i64 = conn
            .query_row("SELECT value FROM meta WHERE key = 'resourceVersion'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(stored as u64, rv);
    }

    #[tokio::test]
    async fn committed_writes_are_synced_and_waiting_ends_when_the_database_closes() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(10);
        open(dir.path(), None, &mut state).unwrap();
        let durability = state
            .store
            .durability()
            .expect("a store with a database syncs it");
        let rk = configmaps();
        for i in 0..50 {
            state.store.put(
                &rk,
                json!({"metadata": {"name": format!("c{i}"), "namespace": "n"}}),
            );
        }
        assert_eq!(durability.committed(), state.store.resource_version());
        durability.all_synced().await;
        assert!(state.store.persist_failure().is_none());

        state.store.close_db();
        // Nothing later will be synced: whoever waits is let go (and finds the store refusing).
        durability.synced(u64::MAX).await;
        assert!(state.store.persist_failure().is_some());
    }

    #[test]
    fn a_write_that_cannot_be_persisted_is_not_stored_and_refuses_later_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(10);
        // A few pages hold the tables and little else: the disk is "full" after some writes.
        open(dir.path(), Some(8), &mut state).unwrap();
        let mut events = state.store.subscribe();
        let rk = configmaps();
        let big = "x".repeat(3000);
        let mut stored = 0;
        for i in 0..20 {
            let before = state.store.count(&rk);
            state.store.put(
                &rk,
                json!({"metadata": {"name": format!("c{i}"), "namespace": "n"}, "data": {"k": big}}),
            );
            if state.store.count(&rk) == before {
                break;
            }
            stored += 1;
        }
        assert!(stored < 20, "the page limit was reached");
        while events.try_recv().is_ok() {}
        let refused = state.store.persist_failure().expect("the failure is reported");
        assert_eq!(refused.code, 503);
        assert!(refused.message.contains(DB_FILE), "{}", refused.message);
        assert!(refused.message.contains("full"), "{}", refused.message);
        state
            .store
            .put(&rk, json!({"metadata": {"name": "later", "namespace": "n"}}));
        assert_eq!(state.store.count(&rk), stored, "later writes are refused");
        assert!(
            events.try_recv().is_err(),
            "an unpersisted write is not announced"
        );
    }

    #[test]
    fn events_an_earlier_testkit_stored_apart_join_the_v1_events_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(10);
        open(dir.path(), None, &mut state).unwrap();
        let apart = ResourceKey {
            group: crate::events::GROUP.into(),
            resource: "events".into(),
        };
        state.store.put(
            &apart,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "e", "namespace": "n"}, "note": "ran",
                "regarding": {"kind": "Pod", "namespace": "n", "name": "p"}}),
        );
        drop(state);

        for _ in 0..2 {
            let mut state = State::new(10);
            open(dir.path(), None, &mut state).unwrap();
            assert_eq!(state.store.count(&apart), 0);
            let core = state.store.get(&events_key(), &("n".into(), "e".into())).unwrap();
            assert_eq!(core["apiVersion"], "v1");
            assert_eq!(core["message"], "ran");
            assert_eq!(core["involvedObject"]["name"], "p");
        }
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let groups: Vec<String> = conn
            .prepare("SELECT grp FROM objects WHERE resource = 'events'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(groups, vec![String::new()], "the row moved");
    }
}
