//! A cluster member's snapshot of a placement group: the group's state as of one applied
//! entry, in one file of its own (`snapshots/<group>.snap`: written to a temporary name,
//! synced, renamed, the directory synced), so that the log before it can be purged and its
//! segments deleted, and a member that lacks those entries (a new node, one far behind) is
//! sent the file instead.
//!
//! The state is what replaying the group's entries builds (`LogStorage::replay_group`):
//! each entity's changes (as a checkpoint: it replaces what came before) and the
//! namespace's run-time changes. File: a magic line, then frames (`u32` length, `u32`
//! CRC-32 of the bytes, the bytes; little-endian): first the group's state record (the
//! snapshot's last entry as its purge point, and its membership), then the records, then
//! an empty frame that ends the file. A file without its end is not a snapshot.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::codec::{self, EntryId, LogRecord, Membership, RaftRecord};
use super::log::StoreError;

const MAGIC: &[u8; 8] = b"FBSNAP1\n";

/// The directory holding a data directory's snapshots.
pub const DIRECTORY: &str = "snapshots";

/// What a snapshot describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// The group.
    pub group: String,
    /// The last entry it includes.
    pub last: EntryId,
    /// The group's membership as of that entry, and the entry that set it.
    pub membership: Option<(EntryId, Membership)>,
}

/// A snapshot read back: what it describes and the records that rebuild the state.
#[derive(Debug)]
pub struct GroupSnapshot {
    /// What it describes.
    pub meta: SnapshotMeta,
    /// The records, in replay order.
    pub records: Vec<LogRecord>,
}

fn frame(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Encodes a snapshot file's bytes.
pub fn encode<'a>(
    meta: &SnapshotMeta,
    records: impl IntoIterator<Item = &'a LogRecord>,
) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    let state = codec::encode_state(
        &meta.group,
        None,
        Some(meta.last),
        meta.membership
            .as_ref()
            .map(|(at, membership)| (*at, membership)),
    );
    frame(&mut out, &state);
    let mut record_bytes = Vec::new();
    for record in records {
        record_bytes.clear();
        codec::encode_into(&mut record_bytes, record);
        frame(&mut out, &record_bytes);
    }
    frame(&mut out, &[]);
    out
}

/// Decodes a snapshot file's bytes; fails naming what is wrong (a torn or damaged file, or
/// bytes that are not a snapshot).
pub fn decode(bytes: &[u8]) -> Result<GroupSnapshot, StoreError> {
    let bad = |why: String| StoreError::Recovery(format!("a group snapshot is damaged: {why}"));
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| bad("it does not start as a ferrobus snapshot".to_string()))?;
    let mut at = 0usize;
    let mut next = || -> Result<&[u8], StoreError> {
        let header = rest
            .get(at..at + 8)
            .ok_or_else(|| bad(format!("it ends at byte {} without its end", at + 8)))?;
        let length = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let body = rest
            .get(at + 8..at + 8 + length)
            .ok_or_else(|| bad(format!("a frame at byte {} runs past its end", at + 8)))?;
        if crc32fast::hash(body) != crc {
            return Err(bad(format!(
                "the frame at byte {} fails its checksum",
                at + 8
            )));
        }
        at += 8 + length;
        Ok(body)
    };
    let state = next()?;
    let meta = match codec::decode_raft(state) {
        Ok(RaftRecord::State {
            group,
            purged: Some(last),
            membership,
            ..
        }) => SnapshotMeta {
            group,
            last,
            membership,
        },
        Ok(_) => return Err(bad("its first frame is not its state".to_string())),
        Err(error) => return Err(bad(format!("its state cannot be read: {error}"))),
    };
    let mut records = Vec::new();
    loop {
        let body = next()?;
        if body.is_empty() {
            break;
        }
        records.push(codec::decode(body).map_err(|error| bad(format!("a record: {error}")))?);
    }
    if at != rest.len() {
        return Err(bad(format!("{} bytes follow its end", rest.len() - at)));
    }
    Ok(GroupSnapshot { meta, records })
}

/// Where `group`'s snapshot is in the data directory `directory` (the group's name, its
/// bytes outside `[A-Za-z0-9_-]` written as `%XX`).
pub fn path(directory: &Path, group: &str) -> PathBuf {
    let mut name = String::with_capacity(group.len() + 5);
    for byte in group.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            name.push(byte as char);
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name.push_str(".snap");
    directory.join(DIRECTORY).join(name)
}

/// Writes `group`'s snapshot durably, replacing the one before: a crash leaves the old file
/// or the new one, whole.
pub fn write(directory: &Path, group: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let failed = |what: &str, error: std::io::Error| {
        StoreError::Write(format!(
            "cannot {what} the snapshot of group '{group}': {error}"
        ))
    };
    let path = path(directory, group);
    let folder = path.parent().expect("a snapshot path has a folder");
    std::fs::create_dir_all(folder).map_err(|error| failed("create the folder of", error))?;
    let temporary = path.with_extension("snap.new");
    {
        let mut file =
            std::fs::File::create(&temporary).map_err(|error| failed("create", error))?;
        file.write_all(bytes)
            .map_err(|error| failed("write", error))?;
        file.sync_all().map_err(|error| failed("sync", error))?;
    }
    std::fs::rename(&temporary, &path).map_err(|error| failed("rename", error))?;
    std::fs::File::open(folder)
        .and_then(|folder| folder.sync_all())
        .map_err(|error| failed("sync the folder of", error))
}

/// `group`'s snapshot file's bytes, if it has one.
pub fn read(directory: &Path, group: &str) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path(directory, group)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(StoreError::Recovery(format!(
            "cannot read the snapshot of group '{group}': {error}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SnapshotMeta {
        SnapshotMeta {
            group: "$namespace".to_string(),
            last: EntryId {
                term: 3,
                node: 2,
                index: 41,
            },
            membership: Some((
                EntryId {
                    term: 1,
                    node: 1,
                    index: 1,
                },
                Membership {
                    configs: vec![vec![1, 2, 3]],
                    nodes: vec![
                        (1, "127.0.0.1:5700".to_string()),
                        (2, "127.0.0.2:5700".to_string()),
                        (3, "127.0.0.3:5700".to_string()),
                    ],
                },
            )),
        }
    }

    #[test]
    fn a_snapshot_reads_back_as_written_and_a_torn_one_is_refused() {
        let records = vec![
            LogRecord::Checkpoint {
                entity: "orders".to_string(),
                first: true,
                last: true,
                changes: Vec::new(),
            },
            LogRecord::Namespace {
                text: "[[queues]]\nname = \"made-at-run-time\"\n".to_string(),
            },
        ];
        let bytes = encode(&meta(), &records);
        let read = decode(&bytes).expect("a whole snapshot reads back");
        assert_eq!(read.meta, meta());
        assert_eq!(read.records.len(), 2);
        assert!(matches!(
            &read.records[1],
            LogRecord::Namespace { text } if text.contains("made-at-run-time")
        ));
        for cut in [0, 8, 20, bytes.len() - 1] {
            let error = decode(&bytes[..cut]).expect_err("a torn snapshot is refused");
            assert!(error.to_string().contains("damaged"), "{error}");
        }
        let mut flipped = bytes.clone();
        let middle = bytes.len() / 2;
        flipped[middle] ^= 0x40;
        assert!(decode(&flipped).is_err());
    }

    #[test]
    fn a_written_snapshot_replaces_the_one_before() {
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-snapshot-{}-{}",
            std::process::id(),
            crate::encoding::ids::unique_u64()
        ));
        assert!(read(&directory, "$namespace").unwrap().is_none());
        write(&directory, "$namespace", b"first").unwrap();
        write(&directory, "$namespace", b"second").unwrap();
        let read_back = read(&directory, "$namespace").unwrap();
        let _ = std::fs::remove_dir_all(&directory);
        assert_eq!(read_back.as_deref(), Some(b"second".as_slice()));
        assert!(path(&directory, "$namespace").ends_with("snapshots/%24namespace.snap"));
    }
}
