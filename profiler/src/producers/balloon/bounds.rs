//! Where a band lies in free pages, for the watermarks of the moment.

use anyhow::{Result, bail};

use crate::ground::band::Band;
use crate::record::sampling::Watermarks;

use crate::record::balloon::Bounds;

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
