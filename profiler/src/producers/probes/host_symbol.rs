//! A function in the host's own executable, found in its symbol table, for a uprobe scoped to
//! the host. Only the ELF headers and the symbol table are read, not the whole binary
//! (skillhost is over 100 MiB), and the uprobe is then attached by file offset.

use std::{
    fs,
    num::NonZeroU32,
    path::{Path, PathBuf},
};

use ::object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeScope},
    },
};

/// The host's executable (`/proc/PID/exe`, which names the running binary even if the file
/// on disk has been replaced since) and the function's offset in that file.
pub struct HostSymbol {
    pub exe: PathBuf,
    pub offset: u64,
}

impl HostSymbol {
    /// Loads `program` and attaches it as a uprobe on this function, in the host `tgid` only.
    pub fn attach(&self, ebpf: &mut Ebpf, program: &str, tgid: u32) -> Result<()> {
        let uprobe: &mut UProbe = ebpf
            .program_mut(program)
            .with_context(|| format!("the BPF object has no {program}"))?
            .try_into()?;
        uprobe
            .load()
            .with_context(|| format!("loading {program}"))?;
        let pid = NonZeroU32::new(tgid).context("pid 0")?;
        uprobe
            .attach(
                [UProbeAttachLocation::AbsoluteOffset(self.offset)],
                &self.exe,
                UProbeScope::OneProcess(pid),
            )
            .with_context(|| format!("attaching {program}"))?;
        Ok(())
    }
}

/// For each of `wanted`, the first symbol of the executable `exe` whose name it matches, in
/// one pass over the symbol table (a large host's takes a good part of a second to read).
pub fn find_each<const N: usize>(
    exe: &Path,
    wanted: [fn(&str) -> bool; N],
) -> Result<[Option<HostSymbol>; N], String> {
    let file = fs::File::open(exe).map_err(|e| format!("cannot open {}: {e}", exe.display()))?;
    let cache = ::object::ReadCache::new(file);
    let elf = ::object::File::parse(&cache)
        .map_err(|e| format!("{} is not an ELF executable: {e}", exe.display()))?;
    let offset = |symbol: &::object::Symbol<'_, '_, _>| {
        let section = elf.section_by_index(symbol.section_index()?).ok()?;
        let (section_offset, _) = section.file_range()?;
        match UProbeAttachLocation::from_virtual_address(
            symbol.address(),
            section.address(),
            section_offset,
        ) {
            Ok(UProbeAttachLocation::AbsoluteOffset(offset)) => Some(offset),
            _ => None,
        }
    };
    let mut found: [Option<HostSymbol>; N] = std::array::from_fn(|_| None);
    for symbol in elf.symbols() {
        let Ok(name) = symbol.name() else { continue };
        for (slot, matches) in found.iter_mut().zip(wanted) {
            if slot.is_none() && matches(name) {
                *slot = offset(&symbol).map(|offset| HostSymbol {
                    exe: exe.to_owned(),
                    offset,
                });
            }
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    Ok(found)
}

/// The running host's executable: `/proc/PID/exe` names the binary it runs even if the file
/// on disk has been replaced since.
pub fn running_exe(tgid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/exe"))
}

/// The host's binary as its link names it, for messages.
pub fn binary(tgid: u32) -> String {
    let exe = running_exe(tgid);
    fs::read_link(&exe).unwrap_or(exe).display().to_string()
}
