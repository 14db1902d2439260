//! Client registrations in memory only (no `--state`): lost on restart, same semantics otherwise.

use std::collections::BTreeMap;
use std::sync::Mutex;

use duet_core::api::{ObservationRecord, WorkloadBody};

use super::{Change, Put, Store, StoreError, Written, existed};

/// id -> (body, sequence number); a `None` body is a tombstone.
type Rows = BTreeMap<String, (Option<WorkloadBody>, i64)>;

#[derive(Debug, Default)]
pub struct MemoryStore {
    /// id -> (body, sequence number), `None` body: a tombstone; and the last sequence number.
    rows: Mutex<(Rows, i64)>,
    /// Observations in the order stored (the sequence number is the position + 1), and their
    /// index by id.
    observations: Mutex<(Vec<ObservationRecord>, BTreeMap<String, usize>)>,
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

    async fn put_observation(&self, record: &ObservationRecord) -> Result<Put, StoreError> {
        let mut guard = self
            .observations
            .lock()
            .map_err(|_| StoreError::Broken("memory store lock poisoned".into()))?;
        let (rows, by_id) = &mut *guard;
        if let Some(&i) = by_id.get(&record.observation.id) {
            return Ok(if rows[i].observation == record.observation {
                Put::Duplicate
            } else {
                Put::Conflict
            });
        }
        rows.push(record.clone());
        by_id.insert(record.observation.id.clone(), rows.len() - 1);
        Ok(Put::Stored(i64::try_from(rows.len()).unwrap_or(i64::MAX)))
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
