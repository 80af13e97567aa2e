//! Human output: aligned text columns and short durations.

/// A table of text aligned in columns, two spaces apart; the last column is not padded.
#[derive(Debug)]
pub(crate) struct Columns {
    rows: Vec<Vec<String>>,
}

impl Columns {
    pub(crate) fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    pub(crate) fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if c + 1 < row.len() {
                    let pad = widths[c].saturating_sub(cell.chars().count());
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A duration in milliseconds, short: `850ms`, `12s`, `3m 05s`, `2h 03m`, `3d 04h`.
/// The sign is dropped; callers say "ago" or "in".
pub(crate) fn duration(ms: i64) -> String {
    let ms = ms.unsigned_abs();
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// An instant as shown: RFC 3339 in UTC, `2026-11-30T11:45:00.25Z`.
pub(crate) fn instant(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Text as shown in a cell: `-` when empty, else on one line of at most `max`
/// characters.
pub(crate) fn cell(text: &str, max: usize) -> String {
    match one_line(text, max) {
        line if line.is_empty() => "-".to_owned(),
        line => line,
    }
}

/// One line of at most `max` characters: whitespace runs collapsed, `…` when cut.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_the_last_is_not_padded() {
        let mut t = Columns::new(&["A", "LONG HEADER", "Q"]);
        t.push(vec!["wide cell".into(), "x".into(), "SELECT 1".into()]);
        assert_eq!(
            t.render(),
            "A          LONG HEADER  Q\nwide cell  x            SELECT 1\n"
        );
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(-12_400), "12s");
        assert_eq!(duration(185_000), "3m 05s");
        assert_eq!(duration(7_380_000), "2h 03m");
        assert_eq!(duration(273_600_000), "3d 04h");
    }

    #[test]
    fn text_is_cut_to_one_line() {
        assert_eq!(
            one_line("SELECT\n  pg_advisory_lock(42)", 80),
            "SELECT pg_advisory_lock(42)"
        );
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}
