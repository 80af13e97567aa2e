//! Shared bits of the examples: their common flags, logging, Ctrl-C, and how `main`
//! reports an error.
//!
//! Each example has its own `clap` parser, which flattens the flag groups here that
//! it takes: [`RunFor`] (`--seconds`), [`Node`] (`--node`) and [`Database`]
//! (`--database-url`), and parses it with [`parse_args`]. Every flag also reads the
//! environment variable named in `--help`, for when the flag is not given.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use scheduler_core::{BoxError, error_chain};

/// Parses the command line as `T`, as `T::parse()` does (printing help, or an error
/// and exiting with code 2), except that an environment variable standing in for a
/// flag counts as unset when it is empty, as it always has for the examples
/// (`NODE_ID= cargo run --example quickstart` runs as the hostname).
pub fn parse_args<T: clap::Parser>() -> T {
    let command = T::command().mut_args(|arg| {
        let empty = arg
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|value| value.is_empty());
        if empty { arg.env(None::<&str>) } else { arg }
    });
    let mut matches = command.get_matches();
    T::from_arg_matches_mut(&mut matches).unwrap_or_else(|err| err.format(&mut T::command()).exit())
}

/// `--seconds N`: how long the example runs.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct RunFor {
    /// Stop gracefully after N seconds (default: run until Ctrl-C)
    #[arg(long, value_name = "N", env = "RUN_SECONDS")]
    pub seconds: Option<u64>,
}

impl RunFor {
    /// Completes on Ctrl-C, or once `--seconds` have passed if given.
    pub async fn shutdown_signal(self) {
        match self.seconds {
            Some(s) => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(s)) => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        eprintln!("shutting down: finishing running jobs, releasing leases");
    }
}

/// `--node NAME`: the node id of `scope = "node"` jobs.
#[derive(Debug, Clone, clap::Args)]
pub struct Node {
    /// Node id for node-scope jobs (default: the hostname)
    #[arg(long, value_name = "NAME", env = "NODE_ID")]
    pub node: Option<String>,
}

/// `--database-url URL`: the PostgreSQL database, required.
#[derive(Debug, Clone, clap::Args)]
pub struct Database {
    /// PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/app
    /// (add ?pgbouncer=true behind PgBouncer's transaction pooling)
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    pub database_url: String,
}

/// Logs to stderr, `info` by default (`RUST_LOG` overrides), in colour only when
/// stderr is a terminal and `NO_COLOR` is unset or empty.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .init();
}

/// Ends `main`: on an error, prints it to stderr as one line, `error: ` and its
/// chain of causes ([`error_chain`]), and returns a failure exit code.
///
/// ```no_run
/// use std::process::ExitCode;
/// use scheduler_core::{BoxError, error_chain};
///
/// async fn run() -> Result<(), BoxError> {
///     Err("the database said no".into())
/// }
///
/// #[tokio::main]
/// async fn main() -> ExitCode {
///     scheduler_examples::report(run().await)
/// }
/// ```
pub fn report(result: Result<(), BoxError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", line(&error));
            ExitCode::FAILURE
        }
    }
}

/// What [`report`] prints for `error`.
fn line(error: &BoxError) -> String {
    format!("error: {}", error_chain(error.as_ref()))
}

/// The README's code blocks, compiled as doctests so the README stays true to the code.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::fmt;

    use super::*;

    /// An error with a message and maybe a source.
    #[derive(Debug)]
    struct Layer {
        message: &'static str,
        source: Option<Box<Layer>>,
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.message)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.source.as_deref().map(|s| s as &(dyn Error + 'static))
        }
    }

    fn layer(message: &'static str, source: Option<Layer>) -> Layer {
        Layer {
            message,
            source: source.map(Box::new),
        }
    }

    #[test]
    fn a_chain_of_three_is_one_line_of_sentences() {
        let io = layer("connection refused (os error 111)", None);
        let pool = layer("pool timed out while waiting for a connection", Some(io));
        let top: BoxError = Box::new(layer("cannot connect to the database", Some(pool)));
        assert_eq!(
            line(&top),
            "error: cannot connect to the database: pool timed out while waiting for a \
             connection: connection refused (os error 111)"
        );
    }

    #[test]
    fn a_cause_a_message_already_says_is_said_once() {
        // As `#[error("…: {source}; hint")]` does: the bottom one's text is in the
        // middle one's, the middle one's in the top one's.
        let io = layer("connection refused (os error 111)", None);
        let pool = layer(
            "pool timed out: connection refused (os error 111)",
            Some(io),
        );
        let top: BoxError = Box::new(layer(
            "cannot connect: pool timed out: connection refused (os error 111); check the URL",
            Some(pool),
        ));
        assert_eq!(
            line(&top),
            "error: cannot connect: pool timed out: connection refused (os error 111); check the URL"
        );
    }

    #[test]
    fn report_fails_on_an_error_and_succeeds_without() {
        assert_eq!(report(Ok(())), ExitCode::SUCCESS);
        assert_eq!(report(Err("no".into())), ExitCode::FAILURE);
    }
}
