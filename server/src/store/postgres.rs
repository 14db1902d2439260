//! Client registrations in PostgreSQL, shared by every replica.
//!
//! Each write is one call of the `duet_workload_write` function, which takes a transaction-level
//! advisory lock before it draws the next sequence number: writers are serialised, so commit
//! order is sequence order and a replica catching up with `seq > n` never skips a change that
//! commits late. The function notifies `duet_registry` with the sequence number; the server's
//! sync task (`crate::sync`) listens on the same connection and also polls, so a lost
//! notification costs at most one poll interval.
//!
//! One connection per replica serves writes, catch-up queries and `LISTEN` (tokio-postgres
//! pipelines concurrent queries on it). The sync task connects and reconnects it; while it is
//! down, writes fail with `StoreError::Unavailable` at once, never waiting on the network.

use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use duet_core::api::{ObservationRecord, WorkloadBody};
use tokio_postgres::config::Host;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

use super::{
    Change, Put, SCHEMA_VERSION, Store, StoreError, Written, sql_limit, stored_body, stored_change,
    stored_observation, stored_record,
};

/// The channel writers notify and replicas listen on.
pub const CHANNEL: &str = "duet_registry";
/// Advisory lock keys: schema migration, and writes.
const MIGRATION_LOCK: i64 = 0x6475_6574_0001;
const WRITE_LOCK: i64 = 0x6475_6574_0002;
/// Held by a batch of observations while it draws its sequence numbers and commits: commit
/// order is sequence order, so an export paging by `seq > n` never skips a row.
const OBSERVATION_LOCK: i64 = 0x6475_6574_0003;
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long bringing a new connection into service (schema check, `LISTEN`) may take; an attempt
/// over it is dropped and the next one starts on a fresh connection.
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a write or a catch-up may wait for the database. A write over it answers 503 (it
/// may still commit: a PUT or DELETE retried is harmless); a catch-up over it (a partition that
/// drops packets without closing the connection) gives the connection up, and the sync task
/// rebuilds it.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The database as `postgres://user@host:port/dbname`, never with its password.
pub fn describe(dsn: &str) -> String {
    match Config::from_str(dsn) {
        Ok(config) => describe_config(&config),
        Err(_) => "postgres://(a connection string that does not parse)".into(),
    }
}

fn describe_config(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            };
            let port = config
                .get_ports()
                .get(i)
                .or_else(|| config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}{}/{db}", hosts.join(","))
}

#[derive(Debug)]
pub struct PostgresStore {
    config: Config,
    target: String,
    client: RwLock<Option<Arc<Client>>>,
    /// Why the database is unreachable, while it is.
    down: RwLock<Option<String>>,
    /// A connection of its own for `GET /v1/drift`'s reads, opened on first use and held by
    /// one read at a time: a burst of them never delays the sync's catch-up on the main
    /// connection, nor marks it down.
    reader: Box<tokio::sync::Mutex<Option<Client>>>,
}

impl PostgresStore {
    pub fn new(dsn: &str) -> Result<PostgresStore, String> {
        let mut config = Config::from_str(dsn)
            .map_err(|e| format!("--state: not a PostgreSQL connection string: {e}"))?;
        if config.get_hosts().is_empty() {
            return Err("--state: the PostgreSQL connection string names no host".into());
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("duet-serve");
        }
        let target = describe_config(&config);
        Ok(PostgresStore {
            config,
            target,
            client: RwLock::new(None),
            down: RwLock::new(Some("not connected yet".into())),
            reader: Box::new(tokio::sync::Mutex::new(None)),
        })
    }

    /// Connects, brings the schema to this binary's version and listens on `CHANNEL`.
    /// Notifications (and the connection's end, as `None`) arrive on the returned receiver.
    /// Replaces the connection writes use.
    pub async fn connect(
        &self,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<Option<i64>>, StoreError> {
        let (client, mut connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| self.unavailable(&e))?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        let _ = tx.send(n.payload().parse::<i64>().ok());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "registry database connection lost");
                        break;
                    }
                    None => break,
                }
            }
            // The receiver learns that the connection ended when the sender drops.
        });
        let setup = async {
            self.migrate(&client).await?;
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .await
                .map_err(|e| self.unavailable(&e))
        };
        match tokio::time::timeout(SETUP_TIMEOUT, setup).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "{}: the schema check and LISTEN took longer than {} s",
                    self.target,
                    SETUP_TIMEOUT.as_secs()
                )));
            }
        }
        if let Ok(mut c) = self.client.write() {
            *c = Some(Arc::new(client));
        }
        if let Ok(mut d) = self.down.write() {
            *d = None;
        }
        Ok(rx)
    }

    /// The newest `limit` stored observations, newest first, read on the drift reader's own
    /// connection (one read at a time; the next waits). A failure drops that connection only.
    pub async fn newest_observations(
        &self,
        limit: usize,
    ) -> Result<Vec<(i64, ObservationRecord)>, StoreError> {
        let mut reader = self.reader.lock().await;
        if reader.as_ref().is_none_or(Client::is_closed) {
            let (client, connection) =
                tokio::time::timeout(CONNECT_TIMEOUT, self.config.connect(NoTls))
                    .await
                    .map_err(|_| {
                        StoreError::Unavailable(format!(
                            "{}: no connection within {} s",
                            self.target,
                            CONNECT_TIMEOUT.as_secs()
                        ))
                    })?
                    .map_err(|e| self.unavailable(&e))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "the drift reader's connection ended");
                }
            });
            *reader = Some(client);
        }
        let Some(client) = reader.as_ref() else {
            return Err(StoreError::Unavailable(format!(
                "{}: not connected",
                self.target
            )));
        };
        let limit = sql_limit(limit);
        let answer = tokio::time::timeout(
            QUERY_TIMEOUT,
            client.query(
                "SELECT id, seq, record FROM duet_observations ORDER BY seq DESC LIMIT $1",
                &[&limit],
            ),
        )
        .await;
        let rows = match answer {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                *reader = None;
                return Err(self.unavailable(&e));
            }
            Err(_) => {
                *reader = None;
                return Err(StoreError::Unavailable(format!(
                    "{}: no answer within {} s",
                    self.target,
                    QUERY_TIMEOUT.as_secs()
                )));
            }
        };
        drop(reader);
        rows.into_iter()
            .map(|row| {
                let id: String = row.get(0);
                let text: String = row.get(2);
                Ok((row.get(1), stored_record(&self.target, &id, &text)?))
            })
            .collect()
    }

    /// Marks the database unreachable: writes fail at once until `connect` succeeds.
    pub fn disconnected(&self, why: &str) {
        if let Ok(mut c) = self.client.write() {
            *c = None;
        }
        if let Ok(mut d) = self.down.write() {
            *d = Some(why.to_string());
        }
    }

    /// Why the database is unreachable, while it is.
    pub fn down(&self) -> Option<String> {
        self.down.read().ok().and_then(|d| d.clone())
    }

    fn unavailable(&self, e: &tokio_postgres::Error) -> StoreError {
        let detail = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => {
                let source = std::error::Error::source(e)
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default();
                format!("{e}{source}")
            }
        };
        StoreError::Unavailable(format!("{}: {detail}", self.target))
    }

    fn current(&self) -> Result<Arc<Client>, StoreError> {
        let client = self.client.read().ok().and_then(|c| c.clone());
        match client {
            Some(c) if !c.is_closed() => Ok(c),
            _ => Err(StoreError::Unavailable(format!(
                "{}: {}",
                self.target,
                self.down()
                    .unwrap_or_else(|| "the connection is closed".into())
            ))),
        }
    }

    /// Creates or upgrades the schema, one replica at a time; refuses a newer one.
    async fn migrate(&self, client: &Client) -> Result<(), StoreError> {
        let fail = |e: tokio_postgres::Error| self.unavailable(&e);
        client
            .batch_execute(&format!(
                "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK});
                 CREATE TABLE IF NOT EXISTS duet_schema (
                     version BIGINT NOT NULL,
                     migrated_at TIMESTAMPTZ NOT NULL DEFAULT now());"
            ))
            .await
            .map_err(fail)?;
        let result = self.migrate_locked(client).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        client.batch_execute(end).await.map_err(fail)?;
        result
    }

    async fn migrate_locked(&self, client: &Client) -> Result<(), StoreError> {
        let fail = |e: tokio_postgres::Error| self.unavailable(&e);
        let row = client
            .query_one("SELECT COALESCE(MAX(version), 0) FROM duet_schema", &[])
            .await
            .map_err(fail)?;
        let version: i64 = row.get(0);
        if version > SCHEMA_VERSION {
            return Err(StoreError::Broken(format!(
                "{}: the registry database has schema version {version}, newer than this \
                 duet's {SCHEMA_VERSION}; run a newer duet, or give another database",
                self.target
            )));
        }
        if version < SCHEMA_VERSION {
            client
                .batch_execute(&format!(
                    "CREATE SEQUENCE IF NOT EXISTS duet_workload_seq;
                     CREATE TABLE IF NOT EXISTS duet_workloads (
                         id TEXT PRIMARY KEY,
                         body TEXT,
                         seq BIGINT NOT NULL,
                         written_at TIMESTAMPTZ NOT NULL DEFAULT now());
                     CREATE INDEX IF NOT EXISTS duet_workloads_seq ON duet_workloads (seq);
                     CREATE OR REPLACE FUNCTION duet_workload_write(
                         p_id TEXT, p_body TEXT, p_seed BOOLEAN)
                     RETURNS TABLE (written_seq BIGINT, existed BOOLEAN)
                     LANGUAGE plpgsql AS $fn$
                     DECLARE
                         row_present BOOLEAN;
                         row_live BOOLEAN;
                         was BOOLEAN;
                         s BIGINT;
                     BEGIN
                         PERFORM pg_advisory_xact_lock({WRITE_LOCK});
                         SELECT w.body IS NOT NULL INTO row_live
                             FROM duet_workloads w WHERE w.id = p_id;
                         row_present := FOUND;
                         was := CASE WHEN row_present THEN row_live ELSE p_seed END;
                         IF p_body IS NULL AND NOT was THEN
                             RETURN QUERY SELECT NULL::BIGINT, FALSE;
                             RETURN;
                         END IF;
                         s := nextval('duet_workload_seq');
                         INSERT INTO duet_workloads AS w (id, body, seq, written_at)
                             VALUES (p_id, p_body, s, now())
                             ON CONFLICT (id) DO UPDATE
                             SET body = EXCLUDED.body, seq = EXCLUDED.seq,
                                 written_at = EXCLUDED.written_at;
                         PERFORM pg_notify('{CHANNEL}', s::text);
                         RETURN QUERY SELECT s, was;
                     END
                     $fn$;
                     CREATE SEQUENCE IF NOT EXISTS duet_observation_seq;
                     CREATE TABLE IF NOT EXISTS duet_observations (
                         id TEXT PRIMARY KEY,
                         seq BIGINT NOT NULL UNIQUE DEFAULT nextval('duet_observation_seq'),
                         observation TEXT NOT NULL,
                         record TEXT NOT NULL,
                         stored_at TIMESTAMPTZ NOT NULL DEFAULT now());
                     CREATE OR REPLACE FUNCTION duet_observations_put(
                         p_ids TEXT[], p_observations TEXT[], p_records TEXT[])
                     RETURNS TABLE (idx INT, stored_seq BIGINT, before TEXT)
                     LANGUAGE plpgsql AS $fn$
                     DECLARE
                         i INT;
                         s BIGINT;
                         b TEXT;
                     BEGIN
                         PERFORM pg_advisory_xact_lock({OBSERVATION_LOCK});
                         FOR i IN 1 .. COALESCE(array_length(p_ids, 1), 0) LOOP
                             s := NULL;
                             b := NULL;
                             INSERT INTO duet_observations (id, observation, record)
                                 VALUES (p_ids[i], p_observations[i], p_records[i])
                                 ON CONFLICT (id) DO NOTHING RETURNING seq INTO s;
                             IF s IS NULL THEN
                                 SELECT o.observation INTO b
                                     FROM duet_observations o WHERE o.id = p_ids[i];
                             END IF;
                             RETURN QUERY SELECT i, s, b;
                         END LOOP;
                     END
                     $fn$;
                     INSERT INTO duet_schema (version) VALUES ({SCHEMA_VERSION});"
                ))
                .await
                .map_err(fail)?;
            tracing::info!(
                database = %self.target,
                from = version,
                to = SCHEMA_VERSION,
                "registry schema migrated"
            );
        }
        Ok(())
    }

    /// `query` within `QUERY_TIMEOUT`; a connection error marks the database unreachable, and
    /// so does a timeout where `give_up`.
    async fn timed<T>(
        &self,
        query: impl Future<Output = Result<T, tokio_postgres::Error>>,
        give_up: bool,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(QUERY_TIMEOUT, query).await {
            Ok(result) => result.map_err(|e| self.result(e)),
            Err(_) => {
                let err = StoreError::Unavailable(format!(
                    "{}: no answer within {} s",
                    self.target,
                    QUERY_TIMEOUT.as_secs()
                ));
                if give_up {
                    self.disconnected(&err.to_string());
                }
                Err(err)
            }
        }
    }

    fn result(&self, e: tokio_postgres::Error) -> StoreError {
        let err = self.unavailable(&e);
        if e.is_closed() || e.as_db_error().is_none() {
            self.disconnected(&err.to_string());
        }
        err
    }
}

impl Store for PostgresStore {
    fn target(&self) -> &str {
        &self.target
    }

    async fn changes_since(&self, after: i64) -> Result<Vec<Change>, StoreError> {
        let client = self.current()?;
        let rows = self
            .timed(
                client.query(
                    "SELECT id, body, seq FROM duet_workloads WHERE seq > $1 ORDER BY seq",
                    &[&after],
                ),
                true,
            )
            .await?;
        rows.into_iter()
            .map(|row| stored_change(&self.target, row.get(0), row.get(1), row.get(2)))
            .collect()
    }

    async fn write(
        &self,
        id: &str,
        body: Option<&WorkloadBody>,
        seed: bool,
    ) -> Result<Written, StoreError> {
        let text = stored_body(&self.target, body)?;
        let client = self.current()?;
        let row = self
            .timed(
                client.query_one(
                    "SELECT written_seq, existed FROM duet_workload_write($1, $2, $3)",
                    &[&id, &text, &seed],
                ),
                false,
            )
            .await?;
        Ok(Written {
            seq: row.get(0),
            existed: row.get(1),
        })
    }

    async fn put_observations(
        &self,
        records: &[ObservationRecord],
    ) -> Result<Vec<Put>, StoreError> {
        let mut ids = Vec::with_capacity(records.len());
        let mut observations = Vec::with_capacity(records.len());
        let mut texts = Vec::with_capacity(records.len());
        for record in records {
            let (observation, text) = stored_observation(&self.target, record)?;
            ids.push(record.observation.id.clone());
            observations.push(observation);
            texts.push(text);
        }
        let client = self.current()?;
        // One statement: one transaction under the observations' lock. Rows are only ever
        // added: an id that conflicts stays as it was stored first.
        let rows = self
            .timed(
                client.query(
                    "SELECT idx, stored_seq, before FROM duet_observations_put($1, $2, $3)",
                    &[&ids, &observations, &texts],
                ),
                false,
            )
            .await?;
        let mut puts: Vec<(i32, Put)> = rows
            .into_iter()
            .map(|row| {
                let idx: i32 = row.get(0);
                let seq: Option<i64> = row.get(1);
                let before: Option<String> = row.get(2);
                let mine = usize::try_from(idx - 1)
                    .ok()
                    .and_then(|i| observations.get(i));
                let put = match (seq, before) {
                    (Some(seq), _) => Put::Stored(seq),
                    (None, before) if before.as_ref() == mine => Put::Duplicate,
                    (None, _) => Put::Conflict,
                };
                (idx, put)
            })
            .collect();
        puts.sort_by_key(|(idx, _)| *idx);
        if puts.len() != records.len() {
            return Err(StoreError::Broken(format!(
                "{}: {} observations stored for {} sent",
                self.target,
                puts.len(),
                records.len()
            )));
        }
        Ok(puts.into_iter().map(|(_, put)| put).collect())
    }

    async fn observations(
        &self,
        after: i64,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<(i64, ObservationRecord)>, StoreError> {
        let client = self.current()?;
        let order = if newest { "DESC" } else { "ASC" };
        let rows = self
            .timed(
                client.query(
                    &format!(
                        "SELECT id, seq, record FROM duet_observations WHERE seq > $1 \
                         ORDER BY seq {order} LIMIT $2"
                    ),
                    &[&after, &sql_limit(limit)],
                ),
                true,
            )
            .await?;
        rows.into_iter()
            .map(|row| {
                let id: String = row.get(0);
                let text: String = row.get(2);
                Ok((row.get(1), stored_record(&self.target, &id, &text)?))
            })
            .collect()
    }
}
