//! Client registrations in memory only (no `--state`): lost on restart, same semantics otherwise.

use std::collections::BTreeMap;
use std::sync::Mutex;

use duet_core::api::{ObservationRecord, WorkloadBody};

use super::{Change, Put, Store, StoreError, Written, existed};

/// id -> (body, sequence number); a `None` body is a tombstone.
type Rows = BTreeMap<String, (Option<WorkloadBody>, i64)>;

/// The default bound on observations the memory store keeps (`--max-memory-observations`).
pub const MAX_MEMORY_OBSERVATIONS: usize = 100_000;

#[derive(Debug)]
pub struct MemoryStore {
    /// The most observations kept; a batch that would pass it is refused whole.
    max_observations: usize,
    /// id -> (body, sequence number), `None` body: a tombstone; and the last sequence number.
    rows: Mutex<(Rows, i64)>,
    /// Observations in the order stored (the sequence number is the position + 1), and their
    /// index by id.
    observations: Mutex<(Vec<ObservationRecord>, BTreeMap<String, usize>)>,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new(MAX_MEMORY_OBSERVATIONS)
    }
}

impl MemoryStore {
    /// A memory store that keeps at most `max_observations` observations.
    pub fn new(max_observations: usize) -> MemoryStore {
        MemoryStore {
            max_observations,
            rows: Mutex::default(),
            observations: Mutex::default(),
        }
    }
}

impl Store for MemoryStore {
    fn target(&self) -> &str {
        "memory"
    }

    async fn changes_since(&self, after: i64) -> Result<Vec<Change>, StoreError> {
        let rows = self
            .rows
            .lock()
            .map_err(|_| StoreError::Broken("memory store lock poisoned".into()))?;
        let mut out: Vec<Change> = rows
            .0
            .iter()
            .filter(|(_, (_, seq))| *seq > after)
            .map(|(id, (body, seq))| Change {
                id: id.clone(),
                body: body.clone(),
                seq: *seq,
            })
            .collect();
        out.sort_by_key(|c| c.seq);
        Ok(out)
    }

    async fn write(
        &self,
        id: &str,
        body: Option<&WorkloadBody>,
        seed: bool,
    ) -> Result<Written, StoreError> {
        let mut rows = self
            .rows
            .lock()
            .map_err(|_| StoreError::Broken("memory store lock poisoned".into()))?;
        let (rows, last) = &mut *rows;
        let existed = existed(rows.get(id).map(|(b, _)| b.is_some()), seed);
        if body.is_none() && !existed {
            return Ok(Written { seq: None, existed });
        }
        *last += 1;
        let seq = *last;
        rows.insert(id.to_string(), (body.cloned(), seq));
        Ok(Written {
            seq: Some(seq),
            existed,
        })
    }

    async fn put_observations(
        &self,
        records: &[ObservationRecord],
    ) -> Result<Vec<Put>, StoreError> {
        let mut guard = self
            .observations
            .lock()
            .map_err(|_| StoreError::Broken("memory store lock poisoned".into()))?;
        let (rows, by_id) = &mut *guard;
        let new: std::collections::BTreeSet<&str> = records
            .iter()
            .map(|r| r.observation.id.as_str())
            .filter(|id| !by_id.contains_key(*id))
            .collect();
        if rows.len() + new.len() > self.max_observations {
            return Err(StoreError::Full(format!(
                "the server keeps at most {} observations in memory (--max-memory-observations) \
                 and holds {}; give it --state to keep more",
                self.max_observations,
                rows.len()
            )));
        }
        let mut puts = Vec::with_capacity(records.len());
        for record in records {
            if let Some(&i) = by_id.get(&record.observation.id) {
                puts.push(if rows[i].observation == record.observation {
                    Put::Duplicate
                } else {
                    Put::Conflict
                });
                continue;
            }
            rows.push(record.clone());
            by_id.insert(record.observation.id.clone(), rows.len() - 1);
            puts.push(Put::Stored(i64::try_from(rows.len()).unwrap_or(i64::MAX)));
        }
        Ok(puts)
    }

    async fn observations(
        &self,
        after: i64,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<(i64, ObservationRecord)>, StoreError> {
        let guard = self
            .observations
            .lock()
            .map_err(|_| StoreError::Broken("memory store lock poisoned".into()))?;
        let numbered = guard
            .0
            .iter()
            .enumerate()
            .map(|(i, r)| (i64::try_from(i + 1).unwrap_or(i64::MAX), r.clone()))
            .filter(|(seq, _)| *seq > after);
        Ok(if newest {
            let mut all: Vec<_> = numbered.collect();
            all.reverse();
            all.truncate(limit);
            all
        } else {
            numbered.take(limit).collect()
        })
    }
}
