//! Placement groups in the node's log: each group's Raft entries, votes, truncations and
//! purge points share the one write-ahead log (and its group commit), tagged by group.
//! Recovery reads each group's entries in index order (after its purge point, without
//! truncated suffixes, up to a gap) and replays their records: entities' changes, and the
//! metadata group's namespace text. A compaction round writes every group's state (vote,
//! purge point, membership) before it deletes older segments, so a segment goes only once
//! every group has purged past it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{LogStorage, Replay};
use crate::store::codec::{
    self, EntryId, LogRecord, Membership, Payload, PayloadRef, RaftRecord, Vote,
};
use crate::store::log::{Location, StoreError};
use crate::store::segment;
use crate::store::snapshots::{self, GroupSnapshot, SnapshotMeta};

/// A snapshot's checkpoint of one entity is written in parts of this many changes.
const SNAPSHOT_PART: usize = 1024;

/// Every entity's changes in a group, replayed.
pub type GroupChanges = HashMap<String, Vec<crate::broker::entity::state::Change>>;

/// A placement group's Raft log state: what a log store needs to answer for the group
/// without keeping entries in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupLog {
    /// The newest vote.
    pub vote: Option<Vote>,
    /// Entries up to this one are purged.
    pub purged: Option<EntryId>,
    /// The last entry written.
    pub last: Option<EntryId>,
    /// The newest membership entry and its configuration.
    pub membership: Option<(EntryId, Membership)>,
    /// The first entry of each leader's run of entries, ascending: the term and node of
    /// any index after the purge point.
    pub runs: Vec<EntryId>,
}

impl GroupLog {
    /// The identity of the entry at `index`, if the group's log holds it (or it is the
    /// purge point).
    pub fn id_at(&self, index: u64) -> Option<EntryId> {
        let first = self.purged.map_or(0, |purged| purged.index);
        let last = self.last?;
        if index < first || index > last.index {
            return None;
        }
        if self.purged.is_some_and(|purged| purged.index == index) {
            return self.purged;
        }
        self.id_at_runs(index)
    }

    fn note_entry(&mut self, id: EntryId) {
        let same_leader = self
            .runs
            .last()
            .is_some_and(|run| run.term == id.term && run.node == id.node);
        if !same_leader || self.last.is_some_and(|last| id.index <= last.index) {
            self.truncate(id.index);
            self.runs.push(id);
        }
        self.last = Some(id);
    }

    fn truncate(&mut self, index: u64) {
        let keep = self.runs.partition_point(|run| run.index < index);
        self.runs.truncate(keep);
        if self.last.is_some_and(|last| last.index >= index) {
            self.last = index
                .checked_sub(1)
                .and_then(|previous| self.id_at_runs(previous))
                .or(self.purged.filter(|purged| purged.index < index));
        }
        if self
            .membership
            .as_ref()
            .is_some_and(|(at, _)| at.index >= index)
        {
            // A truncated membership entry: the configuration before it is not known here;
            // only a follower truncates, and it learns the membership again from its leader.
            self.membership = None;
        }
    }

    fn id_at_runs(&self, index: u64) -> Option<EntryId> {
        let at = self.runs.partition_point(|run| run.index <= index);
        let run = self.runs.get(at.checked_sub(1)?)?;
        Some(EntryId { index, ..*run })
    }

    fn purge(&mut self, id: EntryId) {
        if self.purged.is_some_and(|purged| purged >= id) {
            return;
        }
        self.purged = Some(id);
        let first = self.runs.partition_point(|run| run.index <= id.index);
        // Keep the run holding the entries after the purge point.
        let keep_from = first.saturating_sub(1);
        self.runs.drain(..keep_from);
        if self.last.is_none_or(|last| last.index < id.index) {
            self.last = Some(id);
            self.runs.clear();
        }
    }

    fn note_vote(&mut self, vote: Vote) {
        let newer = self
            .vote
            .is_none_or(|old| (vote.term, vote.committed) >= (old.term, old.committed));
        if newer {
            self.vote = Some(vote);
        }
    }

    fn note_membership(&mut self, id: EntryId, membership: Membership) {
        if self.membership.as_ref().is_none_or(|(at, _)| *at < id) {
            self.membership = Some((id, membership));
        }
    }
}

/// Where one group's entries are on disk, by index.
pub(super) type GroupLocations = BTreeMap<u64, (EntryId, Location)>;

/// Where every group's entries are on disk.
pub(super) type EntryLocations = Arc<Mutex<HashMap<String, GroupLocations>>>;

/// Notes at recovery where `record` is, if it is an entry (a truncation forgets the
/// locations it voids, and a rewritten index those after it).
pub(super) fn locate(
    locations: &mut HashMap<String, GroupLocations>,
    record: &RaftRecord,
    at: Location,
) {
    match record {
        RaftRecord::Entry { group, id, .. } => {
            let located = locations.entry(group.clone()).or_default();
            located.split_off(&id.index);
            located.insert(id.index, (*id, at));
        }
        RaftRecord::Truncate { group, index } => {
            if let Some(located) = locations.get_mut(group) {
                located.split_off(index);
            }
        }
        RaftRecord::Vote { .. } | RaftRecord::State { .. } => {}
    }
}

/// The recovered locations of the entries each group's log holds (after its purge point,
/// up to its last entry).
pub(super) fn kept_locations(
    mut locations: HashMap<String, GroupLocations>,
    groups: &HashMap<String, GroupLog>,
) -> HashMap<String, GroupLocations> {
    locations.retain(|group, located| {
        let Some(log) = groups.get(group) else {
            return false;
        };
        let first = log.purged.map_or(0, |purged| purged.index + 1);
        let end = log.last.map_or(0, |last| last.index + 1);
        let mut kept = located.split_off(&first);
        kept.split_off(&end);
        *located = kept;
        !located.is_empty()
    });
    locations
}

/// Raft records read at recovery, before they are put in index order.
#[derive(Default)]
pub(super) struct Replaying {
    groups: HashMap<String, RawGroup>,
}

#[derive(Default)]
struct RawGroup {
    entries: BTreeMap<u64, (EntryId, Payload)>,
    vote: Option<Vote>,
    purged: Option<EntryId>,
    membership: Option<(EntryId, Membership)>,
}

impl Replaying {
    pub(super) fn record(&mut self, record: RaftRecord) {
        match record {
            RaftRecord::Entry { group, id, payload } => {
                let raw = self.groups.entry(group).or_default();
                // A rewritten index replaces what followed it as well.
                raw.entries.split_off(&id.index);
                raw.entries.insert(id.index, (id, payload));
            }
            RaftRecord::Vote { group, vote } => {
                let raw = self.groups.entry(group).or_default();
                raw.vote = newer_vote(raw.vote, vote);
            }
            RaftRecord::Truncate { group, index } => {
                let raw = self.groups.entry(group).or_default();
                raw.entries.split_off(&index);
            }
            RaftRecord::State {
                group,
                vote,
                purged,
                membership,
            } => {
                let raw = self.groups.entry(group).or_default();
                if let Some(vote) = vote {
                    raw.vote = newer_vote(raw.vote, vote);
                }
                if purged > raw.purged {
                    raw.purged = purged;
                }
                if let Some((at, membership)) = membership
                    && raw.membership.as_ref().is_none_or(|(old, _)| *old < at)
                {
                    raw.membership = Some((at, membership));
                }
            }
        }
    }

    /// Replays each group's entries after its purge point, in index order, into `replay`, up
    /// to a gap if there is one.
    pub(super) fn finish(self, replay: &mut Replay) -> HashMap<String, GroupLog> {
        let mut groups = HashMap::with_capacity(self.groups.len());
        for (name, raw) in self.groups {
            let mut log = GroupLog {
                vote: raw.vote,
                purged: raw.purged,
                last: raw.purged,
                membership: raw.membership,
                runs: raw.purged.into_iter().collect(),
            };
            let after = raw.purged.map_or(0, |purged| purged.index + 1);
            let mut expected = raw.purged.map(|purged| purged.index + 1);
            for (index, (id, payload)) in raw.entries.into_iter() {
                if index < after {
                    continue;
                }
                if let Some(expected) = expected
                    && index != expected
                {
                    // A write that failed while later ones of the group landed: the group
                    // stopped at the failure and acknowledged none of them, so what follows
                    // the gap is void (the group went on from the gap when it restarted).
                    tracing::warn!(
                        group = name,
                        "the group's log misses entries {expected} to {}: the entries after them were never acknowledged and are void",
                        index - 1
                    );
                    break;
                }
                expected = Some(index + 1);
                log.note_entry(id);
                match payload {
                    Payload::Blank => {}
                    Payload::Membership(membership) => log.note_membership(id, membership),
                    Payload::Records(records) => {
                        for record in records {
                            replay.record(record);
                        }
                    }
                }
            }
            groups.insert(name, log);
        }
        groups
    }
}

fn newer_vote(old: Option<Vote>, vote: Vote) -> Option<Vote> {
    match old {
        Some(old) if (old.term, old.committed) > (vote.term, vote.committed) => Some(old),
        _ => Some(vote),
    }
}

/// An entry to append to a group's log.
pub enum NewEntry<'a> {
    /// A new leader's blank entry.
    Blank,
    /// A membership change.
    Membership(&'a Membership),
    /// Entity records.
    Records(&'a [LogRecord]),
}

impl LogStorage {
    /// Appends entries to `group`'s log, in order; the answer comes once they are durable.
    /// Entries of every group share the log's group commit.
    pub fn append_entries<'a>(
        &self,
        group: &str,
        entries: impl IntoIterator<Item = (EntryId, NewEntry<'a>)>,
    ) -> oneshot::Receiver<Result<(), StoreError>> {
        let mut records = Vec::new();
        let mut ids = Vec::new();
        let mut checkpoint_bytes = 0u64;
        let mut groups = self.inner.groups.lock().expect("groups lock");
        let log = groups.entry(group.to_string()).or_default();
        for (id, entry) in entries {
            log.note_entry(id);
            ids.push(id);
            let payload = match entry {
                NewEntry::Blank => PayloadRef::Blank,
                NewEntry::Membership(membership) => {
                    log.note_membership(id, membership.clone());
                    PayloadRef::Membership(membership)
                }
                NewEntry::Records(entity_records) => PayloadRef::Records(entity_records),
            };
            let bytes = codec::encode_entry(group, id, payload);
            // A round's live data: checkpoints and the namespace's text.
            if let PayloadRef::Records(entity_records) = payload
                && entity_records.iter().any(|record| {
                    matches!(
                        record,
                        LogRecord::Checkpoint { .. } | LogRecord::Namespace { .. }
                    )
                })
            {
                checkpoint_bytes += bytes.len() as u64;
            }
            records.push(bytes);
        }
        let located = self.inner.locations.as_ref().and_then(|locations| {
            let first = ids.first()?.index;
            let locations = locations.clone();
            let group = group.to_string();
            // A rewritten index voids where the entries from it on were.
            locations
                .lock()
                .expect("locations lock")
                .entry(group.clone())
                .or_default()
                .split_off(&first);
            let located: crate::store::log::Located = Box::new(move |at: Vec<Location>| {
                let mut locations = locations.lock().expect("locations lock");
                let located = locations.entry(group).or_default();
                for (id, at) in ids.into_iter().zip(at) {
                    located.insert(id.index, (id, at));
                }
            });
            Some(located)
        });
        // Sent while the groups are locked: a compaction round's purge points are exactly
        // the entries before its first segment.
        let answer = self.inner.log.append_located(records, located);
        drop(groups);
        self.maybe_compact();
        if checkpoint_bytes > 0 {
            let mut compaction = self.inner.compaction.lock().expect("compaction lock");
            if let Some(round) = &mut compaction.round {
                round.bytes += checkpoint_bytes;
            }
        }
        answer
    }

    /// Stores `group`'s vote; the answer comes once it is durable.
    pub fn save_vote(&self, group: &str, vote: Vote) -> oneshot::Receiver<Result<(), StoreError>> {
        let mut groups = self.inner.groups.lock().expect("groups lock");
        groups.entry(group.to_string()).or_default().note_vote(vote);
        self.inner.log.append(vec![codec::encode_vote(group, vote)])
    }

    /// Voids `group`'s entries from `index` on; the answer comes once that is durable.
    pub fn truncate(&self, group: &str, index: u64) -> oneshot::Receiver<Result<(), StoreError>> {
        let mut groups = self.inner.groups.lock().expect("groups lock");
        groups.entry(group.to_string()).or_default().truncate(index);
        self.forget_locations(group, index..);
        self.inner
            .log
            .append(vec![codec::encode_truncate(group, index)])
    }

    /// Purges `group`'s entries up to `id`; the answer comes once that is durable.
    pub fn purge(&self, group: &str, id: EntryId) -> oneshot::Receiver<Result<(), StoreError>> {
        let mut groups = self.inner.groups.lock().expect("groups lock");
        let log = groups.entry(group.to_string()).or_default();
        log.purge(id);
        self.forget_locations(group, ..=id.index);
        let state = state_record(group, log, log.purged);
        self.inner.log.append(vec![state])
    }

    /// Forgets `group`'s entries from `index` on in what [`LogStorage::group_log`] answers:
    /// their write failed (the log kept none of that batch). Entries of a later batch that
    /// did land are void at recovery: they follow a gap, or the group rewrites their index.
    pub fn void_from(&self, group: &str, index: u64) {
        let mut groups = self.inner.groups.lock().expect("groups lock");
        self.forget_locations(group, index..);
        if let Some(log) = groups.get_mut(group) {
            log.truncate(index);
        }
    }

    /// Every entity's changes in `group`, rebuilt from the group's entries on disk (after
    /// its purge point) as recovery at start builds them: what a member that becomes the
    /// group's leader can start its entities from. Fails when an entry the group's log
    /// holds cannot be read back (or locations are not kept).
    pub fn replay_group(&self, group: &str) -> Result<GroupChanges, StoreError> {
        self.replay_group_with_namespace(group)
            .map(|(entities, _)| entities)
    }

    /// [`LogStorage::replay_group`], with the newest namespace text among the group's
    /// entries (the metadata group's, or a cluster's one group's).
    pub fn replay_group_with_namespace(
        &self,
        group: &str,
    ) -> Result<(GroupChanges, Option<String>), StoreError> {
        let log = self.group_log(group);
        let last = log.last.map_or(0, |last| last.index);
        let replay = self.replay_group_upto(group, &log, last)?;
        Ok((replay.entities, replay.namespace))
    }

    /// `group`'s snapshot file (a cluster member's), read and checked, if it has one.
    pub fn group_snapshot(&self, group: &str) -> Result<Option<GroupSnapshot>, StoreError> {
        let Some(bytes) = snapshots::read(self.directory(), group)? else {
            return Ok(None);
        };
        snapshots::decode(&bytes).map(Some)
    }

    /// `group`'s snapshot file's bytes and what it describes, if it has one.
    pub fn group_snapshot_bytes(
        &self,
        group: &str,
    ) -> Result<Option<(SnapshotMeta, Vec<u8>)>, StoreError> {
        let Some(bytes) = snapshots::read(self.directory(), group)? else {
            return Ok(None);
        };
        let meta = snapshots::decode(&bytes)?.meta;
        Ok(Some((meta, bytes)))
    }

    /// The state `group`'s snapshot and its entries after it up to `upto` build, replayed.
    fn replay_group_upto(
        &self,
        group: &str,
        log: &GroupLog,
        upto: u64,
    ) -> Result<Replay, StoreError> {
        let mut replay = Replay::default();
        let mut first = log.runs.first().map_or(0, |run| run.index);
        if let Some(purged) = log.purged {
            first = first.max(purged.index + 1);
        }
        if let Some(snapshot) = self.group_snapshot(group)? {
            first = first.max(snapshot.meta.last.index + 1);
            for record in snapshot.records {
                replay.record(record);
            }
        }
        if log.last.is_none() || upto < first {
            return Ok(replay);
        }
        let end = upto + 1;
        let entries = self.read_entries(group, first, end)?;
        if entries.len() as u64 != end.saturating_sub(first) {
            return Err(StoreError::Recovery(format!(
                "group {group}'s entries {first} to {upto} cannot all be read back ({} read)",
                entries.len()
            )));
        }
        for (_, payload) in entries {
            if let Payload::Records(records) = payload {
                for record in records {
                    replay.record(record);
                }
            }
        }
        Ok(replay)
    }

    /// Writes `group`'s snapshot as of entry `last` (applied, so on disk): its snapshot
    /// before and the entries after that one replayed, each entity's changes written as a
    /// checkpoint. Answers what it describes and the file's bytes. Reads files.
    pub fn snapshot_group(
        &self,
        group: &str,
        last: EntryId,
        membership: Option<(EntryId, Membership)>,
    ) -> Result<(SnapshotMeta, Vec<u8>), StoreError> {
        let _writing = self.inner.snapshots.lock().expect("snapshots lock");
        // A snapshot as new (installed while this one was asked for) stays: built from
        // older entries over it, this one would claim less than it holds.
        if let Some((meta, bytes)) = self.group_snapshot_bytes(group)?
            && meta.last.index >= last.index
        {
            return Ok((meta, bytes));
        }
        let log = self.group_log(group);
        let replay = self.replay_group_upto(group, &log, last.index)?;
        let mut records = Vec::with_capacity(replay.entities.len() + 1);
        let mut entities: Vec<(String, Vec<crate::broker::entity::state::Change>)> =
            replay.entities.into_iter().collect();
        entities.sort_by(|a, b| a.0.cmp(&b.0));
        for (entity, changes) in entities {
            records.extend(codec::checkpoint_records(
                &entity,
                codec::parts_of(changes, SNAPSHOT_PART),
            ));
        }
        if let Some(text) = replay.namespace {
            records.push(LogRecord::Namespace { text });
        }
        let meta = SnapshotMeta {
            group: group.to_string(),
            last,
            membership,
        };
        let bytes = snapshots::encode(&meta, &records);
        snapshots::write(self.directory(), group, &bytes)?;
        Ok((meta, bytes))
    }

    /// Installs a snapshot of `group` another member sent: checked, then written durably
    /// as the group's snapshot (the group's log is purged up to it after this).
    pub fn install_group_snapshot(
        &self,
        group: &str,
        bytes: &[u8],
    ) -> Result<SnapshotMeta, StoreError> {
        let _writing = self.inner.snapshots.lock().expect("snapshots lock");
        let snapshot = snapshots::decode(bytes)?;
        if snapshot.meta.group != group {
            return Err(StoreError::Recovery(format!(
                "a snapshot of group '{}' was sent for group '{group}'",
                snapshot.meta.group
            )));
        }
        snapshots::write(self.directory(), group, bytes)?;
        Ok(snapshot.meta)
    }

    /// Whether entries can be read back ([`super::StorageOptions::keep_entry_locations`]).
    pub fn keeps_entry_locations(&self) -> bool {
        self.inner.locations.is_some()
    }

    /// Forgets where `group`'s entries in `range` are.
    fn forget_locations(&self, group: &str, range: impl std::ops::RangeBounds<u64>) {
        if let Some(locations) = &self.inner.locations
            && let Some(located) = locations.lock().expect("locations lock").get_mut(group)
        {
            located.retain(|index, _| !range.contains(index));
        }
    }

    /// `group`'s entries from `start` up to `end` (exclusive) as its log holds them on disk,
    /// stopping before the first one it cannot read back (purged, not yet durable, or
    /// without [`super::StorageOptions::keep_entry_locations`]). Reads files.
    pub fn read_entries(
        &self,
        group: &str,
        start: u64,
        end: u64,
    ) -> Result<Vec<(EntryId, Payload)>, StoreError> {
        let Some(locations) = &self.inner.locations else {
            return Ok(Vec::new());
        };
        let wanted: Vec<(EntryId, Location)> = {
            let groups = self.inner.groups.lock().expect("groups lock");
            let locations = locations.lock().expect("locations lock");
            let (Some(log), Some(located)) = (groups.get(group), locations.get(group)) else {
                return Ok(Vec::new());
            };
            (start..end)
                .map_while(|index| {
                    let (id, at) = located.get(&index)?;
                    (log.id_at(index) == Some(*id)).then_some((*id, *at))
                })
                .collect()
        };
        let mut entries = Vec::with_capacity(wanted.len());
        let mut open: Option<(u64, std::fs::File)> = None;
        for (id, at) in wanted {
            if open
                .as_ref()
                .is_none_or(|(number, _)| *number != at.segment)
            {
                let path = self
                    .inner
                    .options
                    .directory
                    .join(segment::file_name(at.segment));
                match std::fs::File::open(&path) {
                    Ok(file) => open = Some((at.segment, file)),
                    // Compaction deleted the segment since: its entries are purged.
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                    Err(error) => {
                        return Err(StoreError::Recovery(format!(
                            "cannot read {}: {error}",
                            path.display()
                        )));
                    }
                }
            }
            let (_, file) = open.as_ref().expect("opened above");
            let bytes = segment::read_record(file, at.offset).map_err(|error| {
                StoreError::Recovery(format!(
                    "entry {} of group {group} in segment {}: {error}",
                    id.index, at.segment
                ))
            })?;
            match codec::decode_raft(&bytes) {
                Ok(RaftRecord::Entry {
                    group: read_group,
                    id: read_id,
                    payload,
                }) if read_group == group && read_id == id => entries.push((id, payload)),
                Ok(_) => {
                    return Err(StoreError::Recovery(format!(
                        "segment {} at byte {} does not hold entry {} of group {group}",
                        at.segment, at.offset, id.index
                    )));
                }
                Err(error) => {
                    return Err(StoreError::Recovery(format!(
                        "entry {} of group {group} cannot be read: {error}",
                        id.index
                    )));
                }
            }
        }
        Ok(entries)
    }

    /// `group`'s log state as recovered and written since.
    pub fn group_log(&self, group: &str) -> GroupLog {
        let groups = self.inner.groups.lock().expect("groups lock");
        groups.get(group).cloned().unwrap_or_default()
    }

    /// An entity's checkpoint for compaction round `epoch` is durable (written through
    /// [`LogStorage::append_entries`]). When it was the round's last, this ends the round
    /// before it returns: the groups' states are durable and the deletion of older segments
    /// is ordered before any later write.
    pub async fn checkpoint_done(&self, entity: &str, epoch: u64) {
        let finish = {
            let mut compaction = self.inner.compaction.lock().expect("compaction lock");
            if let Some(round) = &mut compaction.round
                && round.epoch == epoch
            {
                round.pending.remove(entity);
            }
            self.finish_round_if_done(&mut compaction)
        };
        if let Some(finish) = finish {
            self.finish(finish).await;
        }
    }

    /// Every group's state, to be written before segments older than a round are deleted;
    /// called with the groups locked while the round's rotation is submitted.
    pub(super) fn group_states(groups: &HashMap<String, GroupLog>) -> Vec<Vec<u8>> {
        groups
            .iter()
            .map(|(group, log)| state_record(group, log, log.last.or(log.purged)))
            .collect()
    }
}

impl LogStorage {
    /// Each group's last entry: what a round with snapshots purges each group to.
    pub(super) fn group_targets(groups: &HashMap<String, GroupLog>) -> Vec<(String, EntryId)> {
        groups
            .iter()
            .filter_map(|(group, log)| Some((group.clone(), log.last?)))
            .collect()
    }

    /// Every group's state as it is (its vote, membership and purge point).
    pub(super) fn current_states(&self) -> Vec<Vec<u8>> {
        let groups = self.inner.groups.lock().expect("groups lock");
        groups
            .iter()
            .map(|(group, log)| state_record(group, log, log.purged))
            .collect()
    }
}

/// `group`'s state record: its vote and membership, purged up to `purged`.
fn state_record(group: &str, log: &GroupLog, purged: Option<EntryId>) -> Vec<u8> {
    codec::encode_state(
        group,
        log.vote,
        purged,
        log.membership
            .as_ref()
            .map(|(at, membership)| (*at, membership)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(term: u64, index: u64) -> EntryId {
        EntryId {
            term,
            node: 1,
            index,
        }
    }

    #[test]
    fn an_index_finds_its_leaders_term() {
        let mut log = GroupLog::default();
        for index in 0..5 {
            log.note_entry(id(1, index));
        }
        for index in 5..8 {
            log.note_entry(id(2, index));
        }
        assert_eq!(log.id_at(3), Some(id(1, 3)));
        assert_eq!(log.id_at(5), Some(id(2, 5)));
        assert_eq!(log.id_at(8), None);
        assert_eq!(log.runs, vec![id(1, 0), id(2, 5)]);
        // A rewritten suffix (a follower taking its new leader's entries).
        log.note_entry(id(3, 6));
        assert_eq!(
            (log.id_at(5), log.id_at(6)),
            (Some(id(2, 5)), Some(id(3, 6)))
        );
        assert_eq!(log.last, Some(id(3, 6)));
        log.purge(id(2, 5));
        assert_eq!(
            (log.id_at(4), log.id_at(5), log.id_at(6)),
            (None, Some(id(2, 5)), Some(id(3, 6)))
        );
        log.truncate(6);
        assert_eq!((log.last, log.id_at(6)), (Some(id(2, 5)), None));
    }

    /// The values of the entries read back, in order (`None` for one without records).
    fn values(entries: &[(EntryId, Payload)]) -> Vec<(u64, Vec<i64>)> {
        use crate::store::storage::test_support::counters;
        entries
            .iter()
            .map(|(id, payload)| match payload {
                Payload::Records(records) => {
                    let mut values = Vec::new();
                    for record in records {
                        if let LogRecord::Changes { changes, .. } = record {
                            values.extend(counters(changes));
                        }
                    }
                    (id.index, values)
                }
                _ => (id.index, Vec::new()),
            })
            .collect()
    }

    fn turn(value: i64) -> Vec<LogRecord> {
        vec![LogRecord::Changes {
            entity: "q".into(),
            changes: vec![crate::store::storage::test_support::next(value)],
        }]
    }

    /// A group's entities rebuilt from its entries on disk are what recovery at start
    /// builds: changes in order, a complete checkpoint replacing what came before it, a
    /// dropped entity gone, a rewritten suffix as rewritten.
    #[tokio::test]
    async fn a_group_replayed_from_its_log_is_what_recovery_builds() {
        use crate::store::storage::StorageOptions;
        use crate::store::storage::test_support::{counters, next, scratch};
        let directory = scratch("replay-group");
        let mut options = StorageOptions::new(&directory);
        options.keep_entry_locations = true;
        let (storage, _) = LogStorage::open(options.clone()).expect("opens");
        let changes = |entity: &str, values: &[i64]| LogRecord::Changes {
            entity: entity.into(),
            changes: values.iter().map(|value| next(*value)).collect(),
        };
        let entries = [
            vec![changes("t", &[1]), changes("t/subscriptions/a", &[2])],
            vec![LogRecord::Batch {
                entries: vec![
                    ("t".into(), vec![next(3)]),
                    ("t/subscriptions/b".into(), vec![next(4)]),
                ],
            }],
            vec![
                LogRecord::Checkpoint {
                    entity: "t/subscriptions/a".into(),
                    first: true,
                    last: false,
                    changes: vec![next(20)],
                },
                LogRecord::Checkpoint {
                    entity: "t/subscriptions/a".into(),
                    first: false,
                    last: true,
                    changes: vec![next(21)],
                },
            ],
            vec![LogRecord::Dropped {
                entity: "t/subscriptions/b".into(),
            }],
            vec![changes("t", &[5])],
            vec![changes("t", &[6])],
        ];
        for (index, records) in entries.iter().enumerate() {
            storage
                .append_entries("t", [(id(1, index as u64 + 1), NewEntry::Records(records))])
                .await
                .expect("answered")
                .expect("durable");
        }
        // Another group's entries are not this group's.
        let other = [changes("u", &[9])];
        storage
            .append_entries("u", [(id(1, 1), NewEntry::Records(&other))])
            .await
            .expect("answered")
            .expect("durable");
        // A new leader rewrites the last entry.
        storage
            .truncate("t", 6)
            .await
            .expect("answered")
            .expect("durable");
        let rewritten = [changes("t", &[60])];
        storage
            .append_entries("t", [(id(2, 6), NewEntry::Records(&rewritten))])
            .await
            .expect("answered")
            .expect("durable");
        let replayed = storage.replay_group("t").expect("replays");
        storage.close();
        let (storage, recovery) = LogStorage::open(options).expect("opens again");
        let again = storage.replay_group("t").expect("replays after a restart");
        storage.close();
        let values = |entities: &HashMap<String, Vec<crate::broker::entity::state::Change>>| {
            let mut values: Vec<(String, Vec<i64>)> = entities
                .iter()
                .filter(|(entity, _)| entity.starts_with('t'))
                .map(|(entity, changes)| (entity.clone(), counters(changes)))
                .collect();
            values.sort();
            values
        };
        let expected = vec![
            ("t".to_string(), vec![1, 3, 5, 60]),
            ("t/subscriptions/a".to_string(), vec![20, 21]),
        ];
        assert_eq!(values(&replayed), expected);
        assert_eq!(values(&again), expected);
        assert_eq!(values(&recovery.entities), expected);
        assert!(!replayed.contains_key("u"));
        let _ = std::fs::remove_dir_all(&directory);
    }

    /// With locations kept, a group's entries read back from disk as written, after a
    /// restart too; a rewritten suffix reads back as rewritten, and purged or unwritten
    /// entries are not read.
    #[tokio::test]
    async fn entries_read_back_from_the_log_as_written() {
        use crate::store::storage::StorageOptions;
        let directory = crate::store::storage::test_support::scratch("read-back");
        let mut options = StorageOptions::new(&directory);
        options.keep_entry_locations = true;
        options.segment_size = 512;
        let (storage, _) = LogStorage::open(options.clone()).expect("opens");
        // Enough entries for several segments.
        for index in 1..=40u64 {
            let records = turn(index as i64);
            storage
                .append_entries("g", [(id(1, index), NewEntry::Records(&records))])
                .await
                .expect("answered")
                .expect("durable");
        }
        let segments = segment::list(&directory).expect("lists");
        assert!(segments.len() > 1, "written over {segments:?}");
        let expected: Vec<(u64, Vec<i64>)> = (1..=40).map(|i| (i, vec![i as i64])).collect();
        let read = storage.read_entries("g", 1, 41).expect("reads");
        assert_eq!(values(&read), expected);
        assert!(read.iter().all(|(entry, _)| entry.term == 1));
        assert!(storage.read_entries("g", 41, 50).expect("reads").is_empty());
        assert!(
            storage
                .read_entries("other", 1, 5)
                .expect("reads")
                .is_empty()
        );
        // A new leader rewrites from 31 on.
        storage
            .truncate("g", 31)
            .await
            .expect("answered")
            .expect("durable");
        let records = turn(310);
        storage
            .append_entries("g", [(id(2, 31), NewEntry::Records(&records))])
            .await
            .expect("answered")
            .expect("durable");
        let read = storage.read_entries("g", 29, 41).expect("reads");
        assert_eq!(
            values(&read),
            vec![(29, vec![29]), (30, vec![30]), (31, vec![310])]
        );
        assert_eq!(read[2].0, id(2, 31));
        storage.close();

        let (storage, _) = LogStorage::open(options.clone()).expect("opens again");
        let read = storage
            .read_entries("g", 1, 41)
            .expect("reads after a restart");
        let mut expected: Vec<(u64, Vec<i64>)> = (1..=30).map(|i| (i, vec![i as i64])).collect();
        expected.push((31, vec![310]));
        assert_eq!(values(&read), expected);
        storage
            .purge("g", id(1, 20))
            .await
            .expect("answered")
            .expect("durable");
        assert!(storage.read_entries("g", 5, 10).expect("reads").is_empty());
        assert_eq!(
            values(&storage.read_entries("g", 21, 23).expect("reads")),
            vec![(21, vec![21]), (22, vec![22])]
        );
        storage.close();

        // Without locations kept (a single node) nothing is read back.
        let (storage, _) = LogStorage::open(options.clone()).expect("opens");
        assert!(storage.replay_group("g").is_ok());
        storage.close();
        let (storage, _) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
        assert!(!storage.keeps_entry_locations());
        assert!(storage.read_entries("g", 21, 23).expect("reads").is_empty());
        storage.close();
        let _ = std::fs::remove_dir_all(&directory);
    }

    /// A snapshot built from an older entry than the one installed meanwhile leaves the
    /// installed one in place (built over it, it would claim less than it holds).
    #[tokio::test]
    async fn a_snapshot_built_from_older_entries_keeps_the_newer_one_installed() {
        use crate::store::snapshots;
        use crate::store::storage::StorageOptions;
        let directory = crate::store::storage::test_support::scratch("snapshot-race");
        let mut options = StorageOptions::new(&directory);
        options.keep_entry_locations = true;
        let (storage, _) = LogStorage::open(options).expect("opens");
        for index in 1..=5u64 {
            let records = turn(index as i64);
            storage
                .append_entries("g", [(id(1, index), NewEntry::Records(&records))])
                .await
                .expect("written")
                .expect("durable");
        }
        let installed = snapshots::encode(
            &SnapshotMeta {
                group: "g".to_string(),
                last: id(2, 9),
                membership: None,
            },
            &turn(99),
        );
        storage
            .install_group_snapshot("g", &installed)
            .expect("installs");
        let (meta, bytes) = storage
            .snapshot_group("g", id(1, 5), None)
            .expect("answers");
        assert_eq!(meta.last, id(2, 9));
        assert_eq!(bytes, installed);
        let (meta, _) = storage
            .group_snapshot_bytes("g")
            .expect("reads")
            .expect("a snapshot");
        assert_eq!(meta.last, id(2, 9), "the installed snapshot stays");
        storage.close();
        let _ = std::fs::remove_dir_all(&directory);
    }
}
