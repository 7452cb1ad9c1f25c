//! Cloud-parity mode (`[server] strict`): the quotas and rules the Service Bus service
//! enforces for a tier, so that code tested against ferrobus cannot rely on something the
//! cloud refuses. Off by default: without it ferrobus takes wider values (longer locks,
//! shorter windows) that a local stand-in is often asked for.
//!
//! Checked here: lock duration 5 s … 5 min, default message TTL at least 1 s,
//! auto-delete-on-idle at least 5 min, duplicate detection window 20 s … 7 days, entity
//! size (standard: 1–5 GB in whole GB; premium: up to 80 GB), message size (standard:
//! 256 KB; premium: 1 KB … 100 MB). Entity names, 2,000 rules per subscription and
//! message and session ids of at most 128 characters are enforced in every mode.

use std::time::Duration;

use super::validate::{queue_context, subscription_context, topic_context};
use super::{Config, ConfigError, Tier};

/// Shortest lock the service accepts.
pub const MIN_LOCK_DURATION: Duration = Duration::from_secs(5);
/// Longest lock the service accepts.
pub const MAX_LOCK_DURATION: Duration = Duration::from_secs(300);
/// Shortest default message time to live.
pub const MIN_TIME_TO_LIVE: Duration = Duration::from_secs(1);
/// Shortest auto-delete-on-idle.
pub const MIN_AUTO_DELETE_ON_IDLE: Duration = Duration::from_secs(300);
/// Duplicate detection window bounds.
pub const MIN_DUPLICATE_WINDOW: Duration = Duration::from_secs(20);
/// Longest duplicate detection window (7 days).
pub const MAX_DUPLICATE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// Checks every entity against the tier's rules.
pub(super) fn validate(config: &Config, tier: Tier) -> Result<(), ConfigError> {
    for (index, queue) in config.queues.iter().enumerate() {
        let context = queue_context(index, &queue.name);
        lock(&context, queue.lock_duration)?;
        time_to_live(&context, queue.default_message_time_to_live)?;
        auto_delete(&context, queue.auto_delete_on_idle)?;
        if queue.requires_duplicate_detection {
            duplicate_window(&context, queue.duplicate_detection_history_time_window)?;
        }
        sizes(
            &context,
            tier,
            queue.max_size_in_megabytes,
            queue.max_message_size_in_kilobytes,
        )?;
    }
    for (index, topic) in config.topics.iter().enumerate() {
        let context = topic_context(index, &topic.name);
        time_to_live(&context, topic.default_message_time_to_live)?;
        auto_delete(&context, topic.auto_delete_on_idle)?;
        if topic.requires_duplicate_detection {
            duplicate_window(&context, topic.duplicate_detection_history_time_window)?;
        }
        sizes(
            &context,
            tier,
            topic.max_size_in_megabytes,
            topic.max_message_size_in_kilobytes,
        )?;
        for (sub_index, subscription) in topic.subscriptions.iter().enumerate() {
            let context = subscription_context(&context, sub_index, &subscription.name);
            lock(&context, subscription.lock_duration)?;
            time_to_live(&context, subscription.default_message_time_to_live)?;
            auto_delete(&context, subscription.auto_delete_on_idle)?;
        }
    }
    Ok(())
}

fn strict_error(context: &str, reason: String) -> ConfigError {
    ConfigError::invalid(context, format!("{reason} (strict mode: the cloud's rule)"))
}

fn lock(context: &str, duration: Duration) -> Result<(), ConfigError> {
    if duration < MIN_LOCK_DURATION || duration > MAX_LOCK_DURATION {
        return Err(strict_error(
            context,
            format!(
                "lock_duration {} is outside 5 seconds to 5 minutes; the service refuses it: \"The supplied lock time exceeds the allowed maximum of '5' minutes.\"",
                seconds(duration)
            ),
        ));
    }
    Ok(())
}

fn time_to_live(context: &str, duration: Option<Duration>) -> Result<(), ConfigError> {
    match duration {
        Some(duration) if duration < MIN_TIME_TO_LIVE => Err(strict_error(
            context,
            format!(
                "default_message_time_to_live {} is below the minimum of 1 second",
                seconds(duration)
            ),
        )),
        _ => Ok(()),
    }
}

fn auto_delete(context: &str, duration: Option<Duration>) -> Result<(), ConfigError> {
    match duration {
        Some(duration) if duration < MIN_AUTO_DELETE_ON_IDLE => Err(strict_error(
            context,
            format!(
                "auto_delete_on_idle {} is below the minimum of 5 minutes",
                seconds(duration)
            ),
        )),
        _ => Ok(()),
    }
}

fn duplicate_window(context: &str, duration: Duration) -> Result<(), ConfigError> {
    if duration < MIN_DUPLICATE_WINDOW || duration > MAX_DUPLICATE_WINDOW {
        return Err(strict_error(
            context,
            format!(
                "duplicate_detection_history_time_window {} is outside 20 seconds to 7 days",
                seconds(duration)
            ),
        ));
    }
    Ok(())
}

fn sizes(
    context: &str,
    tier: Tier,
    max_size_in_megabytes: u64,
    max_message_size_in_kilobytes: u64,
) -> Result<(), ConfigError> {
    match tier {
        Tier::Standard => {
            if !(1..=5).contains(&(max_size_in_megabytes / 1024))
                || !max_size_in_megabytes.is_multiple_of(1024)
            {
                return Err(strict_error(
                    context,
                    format!(
                        "max_size_in_megabytes {max_size_in_megabytes} is not one of 1024, 2048, 3072, 4096, 5120 (the standard tier's sizes)"
                    ),
                ));
            }
            if max_message_size_in_kilobytes > 256 {
                return Err(strict_error(
                    context,
                    format!(
                        "max_message_size_in_kilobytes {max_message_size_in_kilobytes} is above the standard tier's 256 KB"
                    ),
                ));
            }
        }
        Tier::Premium => {
            if max_size_in_megabytes > 81_920 {
                return Err(strict_error(
                    context,
                    format!(
                        "max_size_in_megabytes {max_size_in_megabytes} is above the premium tier's 81920 (80 GB)"
                    ),
                ));
            }
            if !(1..=102_400).contains(&max_message_size_in_kilobytes) {
                return Err(strict_error(
                    context,
                    format!(
                        "max_message_size_in_kilobytes {max_message_size_in_kilobytes} is outside the premium tier's 1 to 102400 (100 MB)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    fn load(text: &str) -> Result<Config, String> {
        Config::from_toml_str(text, "t.toml").map_err(|error| error.to_string())
    }

    #[test]
    fn strict_mode_refuses_what_the_cloud_refuses() {
        let error =
            load("[server]\nstrict = true\n[[queues]]\nname = \"q\"\nlock_duration = \"10m\"\n")
                .unwrap_err();
        assert!(error.contains("lock_duration"), "{error}");
        assert!(error.contains("strict mode"), "{error}");
        let error = load(
            "[server]\nstrict = true\n[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nauto_delete_on_idle = \"1m\"\n",
        )
        .unwrap_err();
        assert!(error.contains("auto_delete_on_idle"), "{error}");
        let error = load(
            "[server]\nstrict = true\n[[queues]]\nname = \"q\"\nrequires_duplicate_detection = true\nduplicate_detection_history_time_window = \"5s\"\n",
        )
        .unwrap_err();
        assert!(
            error.contains("duplicate_detection_history_time_window"),
            "{error}"
        );
        let error = load(
            "[server]\nstrict = true\n[[queues]]\nname = \"q\"\nmax_message_size_in_kilobytes = 1024\n",
        )
        .unwrap_err();
        assert!(error.contains("256 KB"), "{error}");
        let error = load("[server]\nstrict = \"gold\"\n").unwrap_err();
        assert!(error.contains("gold"), "{error}");
    }

    #[test]
    fn the_same_values_are_fine_without_strict_and_premium_takes_large_messages() {
        load("[[queues]]\nname = \"q\"\nlock_duration = \"10m\"\nauto_delete_on_idle = \"1m\"\n")
            .expect("not strict");
        let config = load(
            "[server]\nstrict = \"premium\"\n[[queues]]\nname = \"q\"\nmax_message_size_in_kilobytes = 102400\nmax_size_in_megabytes = 10240\n",
        )
        .expect("premium sizes");
        assert_eq!(config.server.strict, Some(super::Tier::Premium));
        load("[server]\nstrict = false\n[[queues]]\nname = \"q\"\nlock_duration = \"10m\"\n")
            .expect("strict = false is off");
    }
}
