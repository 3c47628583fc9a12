//! A latency target as a user writes it: `p99<=10ms`, `p99.9<=2ms`, `p50<=250us`, `p90<=1s`.

use crate::record::slo::Target;

/// The quantiles a step measures.
const QUANTILES: [&str; 4] = ["p50", "p90", "p99", "p99.9"];

pub fn parse(text: &str) -> Result<Target, String> {
    let spec = "a target is a quantile, <=, and a time with its unit, as p99<=10ms (quantiles: \
                p50, p90, p99, p99.9; units: us, ms, s)";
    let (quantile, bound) = text
        .split_once("<=")
        .or_else(|| text.split_once('<'))
        .ok_or_else(|| format!("{spec}; got {text:?}"))?;
    let quantile = quantile.trim();
    if !QUANTILES.contains(&quantile) {
        return Err(format!("{spec}; got the quantile {quantile:?}"));
    }
    let bound = bound.trim();
    let digits = bound
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{spec}; {bound:?} has no unit"))?;
    let (number, unit) = bound.split_at(digits);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{spec}; {bound:?} is not a time"))?;
    let ms = match unit.trim() {
        "us" | "µs" => number / 1e3,
        "ms" => number,
        "s" => number * 1e3,
        other => return Err(format!("{spec}; {other:?} is not a unit")),
    };
    if !(ms > 0.0 && ms.is_finite()) {
        return Err(format!("{spec}; the time must be above 0, got {bound:?}"));
    }
    Ok(Target {
        quantile: quantile.to_owned(),
        ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_quantile_and_a_time_with_its_unit() {
        let t = parse("p99<=10ms").unwrap();
        assert_eq!((t.quantile.as_str(), t.ms), ("p99", 10.0));
        assert_eq!(parse("p99.9<=250us").unwrap().ms, 0.25);
        assert_eq!(parse("p50 <= 1.5s").unwrap().ms, 1500.0);
        assert!(parse("p99<=10").unwrap_err().contains("no unit"));
        assert!(parse("p98<=10ms").unwrap_err().contains("quantile"));
        assert!(parse("p99<=0ms").unwrap_err().contains("above 0"));
        assert!(parse("10ms").is_err());
        assert!(parse("p99<=10min").unwrap_err().contains("not a unit"));
    }
}
