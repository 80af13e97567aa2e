//! The guess for a misspelled key or word: the closest valid one, if close
//! ([`closest`]), said as `did you mean "x"? ` ([`did_you_mean`]).

/// Of `candidates`, the closest to `written` if it is close: at most two edits away,
/// and fewer edits than its length.
///
/// ```
/// assert_eq!(scheduler_spec::closest(["skip", "latest", "all"], "lates"), Some("latest"));
/// assert_eq!(scheduler_spec::closest(["skip", "latest", "all"], "sometimes"), None);
/// ```
pub fn closest<'a>(
    candidates: impl IntoIterator<Item = &'a str>,
    written: &str,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(candidate, written), candidate))
        .filter(|(d, candidate)| *d <= 2 && *d < candidate.len())
        .min()
        .map(|(_, candidate)| candidate)
}

/// `did you mean "x"? ` for a guess, nothing without one.
pub fn did_you_mean(guess: Option<&str>) -> String {
    guess.map_or_else(String::new, |guess| format!("did you mean {guess:?}? "))
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("every", "evry"), 1);
        assert_eq!(edit_distance("catch_up", "catchup"), 1);
        assert_eq!(edit_distance("tz", "tz"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
