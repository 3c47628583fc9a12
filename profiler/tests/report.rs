//! `skillprof report` end to end: real runs of the skill host, their report.html rendered in
//! headless Chromium (Debian's, with the flags this closed network needs), a screenshot, no
//! console errors, every section there and every plot drawn.
//!
//! Runs as root (the runs attach probes). Chromium must be installed (scripts/setup.sh does):
//! a missing one fails the test, never skips it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use skillprof::ground::machine::Machine;
use skillprof::producers::probes::cost_model::{CostModel, EventCost};
use skillprof::record::probes::{Mechanism, Ns, Per, Probe};
use skillprof::views::explain;
use skillprof::views::output::commands_csv::{self, CsvRow};
use skillprof::views::output::entries_jsonl;
use skillprof_common::Counters;

mod common;
use common::cli::{describe, run_ok, skillprof, smoke_cmds};

/// Where this test binary keeps its runs: under target/, emptied once per process.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-test");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// Runs `cmds` with `args` into scratch/`name` and returns the run folder.
fn run(name: &str, cmds: &Path, args: &[&str]) -> PathBuf {
    run_ok(cmds, &scratch().join(name), args).1
}

/// cmds/smoke.cmds on the default (on-demand) allocator, made once per process, in exact mode
/// (every view has something to draw). No cost model: the probes' cost is neither measured
/// nor modelled.
fn on_demand() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let absent = scratch().join("no-cost-model.json");
        run(
            "on-demand",
            &smoke_cmds(),
            &[
                "--probes",
                "exact",
                "--cost-model",
                absent.to_str().unwrap(),
            ],
        )
    })
}

/// The same workload on the pooling allocator, exact mode too, with the cost model of
/// [`cost_model`].
fn pooling() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let model = cost_model();
        // Exact mode: the fault program's events priced by the model too.
        let args = [
            "--probes",
            "exact",
            "--cost-model",
            model.to_str().unwrap(),
            "--",
            "--allocator",
            "pooling",
        ];
        run("pooling", &smoke_cmds(), &args)
    })
}

/// Per-event costs for this machine, as `probe_cost` saves them: a syscall 500 ns [400, 700],
/// a fault 100 ns [-50, 250] and a mark 300 ns [250, 400], whatever the mechanism.
const SYSCALL_NS: Ns = Ns {
    median: 500.0,
    lo: 400.0,
    hi: 700.0,
};
const FAULT_NS: Ns = Ns {
    median: 100.0,
    lo: -50.0,
    hi: 250.0,
};
const MARK_NS: Ns = Ns {
    median: 300.0,
    lo: 250.0,
    hi: 400.0,
};

fn cost_model() -> PathBuf {
    let machine = Machine::read().unwrap();
    let mut costs = Vec::new();
    for mechanism in Mechanism::ALL {
        for (probe, per, ns) in [
            (Probe::Syscalls, Per::Syscall, SYSCALL_NS),
            (Probe::PageFaults, Per::Fault, FAULT_NS),
            (Probe::Markers, Per::Mark, MARK_NS),
        ] {
            costs.push(EventCost {
                probe,
                mechanism,
                per,
                ns,
            });
        }
    }
    let path = scratch().join("cost-model.json");
    CostModel {
        kernel_release: machine.kernel_release,
        cpu: machine.brand,
        measured_at: "the test".to_owned(),
        rounds: 15,
        costs,
    }
    .save(&path)
    .unwrap();
    path
}

/// A two-entry workload without probes: other cmds, and every probe column empty.
fn tiny_without_probes() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let cmds = scratch().join("tiny.cmds");
        fs::write(&cmds, "add_rs\nskills\n").unwrap();
        run("tiny", &cmds, &["--no-probes"])
    })
}

fn report(args: &[&Path], extra: &[&str]) -> Output {
    skillprof()
        .arg("report")
        .args(args)
        .args(extra)
        .output()
        .unwrap()
}

/// Debian's Chromium with the flags this closed network needs, and a new empty profile.
fn chromium(extra: &[String], page: &Path) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // The console, one line per message, on stderr.
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output();
    match output {
        Ok(output) => output,
        Err(error) => panic!(
            "cannot start chromium ({error}): the report test needs Debian's chromium; \
             scripts/test.sh installs it (apt-get install --no-install-recommends chromium)"
        ),
    }
}

/// Chromium prints every console message as `...:CONSOLE:<line>] "<message>", source: ...`;
/// this Chromium gives them all the level INFO, so every one counts (the report logs nothing).
fn console_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect()
}

/// Renders `page` in Chromium, once for its DOM and once for a screenshot, and asserts that
/// the console stayed silent and the page's script ran to its end; returns the DOM after its
/// scripts ran.
fn render(page: &Path, screenshot: &Path) -> String {
    let dom = chromium(&["--dump-dom".to_owned()], page);
    assert!(
        dom.status.success(),
        "chromium --dump-dom: {}",
        describe(&dom)
    );
    let shot = chromium(
        &[
            "--window-size=1400,5000".to_owned(),
            format!("--screenshot={}", screenshot.display()),
        ],
        page,
    );
    assert!(
        shot.status.success(),
        "chromium --screenshot: {}",
        describe(&shot)
    );
    let mut console = console_lines(&dom.stderr);
    console.extend(console_lines(&shot.stderr));
    assert!(
        console.is_empty(),
        "{} logged to the console:\n{}",
        page.display(),
        console.join("\n")
    );
    let dom = String::from_utf8(dom.stdout).unwrap();
    assert!(
        dom.contains("data-ready=\"yes\""),
        "the page's script did not run to its end"
    );
    dom
}

/// Width and height of a PNG, from its header.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[1..4], b"PNG", "{} is not a PNG", path.display());
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The markup of `<figure ... data-plot="id" ...>` up to its end.
fn figure<'d>(dom: &'d str, id: &str) -> &'d str {
    let marker = format!("data-plot=\"{id}\"");
    let start = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("no plot {id} in the page"));
    let end = start + dom[start..].find("</figure>").expect("a closed figure");
    &dom[start..end]
}

/// The data a plotters SVG draws: lines that are not black axes (with at least two points),
/// and bars that are neither the background nor the entries' shading.
fn data_marks(svg: &str) -> usize {
    let mut marks = 0;
    for element in svg.split('<').skip(1) {
        let attribute = |name: &str| {
            let key = format!(" {name}=\"");
            let start = element.find(&key)? + key.len();
            Some(&element[start..start + element[start..].find('"')?])
        };
        if element.starts_with("polyline") {
            let points = attribute("points").unwrap_or("").split_whitespace().count();
            if attribute("stroke") != Some("#000000") && points >= 2 {
                marks += 1;
            }
        } else if element.starts_with("rect") {
            let fill = attribute("fill").unwrap_or("");
            let width: f64 = attribute("width")
                .and_then(|w| w.parse().ok())
                .unwrap_or(0.0);
            if !["#FFFFFF", "#78788C"].contains(&fill) && width > 0.0 {
                marks += 1;
            }
        }
    }
    marks
}

fn assert_plotted(dom: &str, id: &str) {
    let markup = figure(dom, id);
    assert!(
        !markup.contains("data-absent"),
        "plot {id} is absent: {markup}"
    );
    let svg = &markup[markup
        .find("<svg")
        .unwrap_or_else(|| panic!("plot {id} has no svg"))..];
    let marks = data_marks(svg);
    assert!(marks > 0, "plot {id} draws no data:\n{svg:.2000}");
}

fn assert_section(dom: &str, name: &str) {
    assert!(
        dom.contains(&format!("data-section=\"{name}\"")),
        "section {name} missing"
    );
}

/// Text as Chromium serialises it in the DOM.
fn serialised(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn screenshots() -> PathBuf {
    let dir = scratch().join("screenshots");
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn chromium_console_errors_reach_the_test() {
    // The check below is only as good as this: a page that errs must be caught.
    let page = scratch().join("console-error.html");
    fs::write(
        &page,
        "<!DOCTYPE html><html><body><script>console.error('caught');</script></body></html>",
    )
    .unwrap();
    let rendered = chromium(&["--dump-dom".to_owned()], &page);
    let console = console_lines(&rendered.stderr);
    assert!(
        console.iter().any(|line| line.contains("caught")),
        "chromium did not report console.error on stderr: {}",
        describe(&rendered)
    );
}

#[test]
fn a_real_runs_report_renders_with_every_section_and_plot() {
    let folder = on_demand();
    let output = report(&[folder], &["--format", "png"]);
    assert!(output.status.success(), "{}", describe(&output));
    let page = folder.join("report.html");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&page.display().to_string()), "{stderr}");

    // Self-contained: nothing to fetch, and a policy that would refuse it.
    let html = fs::read_to_string(&page).unwrap();
    assert!(html.contains("Content-Security-Policy"));
    // A web address, not any "http": the flame graphs name functions of the http crate.
    for (at, _) in html.match_indices("://") {
        let rest = &html[html[..at]
            .rfind(|c: char| !c.is_ascii_alphanumeric())
            .map_or(0, |i| i + 1)..];
        assert!(
            rest.starts_with("http://www.w3.org/2000/svg"),
            "a web address in report.html: {:.80}",
            rest
        );
    }

    let shot = screenshots().join("smoke-report.png");
    let dom = &render(&page, &shot);
    assert_eq!(png_size(&shot), (1400, 5000));
    println!("screenshot: {}", shot.display());

    for section in [
        "answers",
        "header",
        "entries",
        "held",
        "skills",
        "time",
        "timeseries",
        "stop",
    ] {
        assert_section(dom, section);
    }
    // The page opens on the run's answers, each drawn from this run's records; the table of
    // every column waits behind a click.
    let first_section = dom.find("<section").unwrap();
    assert!(
        dom[first_section..].starts_with("<section id=\"answers\""),
        "the report does not open on its answers: {:.200}",
        &dom[first_section..]
    );
    let answers =
        &dom[first_section..dom[first_section..].find("</section>").unwrap() + first_section];
    for said in [
        "<dt>memory</dt>",
        "The host's RSS went from",
        "<dt>where it went</dt>",
        "malloc",
        "<dt>failures</dt>",
        "Every request was answered.",
        "<dt>capacity</dt>",
        "Rust skills",
        "<dt>profiler's cost</dt>",
        "BPF programs",
    ] {
        assert!(
            answers.contains(said),
            "the answers lack {said:?}: {answers}"
        );
    }
    assert!(
        dom.contains("<details class=\"entries\">"),
        "the full table is not behind a click"
    );
    for fact in [
        "machine",
        "kernel",
        "host configuration",
        "probes live",
        "profiler overhead",
    ] {
        assert!(
            dom.contains(&format!("<dt>{fact}</dt>")),
            "header lacks {fact}"
        );
    }
    assert!(
        dom.contains("syscalls <span"),
        "the probes live are not listed"
    );
    // skillhost has markers: the faults by skill are drawn.
    for plot in [
        "memory", "rates", "zones", "psi", "reclaim", "held", "skills", "stop",
    ] {
        assert_plotted(dom, plot);
    }
    // Each entry's true peak is drawn over the sampled RSS.
    assert!(
        figure(dom, "memory").contains("entry's peak (VmHWM)"),
        "the memory plot does not draw the entries' peaks"
    );

    // Every entry in the table, with its explanation and every column.
    let rows = commands_csv::read(&folder.join("commands.csv")).unwrap();
    // commands.csv is a view of the typed records the report reads: the same cells, to the
    // byte, from records that went through entries.jsonl and back.
    let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE)).unwrap();
    let viewed: Vec<_> = records.iter().map(|r| CsvRow::of(&r.row())).collect();
    assert_eq!(
        viewed, rows,
        "entries.jsonl does not read back as commands.csv"
    );
    let table = &dom[dom.find("id=\"entries-table\"").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert_eq!(
        table.matches("<tr>").count(),
        rows.len() + 1,
        "one row per entry"
    );
    let document = fs::read_to_string(folder.join("explain.md")).unwrap();
    // BPF stats are off by default, there is no cost model, and the head says so.
    assert!(
        document.contains("- probe cost mode: not measured (BPF stats are off unless --self-cost")
            && document.contains("no cost model at"),
        "{document}"
    );
    // The report and explain.md say the same of each entry, both from its record.
    let explained = explain::paragraphs(
        &skillprof::views::output::meta::read(folder).unwrap(),
        &records,
    );
    assert_eq!(explained.len(), rows.len(), "one explanation per entry");
    for paragraph in &explained {
        assert!(
            document.contains(paragraph.as_str()),
            "explain.md lacks {paragraph}"
        );
        let paragraph = serialised(paragraph);
        assert!(table.contains(&paragraph), "no explanation {paragraph}");
    }
    for name in rows[0].names().filter(|n| *n != "index" && *n != "cmd") {
        assert!(table.contains(&format!(">{name}</th>")), "no column {name}");
    }

    // Sortable: a click on took_ms orders the entries by it (the script runs in Chromium; a
    // copy of the page clicks and writes down the order it sees).
    let sorting = folder.join("sorting.html");
    let click = r#"<script>
        const table = document.getElementById("entries-table");
        const heads = Array.from(table.tHead.rows[0].cells);
        heads.find(h => h.textContent === "took_ms").click();
        document.body.dataset.order = Array.from(table.tBodies[0].rows)
            .map(row => row.cells[0].dataset.v).join(",");
        </script></body>"#;
    fs::write(&sorting, html.replace("</body>", click)).unwrap();
    let sorted = chromium(&["--dump-dom".to_owned()], &sorting);
    assert!(
        console_lines(&sorted.stderr).is_empty(),
        "{}",
        describe(&sorted)
    );
    let mut by_took: Vec<(f64, String)> = rows
        .iter()
        .map(|row| {
            let took = row.get("took_ms").unwrap().parse().unwrap();
            (took, row.get("index").unwrap().to_owned())
        })
        .collect();
    by_took.sort_by(|a, b| a.0.total_cmp(&b.0));
    let expected: Vec<String> = by_took.into_iter().map(|(_, index)| index).collect();
    let dom = String::from_utf8_lossy(&sorted.stdout);
    assert!(
        dom.contains(&format!("data-order=\"{}\"", expected.join(","))),
        "sorting by took_ms gave another order than {expected:?}"
    );

    // --format png: every plot alone, as an image.
    for plot in ["memory", "rates", "zones", "psi", "reclaim", "stop"] {
        let (width, height) = png_size(&folder.join("plots").join(format!("{plot}.png")));
        assert!(width >= 2000 && height >= 200, "{plot}: {width}x{height}");
    }
}

#[test]
fn the_time_sections_flamegraphs_name_a_skills_wasm_function() {
    let dir = scratch().join("burn-cmds");
    fs::create_dir_all(&dir).unwrap();
    let cmds = common::cli::write_cmds(
        &dir,
        "burn.cmds",
        "add_rs\nexecute sample_rs1 {\"burn_ms\": 1000}\n",
    );
    let folder = run("burn", &cmds, &[]);
    let output = report(&[&folder], &[]);
    assert!(output.status.success(), "{}", describe(&output));
    let shot = screenshots().join("burn-report.png");
    let dom = render(&folder.join("report.html"), &shot);
    assert_section(&dom, "time");
    let start = dom.find("<section id=\"time\"").expect("a time section");
    let time = &dom[start..start + dom[start..].find("</section>").unwrap()];
    // The skill's graph, drawn in the page (not only linked), names the burn by its skill.
    assert!(
        time.contains("<title>sample_rs1!sample_rs::burn (")
            && time.contains("sample_rs1: on a CPU"),
        "the time section does not draw sample_rs1!sample_rs::burn:\n{time:.3000}"
    );
    // Each entry links its interactive flamegraphs and pprof files, which exist.
    for file in [
        "profile/1.cpu.svg",
        "profile/1.offcpu.svg",
        "profile/1.cpu.pb.gz",
    ] {
        assert!(
            time.contains(&format!("href=\"{file}\"")),
            "no link to {file}"
        );
        assert!(folder.join(file).exists(), "{file} is linked but missing");
    }
}

#[test]
fn comparing_pooling_with_on_demand_draws_the_entries_side_by_side() {
    let (a, b) = (on_demand(), pooling());
    let out = scratch().join("pooling-vs-on-demand.html");
    let output = report(&[a, b], &["--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&out.display().to_string()),
        "the report does not say where it went"
    );
    let shot = screenshots().join("smoke-comparison.png");
    let dom = &render(&out, &shot);
    println!("screenshot: {}", shot.display());
    for section in ["header", "comparison", "stop", "runs"] {
        assert_section(dom, section);
    }
    for plot in [
        "compare-time",
        "compare-rss",
        "compare-peak",
        "compare-faults",
        "compare-syscalls",
        "compare-rss-time",
        "stop",
    ] {
        assert_plotted(dom, plot);
    }
    assert!(dom.contains("(on-demand)") && dom.contains("(pooling)"));
    // Ratios to run a beside run b's bars, and in the table.
    assert!(dom.contains("b/a</th>"));
    assert!(figure(dom, "compare-time").contains('×'));

    // Without --out, the page goes into the first run's folder.
    let output = report(&[b, a], &[]);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(b.join("report.html").exists());
}

#[test]
fn without_bpf_stats_the_cost_is_modelled_from_the_events_counted() {
    let folder = pooling();
    let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE)).unwrap();
    let total = |probe: Probe, figure: fn(&Counters) -> u64| -> u64 {
        records.iter().filter_map(|r| r.probe(probe, figure)).sum()
    };
    let syscalls = total(Probe::Syscalls, |c| {
        c.syscalls.iter().map(|s| s.calls).sum()
    });
    let faults = total(Probe::PageFaults, |c| c.faults.user + c.faults.kernel);
    let marks = total(Probe::Markers, |c| c.marks.hits);
    assert!(
        syscalls > 0 && faults > 0 && marks > 0,
        "{syscalls} syscalls, {faults} faults, {marks} marks"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&fs::read(folder.join("meta.json")).unwrap()).unwrap();
    let mechanism = |probe: &str| {
        let statuses = meta["probes"]["statuses"].as_array().unwrap();
        let status = statuses.iter().find(|s| s["probe"] == probe).unwrap();
        status["mechanism"].as_str().unwrap().to_owned()
    };
    let document = fs::read_to_string(folder.join("explain.md")).unwrap();
    let head = document
        .lines()
        .find(|line| line.starts_with("- probe cost mode: "))
        .unwrap_or_else(|| panic!("no probe cost mode in {document}"));
    // The model counts the session's totals when the run ends; the entries were read as each
    // ended, so a call still in flight at an entry's end (a munmap of a finished request's
    // instance) is in the totals and not in its entry. Only a few may differ.
    let counted = |what: &str| -> u64 {
        let before = head.split(&format!(" {what} (")).next().unwrap();
        let number = before.rsplit([' ', ':']).next().unwrap();
        number.replace(',', "").parse().unwrap()
    };
    let (syscalls_counted, faults_counted, marks_counted) =
        (counted("syscalls"), counted("faults"), counted("marks"));
    assert!(
        (syscalls..=syscalls + 10).contains(&syscalls_counted)
            && (faults..=faults + 50).contains(&faults_counted)
            && (marks..=marks + 10).contains(&marks_counted),
        "the entries hold {syscalls} syscalls, {faults} faults and {marks} marks: {head}"
    );
    let (syscalls, faults, marks) = (syscalls_counted, faults_counted, marks_counted);
    // Events counted × the model's figure, the interval carried through.
    let ms = |syscall: f64, fault: f64, mark: f64| {
        skillprof::ground::units::ms(
            (syscalls as f64 * syscall + faults as f64 * fault + marks as f64 * mark) / 1e6,
        )
    };
    let expected = format!(
        "- probe cost mode: modelled (BPF stats off): {} syscalls ({}) × 500 ns + {} faults ({}) \
         × 100 ns + {} marks ({}) × 300 ns ≈ {} of CPU [95% CI {}, {}] (probe_cost's \
         figures of the test, 15 rounds)",
        skillprof::ground::units::count(syscalls as f64),
        mechanism("syscalls"),
        skillprof::ground::units::count(faults as f64),
        mechanism("page_faults"),
        skillprof::ground::units::count(marks as f64),
        mechanism("markers"),
        ms(SYSCALL_NS.median, FAULT_NS.median, MARK_NS.median),
        ms(SYSCALL_NS.lo, FAULT_NS.lo, MARK_NS.lo),
        ms(SYSCALL_NS.hi, FAULT_NS.hi, MARK_NS.hi),
    );
    assert!(head.starts_with(&expected), "{head}\nexpected {expected}");
}

#[test]
fn runs_of_other_workloads_are_refused() {
    let output = report(&[on_demand(), tiny_without_probes()], &[]);
    assert!(!output.status.success(), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("one workload") && stderr.contains("different workloads"),
        "{stderr}"
    );
}

#[test]
fn what_was_not_measured_is_absent_with_a_note_never_zero() {
    let folder = tiny_without_probes();
    let output = report(&[folder], &[]);
    assert!(output.status.success(), "{}", describe(&output));
    let page = folder.join("report.html");
    let dom = &render(&page, &screenshots().join("no-probes.png"));
    // Probes off: reclaim and the stop breakdown are absent, each saying why.
    for plot in ["reclaim", "stop"] {
        let markup = figure(dom, plot);
        assert!(markup.contains("data-absent"), "{plot}: {markup:.500}");
        assert!(markup.contains("--no-probes"), "{plot}: {markup:.500}");
    }
    // The syscall half of the rates plot says it was not measured; faults are drawn.
    assert_plotted(dom, "rates");
    assert!(figure(dom, "rates").contains("probes were off"));
    // Probe columns are "–" (not measured), not 0.
    let table = &dom[dom.find("id=\"entries-table\"").unwrap()..];
    assert!(table.contains("title=\"not measured\">–</td>"));
    assert!(dom.contains("none: probes off"));
}
