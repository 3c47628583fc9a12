//! report.html: one self-contained page. Plots are inline SVG, styles (`style.css`) and the
//! table-sorting script (`script.js`) inline; a Content-Security-Policy forbids every fetch,
//! so a page that tried one would say so in the browser's console. The shell of a page is
//! here; the run's page (`run`), the comparison's (`comparison`), and what both say of a run
//! (`facts`) beside it.
//!
//! Every section is a `<section data-section=NAME>` and every plot a
//! `<figure class="plot" data-plot=ID>`: the anchors of the table of contents, and what the
//! report test looks for.

mod allocator;
mod comparison;
mod facts;
mod run;
mod time;

pub use comparison::comparison;
pub use run::single;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::plots::{Body, Figure};
use crate::ground::units;

/// The page and its figures (for `--format`, which also writes each plot alone).
pub struct Page {
    pub html: String,
    pub figures: Vec<Figure>,
}

// Style and script are ours and must reach the page verbatim: entity-escaping would break
// selectors such as `details.run > summary` and the script's string literals.
const STYLE: PreEscaped<&str> = PreEscaped(include_str!("style.css"));

/// Sorting by any column: numbers by `data-v`, text otherwise, unmeasured cells last.
const SCRIPT: PreEscaped<&str> = PreEscaped(include_str!("script.js"));

/// Every fetch refused: the report must stand alone.
const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

fn page(title: &str, subtitle: Markup, nav: &[(&str, &str)], body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (STYLE) }
            }
            body {
                header {
                    h1 { (title) }
                    p class="lead" { (subtitle) }
                    nav {
                        @for (anchor, name) in nav {
                            a href={ "#" (anchor) } { (name) }
                        }
                    }
                }
                (body)
                script { (SCRIPT) }
            }
        }
    }
    .into_string()
}

fn section(id: &str, title: &str, content: Markup) -> Markup {
    html! {
        section id=(id) data-section=(id) {
            h2 { (title) }
            (content)
        }
    }
}

/// A figure, its id made unique by `prefix` where a page holds several runs.
fn figure(figure: &Figure, prefix: &str) -> Markup {
    match &figure.body {
        Body::Svg(svg) => {
            let svg = svg.trim_start_matches(|c| c != '<');
            let svg = match svg.strip_prefix("<?xml") {
                Some(rest) => rest.split_once("?>").map_or(rest, |(_, svg)| svg),
                None => svg,
            };
            html! {
                figure class="plot" id={ "plot-" (prefix) (figure.id) } data-plot=(figure.id) {
                    @if !figure.titled {
                        h3 { (figure.title) }
                    }
                    // Our own plot code drew it: trusted markup.
                    div class="svg" role="img" aria-label=(figure.title) { (PreEscaped(svg)) }
                    figcaption { (figure.caption) }
                }
            }
        }
        Body::Absent(why) => html! {
            figure class="plot absent" id={ "plot-" (prefix) (figure.id) } data-plot=(figure.id)
                data-absent="yes" {
                h3 { (figure.title) }
                p { (why) }
            }
        },
    }
}

/// A join that keeps each item as markup: joining strings first would mean escaping by hand.
fn joined<T>(
    items: impl IntoIterator<Item = T>,
    separator: &str,
    each: impl Fn(T) -> Markup,
) -> Markup {
    html! {
        @for (i, item) in items.into_iter().enumerate() {
            @if i > 0 {
                (separator)
            }
            (each(item))
        }
    }
}

/// A cell of commands.csv as the table shows it: numbers with separators (sorted by value),
/// empty as "–" (not measured).
fn cell(value: &str) -> Markup {
    cell_in(value, "")
}

/// [`cell`] with `class` (space-separated) added to its own.
fn cell_in(value: &str, class: &str) -> Markup {
    let classes = |own: &str| {
        let all = [own, class]
            .iter()
            .filter(|c| !c.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        (!all.is_empty()).then_some(all)
    };
    if value.is_empty() {
        return html! { td class=[classes("na")] data-v="" title="not measured" { "–" } };
    }
    match value.parse::<f64>() {
        Ok(number) => html! {
            td class=[classes("")] data-v=(number) {
                @match value.parse::<i128>() {
                    Ok(integer) => (units::thousands(integer)),
                    Err(_) => (value),
                }
            }
        },
        Err(_) => html! { td class=[classes("text")] { (value) } },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_empty_apart_from_zero() {
        assert!(cell("").0.contains("class=\"na\""));
        assert!(cell_in("", "quiet").0.contains("class=\"na quiet\""));
        assert!(cell("0").0.contains("data-v=\"0\""));
        assert_eq!(cell("1234567").0, "<td data-v=\"1234567\">1,234,567</td>");
        assert_eq!(cell("rss_stat").0, "<td class=\"text\">rss_stat</td>");
        assert_eq!(
            cell("<a&\"b\">").0,
            "<td class=\"text\">&lt;a&amp;&quot;b&quot;&gt;</td>"
        );
    }
}
