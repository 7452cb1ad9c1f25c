//! The operator CLI's way to a running broker: the connection string (the SDKs' format), a
//! small HTTP/1.1 client for the admin API and the explorer's JSON API (both served on the
//! AMQP port), and the errors every command ends with, each with its exit code.
//!
//! The HTTP client sends one request per connection (`Connection: close`) and reads the
//! answer whole: the CLI makes a handful of requests to a broker on the same machine or
//! network, so a connection pool would buy nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The environment variable read when `--connection-string` is not given.
pub const CONNECTION_STRING_VARIABLE: &str = "FERROBUS_CONNECTION_STRING";

/// The connection string used when neither `--connection-string` nor the variable is set:
/// the local broker's default port, no key (a broker without `[[auth.keys]]`).
pub const DEFAULT_CONNECTION_STRING: &str =
    "Endpoint=sb://localhost:5672;UseDevelopmentEmulator=true";

/// The AMQP port when the endpoint names none.
const DEFAULT_PORT: u16 = 5672;

/// How long one HTTP request or AMQP step may take before the broker counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer body read (a peek of many large messages stays far below it).
const MAX_ANSWER: usize = 256 * 1024 * 1024;

/// Why a command failed; [`OpsError::exit_code`] is the process's exit status.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The arguments or an input file are wrong (exit 2, as for clap's usage errors).
    #[error("{0}")]
    Usage(String),
    /// Nothing answers at the endpoint, or the answer is not the broker's (exit 3).
    #[error("broker unreachable: {0}")]
    Unreachable(String),
    /// The key is wrong or unknown, or lacks the right the operation needs (exit 4).
    #[error("unauthorised: {0}")]
    Unauthorized(String),
    /// The entity (or message, or rule) does not exist (exit 5).
    #[error("not found: {0}")]
    NotFound(String),
    /// The entity already exists (exit 6).
    #[error("already exists: {0}")]
    Exists(String),
    /// The broker refused the request for another reason (bad value, entity disabled, …)
    /// (exit 1).
    #[error("{0}")]
    Refused(String),
}

impl OpsError {
    /// The documented exit status of this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            OpsError::Refused(_) => 1,
            OpsError::Usage(_) => 2,
            OpsError::Unreachable(_) => 3,
            OpsError::Unauthorized(_) => 4,
            OpsError::NotFound(_) => 5,
            OpsError::Exists(_) => 6,
        }
    }
}

/// A parsed connection string: where the broker is and the key to use, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name or address of the endpoint.
    pub host: String,
    /// The AMQP port (which serves the admin API and the explorer too).
    pub port: u16,
    /// `SharedAccessKeyName` and `SharedAccessKey`, when both are given.
    pub key: Option<(String, String)>,
}

impl Target {
    /// Parses `Endpoint=sb://host[:port][/];SharedAccessKeyName=…;SharedAccessKey=…[;…]`
    /// (case-insensitive names, other fields ignored). `amqp://` and `http://` endpoints are
    /// taken too.
    pub fn parse(text: &str) -> Result<Target, OpsError> {
        let mut endpoint = None;
        let mut key_name = None;
        let mut key = None;
        for field in text.split(';').map(str::trim).filter(|f| !f.is_empty()) {
            let Some((name, value)) = field.split_once('=') else {
                return Err(OpsError::Usage(format!(
                    "the connection string's field {field:?} is not NAME=VALUE"
                )));
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "endpoint" => endpoint = Some(value.trim().to_string()),
                "sharedaccesskeyname" => key_name = Some(value.trim().to_string()),
                "sharedaccesskey" => key = Some(value.trim().to_string()),
                _ => {}
            }
        }
        let endpoint = endpoint.ok_or_else(|| {
            OpsError::Usage("the connection string has no Endpoint=sb://host[:port]".to_string())
        })?;
        let rest = ["sb://", "amqp://", "http://"]
            .iter()
            .find_map(|scheme| {
                endpoint
                    .get(..scheme.len())
                    .filter(|prefix| prefix.eq_ignore_ascii_case(scheme))
                    .map(|_| &endpoint[scheme.len()..])
            })
            .ok_or_else(|| {
                OpsError::Usage(format!(
                    "the Endpoint {endpoint:?} is not sb://host[:port] (TLS endpoints are not supported by the CLI)"
                ))
            })?;
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                let port = port.parse::<u16>().map_err(|_| {
                    OpsError::Usage(format!("the Endpoint's port {port:?} is not a port number"))
                })?;
                (host.to_string(), port)
            }
            _ => (authority.to_string(), DEFAULT_PORT),
        };
        if host.is_empty() {
            return Err(OpsError::Usage(format!(
                "the Endpoint {endpoint:?} names no host"
            )));
        }
        let key = match (key_name, key) {
            (Some(name), Some(key)) => Some((name, key)),
            (None, None) => None,
            _ => {
                return Err(OpsError::Usage(
                    "the connection string needs both SharedAccessKeyName and SharedAccessKey, or neither"
                        .to_string(),
                ));
            }
        };
        Ok(Target { host, port, key })
    }

    /// `--connection-string`, else [`CONNECTION_STRING_VARIABLE`], else
    /// [`DEFAULT_CONNECTION_STRING`].
    pub fn from_options(connection_string: Option<&str>) -> Result<Target, OpsError> {
        match connection_string {
            Some(text) => Target::parse(text),
            None => match std::env::var(CONNECTION_STRING_VARIABLE) {
                Ok(text) if !text.trim().is_empty() => Target::parse(&text),
                _ => Target::parse(DEFAULT_CONNECTION_STRING),
            },
        }
    }

    /// `host:port` as a URL authority.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The `Authorization` header for the admin (ATOM) API: a SAS token for the whole
    /// namespace, valid for an hour.
    fn token(&self) -> Option<String> {
        let (name, key) = self.key.as_ref()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs() as i64)
            .unwrap_or(0);
        Some(crate::amqp::sas::sign(
            &format!("sb://{}/", self.host),
            name,
            key,
            now + 3600,
        ))
    }

    /// The `Authorization` header for the explorer's API: HTTP Basic with the key.
    fn basic(&self) -> Option<String> {
        let (name, key) = self.key.as_ref()?;
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{name}:{key}"))
        ))
    }

    /// Calls the explorer's JSON API (`/explorer/api/{route}`) and returns its JSON answer.
    pub async fn explorer(
        &self,
        method: &str,
        route: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, OpsError> {
        let body = body.map(|value| value.to_string().into_bytes());
        let answer = self
            .request(
                method,
                &format!("/explorer/api/{route}"),
                self.basic(),
                &[],
                body.as_deref().map(|bytes| ("application/json", bytes)),
            )
            .await?;
        answer.check(route)?;
        serde_json::from_slice(&answer.body).map_err(|error| {
            OpsError::Unreachable(format!(
                "the answer to {route} is not JSON ({error}): is the endpoint a ferrobus broker?"
            ))
        })
    }

    /// Fetches raw bytes from the explorer's API (a message body).
    pub async fn explorer_bytes(&self, route: &str) -> Result<Vec<u8>, OpsError> {
        let answer = self
            .request(
                "GET",
                &format!("/explorer/api/{route}"),
                self.basic(),
                &[],
                None,
            )
            .await?;
        answer.check(route)?;
        Ok(answer.body)
    }

    /// Calls the admin (ATOM/XML) API at `path` (e.g. `/t/Subscriptions/s/Rules/r`).
    pub async fn admin(
        &self,
        method: &str,
        path: &str,
        extra_headers: &[(&str, &str)],
        xml: Option<&str>,
    ) -> Result<String, OpsError> {
        let answer = self
            .request(
                method,
                &format!("{path}?api-version=2021-05"),
                self.token(),
                extra_headers,
                xml.map(|text| ("application/atom+xml", text.as_bytes())),
            )
            .await?;
        answer.check(path)?;
        Ok(String::from_utf8_lossy(&answer.body).into_owned())
    }

    /// A JSON request to the admin API's own routes (`/$cluster`): the answer's body.
    pub async fn admin_json(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<String, OpsError> {
        let answer = self
            .request(
                method,
                path,
                self.token(),
                &[],
                body.map(|text| ("application/json", text.as_bytes())),
            )
            .await?;
        answer.check(path)?;
        Ok(String::from_utf8_lossy(&answer.body).into_owned())
    }

    /// One HTTP/1.1 request on a connection of its own.
    async fn request(
        &self,
        method: &str,
        path_and_query: &str,
        authorization: Option<String>,
        extra_headers: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) -> Result<Answer, OpsError> {
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|error| {
                    OpsError::Unreachable(format!(
                        "cannot connect to {}: {error}",
                        self.authority()
                    ))
                })?;
            let mut head = format!(
                "{method} {path_and_query} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: ferrobus-cli/{}\r\n",
                self.authority(),
                env!("CARGO_PKG_VERSION")
            );
            if let Some(value) = authorization {
                head.push_str(&format!("Authorization: {value}\r\n"));
            }
            for (name, value) in extra_headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            let payload = body.map(|(_, bytes)| bytes).unwrap_or_default();
            if let Some((content_type, _)) = body {
                head.push_str(&format!("Content-Type: {content_type}\r\n"));
            }
            if body.is_some() || method != "GET" {
                head.push_str(&format!("Content-Length: {}\r\n", payload.len()));
            }
            head.push_str("\r\n");
            let lost = |error: std::io::Error| {
                OpsError::Unreachable(format!("{}: {error}", self.authority()))
            };
            stream.write_all(head.as_bytes()).await.map_err(lost)?;
            stream.write_all(payload).await.map_err(lost)?;
            let mut raw = Vec::new();
            (&mut stream)
                .take(MAX_ANSWER as u64)
                .read_to_end(&mut raw)
                .await
                .map_err(lost)?;
            Answer::parse(&raw).ok_or_else(|| {
                OpsError::Unreachable(format!(
                    "{} did not answer in HTTP: is it a ferrobus broker's AMQP port?",
                    self.authority()
                ))
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                OpsError::Unreachable(format!(
                    "{} did not answer within {} s",
                    self.authority(),
                    REQUEST_TIMEOUT.as_secs()
                ))
            })?
    }
}

/// An HTTP answer: status and (de-chunked) body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    /// Parses a whole HTTP/1.1 answer read up to the connection's end.
    fn parse(raw: &[u8]) -> Option<Answer> {
        let end = raw.windows(4).position(|window| window == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&raw[..end]).ok()?;
        let rest = &raw[end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next()?;
        if !status_line.starts_with("HTTP/1.") {
            return None;
        }
        let status = status_line.split_whitespace().nth(1)?.parse().ok()?;
        let mut chunked = false;
        let mut length = None;
        for line in lines {
            let (name, value) = line.split_once(':')?;
            let value = value.trim();
            if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            }
        }
        let body = if chunked {
            dechunk(rest)?
        } else {
            match length {
                Some(length) => rest.get(..length)?.to_vec(),
                None => rest.to_vec(),
            }
        };
        Some(Answer { status, body })
    }

    /// Turns a 4xx/5xx answer into the error it means; `what` names the request.
    fn check(&self, what: &str) -> Result<(), OpsError> {
        if self.status < 400 {
            return Ok(());
        }
        let text = error_text(&self.body)
            .unwrap_or_else(|| format!("{what}: HTTP status {}", self.status));
        Err(match self.status {
            401 | 403 => OpsError::Unauthorized(text),
            404 => OpsError::NotFound(text),
            409 => OpsError::Exists(text),
            _ => OpsError::Refused(text),
        })
    }
}

/// The text of an error answer: the explorer's `{"error": …}`, the admin API's
/// `<Detail>…</Detail>`, or a short plain-text body.
fn error_text(body: &[u8]) -> Option<String> {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(text) = value.get("error").and_then(|text| text.as_str())
    {
        return Some(text.to_string());
    }
    let text = String::from_utf8_lossy(body);
    if let Some(start) = text.find("<Detail>") {
        let rest = &text[start + "<Detail>".len()..];
        let detail = rest.split("</Detail>").next().unwrap_or(rest);
        return Some(
            detail
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&"),
        );
    }
    let trimmed = text.trim();
    (!trimmed.is_empty() && trimmed.len() < 500).then(|| trimmed.to_string())
}

/// Decodes a chunked body.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|window| window == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_string_gives_host_port_and_key() {
        let target = Target::parse(
            "Endpoint=sb://localhost:5673;SharedAccessKeyName=root;SharedAccessKey=abc=;UseDevelopmentEmulator=true",
        )
        .expect("parses");
        assert_eq!(target.host, "localhost");
        assert_eq!(target.port, 5673);
        assert_eq!(target.key, Some(("root".to_string(), "abc=".to_string())));
        let bare = Target::parse("endpoint=sb://broker/").expect("parses");
        assert_eq!(
            (bare.host.as_str(), bare.port, bare.key),
            ("broker", 5672, None)
        );
    }

    #[test]
    fn a_bad_connection_string_is_a_usage_error() {
        for text in [
            "SharedAccessKey=x",
            "Endpoint=https://h",
            "Endpoint=sb://h:notaport",
            "Endpoint=sb://h;SharedAccessKeyName=x",
            "Endpoint=sb://",
        ] {
            let error = Target::parse(text).expect_err(text);
            assert_eq!(error.exit_code(), 2, "{text}: {error}");
        }
    }

    #[test]
    fn answers_parse_with_length_chunks_or_to_the_end() {
        let plain =
            Answer::parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi").expect("parses");
        assert_eq!(
            (plain.status, plain.body.as_slice()),
            (200, b"hi".as_slice())
        );
        let chunked = Answer::parse(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"e\r\na\r\nrror\":\"x\"}\r\n0\r\n\r\n",
        )
        .expect("parses");
        assert_eq!(chunked.body, b"{\"error\":\"x\"}");
        assert!(matches!(chunked.check("q"), Err(OpsError::NotFound(text)) if text == "x"));
        assert!(Answer::parse(b"\x00SASL garbage\r\n\r\n").is_none());
    }

    #[test]
    fn admin_errors_give_their_detail() {
        let body =
            b"<Error><Code>401</Code><Detail>InvalidSignature: bad &amp; wrong</Detail></Error>";
        assert_eq!(
            error_text(body).as_deref(),
            Some("InvalidSignature: bad & wrong")
        );
    }
}
