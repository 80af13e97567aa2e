//! Many dynamic schedules put at once ([`Controls::put_schedules`]): every row checked
//! before anything is written, then one write, one version bump and one audit record
//! for the batch.
//!
//! [`Controls::put_schedules`]: super::Controls::put_schedules

use std::collections::HashMap;

use super::ScheduleRow;
use crate::error::{Error, Result};

/// How many rows' names a batch's audit record names.
const NAMED_IN_RECORD: usize = 5;

/// `cause`, the refusal of row `index`, as the batch's refusal.
pub(crate) fn in_batch(index: usize, row: &ScheduleRow, cause: Error) -> Error {
    Error::InBatch {
        index,
        name: row.name.clone(),
        cause: Box::new(cause),
    }
}

/// Refuses a batch that names one schedule twice: which row is kept would depend on
/// the order the store writes them in.
///
/// # Errors
/// [`Error::InBatch`] for the second row of the name, its cause
/// [`Error::InvalidInput`] naming the first.
pub(crate) fn check_unique(rows: &[ScheduleRow]) -> Result<()> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(rows.len());
    for (index, row) in rows.iter().enumerate() {
        if let Some(first) = seen.insert(row.name.as_str(), index) {
            return Err(in_batch(
                index,
                row,
                Error::InvalidInput {
                    reason: format!(
                        "schedule {:?} is also row {first}: put each name once per batch",
                        row.name
                    ),
                },
            ));
        }
    }
    Ok(())
}

/// The rule every row's handler of a batch keeps: some running instance registered
/// it. Handed to [`ControlTables::write_schedules`](super::ControlTables::write_schedules),
/// which reads the handlers where its write sees them.
#[derive(Debug, Clone, Copy)]
pub struct HandlersCheck<'a> {
    pub(super) rows: &'a [ScheduleRow],
}

impl HandlersCheck<'_> {
    /// Whether every row's handler is among `known`, the handlers registered.
    ///
    /// # Errors
    /// [`Error::InBatch`] for the first row whose handler is not, its cause
    /// [`Error::UnknownHandler`].
    pub fn check(&self, known: &[String]) -> Result<()> {
        for (index, row) in self.rows.iter().enumerate() {
            HandlerCheck { row }
                .check(known)
                .map_err(|cause| in_batch(index, row, cause))?;
        }
        Ok(())
    }
}

/// What the audit record of a batch of `rows` says: how many, and the first names.
/// `rows` is not empty.
pub fn batch_detail(rows: &[ScheduleRow]) -> String {
    let names: Vec<String> = rows
        .iter()
        .take(NAMED_IN_RECORD)
        .map(|row| format!("{:?}", row.name))
        .collect();
    let more = rows.len().saturating_sub(NAMED_IN_RECORD);
    let plural = if rows.len() == 1 { "" } else { "s" };
    let mut detail = format!("{} schedule{plural} put: {}", rows.len(), names.join(", "));
    if more > 0 {
        detail.push_str(&format!(" and {more} more"));
    }
    detail
}

/// The rule a dynamic schedule's handler keeps: some running instance registered
/// it. Handed to [`ControlTables::write_schedule`](super::ControlTables::write_schedule), which reads the handlers.
#[derive(Debug, Clone, Copy)]
pub struct HandlerCheck<'a> {
    pub(crate) row: &'a ScheduleRow,
}

impl HandlerCheck<'_> {
    /// Whether the row's handler is among `known`, the handlers registered.
    ///
    /// # Errors
    /// [`Error::UnknownHandler`], listing the ones registered.
    pub fn check(&self, known: &[String]) -> Result<()> {
        if known.contains(&self.row.handler) {
            return Ok(());
        }
        let mut known: Vec<&str> = known.iter().map(String::as_str).collect();
        known.sort_unstable();
        known.dedup();
        Err(Error::UnknownHandler {
            handler: self.row.handler.clone(),
            known: if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str) -> ScheduleRow {
        ScheduleRow::new(name, "h", "every 30s")
    }

    #[test]
    fn a_name_twice_is_refused_naming_both_rows() {
        let rows = [row("a"), row("b"), row("a")];
        let err = check_unique(&rows).unwrap_err();
        assert!(
            matches!(&err, Error::InBatch { index: 2, name, .. } if name == "a"),
            "{err:?}"
        );
        assert!(err.to_string().contains("also row 0"), "{err}");
        assert!(check_unique(&rows[..2]).is_ok());
    }

    #[test]
    fn the_detail_says_how_many_and_names_a_few() {
        let rows: Vec<ScheduleRow> = (0..7).map(|i| row(&format!("r{i}"))).collect();
        assert_eq!(
            batch_detail(&rows),
            r#"7 schedules put: "r0", "r1", "r2", "r3", "r4" and 2 more"#
        );
        assert_eq!(batch_detail(&rows[..1]), r#"1 schedule put: "r0""#);
    }

    #[test]
    fn an_unknown_handler_names_its_row() {
        let mut rows = vec![row("a"), row("b")];
        rows[1].handler = "other".to_owned();
        let err = HandlersCheck { rows: &rows }
            .check(&["h".to_owned()])
            .unwrap_err();
        let Error::InBatch { index, cause, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(index, 1);
        assert!(matches!(*cause, Error::UnknownHandler { .. }));
    }
}
