//! The record of one kernel event of `--events` ([`KernelEvent`]): its header and the typed
//! body its kind names, the same `#[repr(C)]` body the BPF program wrote. events.csv is its
//! view, one line per event (`ts_ns,entry,tid,kind,fields`, the fields as space-separated
//! `name=value`); [`KernelEvent::parse`] reads a line back into the same record, so the
//! report matches on kinds and reads fields by type, never by name.

use std::fmt;

use anyhow::{Context, Result, bail};
use skillprof_common::{
    ADVICE_NAMES, CTX_NAMES, DirectReclaimEvent, ExitGroupEvent, ExitMmapEvent, HandledFaultEvent,
    KernelFaultEvent, KswapdSleepEvent, KswapdWakeEvent, LruActiveEvent, LruInactiveEvent,
    MarkEvent, MemcgReclaimEvent, NotifyParentEvent, RssTeardownEvent, SYS_BRK, SYS_MADVISE,
    SYS_MREMAP, SYSCALL_NAMES, ShrinkNodeEvent, ShrinkSlabEvent, SignalDeliverEvent, SyscallEvent,
    ThrottledEvent, UserFaultEvent, WakeupKswapdEvent, advice_class,
};

/// events.csv's header line.
pub const CSV_HEADER: &str = "ts_ns,entry,tid,kind,fields";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelEvent {
    /// CLOCK_MONOTONIC.
    pub ts_ns: u64,
    /// The entry the probes attributed it to.
    pub entry: u32,
    pub tid: u32,
    pub body: Body,
}

/// One body per event kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    Syscall(SyscallEvent),
    UserFault(UserFaultEvent),
    HandledFault(HandledFaultEvent),
    KernelFault(KernelFaultEvent),
    KswapdWake(KswapdWakeEvent),
    KswapdSleep(KswapdSleepEvent),
    WakeupKswapd(WakeupKswapdEvent),
    DirectReclaim(DirectReclaimEvent),
    MemcgReclaim(MemcgReclaimEvent),
    LruInactive(LruInactiveEvent),
    LruActive(LruActiveEvent),
    ShrinkNode(ShrinkNodeEvent),
    ShrinkSlab(ShrinkSlabEvent),
    Throttled(ThrottledEvent),
    SignalDeliver(SignalDeliverEvent),
    ExitGroup(ExitGroupEvent),
    ThreadExit,
    ExitMmap(ExitMmapEvent),
    RssTeardown(RssTeardownEvent),
    NotifyParent(NotifyParentEvent),
    Mark(MarkEvent),
    /// A kind this version does not know, or a body too short for its kind.
    Unknown {
        tag: u32,
        bytes: u64,
    },
}

fn ctx_name(ctx: u32) -> &'static str {
    CTX_NAMES.get(ctx as usize).copied().unwrap_or("?")
}

fn ctx_of(name: &str) -> u32 {
    CTX_NAMES
        .iter()
        .position(|known| *known == name)
        .map_or(u32::MAX, |ctx| ctx as u32)
}

/// One field of an event, typed: events.csv writes it as text ([`fmt::Display`]); the typed
/// export (`export --format events`) as a column of its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Int(i128),
    /// An address, flags or a bit set: events.csv writes it in hex.
    Hex(u64),
    Name(&'static str),
    /// madvise's advice, which events.csv writes with its class: `4 (dontneed)`.
    Advice(u64),
}

impl Field {
    /// The advice's class name (`dontneed`), for [`Field::Advice`].
    pub fn advice_class(&self) -> Option<&'static str> {
        match *self {
            Field::Advice(advice) => Some(ADVICE_NAMES[advice_class(advice)]),
            _ => None,
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Field::Int(value) => write!(f, "{value}"),
            Field::Hex(value) => write!(f, "{value:#x}"),
            Field::Name(name) => f.write_str(name),
            Field::Advice(advice) => write!(f, "{advice} ({})", ADVICE_NAMES[advice_class(advice)]),
        }
    }
}

/// How a plain kind's field is written in events.csv and read back: a number (`int`), one the
/// kernel means as signed (`signed`: an exit code), in hex (`hex`), or a reclaim context's name
/// (`ctx`).
macro_rules! written {
    (int, $value:expr) => {
        Field::Int(($value).into())
    };
    (signed, $value:expr) => {
        Field::Int(($value as i64).into())
    };
    (hex, $value:expr) => {
        Field::Hex(($value).into())
    };
    (ctx, $value:expr) => {
        Field::Name(ctx_name($value))
    };
}

macro_rules! read {
    (ctx, $fields:expr, $name:literal) => {
        ctx_of($fields.text($name)?)
    };
    ($how:ident, $fields:expr, $name:literal) => {
        FromInt::from_int($fields.int($name)?)
    };
}

/// The kinds whose events.csv fields are their body's own, each declared once: the kind's
/// name in the line, and per field its name, the body's field and how it is written.
/// [`Body::name`], [`Body::fields`] and [`Body::parse`] all read this one list. The five left
/// out do not fit one line of it: a syscall is named by its number and names its argument by
/// it, a fault writes fields derived from its bits, exit_mmap has a name per phase, and
/// thread_exit and unknown have no body of their own. A test holds their writing and reading
/// together (`every_kind_reads_back_as_the_record_it_was_written_from`).
macro_rules! plain_kinds {
    ($( $variant:ident($body:ident) = $kind:literal {
        $( $name:literal: $field:ident as $how:ident ),* $(,)?
    } )*) => {
        impl Body {
            fn plain_name(&self) -> Option<&'static str> {
                match self {
                    $( Body::$variant(_) => Some($kind), )*
                    _ => None,
                }
            }

            fn plain_fields(&self) -> Option<Vec<(&'static str, Field)>> {
                match *self {
                    $( Body::$variant(e) => Some(vec![ $( ($name, written!($how, e.$field)) ),* ]), )*
                    _ => None,
                }
            }

            // A body's fields that events.csv does not keep (a kswapd wake's zone) read back
            // as their defaults; where it keeps them all, the update is empty.
            #[allow(clippy::needless_update)]
            fn parse_plain(kind: &str, f: &Fields) -> Option<Result<Body>> {
                match kind {
                    $( $kind => Some((|| {
                        Ok(Body::$variant($body {
                            $( $field: read!($how, f, $name), )*
                            ..Default::default()
                        }))
                    })()), )*
                    _ => None,
                }
            }
        }
    };
}

plain_kinds! {
    KernelFault(KernelFaultEvent) = "fault_kernel" {
        "address": address as hex, "write": write as int,
    }
    KswapdWake(KswapdWakeEvent) = "kswapd_wake" { "nid": nid as int, "order": order as int }
    KswapdSleep(KswapdSleepEvent) = "kswapd_sleep" {
        "nid": nid as int, "awake_ns": awake_ns as int,
    }
    WakeupKswapd(WakeupKswapdEvent) = "wakeup_kswapd" {
        "nid": nid as int, "order": order as int, "gfp": gfp as hex, "by_host": by_host as int,
    }
    DirectReclaim(DirectReclaimEvent) = "direct_reclaim" {
        "reclaimed": reclaimed as int, "ns": ns as int, "host": by_host as int,
    }
    MemcgReclaim(MemcgReclaimEvent) = "memcg_reclaim" {
        "reclaimed": reclaimed as int, "ns": ns as int, "host": by_host as int,
    }
    LruInactive(LruInactiveEvent) = "lru_shrink_inactive" {
        "ctx": ctx as ctx, "scanned": scanned as int, "reclaimed": reclaimed as int,
        "nid": nid as int,
    }
    LruActive(LruActiveEvent) = "lru_shrink_active" {
        "ctx": ctx as ctx, "taken": taken as int, "deactivated": deactivated as int,
        "nid": nid as int,
    }
    ShrinkNode(ShrinkNodeEvent) = "shrink_node" { "ctx": ctx as ctx, "ns": ns as int }
    ShrinkSlab(ShrinkSlabEvent) = "shrink_slab" { "freed": freed as int, "ns": ns as int }
    Throttled(ThrottledEvent) = "throttled" {
        "nid": nid as int, "delayed_us": delayed_us as int, "reason": reason as hex,
    }
    SignalDeliver(SignalDeliverEvent) = "signal_deliver" { "sig": signal as int }
    NotifyParent(NotifyParentEvent) = "notify_parent" { "sig": signal as int }
    RssTeardown(RssTeardownEvent) = "rss_teardown" {
        "member": member as int, "bytes": bytes as int, "curr": own_task as int,
    }
    Mark(MarkEvent) = "mark" {
        "request": request as int, "skill": skill as int, "phase": phase as hex,
    }
    ExitGroup(ExitGroupEvent) = "exit_group" { "code": code as signed }
}

/// A number read from events.csv into a body's field, as the BPF program's type holds it.
trait FromInt {
    fn from_int(value: i128) -> Self;
}

impl FromInt for u32 {
    fn from_int(value: i128) -> Self {
        value as u32
    }
}

impl FromInt for u64 {
    fn from_int(value: i128) -> Self {
        value as u64
    }
}

/// A syscall's argument, named as its kind has it.
fn arg_name(syscall: u32) -> &'static str {
    match syscall as usize {
        SYS_BRK => "addr",
        SYS_MREMAP => "new_len",
        _ => "len",
    }
}

impl Body {
    /// The kind as events.csv names it.
    pub fn name(&self) -> &'static str {
        if let Some(kind) = self.plain_name() {
            return kind;
        }
        match self {
            Body::Syscall(e) => SYSCALL_NAMES
                .get(e.syscall as usize)
                .copied()
                .unwrap_or("?"),
            Body::UserFault(_) | Body::HandledFault(_) => "fault",
            Body::ThreadExit => "thread_exit",
            Body::ExitMmap(e) if e.end == 0 => "exit_mmap_start",
            Body::ExitMmap(_) => "exit_mmap_end",
            Body::Unknown { .. } => "unknown",
            _ => unreachable!("a plain kind is named by plain_kinds!"),
        }
    }

    /// The fields in events.csv's order, typed. Some are derived for the reader (a fault's
    /// `write` bit); [`KernelEvent::parse`] reads the raw ones.
    pub fn fields(&self) -> Vec<(&'static str, Field)> {
        if let Some(fields) = self.plain_fields() {
            return fields;
        }
        let n = |value: u64| Field::Int(value.into());
        let hex = Field::Hex;
        match *self {
            Body::Syscall(e) => {
                let mut fields = vec![
                    (arg_name(e.syscall), n(e.arg)),
                    ("ret", Field::Int(e.ret.into())),
                    ("lat_ns", n(e.lat_ns)),
                ];
                if e.syscall as usize == SYS_MADVISE {
                    fields.push(("advice", Field::Advice(e.advice.into())));
                }
                fields
            }
            Body::UserFault(e) => vec![
                ("address", hex(e.address)),
                ("write", n((e.error_code >> 1) & 1)),
                ("error_code", hex(e.error_code)),
            ],
            Body::HandledFault(e) => vec![
                ("address", hex(e.address)),
                ("write", n(e.flags & 1)),
                ("major", n((e.result >> 2) & 1)),
                ("flags", hex(e.flags)),
                ("ret", hex(e.result)),
            ],
            Body::ThreadExit | Body::ExitMmap(_) => Vec::new(),
            Body::Unknown { tag, bytes } => vec![("kind", n(tag.into())), ("bytes", n(bytes))],
            _ => unreachable!("a plain kind's fields are plain_kinds!'s"),
        }
    }

    /// What it lasted, for the kinds that say (ending at the event): syscalls, reclaim,
    /// kswapd awake, shrinkers.
    pub fn duration_ns(&self) -> Option<u64> {
        match *self {
            Body::KswapdSleep(e) => (e.awake_ns > 0).then_some(e.awake_ns),
            Body::DirectReclaim(DirectReclaimEvent { ns, .. })
            | Body::MemcgReclaim(MemcgReclaimEvent { ns, .. })
            | Body::ShrinkNode(ShrinkNodeEvent { ns, .. })
            | Body::ShrinkSlab(ShrinkSlabEvent { ns, .. }) => Some(ns),
            Body::Syscall(e) => Some(e.lat_ns),
            _ => None,
        }
    }

    /// Whether only the host's own threads take it (the probes filter these by its pid).
    pub fn host_only(&self) -> bool {
        matches!(
            self,
            Body::Syscall(_) | Body::UserFault(_) | Body::HandledFault(_)
        )
    }
}

impl KernelEvent {
    /// The event's line of events.csv, without the newline.
    pub fn csv_line(&self) -> String {
        let fields: Vec<String> = self
            .body
            .fields()
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        format!(
            "{},{},{},{},{}",
            self.ts_ns,
            self.entry,
            self.tid,
            self.body.name(),
            fields.join(" ")
        )
    }

    /// A line of events.csv read back into the record it was written from.
    pub fn parse(line: &str) -> Result<KernelEvent> {
        let mut cells = line.splitn(5, ',');
        let mut cell = |what: &str| cells.next().with_context(|| format!("no {what}"));
        let ts_ns = cell("ts_ns")?.parse().context("ts_ns")?;
        let entry = cell("entry")?.parse().context("entry")?;
        let tid = cell("tid")?.parse().context("tid")?;
        let kind = cell("kind")?;
        let fields = Fields::parse(cells.next().unwrap_or(""));
        Ok(KernelEvent {
            ts_ns,
            entry,
            tid,
            body: Body::parse(kind, &fields).with_context(|| format!("a {kind} event"))?,
        })
    }
}

/// The `name=value` pairs of a line; a word without `=` (madvise's "(dontneed)") belongs to
/// the value before it.
struct Fields(Vec<(String, String)>);

impl Fields {
    fn parse(text: &str) -> Fields {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for token in text.split(' ').filter(|t| !t.is_empty()) {
            if let Some((name, value)) = token.split_once('=') {
                pairs.push((name.to_owned(), value.to_owned()));
            } else if let Some((_, value)) = pairs.last_mut() {
                value.push(' ');
                value.push_str(token);
            } else {
                pairs.push((token.to_owned(), String::new()));
            }
        }
        Fields(pairs)
    }

    fn text(&self, name: &str) -> Result<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
            .with_context(|| format!("no field {name}"))
    }

    /// A number as written: decimal, or hex with `0x`; only its first word (madvise's advice).
    fn int(&self, name: &str) -> Result<i128> {
        let text = self.text(name)?;
        let word = text.split(' ').next().unwrap_or("");
        let parsed = match word.strip_prefix("0x") {
            Some(hex) => i128::from_str_radix(hex, 16),
            None => word.parse(),
        };
        parsed.with_context(|| format!("field {name}={text} is not a number"))
    }

    fn u64(&self, name: &str) -> Result<u64> {
        Ok(self.int(name)? as u64)
    }

    fn u32(&self, name: &str) -> Result<u32> {
        Ok(self.int(name)? as u32)
    }
}

impl Body {
    fn parse(kind: &str, f: &Fields) -> Result<Body> {
        if let Some(syscall) = SYSCALL_NAMES.iter().position(|name| *name == kind) {
            let syscall = syscall as u32;
            return Ok(Body::Syscall(SyscallEvent {
                syscall,
                advice: if syscall as usize == SYS_MADVISE {
                    f.u32("advice")?
                } else {
                    0
                },
                arg: f.u64(arg_name(syscall))?,
                ret: f.int("ret")? as i64,
                lat_ns: f.u64("lat_ns")?,
            }));
        }
        if let Some(body) = Body::parse_plain(kind, f) {
            return body;
        }
        Ok(match kind {
            "fault" if f.text("error_code").is_ok() => Body::UserFault(UserFaultEvent {
                address: f.u64("address")?,
                error_code: f.u64("error_code")?,
            }),
            "fault" => Body::HandledFault(HandledFaultEvent {
                address: f.u64("address")?,
                flags: f.u64("flags")?,
                result: f.u64("ret")?,
            }),
            "thread_exit" => Body::ThreadExit,
            "exit_mmap_start" => Body::ExitMmap(ExitMmapEvent { end: 0 }),
            "exit_mmap_end" => Body::ExitMmap(ExitMmapEvent { end: 1 }),
            "unknown" => Body::Unknown {
                tag: f.u32("kind")?,
                bytes: f.u64("bytes")?,
            },
            other => bail!("events.csv has no kind {other:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillprof_common::{SYS_MMAP, SYSCALLS};

    /// One body of every kind, with fields that would show a mix-up.
    fn every_kind() -> Vec<Body> {
        let mut bodies: Vec<Body> = (0..SYSCALLS as u32)
            .map(|syscall| {
                Body::Syscall(SyscallEvent {
                    syscall,
                    advice: if syscall as usize == SYS_MADVISE {
                        4
                    } else {
                        0
                    },
                    arg: 4096 + u64::from(syscall),
                    ret: -12,
                    lat_ns: 777,
                })
            })
            .collect();
        bodies.extend([
            Body::UserFault(UserFaultEvent {
                address: 0x7f00_1000,
                error_code: 0x6,
            }),
            Body::HandledFault(HandledFaultEvent {
                address: 0x7f00_2000,
                flags: 0x1255,
                result: 0x4,
            }),
            Body::KernelFault(KernelFaultEvent {
                address: 0x10,
                write: 1,
            }),
            Body::KswapdWake(KswapdWakeEvent {
                nid: 1,
                order: 3,
                ..Default::default()
            }),
            Body::KswapdSleep(KswapdSleepEvent {
                nid: 0,
                awake_ns: 5_000,
                ..Default::default()
            }),
            Body::WakeupKswapd(WakeupKswapdEvent {
                nid: 0,
                by_host: 1,
                order: 2,
                gfp: 0xcc0,
            }),
            Body::DirectReclaim(DirectReclaimEvent {
                reclaimed: 32,
                ns: 9_000,
                by_host: 1,
            }),
            Body::MemcgReclaim(MemcgReclaimEvent {
                reclaimed: 7,
                ns: 8_000,
                by_host: 0,
            }),
            Body::LruInactive(LruInactiveEvent {
                ctx: 1,
                nid: 0,
                scanned: 64,
                reclaimed: 30,
            }),
            Body::LruActive(LruActiveEvent {
                ctx: 0,
                nid: 0,
                taken: 40,
                deactivated: 20,
            }),
            Body::ShrinkNode(ShrinkNodeEvent {
                ctx: 2,
                ns: 1_500,
                ..Default::default()
            }),
            Body::ShrinkSlab(ShrinkSlabEvent {
                freed: 100,
                ns: 2_500,
            }),
            Body::Throttled(ThrottledEvent {
                nid: 0,
                reason: 0x2,
                delayed_us: 100_000,
            }),
            Body::SignalDeliver(SignalDeliverEvent { signal: 15 }),
            Body::ExitGroup(ExitGroupEvent {
                code: (-1i64) as u64,
            }),
            Body::ThreadExit,
            Body::ExitMmap(ExitMmapEvent { end: 0 }),
            Body::ExitMmap(ExitMmapEvent { end: 1 }),
            Body::RssTeardown(RssTeardownEvent {
                member: 1,
                own_task: 1,
                bytes: 8192,
            }),
            Body::NotifyParent(NotifyParentEvent { signal: 17 }),
            Body::Mark(MarkEvent {
                request: 12,
                skill: 3,
                phase: 0x102,
            }),
            Body::Unknown { tag: 99, bytes: 3 },
        ]);
        bodies
    }

    #[test]
    fn every_kind_reads_back_as_the_record_it_was_written_from() {
        for (i, body) in every_kind().into_iter().enumerate() {
            let event = KernelEvent {
                ts_ns: 1_000 + i as u64,
                entry: 2,
                tid: 4242,
                body,
            };
            let line = event.csv_line();
            assert_eq!(KernelEvent::parse(&line).unwrap(), event, "{line}");
        }
    }

    #[test]
    fn lines_keep_the_format_of_events_csv() {
        let madvise = KernelEvent {
            ts_ns: 5,
            entry: 1,
            tid: 7,
            body: Body::Syscall(SyscallEvent {
                syscall: SYS_MADVISE as u32,
                advice: 4,
                arg: 8192,
                ret: 0,
                lat_ns: 77,
            }),
        };
        assert_eq!(
            madvise.csv_line(),
            "5,1,7,madvise,len=8192 ret=0 lat_ns=77 advice=4 (dontneed)"
        );
        assert_eq!(madvise.body.duration_ns(), Some(77));
        let fault = KernelEvent {
            body: Body::UserFault(UserFaultEvent {
                address: 0x10,
                error_code: 0x6,
            }),
            ..madvise
        };
        assert_eq!(
            fault.csv_line(),
            "5,1,7,fault,address=0x10 write=1 error_code=0x6"
        );
        let mmap = Body::Syscall(SyscallEvent {
            syscall: SYS_MMAP as u32,
            ..Default::default()
        });
        assert!(mmap.host_only());
        assert!(KernelEvent::parse("5,1,7,nonsense,").is_err());
    }
}
