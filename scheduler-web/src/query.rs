//! [`Query`]: a page's query string, or the page's own `400` in words.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::problem::{Problem, innermost};

/// The query string of a page's address, as the page describes it.
pub(crate) trait Address: DeserializeOwned {
    /// The page's address with its parameters, as an operator would type it.
    const USAGE: &'static str;
}

/// A page's parameters; an address they cannot be read from is a `400` page that
/// says what is wrong and what the page's address looks like (never axum's
/// plain-text rejection).
#[derive(Debug)]
pub(crate) struct Query<T>(pub(crate) T);

impl<T: Address, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::try_from_uri(&parts.uri) {
            Ok(axum::extract::Query(query)) => Ok(Query(query)),
            Err(rejection) => Err(Problem::bad_request(format!(
                "this address is not understood ({}); this page's address is {}",
                innermost(&rejection),
                T::USAGE
            ))),
        }
    }
}
