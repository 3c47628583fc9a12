//! The bands an experiment can hold, named after the watermark free memory is below:
//! baseline [promo, ∞), promo [high, promo), high [low, high), low [min, low). Below min only
//! the kernel may allocate; skillprof never aims there.

use anyhow::{Result, bail};

use crate::sample::zoneinfo::{Band, Watermarks};

/// From the most free memory to the least: the order an experiment visits them in.
pub const HOLDABLE: [Band; 4] = [Band::Baseline, Band::Promo, Band::High, Band::Low];

/// `baseline`, `promo`, `high` or `low`.
pub fn parse(text: &str) -> Result<Band, String> {
    match HOLDABLE.into_iter().find(|band| band.name() == text) {
        Some(band) => Ok(band),
        None if text == "min" => Err(
            "the min band [0, min) is where only the kernel may allocate; the lowest band \
             skillprof holds is low [min, low)"
                .to_string(),
        ),
        None => Err(format!(
            "unknown band {text:?}; the bands are baseline, promo, high and low"
        )),
    }
}

/// A band's range of free pages: [lower, upper), `upper` None for baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub lower: u64,
    pub upper: Option<u64>,
}

impl Bounds {
    pub fn contains(&self, free_pages: u64) -> bool {
        free_pages >= self.lower && self.upper.is_none_or(|upper| free_pages < upper)
    }
}

/// Where `band` lies for these watermarks. Without a promo watermark (kernels before 6.3)
/// baseline starts at high and there is no promo band.
pub fn bounds(band: Band, marks: &Watermarks) -> Result<Bounds> {
    let (lower, upper) = match band {
        Band::Baseline => (marks.promo.unwrap_or(marks.high), None),
        Band::Promo => match marks.promo {
            Some(promo) => (marks.high, Some(promo)),
            None => bail!(
                "this kernel has no promo watermark (it came with 6.3): there is no promo \
                 band to hold"
            ),
        },
        Band::High => (marks.low, Some(marks.high)),
        Band::Low => (marks.min, Some(marks.low)),
        Band::Min => (0, Some(marks.min)),
    };
    Ok(Bounds { lower, upper })
}

/// `[high, promo)`, as the help and the table write a band.
pub fn interval(band: Band) -> &'static str {
    match band {
        Band::Baseline => "[promo, inf)",
        Band::Promo => "[high, promo)",
        Band::High => "[low, high)",
        Band::Low => "[min, low)",
        Band::Min => "[0, min)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKS: Watermarks = Watermarks {
        min: 100,
        low: 200,
        high: 300,
        promo: Some(400),
    };

    #[test]
    fn names_parse_and_min_is_refused_with_the_reason() {
        assert_eq!(parse("low"), Ok(Band::Low));
        assert_eq!(parse("baseline"), Ok(Band::Baseline));
        assert!(parse("min").unwrap_err().contains("only the kernel"));
        assert!(parse("Low").unwrap_err().contains("unknown band"));
    }

    #[test]
    fn bounds_follow_the_watermarks() {
        let low = bounds(Band::Low, &MARKS).unwrap();
        assert_eq!(
            low,
            Bounds {
                lower: 100,
                upper: Some(200)
            }
        );
        assert!(low.contains(100) && low.contains(199) && !low.contains(200));
        assert!(bounds(Band::Baseline, &MARKS).unwrap().contains(u64::MAX));
        let old = Watermarks {
            promo: None,
            ..MARKS
        };
        assert_eq!(bounds(Band::Baseline, &old).unwrap().lower, 300);
        assert!(bounds(Band::Promo, &old).is_err());
    }
}
