//! IANA time zones.

use std::str::FromStr;

use chrono_tz::Tz;

use crate::error::{Error, Result};

/// The IANA time zone `name`, spelled exactly (`"Europe/Berlin"`, `"UTC"`).
///
/// # Errors
/// [`Error::UnknownTimeZone`], whose message suggests the zone meant when only the
/// case differs (`"europe/berlin"`).
pub fn parse_time_zone(name: &str) -> Result<Tz> {
    Tz::from_str(name).map_err(|_| Error::UnknownTimeZone {
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(name: &str) -> Option<String> {
        parse_time_zone(name).err().map(|e| e.to_string())
    }

    #[test]
    fn time_zones_are_iana_names() {
        assert_eq!(
            parse_time_zone("Europe/Berlin"),
            Ok(chrono_tz::Europe::Berlin)
        );
        assert_eq!(parse_time_zone("UTC"), Ok(chrono_tz::UTC));
        assert_eq!(
            message("europe/berlin").as_deref(),
            Some(r#"unknown time zone "europe/berlin"; did you mean "Europe/Berlin"?"#)
        );
        assert_eq!(
            message(" utc ").as_deref(),
            Some(r#"unknown time zone " utc "; did you mean "UTC"?"#)
        );
        assert_eq!(
            message("Mars/Olympus").as_deref(),
            Some(
                r#"unknown time zone "Mars/Olympus"; use an IANA name such as "Europe/Berlin" or "UTC""#
            )
        );
    }
}
