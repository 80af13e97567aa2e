//! Which calendar days an expression's day-of-month and weekday fields allow,
//! crontab's way: either field when both are restricted, with `L`, `W` and `#`.

use chrono::{Datelike, NaiveDate, Weekday};

/// The day-of-month and weekday fields, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DayRule {
    /// The day-of-month field is `*` or `?`.
    pub(super) any_day: bool,
    /// Days of the month allowed by number: bit `d` for day `d` (1–31).
    pub(super) days: u32,
    /// `L` (0) and `L-n` (n): the day `n` days before the month's last.
    pub(super) from_last: Vec<u32>,
    /// `nW`: the weekday (Monday to Friday) nearest to day `n`, in the same month.
    pub(super) nearest_weekday: Vec<u32>,
    /// `LW`: the month's last weekday (Monday to Friday).
    pub(super) last_weekday: bool,
    /// The weekday field is `*` or `?`.
    pub(super) any_weekday: bool,
    /// Weekdays allowed every week: bit `w` for `w` days from Sunday (0–6).
    pub(super) weekdays: u8,
    /// `FRI#2`: (weekday from Sunday, n): the month's nth such weekday.
    pub(super) nth: Vec<(u32, u32)>,
    /// `FRI#L`, `5L`: the month's last such weekday (from Sunday).
    pub(super) last_of: Vec<u32>,
}

impl DayRule {
    /// Whether it uses `L`, `W` or `#`, which the `cron` crate does not read.
    pub(super) fn has_special(&self) -> bool {
        !(self.from_last.is_empty()
            && self.nearest_weekday.is_empty()
            && !self.last_weekday
            && self.nth.is_empty()
            && self.last_of.is_empty())
    }

    /// Both fields are restricted, so a day matching either one matches (crontab).
    pub(super) fn either(&self) -> bool {
        !self.any_day && !self.any_weekday
    }

    /// Whether the calendar day `date` matches.
    pub(super) fn matches(&self, date: NaiveDate) -> bool {
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (false, true) => self.day_matches(date),
            (true, false) => self.weekday_matches(date),
            (false, false) => self.day_matches(date) || self.weekday_matches(date),
        }
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        let day = date.day();
        let last = last_day(date);
        self.days & (1 << day) != 0
            || self.from_last.iter().any(|&n| n < last && day == last - n)
            || self
                .nearest_weekday
                .iter()
                .any(|&n| nearest_weekday(date, n, last) == Some(day))
            || (self.last_weekday && nearest_weekday(date, last, last) == Some(day))
    }

    fn weekday_matches(&self, date: NaiveDate) -> bool {
        let weekday = date.weekday().num_days_from_sunday();
        let day = date.day();
        self.weekdays & (1 << weekday) != 0
            || self
                .nth
                .iter()
                .any(|&(w, n)| w == weekday && (day - 1) / 7 + 1 == n)
            || self
                .last_of
                .iter()
                .any(|&w| w == weekday && day + 7 > last_day(date))
    }
}

/// The number of days in `date`'s month.
fn last_day(date: NaiveDate) -> u32 {
    let (year, month) = match date.month() {
        12 => (date.year() + 1, 1),
        m => (date.year(), m + 1),
    };
    NaiveDate::from_ymd_opt(year, month, 1)
        .and_then(|first| first.pred_opt())
        .map_or(28, |d| d.day())
}

/// The weekday (Monday to Friday) nearest to day `n` of `date`'s month, which has
/// `last` days, without leaving the month: a Saturday gives the Friday before (the
/// Monday after for the 1st), a Sunday the Monday after (the Friday before for the
/// last day). `None` if the month has no day `n`.
fn nearest_weekday(date: NaiveDate, n: u32, last: u32) -> Option<u32> {
    let day = date.with_day(n)?;
    Some(match day.weekday() {
        Weekday::Sat if n == 1 => 3,
        Weekday::Sat => n - 1,
        Weekday::Sun if n == last => n - 2,
        Weekday::Sun => n + 1,
        _ => n,
    })
}
