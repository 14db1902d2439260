//! The durable side of the workload registry: client writes and deletions go to an SQLite
//! database first and to the in-memory registry (`duet_model::registry`) second, so a restart
//! keeps every acknowledged write.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use duet_core::api::WorkloadBody;
use rusqlite::Connection;

/// Durable client writes: `workloads(id, body)`, a NULL body marking a deleted dataset workload.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, String> {
        let fail = |e: rusqlite::Error| format!("{}: {e}", path.display());
        let conn = Connection::open(path).map_err(fail)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS workloads (id TEXT PRIMARY KEY, body TEXT);",
        )
        .map_err(fail)?;
        Ok(Store {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    /// Every stored entry: `Some(body)` registered, `None` deleted.
    pub fn entries(&self) -> Result<Vec<(String, Option<WorkloadBody>)>, String> {
        let fail = |e: rusqlite::Error| format!("{}: {e}", self.path.display());
        let conn = self.conn.lock().map_err(|_| "registry lock poisoned")?;
        let mut stmt = conn
            .prepare("SELECT id, body FROM workloads ORDER BY id")
            .map_err(fail)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
            .map_err(fail)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, body) = row.map_err(fail)?;
            let body = match body {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| format!("{}: workload `{id}`: {e}", self.path.display()))?,
                ),
                None => None,
            };
            out.push((id, body));
        }
        Ok(out)
    }

    pub fn write(&self, id: &str, body: Option<&WorkloadBody>) -> Result<(), String> {
        let text = body
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| e.to_string())?;
        let conn = self.conn.lock().map_err(|_| "registry lock poisoned")?;
        conn.execute(
            "INSERT INTO workloads (id, body) VALUES (?1, ?2)
             ON CONFLICT(id) DO UPDATE SET body = excluded.body",
            rusqlite::params![id, text],
        )
        .map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok(())
    }

    pub fn forget(&self, id: &str) -> Result<(), String> {
        let conn = self.conn.lock().map_err(|_| "registry lock poisoned")?;
        conn.execute("DELETE FROM workloads WHERE id = ?1", [id])
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok(())
    }
}
