//! The harness run log, `YYMMDD_HHMMSS.mmm_run.log`: three header lines, then one line per
//! entry; JSON objects whose values are all strings, written as Python's `json.dumps` writes
//! them (`{"a": "b", "c": "d"}`, non-ASCII escaped), keys in a fixed order. Years of logs
//! exist in this format, so it is read and written byte for byte as the harness did.

use anyhow::{Context, bail};

use crate::record::{EntryMeasure, RunInfo};
use chrono::{DateTime, Local, NaiveDate, NaiveDateTime};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
};

/// How a run log's file name ends; the name before it is when the run started.
pub const FILE_SUFFIX: &str = "_run.log";

/// Header line 1: the machine the run was measured on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub arch: String,
    pub brand: String,
    pub cores: String,
    /// GB.
    pub memory_total: String,
    /// GB.
    pub memory_available: String,
}

impl crate::ground::machine::Machine {
    /// Header line 1 of the harness log: memory in whole GiB, truncated as `int()` would.
    pub fn harness(&self) -> Machine {
        let gib = |kb: u64| (kb / (1024 * 1024)).to_string();
        Machine {
            arch: self.arch.clone(),
            brand: self.brand.clone(),
            cores: self.cores.to_string(),
            memory_total: gib(self.memory_total_kb),
            memory_available: gib(self.memory_available_kb),
        }
    }
}

/// Header line 2: the host binary that ran the workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binary {
    /// Its path.
    pub bin: String,
    /// SHA-1 (hex) of its contents.
    pub hash: String,
    /// Its ctime, as `YYMMDD_HHMMSS.mmm`.
    pub modified: String,
}

/// Header line 3: the workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CmdsFile {
    /// The cmds file as given on the command line.
    pub filename: String,
    /// The cmds hash: equal hashes mean the same workload.
    pub hash: String,
    /// Its ctime, as `YYMMDD_HHMMSS.mmm`.
    pub modified: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub machine: Machine,
    pub binary: Binary,
    pub cmds: CmdsFile,
}

impl Header {
    /// The header skillprof wrote for the run `info` is the meta.json of.
    pub fn of(info: &RunInfo) -> Header {
        Header {
            machine: info.machine.harness(),
            binary: Binary {
                bin: info.host.spec.bin.display().to_string(),
                hash: info.host.sha1.clone(),
                modified: info.host.modified.clone(),
            },
            cmds: CmdsFile {
                filename: info.cmds.file.clone(),
                hash: info.cmds.hash.clone(),
                modified: info.cmds.modified.clone(),
            },
        }
    }
}

/// One entry of the workload, measured on the host process. Memory is in KB; after `stop`
/// the host is gone and rss and vms read 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggedEntry {
    #[serde(rename = "took", with = "in_a_string")]
    pub took_ms: u64,
    #[serde(rename = "rss_diff", with = "in_a_string")]
    pub rss_diff_kb: i64,
    #[serde(rename = "rss", with = "in_a_string")]
    pub rss_kb: u64,
    #[serde(rename = "vms_diff", with = "in_a_string")]
    pub vms_diff_kb: i64,
    #[serde(rename = "vms", with = "in_a_string")]
    pub vms_kb: u64,
    /// The entry's name: its cmds line, tokens joined by single spaces.
    pub cmd: String,
}

impl From<&EntryMeasure> for LoggedEntry {
    /// The entry as the harness logged it: whole milliseconds, truncated.
    fn from(measure: &EntryMeasure) -> Self {
        LoggedEntry {
            took_ms: measure.took.as_millis() as u64,
            rss_diff_kb: measure.rss_diff_kb(),
            rss_kb: measure.rss_after_kb(),
            vms_diff_kb: measure.process().vms_diff_kb(),
            vms_kb: measure.process().vms_after_kb(),
            cmd: measure.cmd.to_string(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLog {
    pub header: Header,
    pub entries: Vec<LoggedEntry>,
}

impl RunLog {
    /// Reads the run log at `path`; errors name it as given.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = fs::read_to_string(path)
            .with_context(|| format!("cannot read the run log {}", path.display()))?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses the text of a run log; `file` names it in errors, which also give the line.
    /// A log that ends after its header (the run died before its first entry) is valid.
    pub fn parse(file: &str, text: &str) -> anyhow::Result<Self> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(index, line)| (index + 1, line));
        let header = Header {
            machine: header_line(file, &mut lines, "machine")?,
            binary: header_line(file, &mut lines, "host binary")?,
            cmds: header_line(file, &mut lines, "cmds file")?,
        };
        let entries = lines
            .map(|(number, line)| record(file, number, line, "entry"))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { header, entries })
    }
}

fn header_line<'a, T: DeserializeOwned>(
    file: &str,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    kind: &str,
) -> anyhow::Result<T> {
    let Some((number, line)) = lines.next() else {
        bail!(
            "{file}: ends before its {kind} line; a run log starts with 3 header lines: \
             machine, host binary, cmds file"
        )
    };
    record(file, number, line, kind)
}

fn record<T: DeserializeOwned>(
    file: &str,
    number: usize,
    line: &str,
    kind: &str,
) -> anyhow::Result<T> {
    serde_json::from_str(line)
        .with_context(|| format!("{file}:{number}: expected the {kind} line of a run log"))
}

/// Writes a run log as the run goes: a run that dies keeps every entry it finished.
pub struct LogWriter<W: Write> {
    out: W,
}

impl<W: Write> LogWriter<W> {
    /// Writes and flushes the three header lines.
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        write_line(&mut out, &header.machine)?;
        write_line(&mut out, &header.binary)?;
        write_line(&mut out, &header.cmds)?;
        out.flush()?;
        Ok(Self { out })
    }

    /// Writes and flushes one entry line.
    pub fn write_entry(&mut self, entry: &LoggedEntry) -> io::Result<()> {
        write_line(&mut self.out, entry)?;
        self.out.flush()
    }
}

fn write_line(out: &mut impl Write, record: &impl Serialize) -> io::Result<()> {
    let mut line = Vec::with_capacity(256);
    record.serialize(&mut serde_json::Serializer::with_formatter(
        &mut line, PythonJson,
    ))?;
    line.push(b'\n');
    out.write_all(&line)
}

/// Python's `json.dumps` defaults: `", "` and `": "` between items, and everything outside
/// printable ASCII escaped as `\uXXXX` (`ensure_ascii`). serde_json already escapes quotes,
/// backslashes and control characters the way Python does.
struct PythonJson;

impl serde_json::ser::Formatter for PythonJson {
    fn begin_object_key<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { out.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        out.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        out: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        for c in fragment.chars() {
            if matches!(c, ' '..='~') {
                out.write_all(&[c as u8])?;
            } else {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    write!(out, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// Numbers stored as JSON strings, as every value of the log is.
mod in_a_string {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use std::{fmt::Display, str::FromStr};

    pub fn serialize<S: Serializer>(
        value: &impl Display,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: FromStr>(
        deserializer: D,
    ) -> Result<T, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map_err(|_| D::Error::custom(format!("expected an integer in a string, got {text:?}")))
    }
}

/// The run log itself, or the one run log inside a run folder.
pub fn locate(path: &Path) -> anyhow::Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let entries = fs::read_dir(path)
        .with_context(|| format!("cannot list the run folder {}", path.display()))?;
    let mut logs = Vec::new();
    for entry in entries {
        let name = entry
            .with_context(|| format!("cannot list the run folder {}", path.display()))?
            .file_name();
        if name.to_string_lossy().ends_with(FILE_SUFFIX) {
            logs.push(path.join(name));
        }
    }
    logs.sort();
    match logs.as_slice() {
        [log] => Ok(log.clone()),
        [] => bail!(
            "{} is a folder without a *{FILE_SUFFIX}; give a run log or a run folder",
            path.display()
        ),
        _ => {
            let names: Vec<_> = logs.iter().map(|log| log.display().to_string()).collect();
            bail!(
                "{} holds {} run logs; give the one you mean: {}",
                path.display(),
                logs.len(),
                names.join(", ")
            )
        }
    }
}

/// `YYMMDD_HHMMSS.mmm`: how the harness wrote a moment (run names, `modified` fields).
pub fn stamp(time: DateTime<Local>) -> String {
    time.format("%y%m%d_%H%M%S%.3f").to_string()
}

/// The file's ctime as a stamp, for the `modified` fields of the header.
pub fn ctime_stamp(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    let time = DateTime::from_timestamp(meta.ctime(), nanos)
        .with_context(|| format!("{} has an impossible ctime", path.display()))?;
    Ok(stamp(time.with_timezone(&Local)))
}

/// When the run started, from the log's file name `YYMMDD_HHMMSS.mmm_run.log`. Read as
/// Python's `strptime("%y%m%d_%H%M%S.%f")` does: years 69..99 are 19xx, the fraction
/// has 1 to 6 digits.
pub fn started(path: &Path) -> anyhow::Result<NaiveDateTime> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    name.strip_suffix(FILE_SUFFIX).and_then(parse_stamp).with_context(|| {
        format!("{}: cannot tell when the run started: a run log is named YYMMDD_HHMMSS.mmm{FILE_SUFFIX}", path.display())
    })
}

fn parse_stamp(stamp: &str) -> Option<NaiveDateTime> {
    let (date, rest) = stamp.split_once('_')?;
    let (time, fraction) = rest.split_once('.')?;
    let digits = |s: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
    };
    if !(digits(date, 6..=6) && digits(time, 6..=6) && digits(fraction, 1..=6)) {
        return None;
    }
    let number = |s: &str| s.parse::<u32>().ok();
    let two_digit_year = number(&date[..2])?;
    let year = if two_digit_year <= 68 {
        2000 + two_digit_year
    } else {
        1900 + two_digit_year
    };
    NaiveDate::from_ymd_opt(
        year.try_into().ok()?,
        number(&date[2..4])?,
        number(&date[4..])?,
    )?
    .and_hms_micro_opt(
        number(&time[..2])?,
        number(&time[2..4])?,
        number(&time[4..])?,
        number(&format!("{fraction:0<6}"))?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE_LOGS: [&str; 3] = [
        "241022_204217.730_run.log",
        "241022_204217.737_run.log",
        "241023_155316.286_run.log",
    ];

    fn fixture(name: &str) -> PathBuf {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pharia-logs")
            .join(name);
        assert!(
            path.exists(),
            "the fixture {} is missing: the harness fixtures are part of the repository",
            path.display()
        );
        path
    }

    fn write(log: &RunLog) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut writer = LogWriter::new(&mut bytes, &log.header).unwrap();
        for entry in &log.entries {
            writer.write_entry(entry).unwrap();
        }
        bytes
    }

    #[test]
    fn writes_the_fixture_logs_back_byte_for_byte() {
        for name in FIXTURE_LOGS {
            let original = fs::read_to_string(fixture(name)).unwrap();
            let log = RunLog::read(&fixture(name)).unwrap();
            assert_eq!(String::from_utf8(write(&log)).unwrap(), original, "{name}");
        }
    }

    #[test]
    fn reads_typed_entries() {
        let log = RunLog::read(&fixture("241022_204217.730_run.log")).unwrap();
        assert_eq!(log.header.cmds.filename, "bench.cmds");
        assert_eq!(log.entries.len(), 9);
        assert_eq!(
            log.entries[8],
            LoggedEntry {
                took_ms: 6067,
                rss_diff_kb: -1537472,
                rss_kb: 0,
                vms_diff_kb: -413304816,
                vms_kb: 0,
                cmd: "stop".into()
            }
        );
    }

    #[test]
    fn escapes_like_python_json_dumps() {
        // json.dumps({"took": "1", ..., "cmd": "execute_all Zoë \"😀\"\\\x7f\t"})
        let entry = LoggedEntry {
            took_ms: 1,
            rss_diff_kb: -2,
            rss_kb: 3,
            vms_diff_kb: 0,
            vms_kb: 4,
            cmd: "execute_all Zoë \"😀\"\\\x7f\t".into(),
        };
        let mut line = Vec::new();
        write_line(&mut line, &entry).unwrap();
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"took\": \"1\", \"rss_diff\": \"-2\", \"rss\": \"3\", \"vms_diff\": \"0\", \"vms\": \"4\", \
             \"cmd\": \"execute_all Zo\\u00eb \\\"\\ud83d\\ude00\\\"\\\\\\u007f\\t\"}\n"
        );
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let header = "{\"arch\": \"X86_64\", \"brand\": \"b\", \"cores\": \"2\", \"memory_total\": \"8\", \"memory_available\": \"4\"}\n\
                      {\"bin\": \"host\", \"hash\": \"h\", \"modified\": \"241022_163553.629\"}\n\
                      {\"filename\": \"bench.cmds\", \"hash\": \"h\", \"modified\": \"241022_163553.629\"}\n";
        assert_eq!(RunLog::parse("x.log", header).unwrap().entries, []);
        let bad_entry = format!(
            "{header}{{\"took\": \"1.5\", \"rss_diff\": \"0\", \"rss\": \"0\", \"vms_diff\": \"0\", \"vms\": \"0\", \"cmd\": \"stop\"}}\n"
        );
        let error = format!("{:#}", RunLog::parse("x.log", &bad_entry).unwrap_err());
        assert!(error.starts_with("x.log:4: expected the entry line of a run log: expected an integer in a string, got \"1.5\""), "{error}");
        let error = format!(
            "{:#}",
            RunLog::parse("x.log", header.split_once('\n').unwrap().0).unwrap_err()
        );
        assert!(
            error.starts_with("x.log: ends before its host binary line"),
            "{error}"
        );
        let swapped: String = header
            .lines()
            .rev()
            .map(|line| format!("{line}\n"))
            .collect();
        let error = format!("{:#}", RunLog::parse("x.log", &swapped).unwrap_err());
        assert!(
            error.starts_with(
                "x.log:1: expected the machine line of a run log: unknown field `filename`"
            ),
            "{error}"
        );
    }

    #[test]
    fn the_file_name_says_when_the_run_started() {
        let date = |name: &str| {
            started(Path::new(name)).map(|date| date.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        };
        assert_eq!(
            date("logs/241022_204217.730_run.log").unwrap(),
            "2024-10-22 20:42:17.730000"
        );
        assert_eq!(
            date("680101_000000.5_run.log").unwrap(),
            "2068-01-01 00:00:00.500000"
        );
        assert_eq!(
            date("690101_000000.000_run.log").unwrap(),
            "1969-01-01 00:00:00.000000"
        );
        for bad in [
            "run.log",
            "241022_204217.730.log",
            "241322_204217.730_run.log",
            "241022_204217_run.log",
            "24102_204217.730_run.log",
        ] {
            let error = date(bad).unwrap_err().to_string();
            assert!(
                error.ends_with(
                    "cannot tell when the run started: a run log is named YYMMDD_HHMMSS.mmm_run.log"
                ),
                "{bad}: {error}"
            );
        }
    }
}
