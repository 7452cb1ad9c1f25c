//! What keeps a web page from driving the broker over HTTP. A browser lets any page send some
//! requests anywhere — "simple" cross-site requests (a POST with a `text/plain`, form or
//! multipart body, whose answer the page cannot read but whose effect happens) — and DNS
//! rebinding lets a page read answers too, by pointing a name of its own at the broker's
//! address. The rules, applied by [`super::http`] before any route runs:
//!
//! - **Host allow-list** ([`HostAllowList`]): the explorer, the admin API and `/metrics`
//!   answer only a `Host` that names this broker — `localhost` and `*.localhost`, any IP
//!   address literal (rebinding needs a DNS name the attacker controls), the machine's host
//!   name, and the names in `[http] allowed_hosts` (`"*"` switches the check off). `/health`
//!   answers any `Host` (container health checks).
//! - **WebSocket origins** ([`HostAllowList::trusts_origin`]): browsers let any page open a
//!   WebSocket anywhere, so the AMQP WebSocket path takes pages only from the broker's own
//!   host or a trusted name (and the `Host` rule above).
//! - **Same origin** ([`same_origin`]): a request that may change state (any method but GET
//!   and HEAD) that carries an `Origin` must come from the origin it is sent to. The SDKs send
//!   no `Origin`; browsers always send one on such requests.
//! - **JSON only** ([`is_json`]): the explorer's state-changing routes take
//!   `Content-Type: application/json`, which a page on another origin cannot send without a
//!   CORS preflight — and the broker grants none.
//! - **Headers** ([`protect`]): no framing, no content sniffing, no referrer, and a
//!   content security policy on every answer.
//!
//! HTTP Basic credentials (the explorer's and `/metrics`') are checked here too, in constant
//! time ([`basic_key`]). This module holds no state beyond the allow-list and must not touch
//! the namespace.

use std::net::{IpAddr, Ipv6Addr};

use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;
use base64::Engine as _;

use crate::amqp::sas::{AccessKey, constant_time_equal};

/// The host names a request may address (the `Host` header), beyond IP address literals.
#[derive(Debug, Clone)]
pub struct HostAllowList {
    /// `"*"` was configured: every `Host` is served.
    any: bool,
    /// Exact names, lower-case, without a trailing dot.
    names: Vec<String>,
    /// Suffixes (`.corp.example` from `*.corp.example`): any name ending in one.
    suffixes: Vec<String>,
}

impl HostAllowList {
    /// `localhost`, `*.localhost`, the machine's name and the configured entries (exact
    /// names, `*.suffix` patterns or `*`, as `[http] allowed_hosts` takes them).
    pub fn new(configured: &[String], machine_name: Option<&str>) -> HostAllowList {
        let mut list = HostAllowList {
            any: false,
            names: vec!["localhost".to_string()],
            suffixes: vec![".localhost".to_string()],
        };
        if let Some(name) = machine_name.and_then(normal_name) {
            list.names.push(name);
        }
        for entry in configured {
            if entry == "*" {
                list.any = true;
            } else if let Some(suffix) = entry.strip_prefix('*') {
                list.suffixes.push(suffix.to_ascii_lowercase());
            } else if let Some(name) = normal_name(entry) {
                list.names.push(name);
            }
        }
        list
    }

    /// Whether a request with this `Host` (`None`: the request named none, which no browser
    /// does) is served. The port does not matter: rebinding is about the name.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        if self.any {
            return true;
        }
        let Some(name) = authority_host(host) else {
            return false;
        };
        if is_ip_literal(&name) {
            return true;
        }
        self.names.contains(&name) || self.suffixes.iter().any(|suffix| name.ends_with(suffix))
    }

    /// Whether a page at `origin` may open the AMQP WebSocket of a request sent to `host`
    /// (browsers let any page open a WebSocket anywhere, and send its `Origin`): no `Origin`
    /// (not a browser), a page on the broker's own host (any port), or a page on a name the
    /// broker trusts — `localhost`, `*.localhost`, a loopback address, the machine's name or
    /// an `allowed_hosts` entry. Unlike a `Host`, an `Origin` at any other IP address is not
    /// trusted: anyone can serve a page from one.
    pub fn trusts_origin(&self, origin: Option<&str>, host: Option<&str>) -> bool {
        let Some(origin) = origin else {
            return true;
        };
        let Some(origin_host) = origin
            .split_once("://")
            .filter(|(scheme, _)| {
                scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
            })
            .and_then(|(_, authority)| authority_host(authority))
        else {
            return false;
        };
        if host.and_then(authority_host).as_ref() == Some(&origin_host) || self.any {
            return true;
        }
        let address = origin_host
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(&origin_host);
        if let Ok(address) = address.parse::<IpAddr>() {
            return address.is_loopback();
        }
        self.names.contains(&origin_host)
            || self
                .suffixes
                .iter()
                .any(|suffix| origin_host.ends_with(suffix))
    }
}

/// A name lower-cased without its trailing dot; `None` when nothing is left.
fn normal_name(name: &str) -> Option<String> {
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

fn is_ip_literal(name: &str) -> bool {
    name.parse::<IpAddr>().is_ok()
        || name
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .is_some_and(|inner| inner.parse::<Ipv6Addr>().is_ok())
}

/// The host of an authority (`name`, `name:port`, `[v6]`, `[v6]:port`), normalized; IPv6
/// literals keep their brackets.
fn authority_host(authority: &str) -> Option<String> {
    let authority = authority.trim();
    let host = if authority.starts_with('[') {
        let end = authority.find(']')?;
        &authority[..=end]
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    normal_name(host)
}

/// The host and port of an authority, with `default_port` when it names none.
fn host_and_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let host = authority_host(authority)?;
    let rest = if authority.trim().starts_with('[') {
        authority.trim().split_once(']').map(|(_, rest)| rest)?
    } else {
        authority
            .trim()
            .split_once(':')
            .map_or("", |(_, port)| port)
    };
    let port = match rest.strip_prefix(':').unwrap_or(rest) {
        "" => default_port,
        port => port.parse().ok()?,
    };
    Some((host, port))
}

/// The `Host` a request names (its header, else the request target's authority).
pub fn request_host(parts: &axum::http::request::Parts) -> Option<String> {
    match parts.headers.get(header::HOST) {
        Some(value) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        None => parts.uri.authority().map(|authority| authority.to_string()),
    }
}

/// Whether a method may change state (anything but GET and HEAD).
pub fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

/// Checks a request's `Origin` against the origin it was sent to (`host`, reached over TLS
/// when `secure`): the same host and port, or no `Origin` at all (a client that is not a
/// browser). `Err` names why not.
pub fn same_origin(headers: &HeaderMap, host: Option<&str>, secure: bool) -> Result<(), String> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    let refused = || {
        Err(format!(
            "Origin '{origin}' is not this broker's own: a page on another origin may not change anything here."
        ))
    };
    let Some((scheme, authority)) = origin.split_once("://") else {
        return refused();
    };
    let origin_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return refused(),
    };
    let Some(origin) = host_and_port(authority, origin_port) else {
        return refused();
    };
    let own = host.and_then(|host| host_and_port(host, if secure { 443 } else { 80 }));
    if own.as_ref() == Some(&origin) {
        Ok(())
    } else {
        refused()
    }
}

/// Whether a request declares a JSON body (`application/json`, any parameters).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media_type| media_type.trim().eq_ignore_ascii_case("application/json"))
}

/// The explorer page's own policy: its files only, never framed.
pub const PAGE_POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The policy of every other answer (JSON, XML, text, a message body downloaded with its own
/// content type): nothing runs, nothing loads, never framed.
pub const DATA_POLICY: &str = "default-src 'none'; sandbox; frame-ancestors 'none'";

/// Adds the headers every HTTP answer carries; a content security policy already set (the
/// explorer's page) is kept.
pub fn protect(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(DATA_POLICY));
}

/// Why HTTP Basic credentials were not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasicRefusal {
    /// No `Authorization: Basic …` header.
    Missing,
    /// Not base64 of `name:key`.
    Malformed,
    /// No key has that name and key (an unknown name and a wrong key look the same).
    Unknown,
}

/// The configured key that HTTP Basic credentials (`name:key`) name. Every key is compared,
/// name and key in constant time, whatever matches: the time taken tells nothing about
/// which names exist or how much of a key was right.
pub fn basic_key<'a>(
    keys: &'a [AccessKey],
    headers: &HeaderMap,
) -> Result<&'a AccessKey, BasicRefusal> {
    let encoded = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .ok_or(BasicRefusal::Missing)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or(BasicRefusal::Malformed)?;
    let (name, key) = decoded.split_once(':').ok_or(BasicRefusal::Malformed)?;
    let mut found = None;
    for candidate in keys {
        let name_matches = constant_time_equal(candidate.name.as_bytes(), name.as_bytes());
        let key_matches = constant_time_equal(candidate.key.as_bytes(), key.as_bytes());
        if name_matches & key_matches && found.is_none() {
            found = Some(candidate);
        }
    }
    found.ok_or(BasicRefusal::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::sas::Rights;

    #[test]
    fn loopback_names_ip_literals_and_the_machine_are_served() {
        let list = HostAllowList::new(&[], Some("Build-Box"));
        for host in [
            "localhost",
            "LOCALHOST:5300",
            "localhost.",
            "app.localhost:8080",
            "127.0.0.1",
            "10.0.0.7:5300",
            "[::1]:5300",
            "[fe80::1]",
            "build-box",
            "build-box:5672",
        ] {
            assert!(list.allows(Some(host)), "{host}");
        }
        for host in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "build-box.evil.example",
            "[not-an-address]",
            "",
        ] {
            assert!(!list.allows(Some(host)), "{host}");
        }
        assert!(list.allows(None), "no Host: not a browser");
    }

    #[test]
    fn configured_names_suffixes_and_the_wildcard() {
        let list = HostAllowList::new(
            &["Broker.Internal".to_string(), "*.corp.example".to_string()],
            None,
        );
        assert!(list.allows(Some("broker.internal:443")));
        assert!(list.allows(Some("a.b.corp.example")));
        assert!(!list.allows(Some("corp.example")));
        assert!(!list.allows(Some("evil.example")));
        let any = HostAllowList::new(&["*".to_string()], None);
        assert!(any.allows(Some("evil.example")));
    }

    #[test]
    fn websocket_origins_are_the_brokers_own_host_or_trusted_names() {
        let list = HostAllowList::new(&["*.corp.example".to_string()], Some("build-box"));
        let trusts = |origin: Option<&str>, host: &str| list.trusts_origin(origin, Some(host));
        assert!(trusts(None, "localhost:5300"));
        assert!(trusts(Some("http://localhost:3000"), "localhost:5300"));
        assert!(trusts(Some("http://app.localhost"), "127.0.0.1:5300"));
        assert!(trusts(Some("http://127.0.0.1:3000"), "localhost:5300"));
        assert!(trusts(Some("http://[::1]:3000"), "localhost:5300"));
        assert!(trusts(Some("https://build-box"), "localhost:5300"));
        assert!(trusts(Some("https://app.corp.example"), "localhost:5300"));
        assert!(trusts(Some("http://10.1.2.3:3000"), "10.1.2.3:5300"));
        assert!(!trusts(Some("http://10.1.2.4:3000"), "10.1.2.3:5300"));
        assert!(!trusts(Some("http://evil.example"), "localhost:5300"));
        assert!(!trusts(Some("http://203.0.113.5"), "localhost:5300"));
        assert!(!trusts(Some("null"), "localhost:5300"));
        assert!(!trusts(Some("file:///tmp/page.html"), "localhost:5300"));
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).expect("valid"));
        }
        map
    }

    #[test]
    fn only_the_requests_own_origin_passes() {
        let check = |origin: Option<&str>, host: &str, secure: bool| {
            let map = match origin {
                Some(origin) => headers(&[(header::ORIGIN, origin)]),
                None => HeaderMap::new(),
            };
            same_origin(&map, Some(host), secure).is_ok()
        };
        assert!(check(None, "localhost:5300", false));
        assert!(check(
            Some("http://localhost:5300"),
            "localhost:5300",
            false
        ));
        assert!(check(
            Some("http://LOCALHOST:5300"),
            "localhost:5300",
            false
        ));
        assert!(check(Some("http://localhost"), "localhost:80", false));
        assert!(check(Some("https://localhost"), "localhost", true));
        assert!(check(Some("http://[::1]:5300"), "[::1]:5300", false));
        assert!(!check(Some("http://evil.example"), "localhost:5300", false));
        assert!(!check(
            Some("http://localhost:8080"),
            "localhost:5300",
            false
        ));
        assert!(!check(
            Some("http://127.0.0.1:5300"),
            "localhost:5300",
            false
        ));
        assert!(!check(Some("null"), "localhost:5300", false));
        assert!(!check(Some("file://"), "localhost", false));
    }

    #[test]
    fn json_is_application_json_with_any_parameters() {
        let json = |value: &str| is_json(&headers(&[(header::CONTENT_TYPE, value)]));
        assert!(json("application/json"));
        assert!(json("Application/JSON; charset=utf-8"));
        assert!(!json("text/plain"));
        assert!(!json("application/x-www-form-urlencoded"));
        assert!(!json("multipart/form-data; boundary=x"));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn basic_credentials_name_a_key_by_name_and_key() {
        let keys = vec![
            AccessKey {
                name: "root".to_string(),
                key: "root-secret".to_string(),
                rights: Rights {
                    manage: true,
                    send: true,
                    listen: true,
                },
            },
            AccessKey {
                name: "reader".to_string(),
                key: "reader-secret".to_string(),
                rights: Rights {
                    manage: false,
                    send: false,
                    listen: true,
                },
            },
        ];
        let basic = |credentials: &str| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
            basic_key(
                &keys,
                &headers(&[(header::AUTHORIZATION, &format!("Basic {encoded}"))]),
            )
            .map(|key| key.name.as_str())
        };
        assert_eq!(basic("root:root-secret"), Ok("root"));
        assert_eq!(basic("reader:reader-secret"), Ok("reader"));
        assert_eq!(basic("root:reader-secret"), Err(BasicRefusal::Unknown));
        assert_eq!(basic("root:root-secreT"), Err(BasicRefusal::Unknown));
        assert_eq!(basic("nobody:root-secret"), Err(BasicRefusal::Unknown));
        assert_eq!(basic("no colon"), Err(BasicRefusal::Malformed));
        assert_eq!(
            basic_key(&keys, &HeaderMap::new()).map(|key| key.name.as_str()),
            Err(BasicRefusal::Missing)
        );
    }
}
