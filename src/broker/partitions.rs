//! Partitioned entities (rules PRT-1..3): `enable_partitioning` spreads a queue's or topic's
//! messages over [`PARTITIONS`] partitions. A message's partition follows from its session
//! id, else its partition key (`x-opt-partition-key`), else — with duplicate detection — its
//! message id, else the entity takes the partitions in turn. Its sequence number carries the
//! partition in the top 16 bits and counts within the partition in the low 48, so order
//! holds per partition, as in Service Bus. Pure: no I/O, no clock.

use super::message::Message;

/// Partitions of a partitioned entity (a Standard namespace's count).
pub const PARTITIONS: u16 = 16;

/// Picks partitions for arriving messages.
#[derive(Debug, Clone, Default)]
pub struct Partitioner {
    /// 1 when the entity is not partitioned.
    partitions: u16,
    /// Whether message ids choose the partition (duplicate detection is on).
    by_message_id: bool,
    /// The next partition for a message with no key.
    next: u16,
}

impl Partitioner {
    /// A partitioner over `partitions` (0 or 1: not partitioned).
    pub fn new(partitions: u16, by_message_id: bool) -> Partitioner {
        Partitioner {
            partitions: partitions.max(1),
            by_message_id,
            next: 0,
        }
    }

    /// How many partitions.
    pub fn partitions(&self) -> u16 {
        self.partitions
    }

    /// The partition of `message` (rule PRT-2).
    pub fn partition(&mut self, message: &Message) -> u16 {
        if self.partitions <= 1 {
            return 0;
        }
        let system = message.system();
        let key = system
            .session_id()
            .or(message.extras().partition_key.as_deref())
            .or(system.message_id().filter(|_| self.by_message_id));
        match key {
            Some(key) => partition_of_key(key, self.partitions),
            None => {
                let partition = self.next;
                self.next = (self.next + 1) % self.partitions;
                partition
            }
        }
    }
}

/// A key's partition: FNV-1a of its UTF-8 bytes, stable across runs and releases.
pub fn partition_of_key(key: &str, partitions: u16) -> u16 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in key.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % u32::from(partitions.max(1))) as u16
}

/// The partition a sequence number belongs to (its top 16 bits).
pub fn partition_of_number(sequence_number: i64) -> u16 {
    (sequence_number >> super::entity::state::log::PARTITION_SHIFT) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(session: Option<&str>, key: Option<&str>, id: &str) -> Message {
        let mut message = Message::default();
        let system = message.system().with(
            crate::broker::message::SystemField::SessionId,
            (session.map(str::to_string)).as_deref(),
        );
        message.set_system(system);
        message.edit_extras(|extras| extras.partition_key = key.map(Into::into));
        let system = message.system().with(
            crate::broker::message::SystemField::MessageId,
            (Some(id.to_string())).as_deref(),
        );
        message.set_system(system);
        message
    }

    #[test]
    fn the_session_id_then_the_partition_key_then_the_message_id_choose() {
        // rule PRT-2
        let mut by_id = Partitioner::new(PARTITIONS, true);
        let session = partition_of_key("s-1", PARTITIONS);
        assert_eq!(by_id.partition(&keyed(Some("s-1"), None, "a")), session);
        assert_eq!(
            by_id.partition(&keyed(Some("s-1"), Some("s-1"), "b")),
            session
        );
        let key = partition_of_key("k", PARTITIONS);
        assert_eq!(by_id.partition(&keyed(None, Some("k"), "c")), key);
        assert_eq!(
            by_id.partition(&keyed(None, None, "id-7")),
            partition_of_key("id-7", PARTITIONS)
        );
        // Without duplicate detection keyless messages take the partitions in turn.
        let mut in_turn = Partitioner::new(PARTITIONS, false);
        let taken: Vec<u16> = (0..PARTITIONS * 2)
            .map(|index| in_turn.partition(&keyed(None, None, &format!("id-{index}"))))
            .collect();
        let expected: Vec<u16> = (0..PARTITIONS).chain(0..PARTITIONS).collect();
        assert_eq!(taken, expected);
    }

    #[test]
    fn keys_spread_over_every_partition_and_unpartitioned_is_zero() {
        let hit: std::collections::BTreeSet<u16> = (0..400)
            .map(|index| partition_of_key(&format!("key-{index}"), PARTITIONS))
            .collect();
        assert_eq!(hit.len(), PARTITIONS as usize);
        let mut plain = Partitioner::new(1, true);
        assert_eq!(plain.partition(&keyed(Some("s"), None, "x")), 0);
    }
}
