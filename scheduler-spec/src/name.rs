//! The rule for job and lease names.

/// The longest name, in bytes, a job or lease may have.
pub const MAX_NAME_LEN: usize = 200;

/// Checks a job or lease name: 1 to [`MAX_NAME_LEN`] bytes of UTF-8, without NUL or
/// other control characters (PostgreSQL's `text` cannot hold NUL; control characters
/// only make names hard to read in logs and status output).
///
/// ```
/// assert_eq!(scheduler_spec::check_name("nightly sweep"), Ok(()));
/// assert_eq!(scheduler_spec::check_name(""), Err("a name must not be empty"));
/// ```
///
/// # Errors
/// The reason, a sentence fragment such as `"a name must not be empty"`, for the
/// caller to wrap in its own error with the name.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("a name must not be empty")
    } else if name.len() > MAX_NAME_LEN {
        Err("a name must be at most 200 bytes long")
    } else if name.chars().any(char::is_control) {
        Err("a name must not contain control characters (NUL, newline, tab, …)")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_printable_text() {
        assert_eq!(check_name("sweep"), Ok(()));
        assert_eq!(check_name("a b 'c' ü"), Ok(()));
        assert_eq!(check_name(&"x".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(check_name(""), Err("a name must not be empty"));
        assert_eq!(
            check_name(&"x".repeat(MAX_NAME_LEN + 1)),
            Err("a name must be at most 200 bytes long")
        );
        // Bytes, not characters: 101 two-byte characters are too long.
        assert!(check_name(&"ü".repeat(101)).is_err());
        for bad in ["a\nb", "a\0b", "a\tb", "\u{7f}"] {
            assert_eq!(
                check_name(bad),
                Err("a name must not contain control characters (NUL, newline, tab, …)")
            );
        }
    }

    #[test]
    fn the_message_states_the_limit() {
        let too_long = check_name(&"x".repeat(MAX_NAME_LEN + 1)).err();
        assert!(too_long.is_some_and(|m| m.contains(&MAX_NAME_LEN.to_string())));
    }
}
