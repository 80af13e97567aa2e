//! How a batch reaches SQL: as **one** bound JSON parameter, unpacked by `json_each`.
//!
//! One text parameter carries the whole batch, so a batch of any size is one
//! statement, every batch size shares one prepared statement, and SQLite's limit on
//! bound parameters never splits a batch. The values are still never spliced into
//! SQL: SQLite's JSON parser reads them back exactly (`value ->> 0` is the first
//! element of a row, as SQL text or integer).

use std::fmt::Write as _;

use scheduler_core::{LeaseKey, LeaseName, TakeRequest};

/// `[["name","holder",tick_micros,"job","node",caught_up],…]` for a batch take
/// (`caught_up` 1 or 0: [`ControlKey::caught_up_on_resume`]
/// (scheduler_core::ControlKey)); a request without a [control
/// key](TakeRequest::control) leaves out job, node and `caught_up` (read back as
/// `NULL`, which no pause names).
pub(crate) fn takes(requests: &[TakeRequest]) -> String {
    rows(requests, |out, r| {
        string(out, r.name.as_str());
        out.push(',');
        string(out, r.holder.as_str());
        // Writing to a String cannot fail.
        let _ = write!(out, ",{}", r.tick.at().timestamp_micros());
        if let Some(control) = &r.control {
            out.push(',');
            string(out, &control.job);
            out.push(',');
            string(out, &control.node);
            out.push_str(if control.caught_up_on_resume {
                ",1"
            } else {
                ",0"
            });
        }
    })
}

/// `[["name","holder"],…]` for a batch renewal or release.
pub(crate) fn keys(keys: &[LeaseKey]) -> String {
    rows(keys, |out, k| {
        string(out, k.name.as_str());
        out.push(',');
        string(out, k.holder.as_str());
    })
}

/// `[["name"],…]` for a batch of names.
pub(crate) fn names(names: &[LeaseName]) -> String {
    rows(names, |out, n| string(out, n.as_str()))
}

fn rows<T>(items: &[T], mut row: impl FnMut(&mut String, &T)) -> String {
    let mut out = String::with_capacity(2 + items.len() * 96);
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        row(&mut out, item);
        out.push(']');
    }
    out.push(']');
    out
}

/// Appends `s` as a JSON string (RFC 8259: quote, backslash and control characters
/// escaped; all other Unicode as is).
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> String {
        let mut out = String::new();
        string(&mut out, s);
        out
    }

    #[test]
    fn strings_are_escaped_as_json() {
        assert_eq!(json("plain"), r#""plain""#);
        assert_eq!(json(r#"it's "quoted""#), r#""it's \"quoted\"""#);
        assert_eq!(json(r"back\slash"), r#""back\\slash""#);
        assert_eq!(json("a\nb\tc\u{1}"), r#""a\nb\tc\u0001""#);
        assert_eq!(json("ünïcødé ✓ 🚀"), "\"ünïcødé ✓ 🚀\"");
    }

    #[test]
    fn a_batch_is_an_array_of_rows() {
        let name = scheduler_core::LeaseName::new("a\"b").map_err(|e| e.to_string());
        let Ok(name) = name else {
            panic!("{name:?}");
        };
        let holder = scheduler_core::Holder::from_stored("h".to_owned());
        let key = LeaseKey { name, holder };
        assert_eq!(keys(&[key.clone(), key]), r#"[["a\"b","h"],["a\"b","h"]]"#);
        assert_eq!(keys(&[]), "[]");
    }

    #[test]
    fn a_take_carries_its_control_key() {
        let Ok(name) = scheduler_core::LeaseName::new("j:n") else {
            panic!("name");
        };
        let Some(at) = chrono::DateTime::from_timestamp(1, 0) else {
            panic!("time");
        };
        let mut request = TakeRequest::new(name, scheduler_core::Tick::new(at));
        request.holder = scheduler_core::Holder::from_stored("h".to_owned());
        assert_eq!(
            takes(std::slice::from_ref(&request)),
            r#"[["j:n","h",1000000]]"#
        );
        let request = request.controlled_by("j", "n\"");
        assert_eq!(
            takes(std::slice::from_ref(&request)),
            r#"[["j:n","h",1000000,"j","n\"",0]]"#
        );
        let request = request.caught_up_on_resume();
        assert_eq!(takes(&[request]), r#"[["j:n","h",1000000,"j","n\"",1]]"#);
    }
}
