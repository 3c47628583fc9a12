//! The bands free memory can be in, between the kernel's zone watermarks, named after the
//! watermark they are below: baseline [promo, ∞), promo [high, promo), high [low, high), low
//! [min, low), min [0, min). The sampler reports them, an experiment holds them (all but min:
//! below it only the kernel may allocate, and skillprof never aims there), and a cmds file
//! names them.

use std::fmt;

/// Where free pages stand against the watermarks. Each band is named after the watermark
/// they are below (and not below the next lower one): baseline [promo, ∞), promo
/// [high, promo), high [low, high), low [min, low), min [0, min). Without a promo
/// watermark, baseline starts at high. Ordered from the most severe, so the lowest band
/// of several is their `min()`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Band {
    Min,
    Low,
    High,
    Promo,
    Baseline,
}

impl Band {
    const ALL: [Band; 5] = [
        Band::Min,
        Band::Low,
        Band::High,
        Band::Promo,
        Band::Baseline,
    ];

    /// The band `name` (as [`Band::name`] writes it) stands for.
    pub fn from_name(name: &str) -> Option<Band> {
        Band::ALL.into_iter().find(|band| band.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Band::Min => "min",
            Band::Low => "low",
            Band::High => "high",
            Band::Promo => "promo",
            Band::Baseline => "baseline",
        }
    }
}

impl fmt::Display for Band {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

    #[test]
    fn names_parse_and_min_is_refused_with_the_reason() {
        assert_eq!(parse("low"), Ok(Band::Low));
        assert_eq!(parse("baseline"), Ok(Band::Baseline));
        assert!(parse("min").unwrap_err().contains("only the kernel"));
        assert!(parse("Low").unwrap_err().contains("unknown band"));
    }
}
