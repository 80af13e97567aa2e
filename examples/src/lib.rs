//! Shared bits of the examples: flags, logging, Ctrl-C.

use std::time::Duration;

/// Reads `--name VALUE` from the command line, else the environment variable `env`.
pub fn flag(name: &str, env: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == format!("--{name}") {
            return args.next();
        }
        if let Some(value) = arg.strip_prefix(&format!("--{name}=")) {
            return Some(value.to_owned());
        }
    }
    std::env::var(env).ok().filter(|v| !v.is_empty())
}

/// Logs to stderr, `info` by default (`RUST_LOG` overrides).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Completes on Ctrl-C, or after `--seconds N` if given.
pub async fn shutdown_signal() {
    let seconds = flag("seconds", "RUN_SECONDS").and_then(|s| s.parse::<u64>().ok());
    match seconds {
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

/// The README's code blocks, compiled as doctests so the README stays true to the code.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
