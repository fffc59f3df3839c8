//! Azure LLM inference CSV traces: header `TIMESTAMP,ContextTokens,GeneratedTokens`,
//! timestamps `YYYY-MM-DD HH:MM:SS[.fraction]`.

use servesim_core::traffic::{Trace, TraceRow};
use servesim_core::units::SimDur;

use super::{err, too_late, ParsedTrace, TraceError, MAX_SPAN_NS, MAX_TOKENS};

/// Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD HH:MM:SS[.fraction]` (also with `T`) into nanoseconds since 1970.
fn parse_timestamp(s: &str) -> Option<i128> {
    let s = s.trim();
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let (y, mo, da): (i64, i64, i64) =
        (d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?);
    if d.next().is_some() || !(1..=12).contains(&mo) || !(1..=31).contains(&da) {
        return None;
    }
    let (hms, frac) = match time.split_once('.') {
        Some((a, b)) => (a, b),
        None => (time, ""),
    };
    let mut t = hms.split(':');
    let (h, mi, se): (i64, i64, i64) =
        (t.next()?.parse().ok()?, t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    if t.next().is_some() || h > 23 || mi > 59 || se > 60 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut frac_ns: i128 = 0;
    for (i, c) in frac.chars().take(9).enumerate() {
        frac_ns += i128::from(c.to_digit(10)?) * 10i128.pow(8 - u32::try_from(i).ok()?);
    }
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se;
    Some(i128::from(secs) * 1_000_000_000 + frac_ns)
}

/// Parses an Azure LLM inference trace (CSV).
///
/// # Errors
/// A [`TraceError`] for a missing column, an unreadable row or an invalid value.
pub fn parse_azure(bytes: &[u8], file: &str) -> Result<ParsedTrace, TraceError> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(bytes);
    let headers =
        reader.headers().map_err(|e| err(file, Some(1), format!("cannot read the header: {e}")))?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h.eq_ignore_ascii_case(name)).ok_or_else(|| {
            err(
                file,
                Some(1),
                format!("missing column '{name}' (need TIMESTAMP, ContextTokens, GeneratedTokens)"),
            )
        })
    };
    let (c_ts, c_in, c_out) = (col("TIMESTAMP")?, col("ContextTokens")?, col("GeneratedTokens")?);
    let mut stamps = Vec::new();
    let mut rows = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        let line = i + 2;
        let rec = rec.map_err(|e| err(file, Some(line), format!("unreadable row: {e}")))?;
        let field =
            |c: usize, name: &str| rec.get(c).ok_or_else(|| err(file, Some(line), format!("missing {name}")));
        let ts = parse_timestamp(field(c_ts, "TIMESTAMP")?).ok_or_else(|| {
            err(
                file,
                Some(line),
                format!("TIMESTAMP '{}' is not YYYY-MM-DD HH:MM:SS[.fraction]", rec.get(c_ts).unwrap_or("")),
            )
        })?;
        let num = |c: usize, name: &str| -> Result<u32, TraceError> {
            let text = field(c, name)?;
            let n: u64 = text.parse().map_err(|_| {
                err(file, Some(line), format!("{name} '{text}' is not a non-negative integer"))
            })?;
            if n == 0 || n > MAX_TOKENS {
                return Err(err(
                    file,
                    Some(line),
                    format!("{name} must be between 1 and {MAX_TOKENS}, got {n}"),
                ));
            }
            u32::try_from(n).map_err(|_| err(file, Some(line), format!("{name} is too large")))
        };
        let input_tokens = num(c_in, "ContextTokens")?;
        let output_tokens = num(c_out, "GeneratedTokens")?;
        stamps.push(ts);
        rows.push(TraceRow {
            timestamp: SimDur::ZERO,
            session: None,
            input_tokens,
            output_tokens,
            hash_ids: Vec::new(),
            delay: None,
            wait_for: Vec::new(),
        });
    }
    let Some(first) = stamps.iter().min().copied() else {
        return Err(err(file, None, "the trace has no rows"));
    };
    for (i, (row, ts)) in rows.iter_mut().zip(&stamps).enumerate() {
        let offset_ns = u64::try_from(ts - first).unwrap_or(u64::MAX);
        if offset_ns > MAX_SPAN_NS {
            // The header is line 1; a row's line is its index + 2.
            return Err(err(file, Some(i + 2), too_late(&format!("{offset_ns} ns"))));
        }
        row.timestamp = SimDur::from_ns(offset_ns);
    }
    Ok(ParsedTrace { trace: Trace::new(rows, 512), untimed_line: None, token_id_rows: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_csv_rows_and_errors() {
        let text = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n";
        let t = parse_azure(text, "a.csv").unwrap().trace;
        assert_eq!(t.rows[1].timestamp, SimDur::from_ms(52));
        assert_eq!((t.rows[0].input_tokens, t.rows[0].output_tokens), (4808, 10));
        let e = parse_azure(b"TIMESTAMP,Context\n", "a.csv").unwrap_err();
        assert!(e.message.contains("ContextTokens"));
        let e = parse_azure(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-01 00:00:00,1,1\n", "a.csv")
            .unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse_azure(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,1,x\n", "a.csv")
            .unwrap_err();
        assert!(e.to_string().starts_with("a.csv:2: GeneratedTokens 'x'"));
        let e = parse_azure(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,1\n", "a.csv")
            .unwrap_err();
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn timestamps_cross_midnight_and_years() {
        let a = parse_timestamp("2023-12-31 23:59:59.5").unwrap();
        let b = parse_timestamp("2024-01-01 00:00:00").unwrap();
        assert_eq!(b - a, 500_000_000);
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(
            parse_timestamp("2024-02-29T12:00:00"),
            Some(i128::from(days_from_civil(2024, 2, 29)) * 86_400_000_000_000 + 43_200_000_000_000)
        );
    }

    proptest::proptest! {
        #[test]
        fn azure_never_panics(body in "[0-9 :.,\\-A-Za-z\n\"]{0,300}") {
            let text = format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{body}");
            let _ = parse_azure(text.as_bytes(), "fuzz.csv");
        }
    }
}
