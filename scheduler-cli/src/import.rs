//! `schedules import FILE`: many dynamic schedules in one batch
//! ([`Controls::put_schedules`]): all or none, one version bump, one audit record.
//! The file is what `schedules list --json` prints (`{"schedules": [...]}`) or a
//! JSON array of the same rows; `-` reads standard input.

use std::path::PathBuf;

use scheduler_core::{ControlRecord, Controls, ScheduleRow, Scope};
use serde::{Deserialize, Serialize};

use crate::control::{Who, signed};
use crate::error::{Error, Result};
use crate::json::Json;

/// `schedules import FILE [--min-period PERIOD]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ImportArgs {
    /// The rows: `schedules list --json`'s output, or a JSON array of its rows
    /// (`name`, `handler`, `schedule` required; `zone`, `scope`, `policy`, `args`,
    /// `enabled` as `schedules put` defaults them); `-` for standard input.
    pub file: PathBuf,
    /// The shortest `every` period accepted, as `schedules put --min-period`.
    #[arg(long, value_name = "PERIOD", default_value = "1s", value_parser = min_period)]
    pub min_period: std::time::Duration,
    /// Who asks, and why.
    #[command(flatten)]
    pub who: Who,
}

/// A row of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRow {
    name: String,
    handler: String,
    schedule: String,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    policy: String,
    #[serde(default)]
    args: Option<serde_json::Value>,
    #[serde(default = "yes")]
    enabled: bool,
    // What `schedules list --json` adds: the store's, not the file's to set.
    #[serde(default, rename = "version")]
    _version: Option<serde_json::Value>,
    #[serde(default, rename = "updated_at")]
    _updated_at: Option<serde_json::Value>,
}

/// A `--min-period` as written (`100ms`).
pub(crate) fn min_period(text: &str) -> std::result::Result<std::time::Duration, String> {
    scheduler_core::parse_duration(text).map_err(|e| e.to_string())
}

fn yes() -> bool {
    true
}

/// The file's shape: `schedules list --json`'s, or its rows alone.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileRows {
    Listed { schedules: Vec<FileRow> },
    Rows(Vec<FileRow>),
}

/// The rows of `text` (the file `file` holds), each checked
/// ([`ScheduleRow::check_with_min_period`]): a row that does not read or check is
/// named by its position and name.
///
/// # Errors
/// [`Error::BadImport`] for JSON that is not such rows, [`Error::BadSchedule`] for a
/// row that does not check (inside [`scheduler_core::Error::InBatch`]).
pub fn rows(file: &str, text: &str, min_period: std::time::Duration) -> Result<Vec<ScheduleRow>> {
    let parsed: FileRows = serde_json::from_str(text).map_err(|e| Error::BadImport {
        file: file.to_owned(),
        reason: format!(
            "{e}: expected `schedules list --json`'s output ({{\"schedules\": [...]}}) or a \
             JSON array of its rows, each with name, handler and schedule"
        ),
    })?;
    let (FileRows::Listed { schedules: rows } | FileRows::Rows(rows)) = parsed;
    rows.into_iter()
        .enumerate()
        .map(|(index, r)| {
            let in_batch = |cause: scheduler_core::Error| {
                Error::BadSchedule(scheduler_core::Error::InBatch {
                    index,
                    name: r.name.clone(),
                    cause: Box::new(cause),
                })
            };
            let mut row = ScheduleRow::new(&r.name, &r.handler, r.schedule.clone());
            row.zone = r.zone.clone();
            row.scope = match r.scope.as_deref() {
                None | Some("cluster") => Scope::Cluster,
                Some("node") => Scope::Node,
                Some(other) => {
                    return Err(in_batch(scheduler_core::Error::InvalidInput {
                        reason: format!("scope {other:?} is no scope: cluster or node"),
                    }));
                }
            };
            row.policy = r.policy.clone();
            row.args = match &r.args {
                None => "{}".to_owned(),
                // A string holding JSON (as `schedules put --args` takes it), or JSON.
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(value) => value.to_string(),
            };
            row.enabled = r.enabled;
            row.check_with_min_period(min_period).map_err(in_batch)?;
            Ok(row)
        })
        .collect()
}

/// What `schedules import` did. Serialized as the `--json` output: `rows` (how
/// many were put) and `control`, the batch's record (`null` for an empty file).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Imported {
    /// How many rows the batch put.
    pub rows: usize,
    /// The batch's record, `None` for a file without rows (nothing was written).
    pub record: Option<ControlRecord>,
}

/// Puts `rows` in one batch.
///
/// # Errors
/// [`Error::Control`] if the store fails or refuses a row (nothing is written then).
pub async fn import(
    controls: &dyn Controls,
    rows: &[ScheduleRow],
    by: &str,
    why: &str,
) -> Result<Imported> {
    Ok(Imported {
        rows: rows.len(),
        record: controls.put_schedules(rows, by, why).await?,
    })
}

impl Imported {
    /// The human output: one line.
    pub fn human(&self) -> String {
        match &self.record {
            Some(record) => format!(
                "put {} dynamic schedules in one batch; every instance picks them up within a \
                 poll interval ({})\n",
                self.rows,
                signed(record)
            ),
            None => "the file holds no schedules: nothing was written\n".to_owned(),
        }
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`], which these types never cause.
    pub fn json(&self) -> Result<String> {
        #[derive(Serialize)]
        struct Shape<'a> {
            rows: usize,
            control: Option<Json<'a, ControlRecord>>,
        }
        let shape = Shape {
            rows: self.rows,
            control: self.record.as_ref().map(Json),
        };
        Ok(serde_json::to_string_pretty(&shape)? + "\n")
    }
}

/// The text of `file` (`-`: standard input).
///
/// # Errors
/// [`Error::BadImport`] when it cannot be read.
pub fn read(file: &std::path::Path) -> Result<(String, String)> {
    use std::io::Read as _;
    let name = file.display().to_string();
    let mut text = String::new();
    let read = if name == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(file).map(|t| text = t)
    };
    read.map_err(|e| Error::BadImport {
        file: name.clone(),
        reason: e.to_string(),
    })?;
    Ok((name, text))
}
