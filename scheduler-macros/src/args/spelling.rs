//! The guess for a misspelled key: the closest valid one, if close
//! ([`scheduler_spec::closest`], the rule a policy text's keys and words are guessed
//! by too).

use scheduler_spec::closest;
use syn::Error;
use syn::meta::ParseNestedMeta;

use super::KEYS;

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
