//! [`Problem`]: an answer that is not the page asked for, in words, with its status.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use scheduler_core::Error;

use crate::layout::{Nav, page};

/// A refusal or a failure, shown to the operator as text.
#[derive(Debug)]
pub(crate) struct Problem {
    status: StatusCode,
    message: String,
}

impl Problem {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// An action of a dashboard the app left read-only.
    pub(crate) fn read_only() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "this dashboard is read-only: the app has not enabled actions (Dashboard::actions(Actions::enabled()))",
        )
    }

    /// The page needs the store's controls, and the store keeps none.
    pub(crate) fn no_controls() -> Self {
        Self::from_store(Error::NoControls)
    }

    /// An error of the store, with the status that says whose it is: the request's
    /// (`422`: a bad schedule, an unknown handler, …), a missing thing (`404`), or
    /// the store's (`503` when it failed, `501` when it keeps no controls).
    pub(crate) fn from_store(err: Error) -> Self {
        let status = match &err {
            Error::InvalidName { .. }
            | Error::InvalidSchedule { .. }
            | Error::InvalidTiming { .. }
            | Error::InvalidControl { .. }
            | Error::InvalidInput { .. }
            | Error::UnknownHandler { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::UnknownJob { .. } => StatusCode::NOT_FOUND,
            Error::NoControls => StatusCode::NOT_IMPLEMENTED,
            Error::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::warn!(error = %err, "dashboard: the store failed");
        }
        Self::new(status, err.to_string())
    }

    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl From<Error> for Problem {
    fn from(err: Error) -> Self {
        Self::from_store(err)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = page(
            title,
            Nav::None,
            html! { p.problem role="alert" { (self.message) } },
        );
        (self.status, Html(body.into_string())).into_response()
    }
}

/// What a rejection says at its root (`missing field \`name\``), without the
/// framework's wording around it.
pub(crate) fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut err = err;
    while let Some(source) = err.source() {
        err = source;
    }
    err.to_string()
}

/// Any path the dashboard does not serve.
pub(crate) async fn not_found() -> Problem {
    Problem::not_found("no such page in the scheduler dashboard")
}
