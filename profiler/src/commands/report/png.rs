//! PNG versions of the plots: the same SVG, rasterised by resvg, so that a PNG shows exactly
//! what the report shows. Text needs a font: the system's fonts are searched once, DejaVu
//! Sans (Debian's fonts-dejavu-core) preferred for the plots' `sans-serif`.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use resvg::{tiny_skia, usvg};

/// The family the plots' `sans-serif` text is set in, if the system has it.
const PREFERRED: &str = "DejaVu Sans";

/// Rasterises SVGs; loading the system's fonts once.
pub struct Rasteriser {
    options: usvg::Options<'static>,
    /// Pixels per SVG pixel: 2 gives crisp text on screens and in documents.
    scale: f32,
}

impl Rasteriser {
    pub fn new() -> Result<Self> {
        let mut options = usvg::Options::default();
        let fonts = options.fontdb_mut();
        fonts.load_system_fonts();
        if fonts.is_empty() {
            bail!(
                "PNG plots need a TrueType font for their text and this system has none \
                 (looked where fontconfig does, e.g. /usr/share/fonts); install one, e.g. \
                 apt-get install fonts-dejavu-core, or use --format svg"
            );
        }
        let has = |family: &str| {
            fonts
                .faces()
                .any(|face| face.families.iter().any(|(name, _)| name == family))
        };
        let family = if has(PREFERRED) {
            PREFERRED.to_owned()
        } else {
            fonts
                .faces()
                .find_map(|face| face.families.first().map(|(name, _)| name.clone()))
                .context("the system's fonts have no family names")?
        };
        fonts.set_sans_serif_family(family);
        Ok(Rasteriser {
            options,
            scale: 2.0,
        })
    }

    /// Writes `svg` as the PNG file `path`.
    pub fn write(&self, svg: &str, path: &Path) -> Result<()> {
        let tree = usvg::Tree::from_str(svg, &self.options)
            .map_err(|error| anyhow!("reading a plot's SVG back: {error}"))?;
        let size = tree.size();
        let (width, height) = (
            (size.width() * self.scale).ceil() as u32,
            (size.height() * self.scale).ceil() as u32,
        );
        let mut pixmap = tiny_skia::Pixmap::new(width, height)
            .with_context(|| format!("a {width}x{height} image is too large"))?;
        pixmap.fill(tiny_skia::Color::WHITE);
        resvg::render(
            &tree,
            tiny_skia::Transform::from_scale(self.scale, self.scale),
            &mut pixmap.as_mut(),
        );
        pixmap
            .save_png(path)
            .map_err(|error| anyhow!("writing {}: {error}", path.display()))
    }
}
