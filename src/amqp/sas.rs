//! Shared Access Signature tokens: parsing and validating
//! `SharedAccessSignature sr=…&sig=…&se=…&skn=…` as Service Bus does (wire contract §2.4),
//! and the rights a validated token grants.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What a key or token allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rights {
    /// Manage (implies send and listen).
    pub manage: bool,
    /// Send to entities.
    pub send: bool,
    /// Receive from entities.
    pub listen: bool,
}

/// The right an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Sending.
    Send,
    /// Receiving, peeking, settling.
    Listen,
    /// Management operations.
    Manage,
}

impl Rights {
    /// Whether these rights allow `right`.
    pub fn allows(&self, right: Right) -> bool {
        self.manage
            || match right {
                Right::Send => self.send,
                Right::Listen => self.listen,
                Right::Manage => false,
            }
    }
}

/// A configured shared access key.
#[derive(Debug, Clone)]
pub struct AccessKey {
    /// The key name (`skn`, or the SASL PLAIN user name).
    pub name: String,
    /// The key text; its UTF-8 bytes are the HMAC key.
    pub key: String,
    /// What it grants.
    pub rights: Rights,
}

/// A validated token: who may do what where, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The decoded `sr` path (scheme and host removed), lowercase.
    pub path_prefix: String,
    /// The key's rights.
    pub rights: Rights,
    /// Unix seconds after which the token is void.
    pub expires_at_seconds: i64,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a SAS token or a field is missing.
    #[error("InvalidSignature: the token is not a valid SharedAccessSignature: {0}")]
    Malformed(&'static str),
    /// `skn` names no configured key.
    /// The signature does not match.
    #[error("InvalidSignature: the token has an invalid signature")]
    BadSignature,
    /// `se` is in the past.
    #[error("ExpiredToken: the token expired at {0}")]
    Expired(i64),
}

/// Percent-decodes `text` (`+` stays `+`; SDKs encode spaces as `%20` or `+`).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' && index + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).unwrap_or("");
            if let Ok(byte) = u8::from_str_radix(hex, 16) {
                decoded.push(byte);
                index += 3;
                continue;
            }
        }
        decoded.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Validates a SAS token against the configured keys at `now_seconds`.
pub fn validate(token: &str, keys: &[AccessKey], now_seconds: i64) -> Result<Grant, TokenError> {
    let fields = token
        .strip_prefix("SharedAccessSignature ")
        .ok_or(TokenError::Malformed(
            "missing 'SharedAccessSignature ' prefix",
        ))?;
    let (mut resource, mut signature, mut expiry, mut key_name) = (None, None, None, None);
    for pair in fields.split('&') {
        let Some((name, value)) = pair.split_once('=') else {
            continue;
        };
        match name {
            "sr" => resource = Some(value),
            "sig" => signature = Some(value),
            "se" => expiry = Some(value),
            "skn" => key_name = Some(value),
            _ => {}
        }
    }
    let resource = resource.ok_or(TokenError::Malformed("missing sr"))?;
    let signature = signature.ok_or(TokenError::Malformed("missing sig"))?;
    let expiry_text = expiry.ok_or(TokenError::Malformed("missing se"))?;
    let key_name = percent_decode(key_name.ok_or(TokenError::Malformed("missing skn"))?);
    let expires_at_seconds: i64 = expiry_text
        .parse()
        .map_err(|_| TokenError::Malformed("se is not a number"))?;
    // An unknown key name and a wrong signature look the same from outside (same answer,
    // same work): a refusal does not tell which key names exist.
    let key = keys.iter().find(|key| key.name == key_name);
    let secret = key.map_or("ferrobus: no such key", |key| key.key.as_str());
    let signed = format!("{resource}\n{expiry_text}");
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| TokenError::BadSignature)?;
    mac.update(signed.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let presented = percent_decode(signature);
    let matches = constant_time_equal(expected.as_bytes(), presented.as_bytes());
    let Some(key) = key.filter(|_| matches) else {
        return Err(TokenError::BadSignature);
    };
    if expires_at_seconds < now_seconds {
        return Err(TokenError::Expired(expires_at_seconds));
    }
    let audience = percent_decode(resource);
    // HTTP clients (the JS admin client) sign the whole request URL, query string included.
    let audience = audience.split(['?', '#']).next().unwrap_or_default();
    Ok(Grant {
        path_prefix: super::address::strip_authority(audience).to_ascii_lowercase(),
        rights: key.rights,
        expires_at_seconds,
    })
}

/// Compares secrets without an early exit on the first differing byte.
pub fn constant_time_equal(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

/// Signs a token for `resource` (e.g. `sb://localhost/` for the whole namespace) with a key,
/// valid until `expires_at_seconds`, as the SDKs make them: the percent-encoded resource and
/// the expiry, one line each, under HMAC-SHA256.
pub fn sign(resource: &str, key_name: &str, key: &str, expires_at_seconds: i64) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (byte as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect::<String>()
    };
    let resource = encode(resource);
    // HMAC takes a key of any length: new_from_slice cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.as_bytes()) else {
        return String::new();
    };
    mac.update(format!("{resource}\n{expires_at_seconds}").as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "SharedAccessSignature sr={resource}&sig={}&se={expires_at_seconds}&skn={}",
        encode(&signature),
        encode(key_name)
    )
}

/// Whether a grant covers `entity_path` (case-insensitive path prefix, §2.4 step 6).
pub fn covers(grant: &Grant, entity_path: &str, now_seconds: i64) -> bool {
    if grant.expires_at_seconds < now_seconds {
        return false;
    }
    let path = entity_path.trim_matches('/').to_ascii_lowercase();
    grant.path_prefix.is_empty()
        || path == grant.path_prefix
        || path.starts_with(&format!("{}/", grant.path_prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AccessKey {
        AccessKey {
            name: "RootManageSharedAccessKey".into(),
            key: "SAS_KEY_VALUE".into(),
            rights: Rights {
                manage: true,
                send: true,
                listen: true,
            },
        }
    }

    fn token(resource: &str, expiry: i64, key_text: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(key_text.as_bytes()).expect("any length");
        mac.update(format!("{resource}\n{expiry}").as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let signature = signature
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        format!(
            "SharedAccessSignature sr={resource}&sig={signature}&se={expiry}&skn=RootManageSharedAccessKey"
        )
    }

    #[test]
    fn a_signed_token_validates_for_the_namespace() {
        let token = sign(
            "sb://localhost/",
            "RootManageSharedAccessKey",
            "SAS_KEY_VALUE",
            2000,
        );
        let grant = validate(&token, &[key()], 1000).expect("valid token");
        assert_eq!(grant.path_prefix, "");
        assert!(
            validate(
                &sign(
                    "sb://localhost/",
                    "RootManageSharedAccessKey",
                    "wrong",
                    2000
                ),
                &[key()],
                1000
            )
            .is_err()
        );
    }

    #[test]
    fn a_correctly_signed_token_grants_its_path() {
        let resource = "sb%3A%2F%2Flocalhost%3A5672%2Fq2";
        let grant =
            validate(&token(resource, 2000, "SAS_KEY_VALUE"), &[key()], 1000).expect("valid token");
        assert_eq!(grant.path_prefix, "q2");
        assert!(covers(&grant, "q2/$management", 1000));
        assert!(covers(&grant, "Q2", 1000));
        assert!(!covers(&grant, "q20", 1000));
    }

    #[test]
    fn an_http_audience_with_a_query_string_grants_its_path() {
        // The JS admin client signs the lower-cased request URL, query string included.
        let resource = "https%3a%2f%2flocalhost%3a5300%2f%24namespaceinfo%3fapi-version%3d2021-05";
        let grant =
            validate(&token(resource, 2000, "SAS_KEY_VALUE"), &[key()], 1000).expect("valid token");
        assert_eq!(grant.path_prefix, "$namespaceinfo");
        assert!(covers(&grant, "/$namespaceinfo", 1000));
        assert!(!covers(&grant, "q1", 1000));
    }

    #[test]
    fn wrong_key_and_expired_tokens_are_refused() {
        let resource = "sb%3A%2F%2Flocalhost%2Fq2";
        assert_eq!(
            validate(&token(resource, 2000, "WRONG"), &[key()], 1000),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            validate(&token(resource, 500, "SAS_KEY_VALUE"), &[key()], 1000),
            Err(TokenError::Expired(500))
        );
        assert!(matches!(
            validate("Bearer abc", &[key()], 1000),
            Err(TokenError::Malformed(_))
        ));
    }
}
