//! The real sampler against a real child process: entries are tagged, extremes cover the
//! boundary samples, samples.csv stays rectangular, and sampling goes on after the child
//! exits, with empty process cells.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use skillprof::{producers::sample::Sampler, views::output::samples_csv::SamplesCsv};

/// Touches 64 MiB (bytes filled with `x`, so every page is resident), says so, and exits
/// when its stdin closes.
const CHILD: &str =
    "import sys\nb = b'x' * (64 << 20)\nprint('allocated', flush=True)\nsys.stdin.read()\n";

#[test]
fn samples_a_child_through_its_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("samples.csv");
    let mut child = Command::new("python3")
        .args(["-c", CHILD])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the test child");
    let sampler = Sampler::start(
        child.id(),
        Duration::from_millis(20),
        SamplesCsv::create(&path).unwrap(),
    )
    .unwrap();

    sampler.begin_entry(0).unwrap();
    let mut said = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert_eq!(said.trim(), "allocated");
    thread::sleep(Duration::from_millis(100));
    let allocating = sampler.end_entry().unwrap();

    sampler.begin_entry(1).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    thread::sleep(Duration::from_millis(200));
    let exiting = sampler.end_entry().unwrap();
    let cpu_time = sampler.finish().unwrap();

    // The csv crate refuses rows whose length differs from the header's.
    let mut reader = csv::Reader::from_path(&path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (entry, rss, memfree) = (column("entry"), column("rss_kb"), column("memfree_kb"));
    assert!(
        header.iter().any(|h| h.ends_with("_Normal_managed_pages")),
        "{header:?}"
    );
    let tagged = |index: &str| -> Vec<&csv::StringRecord> {
        rows.iter().filter(|row| &row[entry] == index).collect()
    };
    let rss_of = |row: &csv::StringRecord| row[rss].parse::<u64>().unwrap();

    let first = tagged("0");
    assert_eq!(first.len() as u64, allocating.samples);
    assert!(allocating.samples >= 2, "both boundary samples are counted");
    let peak = allocating.rss_peak_kb.unwrap();
    assert!(peak >= rss_of(first[0]) && peak >= rss_of(first[first.len() - 1]));
    assert!(
        peak >= 64 * 1024,
        "the child touched 64 MiB, peak {peak} KB"
    );
    let pgfault = allocating.vmstat.iter().find(|(name, _)| name == "pgfault");
    assert!(
        pgfault.is_some_and(|(_, change)| *change > 0),
        "{:?}",
        allocating.vmstat
    );

    let second = tagged("1");
    assert_eq!(second.len() as u64, exiting.samples);
    assert!(
        rss_of(second[0]) >= 64 * 1024,
        "alive at the start of the entry"
    );
    let after_exit: Vec<_> = second.iter().filter(|row| row[rss].is_empty()).collect();
    assert!(
        after_exit.len() >= 2,
        "sampling goes on after the child exits"
    );
    assert!(after_exit.iter().all(|row| !row[memfree].is_empty()));
    assert!(second[second.len() - 1][rss].is_empty());

    assert!(cpu_time > Duration::ZERO);
}
