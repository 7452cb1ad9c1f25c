//! [`RaftLog`] as the core's storage port: an entity's turn (or a topic's publish with every
//! subscription's copies) becomes one entry of its group's log, and the append resolves
//! once the entry is committed and applied.

use tokio::sync::watch;

use super::propose::{self, COMMANDS_PER_TURN_IN_CLUSTER, MAX_ENTRY_BYTES_IN_CLUSTER};
use super::{METADATA_GROUP, RaftLog};
use crate::broker::entity::state::Change;
use crate::broker::storage::{Durable, DurableLog};
use crate::store::codec::{LogRecord, checkpoint_records, parts_of};

/// Checkpoints are written in parts of this many changes (one entry holds them all).
const CHECKPOINT_PART: usize = 1024;

fn one_record(mut batch: Vec<(String, Vec<Change>)>) -> LogRecord {
    if batch.len() == 1 {
        let (entity, changes) = batch.remove(0);
        LogRecord::Changes { entity, changes }
    } else {
        LogRecord::Batch { entries: batch }
    }
}

impl DurableLog for RaftLog {
    fn append(&self, batch: Vec<(String, Vec<Change>)>) -> Durable<'_> {
        Box::pin(async move {
            let Some((first, _)) = batch.first() else {
                return Ok(());
            };
            let group = self.group_for(first).to_string();
            self.write(&group, vec![one_record(batch)]).await
        })
    }

    fn drop_entity(&self, entity: &str) -> Durable<'_> {
        let entity = entity.to_string();
        Box::pin(async move {
            let record = LogRecord::Dropped {
                entity: entity.clone(),
            };
            let result = self.write(self.group_for(&entity), vec![record]).await;
            self.storage.unregister(&entity);
            result
        })
    }

    fn checkpoint(&self, entity: &str, epoch: u64, changes: Vec<Change>) -> Durable<'_> {
        let entity = entity.to_string();
        Box::pin(async move {
            let group = self.group_for(&entity).to_string();
            if self.cluster.is_some() {
                // Each part in an entry of its own, bounded like any entry of a cluster: a
                // whole checkpoint in one entry (megabytes) would outlast every
                // AppendEntries request's timeout. Parts committed without the last (the
                // leader stopped) are ignored at replay; the changes in between count.
                let parts = propose::checkpoint_parts(changes, MAX_ENTRY_BYTES_IN_CLUSTER / 2);
                for record in checkpoint_records(&entity, parts) {
                    self.write(&group, vec![record]).await?;
                }
                self.storage.checkpoint_done(&entity, epoch).await;
                return Ok(());
            }
            let records = checkpoint_records(&entity, parts_of(changes, CHECKPOINT_PART));
            self.write(&group, records).await?;
            self.storage.checkpoint_done(&entity, epoch).await;
            Ok(())
        })
    }

    fn save_namespace(&self, text: String) -> Durable<'_> {
        Box::pin(async move {
            let mut metadata = self.metadata.lock().await;
            let record = LogRecord::Namespace { text: text.clone() };
            self.write(METADATA_GROUP, vec![record]).await?;
            metadata.text = Some(text);
            let owed = metadata.owed.take();
            drop(metadata);
            if let Some(epoch) = owed {
                self.storage.checkpoint_done(METADATA_GROUP, epoch).await;
            }
            Ok(())
        })
    }

    fn has_room(&self) -> bool {
        self.storage.has_room()
    }

    fn full_error(&self) -> String {
        self.storage.full_error()
    }

    fn register(&self, entity: &str) {
        self.storage.register(entity)
    }

    fn unregister(&self, entity: &str) {
        self.storage.unregister(entity)
    }

    fn commands_per_turn(&self) -> Option<usize> {
        self.cluster.as_ref().map(|_| COMMANDS_PER_TURN_IN_CLUSTER)
    }

    fn epochs(&self) -> watch::Receiver<u64> {
        self.storage.epochs()
    }
}
