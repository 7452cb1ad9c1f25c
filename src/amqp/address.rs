//! Link addresses as the SDKs send them: `amqps://host[:port]/path` (Python) or a bare
//! `path` (JS), case-insensitive, with the sub-queue suffixes `/$DeadLetterQueue` and
//! `/$Transfer/$DeadLetterQueue` and the `/$management` and `$cbs` nodes.

use crate::broker::types::SubQueue;

/// What an address names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// The claims-based-security node `$cbs`.
    Cbs,
    /// An entity (or one of its sub-queues).
    Entity {
        /// Entity path without sub-queue suffix, as written by the client.
        path: String,
        /// Which part of it.
        sub_queue: SubQueue,
    },
    /// `<entity>[/$DeadLetterQueue]/$management`.
    Management {
        /// Entity path without sub-queue suffix.
        path: String,
        /// Which part of the entity the requests address.
        sub_queue: SubQueue,
    },
}

/// Strips `scheme://authority/` from an address, leaving the path.
pub fn strip_authority(address: &str) -> &str {
    let path = match address.find("://") {
        Some(index) => {
            let rest = &address[index + 3..];
            match rest.find('/') {
                Some(slash) => &rest[slash + 1..],
                None => "",
            }
        }
        None => address,
    };
    path.trim_matches('/')
}

fn strip_suffix_ignore_case<'a>(text: &'a str, suffix: &str) -> Option<&'a str> {
    if text.len() >= suffix.len() && text.is_char_boundary(text.len() - suffix.len()) {
        let (head, tail) = text.split_at(text.len() - suffix.len());
        if tail.eq_ignore_ascii_case(suffix) {
            return Some(head);
        }
    }
    None
}

fn split_sub_queue(path: &str) -> (&str, SubQueue) {
    if let Some(head) = strip_suffix_ignore_case(path, "/$Transfer/$DeadLetterQueue") {
        (head, SubQueue::TransferDeadLetter)
    } else if let Some(head) = strip_suffix_ignore_case(path, "/$DeadLetterQueue") {
        (head, SubQueue::DeadLetter)
    } else {
        (path, SubQueue::Main)
    }
}

/// Parses a link address; `None` for an empty address.
pub fn parse(address: &str) -> Option<Node> {
    let path = strip_authority(address);
    if path.is_empty() {
        return None;
    }
    if path.eq_ignore_ascii_case("$cbs") {
        return Some(Node::Cbs);
    }
    if let Some(entity) = strip_suffix_ignore_case(path, "/$management") {
        let (entity, sub_queue) = split_sub_queue(entity);
        return Some(Node::Management {
            path: entity.to_string(),
            sub_queue,
        });
    }
    let (entity, sub_queue) = split_sub_queue(path);
    Some(Node::Entity {
        path: entity.to_string(),
        sub_queue,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_and_js_addresses_name_the_same_entity() {
        let expected = Some(Node::Entity {
            path: "q1".to_string(),
            sub_queue: SubQueue::Main,
        });
        assert_eq!(parse("amqps://localhost:5672/q1"), expected);
        assert_eq!(parse("q1"), expected);
        assert_eq!(parse("/q1"), expected);
    }

    #[test]
    fn sub_queues_and_nodes_are_recognised_case_insensitively() {
        assert_eq!(
            parse("amqps://h/t1/subscriptions/s1/$deadletterqueue"),
            Some(Node::Entity {
                path: "t1/subscriptions/s1".to_string(),
                sub_queue: SubQueue::DeadLetter
            })
        );
        assert_eq!(
            parse("q/$Transfer/$DeadLetterQueue"),
            Some(Node::Entity {
                path: "q".to_string(),
                sub_queue: SubQueue::TransferDeadLetter
            })
        );
        assert_eq!(
            parse("q/$DeadLetterQueue/$management"),
            Some(Node::Management {
                path: "q".to_string(),
                sub_queue: SubQueue::DeadLetter
            })
        );
        assert_eq!(parse("$CBS"), Some(Node::Cbs));
        assert_eq!(parse(""), None);
        assert_eq!(parse("amqps://host"), None);
    }
}
