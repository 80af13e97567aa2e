//! `scheduler-cli`: see the crate's library for what each command shows.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use scheduler_cli::Cli;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match scheduler_cli::run(&cli).await {
        Ok(output) => {
            for warning in &output.warnings {
                eprintln!("warning: {warning}");
            }
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = std::io::stdout().lock().write_all(output.text.as_bytes());
            ExitCode::from(output.exit_code)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
