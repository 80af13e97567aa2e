//! CSRF protection of the action forms: a double-submit token.
//!
//! The dashboard draws a random secret when its router is built. Every page sets it
//! as a `SameSite=Strict`, `HttpOnly` cookie, and every form carries it in a hidden
//! field. A `POST` acts only when both the field and the cookie equal the secret:
//! another site can neither read the secret (to fill the field) nor make the
//! browser send the cookie with its cross-site request. Compared in constant time.

use std::fmt;

use axum::http::{HeaderMap, header};

/// The cookie's name.
pub(crate) const COOKIE: &str = "scheduler_web_csrf";

/// The form field's name.
pub(crate) const FIELD: &str = "csrf";

/// The dashboard's secret.
pub(crate) struct Csrf {
    token: String,
}

impl fmt::Debug for Csrf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Csrf").finish_non_exhaustive()
    }
}

/// Why a `POST` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The form carried no token.
    MissingField,
    /// The request carried no cookie.
    MissingCookie,
    /// A token differs from the secret.
    Wrong,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::MissingField => "the form carried no CSRF token",
            Refusal::MissingCookie => {
                "the request carried no CSRF cookie (it is sent only from the dashboard's own pages)"
            }
            Refusal::Wrong => "the form's CSRF token does not match",
        })
    }
}

impl Csrf {
    /// 256 random bits, in hex.
    pub(crate) fn random() -> Self {
        let bytes: [u8; 32] = rand::random();
        let token = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Self { token }
    }

    /// The token the forms carry.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The `Set-Cookie` value. No `Path`: the browser scopes it to the pages'
    /// directory, which is the nest prefix, wherever the app put it.
    pub(crate) fn set_cookie(&self) -> String {
        format!("{COOKIE}={}; SameSite=Strict; HttpOnly", self.token)
    }

    /// Whether a `POST` with these headers and this form field may act.
    pub(crate) fn check(&self, headers: &HeaderMap, field: Option<&str>) -> Result<(), Refusal> {
        let field = field
            .filter(|f| !f.is_empty())
            .ok_or(Refusal::MissingField)?;
        let mut cookies = cookies(headers, COOKIE).peekable();
        if cookies.peek().is_none() {
            return Err(Refusal::MissingCookie);
        }
        let cookie_ok = cookies.any(|c| same(c.as_bytes(), self.token.as_bytes()));
        if cookie_ok && same(field.as_bytes(), self.token.as_bytes()) {
            Ok(())
        } else {
            Err(Refusal::Wrong)
        }
    }
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
    fn both_the_field_and_the_cookie_must_match() {
        let csrf = Csrf::random();
        let t = csrf.token().to_owned();
        assert_eq!(t.len(), 64);
        let good = with_cookie(&format!("theme=dark; {COOKIE}={t}"));
        assert_eq!(csrf.check(&good, Some(&t)), Ok(()));
        assert_eq!(csrf.check(&good, None), Err(Refusal::MissingField));
        assert_eq!(csrf.check(&good, Some("")), Err(Refusal::MissingField));
        assert_eq!(csrf.check(&good, Some(&t[1..])), Err(Refusal::Wrong));
        let mut flipped = t.clone().into_bytes();
        flipped[10] = if flipped[10] == b'a' { b'b' } else { b'a' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(csrf.check(&good, Some(&flipped)), Err(Refusal::Wrong));
        assert_eq!(
            csrf.check(&HeaderMap::new(), Some(&t)),
            Err(Refusal::MissingCookie)
        );
        // An attacker who can set a cookie still cannot guess the secret.
        let forged = with_cookie(&format!("{COOKIE}={flipped}"));
        assert_eq!(csrf.check(&forged, Some(&flipped)), Err(Refusal::Wrong));
        assert_ne!(Csrf::random().token(), t);
        assert!(!format!("{csrf:?}").contains(&t));
    }
}
