//! The guesses for a misspelled key or word: the closest valid one, if close.

use syn::Error;
use syn::meta::ParseNestedMeta;

use super::KEYS;

/// `did you mean "x"? ` for a guess, nothing without one.
pub(super) fn did_you_mean(guess: Option<&str>) -> String {
    guess.map_or_else(String::new, |guess| format!("did you mean {guess:?}? "))
}

/// Of `candidates`, the closest to `written` if it is close: at most two edits away,
/// and fewer edits than its length.
pub(super) fn closest<'a>(
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

/// The error for a key not in [`KEYS`], with a guess when one is close.
pub(super) fn unknown_key(meta: &ParseNestedMeta<'_>) -> Error {
    let path = &meta.path;
    let written = path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    let valid = KEYS.join(", ");
    let msg = match closest(KEYS, &written) {
        Some(k) => format!("unknown key `{written}`; did you mean `{k}`? valid keys: {valid}"),
        None => format!("unknown key `{written}`; valid keys: {valid}"),
    };
    Error::new_spanned(path, msg)
}

/// Levenshtein distance, in characters.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
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
