//! The converted configuration as the TOML text `ferrobus` reads, with the emulator's
//! settings as comments beside them.

/// The converted file, ready to render.
pub(super) struct Document {
    pub(super) namespace: Option<String>,
    pub(super) queues: Vec<Entity>,
    pub(super) topics: Vec<Topic>,
}

/// A queue, topic or subscription: its name and settings.
pub(super) struct Entity {
    /// Its JSON path, written as a comment so TOML-stage errors can be traced back.
    pub(super) source: String,
    pub(super) name: String,
    pub(super) settings: Vec<Setting>,
}

pub(super) struct Topic {
    pub(super) entity: Entity,
    pub(super) subscriptions: Vec<Subscription>,
}

pub(super) struct Subscription {
    pub(super) entity: Entity,
    pub(super) rules: Vec<Rule>,
}

pub(super) struct Rule {
    pub(super) source: String,
    pub(super) name: String,
    pub(super) filter: Filter,
    pub(super) action: Option<String>,
}

pub(super) enum Filter {
    Sql(String),
    Correlation {
        /// (TOML key, value) of the fields set.
        fields: Vec<(&'static str, String)>,
        /// (property name, TOML literal).
        properties: Vec<(String, String)>,
    },
}

pub(super) struct Setting {
    pub(super) key: &'static str,
    pub(super) value: SettingValue,
}

pub(super) enum SettingValue {
    /// A TOML literal from the file.
    Given(String),
    /// A TOML literal of the emulator's default.
    Default(String),
    /// `TimeSpan.MaxValue`: the key is left out, which ferrobus reads as no limit.
    Unlimited,
    /// Not set (an empty or absent forward target).
    None,
}

impl Document {
    pub(super) fn render(&self, origin: &str) -> String {
        let mut out = String::new();
        let origin = origin.replace(|character: char| character.is_control(), " ");
        out.push_str(
            "# ferrobus configuration converted from the Azure Service Bus emulator's Config.json\n",
        );
        out.push_str(&format!("# ({origin}) by `ferrobus config convert`.\n"));
        match &self.namespace {
            Some(name) => out.push_str(&format!(
                "# Emulator namespace: {}. ferrobus serves one namespace and needs no name for it.\n",
                toml_string(name)
            )),
            None => out.push_str("# The emulator namespace has no name; ferrobus needs none.\n"),
        }
        out.push_str(concat!(
            "# Values marked \"emulator default\" were not in Config.json: they are the emulator's\n",
            "# defaults. Config.json's Logging is not converted (ferrobus logs to stderr).\n",
            "# The emulator keeps nothing across restarts; for the same, run with --memory or add:\n",
            "# [storage]\n",
            "# mode = \"memory\"\n",
        ));
        if self.queues.is_empty() && self.topics.is_empty() {
            out.push_str("\n# Config.json defines no queues and no topics.\n");
        }
        for queue in &self.queues {
            out.push_str("\n[[queues]]\n");
            queue.render(&mut out);
        }
        for topic in &self.topics {
            out.push_str("\n[[topics]]\n");
            topic.entity.render(&mut out);
            for subscription in &topic.subscriptions {
                out.push_str("\n[[topics.subscriptions]]\n");
                subscription.entity.render(&mut out);
                if subscription.rules.is_empty() {
                    out.push_str("# No rules: the subscription gets $Default, which matches every message.\n");
                }
                for rule in &subscription.rules {
                    out.push_str("\n[[topics.subscriptions.rules]]\n");
                    rule.render(&mut out);
                }
            }
        }
        out
    }
}

/// Width `key = value` is padded to before a trailing comment.
pub(super) const COMMENT_COLUMN: usize = 48;

impl Entity {
    pub(super) fn render(&self, out: &mut String) {
        out.push_str(&format!("# {}\n", comment_text(&self.source)));
        out.push_str(&format!("name = {}\n", toml_string(&self.name)));
        for setting in &self.settings {
            match &setting.value {
                SettingValue::Given(literal) => {
                    out.push_str(&format!("{} = {literal}\n", setting.key));
                }
                SettingValue::Default(literal) => {
                    let line = format!("{} = {literal}", setting.key);
                    out.push_str(&format!("{line:<COMMENT_COLUMN$} # emulator default\n"));
                }
                SettingValue::Unlimited => out.push_str(&format!(
                    "# {}: unlimited (TimeSpan.MaxValue in Config.json)\n",
                    setting.key
                )),
                SettingValue::None => {}
            }
        }
    }
}

impl Rule {
    pub(super) fn render(&self, out: &mut String) {
        out.push_str(&format!("# {}\n", comment_text(&self.source)));
        out.push_str(&format!("name = {}\n", toml_string(&self.name)));
        if let Filter::Sql(expression) = &self.filter {
            out.push_str(&format!("sql_filter = {}\n", toml_string(expression)));
        }
        if let Some(action) = &self.action {
            out.push_str(&format!("sql_action = {}\n", toml_string(action)));
        }
        if let Filter::Correlation { fields, properties } = &self.filter {
            out.push_str("[topics.subscriptions.rules.correlation_filter]\n");
            for (key, value) in fields {
                out.push_str(&format!("{key} = {}\n", toml_string(value)));
            }
            if !properties.is_empty() {
                out.push_str("[topics.subscriptions.rules.correlation_filter.properties]\n");
                for (name, literal) in properties {
                    out.push_str(&format!("{} = {literal}\n", toml_key(name)));
                }
            }
        }
    }
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
pub(super) fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            character if character.is_control() => {
                out.push_str(&format!("\\u{:04X}", u32::from(character)));
            }
            character => out.push(character),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when it can be, else quoted.
pub(super) fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|character| character.is_ascii_alphanumeric() || matches!(character, '_' | '-'));
    if bare {
        key.to_string()
    } else {
        toml_string(key)
    }
}

/// Text safe on one comment line.
pub(super) fn comment_text(text: &str) -> String {
    text.replace(|character: char| character.is_control(), " ")
}
