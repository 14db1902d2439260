//! The durable side of the workload registry: client registrations and deletions, each with a
//! change sequence number. One `Store` trait, three implementations with the same semantics:
//! memory (nothing durable), an embedded SQLite file (one machine), PostgreSQL (every replica of
//! a Deployment shares it).
//!
//! Semantics common to all three: a write is durable in the store before `write` returns, and the
//! server makes it visible only after that. Every write gets the next number of one sequence,
//! and writes are ordered by it (PostgreSQL serialises writers so that commit order is sequence
//! order): a reader that has applied every change up to `n` catches up with `changes_since(n)`
//! and never misses one. A deletion is a tombstone (a change with no body), so replicas learn
//! of deletions the same way; the last write by sequence wins.
//!
//! The same store keeps the observations clients report (`POST /v1/observations`): rows that
//! are only ever added, keyed by the client's id, numbered in the order they were stored.

mod memory;
mod postgres;
mod sqlite;

use std::fmt;
use std::path::PathBuf;

use duet_core::api::{ObservationRecord, WorkloadBody};

pub use memory::{MAX_MEMORY_OBSERVATIONS, MemoryStore};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The store schema this binary writes; a database with a newer one is refused.
pub const SCHEMA_VERSION: i64 = 4;

/// One change of the registry: `body` `None` is a deletion.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub id: String,
    pub body: Option<WorkloadBody>,
    pub seq: i64,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The write's sequence number; `None` when nothing was written (deleting an id that does
    /// not exist).
    pub seq: Option<i64>,
    /// Whether the id existed before the write.
    pub existed: bool,
}

/// Why the store failed. `Unavailable`: the database cannot be reached (writes answer 503);
/// `Broken`: it answered with something this binary cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    Unavailable(String),
    Broken(String),
    /// The store holds all it may (the memory store's `--max-memory-observations`).
    Full(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(m) | StoreError::Broken(m) | StoreError::Full(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Whether `id` exists given its stored row (`None`: no row; `Some(None)`: a tombstone) and
/// whether it is one of the model's dataset workloads, which exist until a tombstone says not.
pub fn existed(row: Option<bool>, seed: bool) -> bool {
    row.unwrap_or(seed)
}

/// What storing one observation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Stored now, with this sequence number.
    Stored(i64),
    /// An observation with this id and the same content was stored before: nothing written.
    Duplicate,
    /// An observation with this id and other content was stored before: nothing written.
    Conflict,
}

/// How many stored observations one read returns at most.
pub const OBSERVATION_PAGE: usize = 10_000;

/// A registry store. `write` with `body` `None` deletes `id`, and writes nothing when `id` does
/// not exist; `seed` says whether `id` is one of the serving model's dataset workloads.
pub trait Store: Send + Sync + fmt::Debug {
    /// Where the store is, for logs, errors and `/readyz`: never a password.
    fn target(&self) -> &str;
    /// Every change after sequence number `after`, in sequence order (one per id: its latest).
    fn changes_since(
        &self,
        after: i64,
    ) -> impl Future<Output = Result<Vec<Change>, StoreError>> + Send;
    fn write(
        &self,
        id: &str,
        body: Option<&WorkloadBody>,
        seed: bool,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
    /// Stores a batch of observations, each under its id unless one with that id exists
    /// (earlier in the batch included), in one transaction: all of them or, on an error, none.
    /// One `Put` per record, in order. Sequence numbers are drawn in commit order, so a reader
    /// paging by `seq > n` never skips a row that commits later.
    fn put_observations(
        &self,
        records: &[ObservationRecord],
    ) -> impl Future<Output = Result<Vec<Put>, StoreError>> + Send;
    /// Stored observations with a sequence number after `after`, oldest first, at most `limit`
    /// (`newest`: the last `limit` of them instead, newest first).
    fn observations(
        &self,
        after: i64,
        limit: usize,
        newest: bool,
    ) -> impl Future<Output = Result<Vec<(i64, ObservationRecord)>, StoreError>> + Send;
}

/// Where client registrations are kept: `--state`.
#[derive(Clone, PartialEq, Eq)]
pub enum StateLocation {
    Sqlite(PathBuf),
    /// A PostgreSQL connection string (`postgres://` or `postgresql://`), which may hold a
    /// password: shown only through `PostgresStore::describe`.
    Postgres(String),
}

impl StateLocation {
    /// A `postgres://` or `postgresql://` URL, or a libpq key=value string (`host=db
    /// dbname=duet user=duet password=...`), is a PostgreSQL database; anything else a path.
    pub fn parse(value: &str) -> StateLocation {
        let trimmed = value.trim();
        let lower = trimmed.to_ascii_lowercase();
        if let Some(scheme) = ["postgres://", "postgresql://"]
            .into_iter()
            .find(|s| lower.starts_with(s))
        {
            // The driver reads the scheme in lower case only.
            StateLocation::Postgres(format!("{scheme}{}", &trimmed[scheme.len()..]))
        } else if is_key_value_dsn(trimmed) {
            StateLocation::Postgres(trimmed.to_string())
        } else {
            StateLocation::Sqlite(PathBuf::from(value))
        }
    }

    /// For messages: the path, or the database without its password.
    pub fn describe(&self) -> String {
        match self {
            StateLocation::Sqlite(p) => p.display().to_string(),
            StateLocation::Postgres(dsn) => postgres::describe(dsn),
        }
    }
}

/// The keywords of libpq's key=value connection strings.
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Whether `value` is a libpq key=value connection string: its first word is `keyword=...`
/// (spaces allowed around `=`) for a libpq keyword. A file name that merely holds `=`
/// (`./a=b.sqlite`) is not one.
fn is_key_value_dsn(value: &str) -> bool {
    let Some((key, _)) = value.split_once('=') else {
        return false;
    };
    let key = key.trim();
    !key.is_empty()
        && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        && LIBPQ_KEYWORDS.contains(&key)
}

impl fmt::Debug for StateLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateLocation::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            StateLocation::Postgres(_) => {
                f.debug_tuple("Postgres").field(&self.describe()).finish()
            }
        }
    }
}

/// The server's store, whichever it is.
#[derive(Debug)]
pub enum RegistryStore {
    Memory(MemoryStore),
    Sqlite(SqliteStore),
    /// Boxed: its connection settings and clients dwarf the other stores.
    Postgres(Box<PostgresStore>),
}

impl RegistryStore {
    /// Opens the store `location` names (memory when `None`). SQLite is opened here and fails
    /// at once; PostgreSQL is only described here: the sync task connects, and a database that
    /// cannot be reached leaves the registry degraded, never the server down.
    pub fn open(
        location: Option<&StateLocation>,
        max_memory_observations: usize,
    ) -> Result<RegistryStore, String> {
        Ok(match location {
            None => RegistryStore::Memory(MemoryStore::new(max_memory_observations)),
            Some(StateLocation::Sqlite(path)) => RegistryStore::Sqlite(SqliteStore::open(path)?),
            Some(StateLocation::Postgres(dsn)) => {
                RegistryStore::Postgres(Box::new(PostgresStore::new(dsn)?))
            }
        })
    }

    /// `memory`, `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self {
            RegistryStore::Memory(_) => "memory",
            RegistryStore::Sqlite(_) => "sqlite",
            RegistryStore::Postgres(_) => "postgres",
        }
    }

    /// The newest `limit` stored observations, newest first, for `GET /v1/drift`: on a
    /// shared store, over a connection of their own, never the one the sync catches up on.
    pub async fn newest_observations(
        &self,
        limit: usize,
    ) -> Result<Vec<(i64, ObservationRecord)>, StoreError> {
        match self {
            RegistryStore::Postgres(p) => p.newest_observations(limit).await,
            other => other.observations(0, limit, true).await,
        }
    }

    pub fn postgres(&self) -> Option<&PostgresStore> {
        match self {
            RegistryStore::Postgres(p) => Some(p.as_ref()),
            _ => None,
        }
    }
}

impl Store for RegistryStore {
    fn target(&self) -> &str {
        match self {
            RegistryStore::Memory(s) => s.target(),
            RegistryStore::Sqlite(s) => s.target(),
            RegistryStore::Postgres(s) => s.target(),
        }
    }

    async fn changes_since(&self, after: i64) -> Result<Vec<Change>, StoreError> {
        match self {
            RegistryStore::Memory(s) => s.changes_since(after).await,
            RegistryStore::Sqlite(s) => s.changes_since(after).await,
            RegistryStore::Postgres(s) => s.changes_since(after).await,
        }
    }

    async fn write(
        &self,
        id: &str,
        body: Option<&WorkloadBody>,
        seed: bool,
    ) -> Result<Written, StoreError> {
        match self {
            RegistryStore::Memory(s) => s.write(id, body, seed).await,
            RegistryStore::Sqlite(s) => s.write(id, body, seed).await,
            RegistryStore::Postgres(s) => s.write(id, body, seed).await,
        }
    }

    async fn put_observations(
        &self,
        records: &[ObservationRecord],
    ) -> Result<Vec<Put>, StoreError> {
        match self {
            RegistryStore::Memory(s) => s.put_observations(records).await,
            RegistryStore::Sqlite(s) => s.put_observations(records).await,
            RegistryStore::Postgres(s) => s.put_observations(records).await,
        }
    }

    async fn observations(
        &self,
        after: i64,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<(i64, ObservationRecord)>, StoreError> {
        match self {
            RegistryStore::Memory(s) => s.observations(after, limit, newest).await,
            RegistryStore::Sqlite(s) => s.observations(after, limit, newest).await,
            RegistryStore::Postgres(s) => s.observations(after, limit, newest).await,
        }
    }
}

/// Every observation stored at `location`, oldest first (`duet dataset export`). An SQLite file
/// must exist already; a PostgreSQL database is connected (its schema brought to this binary's).
pub async fn all_observations(location: &StateLocation) -> Result<Vec<ObservationRecord>, String> {
    let store = match location {
        StateLocation::Sqlite(path) => {
            if !path.is_file() {
                return Err(format!(
                    "--state {}: no such file (give the --state file of the server that \
                     received the observations)",
                    path.display()
                ));
            }
            RegistryStore::Sqlite(SqliteStore::open(path)?)
        }
        StateLocation::Postgres(dsn) => {
            let pg = PostgresStore::new(dsn)?;
            pg.connect().await.map_err(|e| format!("--state {e}"))?;
            RegistryStore::Postgres(Box::new(pg))
        }
    };
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .observations(after, OBSERVATION_PAGE, false)
            .await
            .map_err(|e| format!("--state {e}"))?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = *last;
        all.extend(page.into_iter().map(|(_, r)| r));
    }
    Ok(all)
}

/// An observation as the stores keep it: the client's observation as JSON text (what a retry
/// is compared with) and the whole record.
pub(crate) fn stored_observation(
    target: &str,
    record: &ObservationRecord,
) -> Result<(String, String), StoreError> {
    let broken = |e: serde_json::Error| StoreError::Broken(format!("{target}: {e}"));
    Ok((
        serde_json::to_string(&record.observation).map_err(broken)?,
        serde_json::to_string(record).map_err(broken)?,
    ))
}

/// A stored observation's record text back to the record.
pub(crate) fn stored_record(
    target: &str,
    id: &str,
    text: &str,
) -> Result<ObservationRecord, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Broken(format!("{target}: observation `{id}`: {e}")))
}

/// `limit` as a SQL LIMIT.
pub(crate) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A stored row back to a `Change`: the body is JSON text, NULL for a deletion.
pub(crate) fn stored_change(
    target: &str,
    id: String,
    text: Option<String>,
    seq: i64,
) -> Result<Change, StoreError> {
    let body = text
        .map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| StoreError::Broken(format!("{target}: workload `{id}`: {e}")))
        })
        .transpose()?;
    Ok(Change { id, body, seq })
}

/// A body as the stores keep it: JSON text, `None` for a deletion.
pub(crate) fn stored_body(
    target: &str,
    body: Option<&WorkloadBody>,
) -> Result<Option<String>, StoreError> {
    body.map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Broken(format!("{target}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_connection_strings_are_postgres_never_a_path() {
        for dsn in [
            "host=db.internal port=5432 dbname=duet user=duet password=s3cret",
            "  password=s3cret host=db.internal dbname=duet user=duet\n",
            "host = db.internal dbname=duet user=duet password='s3 cret'",
            "dbname=duet host=/var/run/postgresql user=duet password=s3cret",
            "postgres://duet:s3cret@db.internal:5432/duet",
            "PostgreSQL://duet:s3cret@db.internal/duet",
        ] {
            let location = StateLocation::parse(dsn);
            assert!(
                matches!(location, StateLocation::Postgres(_)),
                "{dsn:?} taken for {location:?}"
            );
            let shown = location.describe();
            assert!(!shown.contains("s3cret"), "{dsn:?} shown as {shown}");
            assert!(
                shown.starts_with("postgres://duet@"),
                "{dsn:?} shown as {shown}"
            );
            let debug = format!("{location:?}");
            assert!(!debug.contains("s3cret"), "{dsn:?} debug {debug}");
        }
        assert_eq!(
            StateLocation::parse("host=db.internal port=5433 dbname=duet user=duet password=x")
                .describe(),
            "postgres://duet@db.internal:5433/duet"
        );
    }

    #[test]
    fn paths_stay_paths_even_with_an_equals_sign() {
        for path in [
            "registry.sqlite",
            "./a=b.sqlite",
            "/var/lib/duet/host=1.sqlite",
            "Host=x.sqlite",
            "=x",
        ] {
            assert_eq!(
                StateLocation::parse(path),
                StateLocation::Sqlite(PathBuf::from(path)),
                "{path}"
            );
        }
    }

    #[test]
    fn a_connection_string_that_does_not_parse_is_never_echoed() {
        let location = StateLocation::parse("host=db password=s3cret port=notanumber");
        assert!(matches!(location, StateLocation::Postgres(_)));
        assert!(!location.describe().contains("s3cret"));
        let err =
            PostgresStore::new("host=db password=s3cret port=notanumber").expect_err("a bad port");
        assert!(err.contains("--state") && !err.contains("s3cret"), "{err}");
    }
}
