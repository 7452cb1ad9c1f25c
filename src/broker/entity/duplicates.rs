//! Duplicate detection (pure): remembers message ids for the entity's history window, so a
//! message whose id was seen within the window is accepted but not enqueued again.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::broker::types::{SequenceNumber, Timestamp};

/// Message ids one entity's duplicate detection remembers at most (about 40 MB at the
/// longest ids).
pub const MAX_REMEMBERED: usize = 100_000;

/// Message ids seen within a sliding window.
#[derive(Debug)]
pub struct DuplicateDetector {
    /// How long an id is remembered.
    window: Duration,
    /// Id → when it was first accepted and the sequence number it got.
    seen: HashMap<String, (Timestamp, SequenceNumber)>,
    /// Ids in acceptance order, for pruning.
    order: VecDeque<(Timestamp, String)>,
}

impl DuplicateDetector {
    /// A detector with the given history window.
    pub fn new(window: Duration) -> DuplicateDetector {
        DuplicateDetector {
            window,
            seen: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn prune(&mut self, now: Timestamp) {
        while let Some((at, _)) = self.order.front() {
            if at.plus(self.window) > now {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.seen.remove(&id);
            }
        }
    }

    /// The sequence number of an earlier message with this id inside the window, if any.
    pub fn check(&mut self, now: Timestamp, message_id: &str) -> Option<SequenceNumber> {
        self.prune(now);
        self.seen
            .get(message_id)
            .map(|(_, sequence_number)| *sequence_number)
    }

    /// Remembers an accepted message id. At most [`MAX_REMEMBERED`] ids are kept: past
    /// that the oldest are forgotten first, so the history's memory is bounded whatever the
    /// send rate (ids themselves are at most 128 characters).
    pub fn remember(&mut self, now: Timestamp, message_id: &str, sequence_number: SequenceNumber) {
        if self
            .seen
            .insert(message_id.to_string(), (now, sequence_number))
            .is_none()
        {
            self.order.push_back((now, message_id.to_string()));
        }
        while self.order.len() > MAX_REMEMBERED {
            if let Some((_, id)) = self.order.pop_front() {
                self.seen.remove(&id);
            }
        }
    }

    /// Number of remembered ids.
    /// The remembered ids, oldest first: `(id, when, sequence number)`.
    pub fn entries(&self) -> impl Iterator<Item = (&str, Timestamp, SequenceNumber)> + '_ {
        self.order.iter().filter_map(|(_, id)| {
            self.seen
                .get(id)
                .map(|(at, sequence_number)| (id.as_str(), *at, *sequence_number))
        })
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no ids are remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_forgotten_after_the_window() {
        let mut detector = DuplicateDetector::new(Duration::from_secs(10));
        let start = Timestamp(1_000_000);
        assert_eq!(detector.check(start, "a"), None);
        detector.remember(start, "a", SequenceNumber(1));
        assert_eq!(
            detector.check(start.plus(Duration::from_secs(9)), "a"),
            Some(SequenceNumber(1))
        );
        assert_eq!(
            detector.check(start.plus(Duration::from_secs(10)), "a"),
            None
        );
        assert!(detector.is_empty());
    }
}
