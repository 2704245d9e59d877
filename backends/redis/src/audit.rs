//! The audit log in Redis: a sorted set `ns:audit` scored by the entries' times, each
//! member the entry's JSON after a sequence number; a record is one Lua script
//! (`audit/record.lua`) that appends and trims by age and count.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use redis::{AsyncCommands, Script};

use cronq_shared::audit::{AuditLog, Entry, Filter, MAX_ENTRIES};
use cronq_shared::names::Names;
use cronq_shared::store::StoreError;

use crate::conn::RedisConn;
use crate::error::{command, written};
use crate::script::Call;

/// How many members one listing page reads while filtering.
const PAGE: isize = 500;

/// The audit log of a namespace.
#[derive(Clone)]
pub struct RedisAudit {
    conn: RedisConn,
    key: String,
    seq_key: String,
    retention: Duration,
    record: Arc<Script>,
}

impl std::fmt::Debug for RedisAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAudit")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl RedisAudit {
    /// The audit log of the namespace `names` over `conn`, keeping entries for
    /// `retention`.
    pub fn new(conn: RedisConn, names: &Names, retention: Duration) -> Self {
        Self {
            conn,
            key: names.redis_key(&["audit"]),
            seq_key: names.redis_key(&["audit", "seq"]),
            retention,
            record: Arc::new(Script::new(include_str!("audit/record.lua"))),
        }
    }
}

#[async_trait]
impl AuditLog for RedisAudit {
    async fn record(&self, entry: &Entry) -> Result<(), StoreError> {
        let json = serde_json::to_string(entry).map_err(|source| StoreError::Corrupt {
            key: self.key.clone(),
            source,
        })?;
        let cutoff = Utc::now().timestamp_millis()
            - i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX / 2);
        let mut call = Call::new(&self.record, 2);
        call.key(&self.key)
            .key(&self.seq_key)
            .arg(entry.at.timestamp_millis())
            .arg(json)
            .arg(cutoff)
            .arg(MAX_ENTRIES);
        let _seq: u64 = self.conn.write_script(&call).await.map_err(written)?;
        Ok(())
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<Entry>, StoreError> {
        let since = filter
            .since
            .map_or_else(|| "-inf".to_owned(), |s| s.timestamp_millis().to_string());
        let mut conn = self.conn.clone();
        let mut found = Vec::new();
        let mut offset = 0;
        while found.len() < filter.limit {
            let members: Vec<String> = conn
                .zrevrangebyscore_limit(&self.key, "+inf", &since, offset, PAGE)
                .await
                .map_err(command)?;
            for member in &members {
                let json = member.split_once(':').map_or(member.as_str(), |(_, j)| j);
                let entry: Entry =
                    serde_json::from_str(json).map_err(|source| StoreError::Corrupt {
                        key: self.key.clone(),
                        source,
                    })?;
                if filter.matches(&entry) && found.len() < filter.limit {
                    found.push(entry);
                }
            }
            if members.len() < usize::try_from(PAGE).unwrap_or(usize::MAX) {
                break;
            }
            offset += PAGE;
        }
        Ok(found)
    }
}
