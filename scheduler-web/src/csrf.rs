//! CSRF protection of the action forms: a token bound to the browser's session.
//!
//! Each browser gets a session cookie of its own (`SameSite=Strict`, `HttpOnly`,
//! and `Secure` when the app says it is served over HTTPS): 256 random bits, drawn
//! by the first page it is served. The forms of every page carry the token of that
//! session, HMAC-SHA-256 of the session id under the dashboard's key. A `POST` acts
//! only when its field is the token of the session its cookie names: another site
//! can neither make the browser send the cookie with its cross-site request nor
//! compute a token without the key, and a token copied out of one browser's page
//! is worth nothing with another browser's cookie.
//!
//! The key is the app's ([`Dashboard::csrf_key`](crate::Dashboard::csrf_key)), so
//! that replicas sharing it accept each other's forms and a restart keeps open
//! forms valid; without one, a random key is drawn when the router is built (one
//! replica only, and a restart refuses the forms open before it).

use std::fmt;

use axum::http::{HeaderMap, header};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "scheduler_web_csrf";

/// The form field's name.
pub(crate) const FIELD: &str = "csrf";

/// Bytes of a session id (hex in the cookie).
const ID_BYTES: usize = 32;

/// The domain of the signed text, so that a key shared with something else never
/// signs the same message for it.
const DOMAIN: &[u8] = b"scheduler-web csrf v1\0";

/// A key given by the app, kept out of `Debug`.
#[derive(Clone)]
pub(crate) struct Key(Vec<u8>);

impl Key {
    pub(crate) fn new(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }

    fn random() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self(bytes.to_vec())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The dashboard's signer of tokens.
pub(crate) struct Csrf {
    /// `None` only if HMAC refused the key, which it does for no length: then
    /// every form is refused rather than any accepted.
    mac: Option<Hmac<Sha256>>,
    secure: bool,
}

impl fmt::Debug for Csrf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Csrf")
            .field("secure", &self.secure)
            .finish_non_exhaustive()
    }
}

/// The browser's session as the request names it (or as this answer starts it),
/// and the token of its forms.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    id: String,
    token: String,
    /// Drawn for this request: the request carried no valid session cookie.
    new: bool,
}

impl Session {
    /// The token the forms carry.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }
}

/// Why a `POST` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The form carried no token.
    MissingField,
    /// The request carried no session cookie.
    MissingCookie,
    /// The token is not the session's.
    Wrong,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::MissingField => "the form carried no CSRF token",
            Refusal::MissingCookie => {
                "the request carried no CSRF cookie (it is set by the dashboard's own pages, and sent only from them)"
            }
            Refusal::Wrong => {
                "the form's CSRF token does not match this browser's session (a form of another browser, or of a dashboard with another key)"
            }
        })
    }
}

impl Csrf {
    /// A signer with `key`, or a random key when none is given.
    pub(crate) fn new(key: Option<&Key>, secure: bool) -> Self {
        let random;
        let key = match key {
            Some(key) => key,
            None => {
                random = Key::random();
                &random
            }
        };
        Self {
            mac: <Hmac<Sha256> as KeyInit>::new_from_slice(&key.0).ok(),
            secure,
        }
    }

    /// The session a request's cookie names, or a new one when it names none.
    pub(crate) fn session(&self, headers: &HeaderMap) -> Session {
        let (id, new) = match cookies(headers, COOKIE).find(|v| is_id(v)) {
            Some(id) => (id.to_owned(), false),
            None => (hex(&rand::random::<[u8; ID_BYTES]>()), true),
        };
        Session {
            token: self.sign(&id),
            id,
            new,
        }
    }

    fn sign(&self, id: &str) -> String {
        let Some(mac) = &self.mac else {
            return String::new();
        };
        let mut mac = mac.clone();
        mac.update(DOMAIN);
        mac.update(id.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// The `Set-Cookie` value that starts `session`, when this answer started it.
    /// No `Path`: the browser scopes it to the pages' directory, which is the nest
    /// prefix, wherever the app put it. No `Max-Age`: it ends with the browser's
    /// session.
    pub(crate) fn set_cookie(&self, session: &Session) -> Option<String> {
        let secure = if self.secure { "; Secure" } else { "" };
        session
            .new
            .then(|| format!("{COOKIE}={}; SameSite=Strict; HttpOnly{secure}", session.id))
    }

    /// Whether a `POST` of `session` with this form field may act.
    pub(crate) fn check(&self, session: &Session, field: Option<&str>) -> Result<(), Refusal> {
        let field = field
            .filter(|f| !f.is_empty())
            .ok_or(Refusal::MissingField)?;
        if session.new {
            return Err(Refusal::MissingCookie);
        }
        if !session.token.is_empty() && same(field.as_bytes(), session.token.as_bytes()) {
            Ok(())
        } else {
            Err(Refusal::Wrong)
        }
    }
}

/// A session id as the dashboard draws them: 64 lowercase hex digits.
fn is_id(value: &str) -> bool {
    value.len() == 2 * ID_BYTES
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The values of every cookie named `name` in the request.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |pair| {
            let (n, value) = pair.trim().split_once('=')?;
            (n == name).then_some(value)
        })
}

/// Equal, in a time that depends only on the lengths (the token's is public).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use axum::http::HeaderValue;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn the_field_must_be_the_token_of_the_cookies_session() {
        let key = Key::new(b"a key");
        let csrf = Csrf::new(Some(&key), false);
        let first = csrf.session(&HeaderMap::new());
        assert!(first.new);
        let cookie = csrf.set_cookie(&first).unwrap();
        assert!(
            cookie.starts_with(&format!("{COOKIE}={}; ", first.id)),
            "{cookie}"
        );
        let t = first.token().to_owned();
        assert_eq!(t.len(), 64);

        let good = csrf.session(&with_cookie(&format!("theme=dark; {COOKIE}={}", first.id)));
        assert!(!good.new);
        assert_eq!(good.token(), t);
        assert_eq!(csrf.set_cookie(&good), None, "an existing session is kept");
        assert_eq!(csrf.check(&good, Some(&t)), Ok(()));
        assert_eq!(csrf.check(&good, None), Err(Refusal::MissingField));
        assert_eq!(csrf.check(&good, Some("")), Err(Refusal::MissingField));
        assert_eq!(csrf.check(&good, Some(&t[1..])), Err(Refusal::Wrong));
        // The first answer's session is the cookie it set, not yet one sent back.
        assert_eq!(csrf.check(&first, Some(&t)), Err(Refusal::MissingCookie));
        // Another browser's session, or one the key did not sign for.
        let other = csrf.session(&HeaderMap::new());
        assert_ne!(other.id, first.id);
        let other = csrf.session(&with_cookie(&format!("{COOKIE}={}", other.id)));
        assert_eq!(csrf.check(&other, Some(&t)), Err(Refusal::Wrong));
        let elsewhere = Csrf::new(Some(&Key::new(b"another key")), false);
        assert_eq!(
            elsewhere.check(
                &elsewhere.session(&with_cookie(&format!("{COOKIE}={}", first.id))),
                Some(&t)
            ),
            Err(Refusal::Wrong)
        );
        // A cookie that is no session id starts a new session.
        assert!(
            csrf.session(&with_cookie(&format!("{COOKIE}=x{}", &first.id[1..])))
                .new
        );
        assert!(
            csrf.session(&with_cookie(&format!(
                "{COOKIE}={}",
                first.id.to_uppercase()
            )))
            .new
        );
        // The key never shows.
        assert_eq!(format!("{key:?}"), "Key(..)");
        assert!(!format!("{csrf:?}").contains("a key"));
    }

    #[test]
    fn secure_when_asked() {
        let csrf = Csrf::new(None, true);
        let cookie = csrf.set_cookie(&csrf.session(&HeaderMap::new())).unwrap();
        assert!(
            cookie.ends_with("; SameSite=Strict; HttpOnly; Secure"),
            "{cookie}"
        );
    }
}
