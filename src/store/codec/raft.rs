//! The log's Raft records: every placement group's log entries, votes, truncations and
//! purge points, tagged by group, in the node's one write-ahead log (`docs/scale-out.md` §4,
//! "Log storage on a node"). The types are plain numbers and strings so that the store stays
//! free of the consensus library; `crate::cluster` converts them.
//!
//! Kinds (after the entity records' 1–4): 5 an entry *(group, term, node, index, payload)*,
//! 6 a vote, 7 a truncation (entries from an index on are void), 8 a group's state at a
//! compaction round (vote, purge point, membership), written before older segments go.

use super::{DecodeError, In, LogRecord, Out, decode, encode_into};

const KIND_ENTRY: u8 = 5;
const KIND_VOTE: u8 = 6;
const KIND_TRUNCATE: u8 = 7;
const KIND_STATE: u8 = 8;

const PAYLOAD_BLANK: u8 = 0;
const PAYLOAD_MEMBERSHIP: u8 = 1;
const PAYLOAD_RECORDS: u8 = 2;

/// A log entry's identity: the leader that proposed it (term and node) and its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct EntryId {
    /// The proposing leader's term.
    pub term: u64,
    /// The proposing leader's node id.
    pub node: u64,
    /// The entry's index in its group's log.
    pub index: u64,
}

/// A group member's vote: for whom, in which term, and whether a quorum granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vote {
    /// The term.
    pub term: u64,
    /// The node voted for.
    pub node: u64,
    /// A quorum granted it (the node leads in `term`).
    pub committed: bool,
}

/// A group's membership: its configurations (joint consensus holds two) and the address
/// of every node they name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    /// Each configuration's voters.
    pub configs: Vec<Vec<u64>>,
    /// Every member's node id and peer address.
    pub nodes: Vec<(u64, String)>,
}

/// What an entry carries.
#[derive(Debug, Clone)]
pub enum Payload {
    /// Nothing: a new leader's first entry.
    Blank,
    /// A membership change.
    Membership(Membership),
    /// Entity records written together (a turn, a publish, a checkpoint's parts).
    Records(Vec<LogRecord>),
}

/// What an entry carries, borrowed for encoding.
#[derive(Debug, Clone, Copy)]
pub enum PayloadRef<'a> {
    /// Nothing.
    Blank,
    /// A membership change.
    Membership(&'a Membership),
    /// Entity records.
    Records(&'a [LogRecord]),
}

/// A Raft record as read back.
#[derive(Debug, Clone)]
pub enum RaftRecord {
    /// An entry of a group's log.
    Entry {
        /// The placement group.
        group: String,
        /// The entry's identity.
        id: EntryId,
        /// Its payload.
        payload: Payload,
    },
    /// A group member's vote.
    Vote {
        /// The placement group.
        group: String,
        /// The vote.
        vote: Vote,
    },
    /// The group's entries from `index` on are void (a follower's conflicting suffix).
    Truncate {
        /// The placement group.
        group: String,
        /// The first void index.
        index: u64,
    },
    /// A group's state as of a compaction round, so that deleting older segments loses
    /// none of it: the vote, the last entry before the round (purged), the membership.
    State {
        /// The placement group.
        group: String,
        /// The vote, if one was cast.
        vote: Option<Vote>,
        /// Entries up to this one are purged.
        purged: Option<EntryId>,
        /// The newest membership entry and its configuration.
        membership: Option<(EntryId, Membership)>,
    },
}

/// Whether `bytes` hold a Raft record (rather than an entity record).
pub fn is_raft(bytes: &[u8]) -> bool {
    matches!(
        bytes.first(),
        Some(&(KIND_ENTRY | KIND_VOTE | KIND_TRUNCATE | KIND_STATE))
    )
}

/// Capacity the encoding scratch buffer keeps between entries at most.
const KEPT_SCRATCH: usize = 16 * 1024 * 1024;

thread_local! {
    /// Where [`encode_entry`] encodes an entry's records before copying them into it.
    static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Encodes an entry of `group`'s log.
pub fn encode_entry(group: &str, id: EntryId, payload: PayloadRef<'_>) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(64));
    out.u8(KIND_ENTRY);
    out.str(group);
    out.entry_id(id);
    match payload {
        PayloadRef::Blank => out.u8(PAYLOAD_BLANK),
        PayloadRef::Membership(membership) => {
            out.u8(PAYLOAD_MEMBERSHIP);
            out.membership(membership);
        }
        PayloadRef::Records(records) => {
            out.u8(PAYLOAD_RECORDS);
            out.u64(records.len() as u64);
            // Each record is encoded once into this thread's scratch buffer, then copied
            // once into an entry allocated at its size: no buffer grows by doubling (each
            // step a copy, and past glibc's mmap threshold fresh pages faulted in).
            ENCODED.with_borrow_mut(|scratch| {
                scratch.clear();
                let mut ends = Vec::with_capacity(records.len());
                for record in records {
                    encode_into(scratch, record);
                    ends.push(scratch.len());
                }
                out.0.reserve(scratch.len() + 10 * records.len());
                let mut start = 0;
                for end in ends {
                    out.bytes(&scratch[start..end]);
                    start = end;
                }
                if scratch.capacity() > KEPT_SCRATCH {
                    *scratch = Vec::new();
                }
            });
        }
    }
    out.0
}

/// Encodes a vote of `group`.
pub fn encode_vote(group: &str, vote: Vote) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(32));
    out.u8(KIND_VOTE);
    out.str(group);
    out.vote(vote);
    out.0
}

/// Encodes a truncation of `group`'s log from `index` on.
pub fn encode_truncate(group: &str, index: u64) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(32));
    out.u8(KIND_TRUNCATE);
    out.str(group);
    out.u64(index);
    out.0
}

/// Encodes `group`'s state at a compaction round.
pub fn encode_state(
    group: &str,
    vote: Option<Vote>,
    purged: Option<EntryId>,
    membership: Option<(EntryId, &Membership)>,
) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(64));
    out.u8(KIND_STATE);
    out.str(group);
    match vote {
        Some(vote) => {
            out.u8(1);
            out.vote(vote);
        }
        None => out.u8(0),
    }
    match purged {
        Some(id) => {
            out.u8(1);
            out.entry_id(id);
        }
        None => out.u8(0),
    }
    match membership {
        Some((id, membership)) => {
            out.u8(1);
            out.entry_id(id);
            out.membership(membership);
        }
        None => out.u8(0),
    }
    out.0
}

/// Decodes a Raft record ([`is_raft`] said it is one).
pub fn decode_raft(bytes: &[u8]) -> Result<RaftRecord, DecodeError> {
    let mut input = In { bytes, at: 0 };
    let kind = input.u8()?;
    let group = input.string()?;
    let record = match kind {
        KIND_ENTRY => {
            let id = input.entry_id()?;
            let payload = match input.u8()? {
                PAYLOAD_BLANK => Payload::Blank,
                PAYLOAD_MEMBERSHIP => Payload::Membership(input.membership()?),
                PAYLOAD_RECORDS => {
                    let count = input.count()?;
                    let mut records = Vec::with_capacity(count);
                    for _ in 0..count {
                        records.push(decode(input.slice()?)?);
                    }
                    Payload::Records(records)
                }
                other => return Err(DecodeError(format!("unknown entry payload {other}"))),
            };
            RaftRecord::Entry { group, id, payload }
        }
        KIND_VOTE => RaftRecord::Vote {
            group,
            vote: input.vote()?,
        },
        KIND_TRUNCATE => RaftRecord::Truncate {
            group,
            index: input.u64()?,
        },
        KIND_STATE => {
            let vote = match input.u8()? {
                0 => None,
                _ => Some(input.vote()?),
            };
            let purged = match input.u8()? {
                0 => None,
                _ => Some(input.entry_id()?),
            };
            let membership = match input.u8()? {
                0 => None,
                _ => Some((input.entry_id()?, input.membership()?)),
            };
            RaftRecord::State {
                group,
                vote,
                purged,
                membership,
            }
        }
        kind => return Err(DecodeError(format!("unknown record kind {kind}"))),
    };
    if input.at != bytes.len() {
        return Err(DecodeError(format!(
            "{} bytes left over",
            bytes.len() - input.at
        )));
    }
    Ok(record)
}

impl Out {
    fn entry_id(&mut self, id: EntryId) {
        self.u64(id.term);
        self.u64(id.node);
        self.u64(id.index);
    }
    fn vote(&mut self, vote: Vote) {
        self.u64(vote.term);
        self.u64(vote.node);
        self.u8(u8::from(vote.committed));
    }
    fn membership(&mut self, membership: &Membership) {
        self.u64(membership.configs.len() as u64);
        for config in &membership.configs {
            self.u64(config.len() as u64);
            for node in config {
                self.u64(*node);
            }
        }
        self.u64(membership.nodes.len() as u64);
        for (node, address) in &membership.nodes {
            self.u64(*node);
            self.str(address);
        }
    }
}

impl In<'_> {
    fn entry_id(&mut self) -> Result<EntryId, DecodeError> {
        Ok(EntryId {
            term: self.u64()?,
            node: self.u64()?,
            index: self.u64()?,
        })
    }
    fn vote(&mut self) -> Result<Vote, DecodeError> {
        Ok(Vote {
            term: self.u64()?,
            node: self.u64()?,
            committed: self.u8()? != 0,
        })
    }
    fn count(&mut self) -> Result<usize, DecodeError> {
        let count = self.u64()? as usize;
        if count > self.bytes.len() - self.at {
            return self.fail("a count past the end");
        }
        Ok(count)
    }
    fn membership(&mut self) -> Result<Membership, DecodeError> {
        let mut configs = Vec::new();
        for _ in 0..self.count()? {
            let mut config = Vec::new();
            for _ in 0..self.count()? {
                config.push(self.u64()?);
            }
            configs.push(config);
        }
        let mut nodes = Vec::new();
        for _ in 0..self.count()? {
            nodes.push((self.u64()?, self.string()?));
        }
        Ok(Membership { configs, nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::super::encode;
    use super::*;

    fn id(term: u64, index: u64) -> EntryId {
        EntryId {
            term,
            node: 1,
            index,
        }
    }

    #[test]
    fn every_raft_record_reads_back_as_written() -> Result<(), DecodeError> {
        let membership = Membership {
            configs: vec![vec![1, 2, 3]],
            nodes: vec![(1, "10.0.0.1:5700".into()), (2, "b:5700".into())],
        };
        let records = [LogRecord::Dropped {
            entity: "orders".into(),
        }];
        let entry = encode_entry("orders", id(3, 17), PayloadRef::Records(&records));
        assert!(is_raft(&entry));
        match decode_raft(&entry)? {
            RaftRecord::Entry {
                group,
                id: read,
                payload: Payload::Records(read_records),
            } => {
                assert_eq!((group.as_str(), read), ("orders", id(3, 17)));
                assert!(
                    matches!(&read_records[..], [LogRecord::Dropped { entity }] if entity == "orders")
                );
            }
            other => panic!("read back {other:?}"),
        }
        let member_entry = encode_entry("t", id(1, 0), PayloadRef::Membership(&membership));
        assert!(matches!(decode_raft(&member_entry)?,
            RaftRecord::Entry { payload: Payload::Membership(read), .. } if read == membership));
        let vote = Vote {
            term: 4,
            node: 2,
            committed: true,
        };
        assert!(matches!(decode_raft(&encode_vote("g", vote))?,
            RaftRecord::Vote { group, vote: read } if group == "g" && read == vote));
        assert!(matches!(decode_raft(&encode_truncate("g", 9))?,
            RaftRecord::Truncate { group, index: 9 } if group == "g"));
        let state = encode_state(
            "g",
            Some(vote),
            Some(id(4, 30)),
            Some((id(1, 0), &membership)),
        );
        match decode_raft(&state)? {
            RaftRecord::State {
                vote: Some(read_vote),
                purged: Some(purged),
                membership: Some((at, read)),
                ..
            } => assert_eq!(
                (read_vote, purged, at, read),
                (vote, id(4, 30), id(1, 0), membership)
            ),
            other => panic!("read back {other:?}"),
        }
        // Entity records are not Raft records.
        assert!(!is_raft(&encode(&records[0])));
        Ok(())
    }

    #[test]
    fn a_damaged_raft_record_is_an_error_not_a_panic() {
        let entry = encode_entry("orders", id(1, 1), PayloadRef::Blank);
        for cut in 1..entry.len() {
            assert!(decode_raft(&entry[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = vec![KIND_STATE];
        huge.extend_from_slice(&[1, b'g', 0, 0, 1, 0, 0, 0]);
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_raft(&huge).is_err());
    }
}
