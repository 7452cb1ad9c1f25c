//! The administration API's resources in ATOM/XML: the namespace's info, and get, create,
//! update, delete and list (in feed pages with `$skip` and `$top`) of queues, topics,
//! subscriptions and rules, each entry with its entity's runtime counts. The router in
//! `http.rs` authorizes the request and picks the handler.

use std::time::UNIX_EPOCH;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::{Admin, failure, xml};
use crate::admin::atom::{self, Kind};
use crate::admin::describe;
use crate::amqp::sas;
use crate::broker::namespace::{NamespaceError, Runtime};
use crate::broker::registry::{Description, Slot};

const ENTRY: &str = "application/atom+xml;type=entry;charset=utf-8";
const FEED: &str = "application/atom+xml;type=feed;charset=utf-8";

fn namespace_failure(error: NamespaceError) -> Response {
    let status = match &error {
        NamespaceError::NotFound(_) => StatusCode::NOT_FOUND,
        NamespaceError::Exists(_) => StatusCode::CONFLICT,
        NamespaceError::Invalid(_) => StatusCode::BAD_REQUEST,
        NamespaceError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        NamespaceError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    failure(status, &error.to_string())
}

/// Entries in a feed page when the request names no `$top` (the service's default).
const DEFAULT_PAGE: usize = 100;

/// The query parameters the API uses.
#[derive(Debug, Default)]
pub(super) struct Query {
    skip: usize,
    top: usize,
    api_version: Option<String>,
}

pub(super) fn query(uri: &axum::http::Uri) -> Query {
    let mut parsed = Query {
        skip: 0,
        top: DEFAULT_PAGE,
        api_version: None,
    };
    for pair in uri.query().unwrap_or("").split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match sas::percent_decode(name).as_str() {
            "$skip" => parsed.skip = value.parse().unwrap_or(0),
            "$top" => parsed.top = value.parse().unwrap_or(DEFAULT_PAGE).max(1),
            "api-version" => parsed.api_version = Some(sas::percent_decode(value)),
            _ => {}
        }
    }
    parsed
}

/// Encodes a query value (the API version echoed into links): unreserved characters kept.
fn percent_encode_query(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// One request's view.
pub(super) struct Context<'a> {
    pub(super) admin: &'a Admin,
    pub(super) base: &'a str,
    pub(super) host: &'a str,
    pub(super) query: &'a Query,
}

fn counts(runtime: &Runtime) -> atom::MessageCounts {
    atom::MessageCounts {
        active: runtime.counts.active,
        dead_letter: runtime.counts.dead_letter,
        scheduled: runtime.counts.scheduled,
        transfer: runtime.counts.transfer,
        transfer_dead_letter: runtime.counts.transfer_dead_letter,
    }
}

impl Context<'_> {
    pub(super) fn namespace_info(&self) -> Response {
        let name = atom::namespace_name_of_host(self.host);
        let info = atom::NamespaceInfo {
            name,
            alias: None,
            created_at: self.admin.started,
            modified_at: self.admin.started,
            messaging_units: None,
        };
        xml(
            StatusCode::OK,
            ENTRY,
            atom::render_namespace(self.base, &info),
        )
    }

    /// The entry of one entity, with its runtime counts.
    async fn entry(&self, slot: &Slot) -> Result<String, NamespaceError> {
        let path = slot.description.path();
        let runtime = self.admin.registry.runtime(&path).await?;
        let accessed_at = slot.updated_at.max(slot.created_at);
        Ok(match &slot.description {
            Description::Queue(queue) => atom::render_queue_entry(
                self.base,
                &queue.name,
                &describe::queue_description(queue),
                &atom::QueueRuntime {
                    size_in_bytes: runtime.counts.size_in_bytes,
                    counts: counts(&runtime),
                    created_at: slot.created_at,
                    updated_at: slot.updated_at,
                    accessed_at,
                },
            ),
            Description::Topic(topic) => {
                let (sql_filter_count, correlation_filter_count) =
                    self.admin.registry.filter_counts(&topic.name).await;
                atom::render_topic_entry(
                    self.base,
                    &topic.name,
                    &describe::topic_description(topic),
                    &atom::TopicRuntime {
                        size_in_bytes: runtime.counts.size_in_bytes,
                        subscription_count: runtime.subscription_count,
                        sql_filter_count,
                        correlation_filter_count,
                        counts: counts(&runtime),
                        created_at: slot.created_at,
                        updated_at: slot.updated_at,
                        accessed_at,
                    },
                )
            }
            Description::Subscription {
                topic,
                subscription,
            } => atom::render_subscription_entry(
                self.base,
                topic,
                &subscription.name,
                &describe::subscription_description(subscription),
                &atom::SubscriptionRuntime {
                    counts: counts(&runtime),
                    created_at: slot.created_at,
                    updated_at: slot.updated_at,
                    accessed_at,
                },
            ),
        })
    }

    async fn answer_entry(&self, slot: &Slot, status: StatusCode) -> Response {
        match self.entry(slot).await {
            Ok(entry) => xml(status, ENTRY, entry),
            Err(error) => namespace_failure(error),
        }
    }

    pub(super) async fn get(&self, path: &str) -> Response {
        match self.admin.registry.slot(path) {
            Some(slot) => self.answer_entry(&slot, StatusCode::OK).await,
            None => failure(
                StatusCode::NOT_FOUND,
                &format!("The messaging entity '{path}' could not be found."),
            ),
        }
    }

    /// The self and next links of a feed page listing `list_path` with `total` entries.
    fn page_links(&self, list_path: &str, total: usize) -> (String, Option<String>) {
        let version = self
            .query
            .api_version
            .as_deref()
            .map(|version| format!("api-version={}", percent_encode_query(version)))
            .unwrap_or_default();
        let self_url = if version.is_empty() {
            format!("{}/{list_path}", self.base)
        } else {
            format!("{}/{list_path}?{version}", self.base)
        };
        let next_skip = self.query.skip.saturating_add(self.query.top);
        let next = (next_skip < total).then(|| {
            let separator = if version.is_empty() { "" } else { "&" };
            format!(
                "{}/{list_path}?{version}{separator}%24skip={next_skip}&%24top={}",
                self.base, self.query.top
            )
        });
        (self_url, next)
    }

    async fn feed(&self, title: &str, list_path: &str, slots: Vec<Slot>) -> Response {
        let total = slots.len();
        let (self_url, next_url) = self.page_links(list_path, total);
        let mut entries = Vec::new();
        for slot in slots.into_iter().skip(self.query.skip).take(self.query.top) {
            match self.entry(&slot).await {
                Ok(entry) => entries.push(entry),
                // Deleted in the meantime: not listed.
                Err(NamespaceError::NotFound(_)) => {}
                Err(error) => return namespace_failure(error),
            }
        }
        xml(
            StatusCode::OK,
            FEED,
            atom::render_feed_page(&self_url, title, &entries, next_url.as_deref()),
        )
    }

    pub(super) async fn list_entities(&self, queues: bool) -> Response {
        let slots: Vec<Slot> = self
            .admin
            .registry
            .slots()
            .into_iter()
            .filter(|slot| match &slot.description {
                Description::Queue(_) => queues,
                Description::Topic(_) => !queues,
                Description::Subscription { .. } => false,
            })
            .collect();
        if queues {
            self.feed("Queues", "$Resources/Queues", slots).await
        } else {
            self.feed("Topics", "$Resources/Topics", slots).await
        }
    }

    pub(super) async fn list_subscriptions(&self, topic: &str) -> Response {
        if !matches!(
            self.admin.registry.slot(topic).map(|slot| slot.description),
            Some(Description::Topic(_))
        ) {
            return failure(
                StatusCode::NOT_FOUND,
                &format!("The messaging entity '{topic}' could not be found."),
            );
        }
        let slots: Vec<Slot> = self
            .admin
            .registry
            .slots()
            .into_iter()
            .filter(|slot| {
                matches!(&slot.description,
                    Description::Subscription { topic: owner, .. } if owner.eq_ignore_ascii_case(topic))
            })
            .collect();
        self.feed("Subscriptions", &format!("{topic}/Subscriptions"), slots)
            .await
    }

    pub(super) async fn put_entity(&self, path: &str, body: &str, update: bool) -> Response {
        let registry = &self.admin.registry;
        let description = match atom::detect_kind(body) {
            Some(Kind::Queue) => match atom::parse_queue(body) {
                Ok(queue) => Description::Queue(describe::queue_config(path, &queue)),
                Err(error) => return failure(StatusCode::BAD_REQUEST, &error.to_string()),
            },
            Some(Kind::Topic) => match atom::parse_topic(body) {
                Ok(topic) => Description::Topic(describe::topic_config(path, &topic)),
                Err(error) => return failure(StatusCode::BAD_REQUEST, &error.to_string()),
            },
            _ => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    "The request body is not a QueueDescription or TopicDescription entry.",
                );
            }
        };
        let result = if update {
            registry.update(description).await
        } else {
            registry.create(description).await
        };
        match result {
            Ok(slot) => {
                let status = if update {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                self.answer_entry(&slot, status).await
            }
            Err(error) => namespace_failure(error),
        }
    }

    pub(super) async fn put_subscription(
        &self,
        topic: &str,
        name: &str,
        body: &str,
        update: bool,
    ) -> Response {
        let parsed = match atom::parse_subscription(body) {
            Ok(parsed) => parsed,
            Err(error) => return failure(StatusCode::BAD_REQUEST, &error.to_string()),
        };
        let subscription = match describe::subscription_config(name, &parsed) {
            Ok(subscription) => subscription,
            Err(error) => return failure(StatusCode::BAD_REQUEST, &error),
        };
        let topic_name = match self.admin.registry.slot(topic).map(|slot| slot.description) {
            Some(Description::Topic(config)) => config.name,
            _ => {
                return failure(
                    StatusCode::NOT_FOUND,
                    &format!("The messaging entity '{topic}' could not be found."),
                );
            }
        };
        let description = Description::Subscription {
            topic: topic_name,
            subscription,
        };
        let result = if update {
            self.admin.registry.update(description).await
        } else {
            self.admin.registry.create(description).await
        };
        match result {
            Ok(slot) => {
                let status = if update {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                self.answer_entry(&slot, status).await
            }
            Err(error) => namespace_failure(error),
        }
    }

    pub(super) async fn delete(&self, path: &str) -> Response {
        match self.admin.registry.delete(path).await {
            Ok(()) => (StatusCode::OK, Body::empty()).into_response(),
            Err(error) => namespace_failure(error),
        }
    }

    fn rule_entry(
        &self,
        topic: &str,
        subscription: &str,
        rule: &crate::broker::rules::Rule,
    ) -> String {
        let definition = crate::broker::rules::RuleDefinition::of(rule);
        let created_at =
            UNIX_EPOCH + std::time::Duration::from_millis(definition.created_at.max(0) as u64);
        atom::render_rule_entry(
            self.base,
            topic,
            subscription,
            &definition.name,
            &describe::rule_description(&definition),
            created_at,
        )
    }

    pub(super) async fn list_rules(&self, topic: &str, subscription: &str) -> Response {
        match self.admin.registry.rules(topic, subscription).await {
            Ok(rules) => {
                let entries: Vec<String> = rules
                    .iter()
                    .skip(self.query.skip)
                    .take(self.query.top)
                    .map(|rule| self.rule_entry(topic, subscription, rule))
                    .collect();
                let (self_url, next_url) = self.page_links(
                    &format!("{topic}/Subscriptions/{subscription}/Rules"),
                    rules.len(),
                );
                xml(
                    StatusCode::OK,
                    FEED,
                    atom::render_feed_page(&self_url, "Rules", &entries, next_url.as_deref()),
                )
            }
            Err(error) => namespace_failure(error),
        }
    }

    pub(super) async fn get_rule(&self, topic: &str, subscription: &str, name: &str) -> Response {
        match self.admin.registry.rules(topic, subscription).await {
            Ok(rules) => match rules
                .iter()
                .find(|rule| rule.name.eq_ignore_ascii_case(name))
            {
                Some(rule) => xml(
                    StatusCode::OK,
                    ENTRY,
                    self.rule_entry(topic, subscription, rule),
                ),
                None => failure(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "The rule '{name}' could not be found on '{topic}/Subscriptions/{subscription}'."
                    ),
                ),
            },
            Err(error) => namespace_failure(error),
        }
    }

    pub(super) async fn put_rule(
        &self,
        topic: &str,
        subscription: &str,
        name: &str,
        body: &str,
        update: bool,
    ) -> Response {
        let parsed = match atom::parse_rule(body) {
            Ok(parsed) => parsed,
            Err(error) => return failure(StatusCode::BAD_REQUEST, &error.to_string()),
        };
        let definition = match describe::rule_definition(name, &parsed) {
            Ok(definition) => definition,
            Err(error) => return failure(StatusCode::BAD_REQUEST, &error),
        };
        let registry = &self.admin.registry;
        if update {
            // Replace: the rule must exist; remove it and add the new definition.
            if let Err(error) = registry.delete_rule(topic, subscription, name).await {
                return namespace_failure(error);
            }
        }
        if let Err(error) = registry.add_rule(topic, subscription, &definition).await {
            return namespace_failure(error);
        }
        let status = if update {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        match registry.rules(topic, subscription).await {
            Ok(rules) => match rules
                .iter()
                .find(|rule| rule.name.eq_ignore_ascii_case(name))
            {
                Some(rule) => xml(status, ENTRY, self.rule_entry(topic, subscription, rule)),
                None => failure(StatusCode::NOT_FOUND, "The rule was removed meanwhile."),
            },
            Err(error) => namespace_failure(error),
        }
    }

    pub(super) async fn delete_rule(
        &self,
        topic: &str,
        subscription: &str,
        name: &str,
    ) -> Response {
        match self
            .admin
            .registry
            .delete_rule(topic, subscription, name)
            .await
        {
            Ok(()) => (StatusCode::OK, Body::empty()).into_response(),
            Err(error) => namespace_failure(error),
        }
    }
}
