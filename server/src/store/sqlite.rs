//! Client registrations in an embedded SQLite file: the default for one machine. One process
//! owns the file; its writes are serialised by a mutex, so sequence order is commit order.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use duet_core::api::{ObservationRecord, WorkloadBody};
use rusqlite::{Connection, OptionalExtension};

use super::{
    Change, Put, SCHEMA_VERSION, Store, StoreError, Written, existed, sql_limit, stored_body,
    stored_change, stored_observation, stored_record,
};

#[derive(Debug)]
pub struct SqliteStore {
    file: Arc<File>,
    target: String,
    conn: Arc<Mutex<Connection>>,
}

/// What a blocking call names its errors by.
#[derive(Debug)]
struct File {
    path: PathBuf,
    target: String,
}

impl File {
    fn broken(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Broken(format!("{}: {e}", self.path.display()))
    }
}

impl SqliteStore {
    /// Opens (or creates) the file and brings its schema to this binary's version: a file from
    /// before change sequences gets its rows numbered in insertion order; a file with a newer
    /// schema is refused.
    pub fn open(path: &Path) -> Result<SqliteStore, String> {
        let fail = |e: rusqlite::Error| format!("--state {}: {e}", path.display());
        let mut conn = Connection::open(path).map_err(fail)?;
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            .map_err(fail)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(fail)?;
        if version > SCHEMA_VERSION {
            return Err(format!(
                "--state {}: the registry file has schema version {version}, newer than this \
                 duet's {SCHEMA_VERSION}; run a newer duet, or give another file",
                path.display()
            ));
        }
        let tx = conn.transaction().map_err(fail)?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS workloads (id TEXT PRIMARY KEY, body TEXT);")
            .map_err(fail)?;
        let has_seq: bool = tx
            .prepare("SELECT 1 FROM pragma_table_info('workloads') WHERE name = 'seq'")
            .and_then(|mut s| s.exists([]))
            .map_err(fail)?;
        if !has_seq {
            // Version 1 (no sequence): number the rows as they were inserted.
            tx.execute_batch(
                "ALTER TABLE workloads ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
                 UPDATE workloads SET seq = rowid;
                 CREATE INDEX IF NOT EXISTS workloads_seq ON workloads (seq);",
            )
            .map_err(fail)?;
        }
        // Version 3: observations. (Version 4 changed PostgreSQL's schema only.)
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS observations (
                 id TEXT PRIMARY KEY,
                 seq INTEGER NOT NULL UNIQUE,
                 observation TEXT NOT NULL,
                 record TEXT NOT NULL);",
        )
        .map_err(fail)?;
        tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))
            .map_err(fail)?;
        tx.commit().map_err(fail)?;
        let target = format!("sqlite:{}", path.display());
        Ok(SqliteStore {
            file: Arc::new(File {
                path: path.to_path_buf(),
                target: target.clone(),
            }),
            target,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `work` on the connection on a blocking thread: a synchronous commit (an fsync)
    /// never holds an async worker, nor does waiting for the connection.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection, &File) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn
                .lock()
                .map_err(|_| StoreError::Broken("registry lock poisoned".into()))?;
            work(&mut conn, &file)
        })
        .await
        .map_err(|e| StoreError::Broken(format!("the registry's thread failed: {e}")))?
    }
}

impl Store for SqliteStore {
    fn target(&self) -> &str {
        &self.target
    }

    async fn changes_since(&self, after: i64) -> Result<Vec<Change>, StoreError> {
        self.blocking(move |conn, file| {
            let mut stmt = conn
                .prepare("SELECT id, body, seq FROM workloads WHERE seq > ?1 ORDER BY seq")
                .map_err(|e| file.broken(e))?;
            let rows = stmt
                .query_map([after], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(|e| file.broken(e))?;
            rows.map(|row| {
                let (id, text, seq) = row.map_err(|e| file.broken(e))?;
                stored_change(&file.target, id, text, seq)
            })
            .collect()
        })
        .await
    }

    async fn write(
        &self,
        id: &str,
        body: Option<&WorkloadBody>,
        seed: bool,
    ) -> Result<Written, StoreError> {
        let text = stored_body(&self.target, body)?;
        let deleting = body.is_none();
        let id = id.to_string();
        self.blocking(move |conn, file| {
            let tx = conn.transaction().map_err(|e| file.broken(e))?;
            let row: Option<bool> = tx
                .query_row(
                    "SELECT body IS NOT NULL FROM workloads WHERE id = ?1",
                    [&id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| file.broken(e))?;
            let existed = existed(row, seed);
            if deleting && !existed {
                return Ok(Written { seq: None, existed });
            }
            let seq: i64 = tx
                .query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM workloads", [], |r| {
                    r.get(0)
                })
                .map_err(|e| file.broken(e))?;
            tx.execute(
                "INSERT INTO workloads (id, body, seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT(id) DO UPDATE SET body = excluded.body, seq = excluded.seq",
                rusqlite::params![id, text, seq],
            )
            .map_err(|e| file.broken(e))?;
            tx.commit().map_err(|e| file.broken(e))?;
            Ok(Written {
                seq: Some(seq),
                existed,
            })
        })
        .await
    }

    async fn put_observations(
        &self,
        records: &[ObservationRecord],
    ) -> Result<Vec<Put>, StoreError> {
        let rows = records
            .iter()
            .map(|record| {
                let (observation, text) = stored_observation(&self.target, record)?;
                Ok((record.observation.id.clone(), observation, text))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // One transaction, one synchronous commit for the whole batch.
        self.blocking(move |conn, file| {
            let tx = conn.transaction().map_err(|e| file.broken(e))?;
            let mut seq: i64 = tx
                .query_row("SELECT COALESCE(MAX(seq), 0) FROM observations", [], |r| {
                    r.get(0)
                })
                .map_err(|e| file.broken(e))?;
            let mut puts = Vec::with_capacity(rows.len());
            for (id, observation, text) in rows {
                let before: Option<String> = tx
                    .query_row(
                        "SELECT observation FROM observations WHERE id = ?1",
                        [&id],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| file.broken(e))?;
                if let Some(before) = before {
                    puts.push(if before == observation {
                        Put::Duplicate
                    } else {
                        Put::Conflict
                    });
                    continue;
                }
                seq += 1;
                tx.execute(
                    "INSERT INTO observations (id, seq, observation, record) \
                     VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![id, seq, observation, text],
                )
                .map_err(|e| file.broken(e))?;
                puts.push(Put::Stored(seq));
            }
            tx.commit().map_err(|e| file.broken(e))?;
            Ok(puts)
        })
        .await
    }

    async fn observations(
        &self,
        after: i64,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<(i64, ObservationRecord)>, StoreError> {
        self.blocking(move |conn, file| {
            let order = if newest { "DESC" } else { "ASC" };
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT id, seq, record FROM observations WHERE seq > ?1 ORDER BY seq \
                     {order} LIMIT ?2"
                ))
                .map_err(|e| file.broken(e))?;
            let rows = stmt
                .query_map(rusqlite::params![after, sql_limit(limit)], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                })
                .map_err(|e| file.broken(e))?;
            rows.map(|row| {
                let (id, seq, text) = row.map_err(|e| file.broken(e))?;
                Ok((seq, stored_record(&file.target, &id, &text)?))
            })
            .collect()
        })
        .await
    }
}
