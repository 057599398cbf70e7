//! Dates as `-newerXt DATE` takes them (`-newermt '2024-01-31 12:00'`).
//!
//! GNU find reads DATE with getdate, which understands almost any English
//! date ("last monday", "2 days ago"). Sextant reads the forms scripts
//! use, and refuses the rest with a message naming them (never a guess):
//! - `YYYY-MM-DD`, then optionally ` HH:MM`, `:SS`, `.FRACTION` (a `T`
//!   may separate date and time, as in ISO 8601);
//! - then optionally a zone: `Z`, `UTC`, `+HH:MM`, `-HHMM` (with or
//!   without a space before it); without one the time is local, like
//!   find's (the caller converts: [`Civil`] goes to [`super::parse::Env`]);
//! - `@SECONDS[.FRACTION]` since the epoch.
//!
//! Pure: no clock, no time zone database.

use sextant_types::Nanos;

/// A civil (calendar) time without a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Civil {
    /// Seconds since the epoch if this civil time is UTC.
    pub fn utc_seconds(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// What DATE was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Date {
    /// An instant (a zone or `@SECONDS` was given).
    At(Nanos),
    /// A local civil time plus nanoseconds, for the caller to convert.
    Local(Civil, u32),
}

/// The forms accepted, for messages.
pub const FORMS: &str = "YYYY-MM-DD[ HH:MM[:SS[.F]]][Z|UTC|±HH:MM] or @SECONDS[.F]";

/// Parses DATE (see the module docs).
pub fn parse(s: &str) -> Result<Date, String> {
    let bad = || format!("unrecognised date '{s}' (Sextant reads {FORMS})");
    let t = s.trim();
    if let Some(rest) = t.strip_prefix('@') {
        let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
        let secs: i64 = int.parse().map_err(|_| bad())?;
        let nanos = fraction(frac).ok_or_else(bad)?;
        // A negative instant with a fraction: -1.5 is -2 s + 0.5 s.
        let at = if secs < 0 && nanos > 0 {
            Nanos::from_parts(secs - 1, 1_000_000_000 - nanos)
        } else {
            Nanos::from_parts(secs, nanos)
        };
        return at.map(Date::At).ok_or_else(bad);
    }
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        if part.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(part).ok()?.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let (year, month, day) = match (digits(0..4), digits(5..7), digits(8..10)) {
        (Some(y), Some(m), Some(d)) => (i64::from(y), m, d),
        _ => return Err(bad()),
    };
    let mut i = 10;
    let (mut hour, mut minute, mut second, mut nanos) = (0, 0, 0, 0);
    if matches!(b.get(i), Some(b' ' | b'T')) && b.get(i + 3) == Some(&b':') {
        hour = digits(i + 1..i + 3).ok_or_else(bad)?;
        minute = digits(i + 4..i + 6).ok_or_else(bad)?;
        i += 6;
        if b.get(i) == Some(&b':') {
            second = digits(i + 1..i + 3).ok_or_else(bad)?;
            i += 3;
            if b.get(i) == Some(&b'.') {
                let end = b[i + 1..]
                    .iter()
                    .position(|c| !c.is_ascii_digit())
                    .map_or(b.len(), |p| i + 1 + p);
                nanos = fraction(&t[i + 1..end]).ok_or_else(bad)?;
                i = end;
            }
        }
    }
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(bad());
    }
    let civil = Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
    };
    let zone = t[i..].trim_start();
    let offset: i64 = match zone {
        "" => return Ok(Date::Local(civil, nanos)),
        "Z" | "UTC" | "GMT" => 0,
        z => {
            let (sign, hm) = match z.as_bytes()[0] {
                b'+' => (1, &z[1..]),
                b'-' => (-1, &z[1..]),
                _ => return Err(bad()),
            };
            let hm = hm.replace(':', "");
            if hm.len() != 4 || !hm.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let (h, m): (i64, i64) = (
                hm[..2].parse().map_err(|_| bad())?,
                hm[2..].parse().map_err(|_| bad())?,
            );
            if h > 23 || m > 59 {
                return Err(bad());
            }
            sign * (h * 3600 + m * 60)
        }
    };
    Nanos::from_parts(civil.utc_seconds() - offset, nanos)
        .map(Date::At)
        .ok_or_else(bad)
}

/// Nanoseconds of a decimal fraction's digits (at most 9 count).
fn fraction(digits: &str) -> Option<u32> {
    if !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut n: u32 = 0;
    for i in 0..9 {
        let d = digits.as_bytes().get(i).map_or(0, |c| u32::from(c - b'0'));
        n = n * 10 + d;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        match parse(s) {
            Ok(Date::At(n)) => n.0,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn instants() {
        assert_eq!(at("@0"), 0);
        assert_eq!(at("@1700000000.25"), 1_700_000_000_250_000_000);
        assert_eq!(at("@-1.5"), -1_500_000_000);
        assert_eq!(at("1970-01-01Z"), 0);
        assert_eq!(at("2000-03-01 00:00 UTC"), 951_868_800 * 1_000_000_000);
        assert_eq!(at("2024-02-29T12:30:15Z"), 1_709_209_815 * 1_000_000_000);
        assert_eq!(
            at("2024-02-29 12:30:15.5+01:00"),
            (1_709_209_815 - 3600) * 1_000_000_000 + 500_000_000
        );
        assert_eq!(
            at("2024-02-29 12:30 -0130"),
            (1_709_209_800 + 5400) * 1_000_000_000
        );
    }

    #[test]
    fn local_times_are_left_to_the_caller() {
        let c = Civil {
            year: 2024,
            month: 1,
            day: 31,
            hour: 0,
            minute: 0,
            second: 0,
        };
        assert_eq!(parse("2024-01-31"), Ok(Date::Local(c, 0)));
        let c2 = Civil {
            hour: 23,
            minute: 59,
            second: 58,
            ..c
        };
        assert_eq!(
            parse(" 2024-01-31 23:59:58.1 "),
            Ok(Date::Local(c2, 100_000_000))
        );
        assert_eq!(c.utc_seconds(), 1_706_659_200);
    }

    #[test]
    fn everything_else_is_refused() {
        for s in [
            "yesterday",
            "2 days ago",
            "2024-13-01",
            "2023-02-29",
            "2024-01-32",
            "2024-1-5",
            "2024-01-01 25:00",
            "2024-01-01 12:00 CET",
            "2024-01-01 12:00 +5",
            "@",
            "@1e9",
            "",
        ] {
            let e = parse(s).unwrap_err();
            assert!(e.contains("unrecognised date"), "{s}: {e}");
        }
    }

    #[test]
    fn civil_days_match_the_calendar() {
        // Against a day-by-day walk from the epoch, over 1960 – 2040.
        let mut days = days_from_civil(1960, 1, 1);
        for y in 1960..2040 {
            for m in 1..=12 {
                for d in 1..=days_in_month(y, m) {
                    assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
                    days += 1;
                }
            }
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    proptest::proptest! {
        /// Any text is a date or refused, never a panic; a printed UTC
        /// date reads back as the same instant.
        #[test]
        fn any_text_is_read_or_refused(s in "\\PC{0,40}", secs in -5_000_000_000i64..5_000_000_000) {
            let _ = parse(&s);
            let days = secs.div_euclid(86_400);
            let in_day = secs.rem_euclid(86_400);
            // Civil date of `days` (the inverse of days_from_civil), by search.
            let mut year = 1970 + days / 366 - 2;
            while days_from_civil(year + 1, 1, 1) <= days {
                year += 1;
            }
            let mut month = 1;
            while month < 12 && days_from_civil(year, month + 1, 1) <= days {
                month += 1;
            }
            let day = (days - days_from_civil(year, month, 1) + 1) as u32;
            if (1000..=9999).contains(&year) {
                let text = format!(
                    "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
                    in_day / 3600,
                    in_day % 3600 / 60,
                    in_day % 60
                );
                proptest::prop_assert_eq!(parse(&text), Ok(Date::At(Nanos(secs * 1_000_000_000))));
            }
        }
    }
}
