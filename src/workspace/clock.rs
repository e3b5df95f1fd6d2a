//! litany's clock (CONTRACT §3.3): `YYYY-MM-DDTHH:MM:SSZ`, UTC, second precision, as
//! chrono's `%Y-%m-%dT%H:%M:%SZ` prints it. Deposits stamp `deposited_at:` with it, and
//! `meta.json`, `output.json` and the frontmatter are read back with it: one format, one
//! home, so what litanyfs writes and what it reads can never disagree.
//!
//! Plain calendar arithmetic (Howard Hinnant's civil-date algorithms), no time zone data.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in litany's clock format: `YYYY-MM-DDTHH:MM:SSZ` (UTC). A clock before the epoch
/// reads as the epoch.
pub(crate) fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    format_utc(secs)
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC). Years
/// outside 0..=9999 are printed with as many digits as they need, as chrono does.
pub(crate) fn format_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `YYYY-MM-DDTHH:MM:SSZ` (litany's clock, CONTRACT §3.3) as seconds since the epoch.
pub(crate) fn parse_utc(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Seconds since the epoch now.
pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_like_chrono() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_796_204_571), "2026-12-02T09:42:51Z");
        assert_eq!(format_utc(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(format_utc(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(format_utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_utc(253_402_300_799), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn clock_matches_the_system_date() {
        // One sample of the clock, formatted by us and by date(1).
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let date = String::from_utf8(out.stdout).unwrap();
        assert_eq!(format_utc(secs as i64), date.trim());
        // now_utc() reads that clock: it lies between two samples of it taken around
        // it (the format sorts as the time does).
        let sample = || {
            let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            format_utc(d.as_secs() as i64)
        };
        let before = sample();
        let now = now_utc();
        let after = sample();
        assert!(before <= now && now <= after, "{before} {now} {after}");
    }

    #[test]
    fn utc_round_trips() {
        for secs in [0, 1_796_204_571, 951_782_400, 4_102_444_799] {
            let s = format_utc(secs);
            assert_eq!(parse_utc(&s), Some(secs), "{s}");
        }
        for bad in [
            "",
            "2026-12-02T09:42:51",
            "2026-13-02T09:42:51Z",
            "2026-12-02 09:42:51Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}
