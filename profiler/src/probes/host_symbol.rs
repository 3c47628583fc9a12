//! A function in the host's own executable, found in its symbol table, for a uprobe scoped to
//! the host. Only the ELF headers and the symbol table are read, not the whole binary
//! (skillhost is over 100 MiB), and the uprobe is then attached by file offset.

use std::{fs, path::PathBuf};

use ::object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use aya::programs::uprobe::UProbeAttachLocation;

/// The host's executable (`/proc/PID/exe`, which names the running binary even if the file
/// on disk has been replaced since) and the function's offset in that file.
pub struct HostSymbol {
    pub exe: PathBuf,
    pub offset: u64,
}

/// The first symbol of the host `tgid` whose name `matches`; `Err` says why there is none.
pub fn find(tgid: u32, matches: impl Fn(&str) -> bool) -> Result<HostSymbol, String> {
    let exe = PathBuf::from(format!("/proc/{tgid}/exe"));
    let file = fs::File::open(&exe).map_err(|e| format!("cannot open {}: {e}", exe.display()))?;
    let cache = ::object::ReadCache::new(file);
    let elf = ::object::File::parse(&cache)
        .map_err(|e| format!("{} is not an ELF executable: {e}", exe.display()))?;
    let offset = elf
        .symbols()
        .find(|s| s.name().is_ok_and(&matches))
        .and_then(|symbol| {
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
        });
    match offset {
        Some(offset) => Ok(HostSymbol { exe, offset }),
        None => Err(fs::read_link(&exe).unwrap_or(exe).display().to_string()),
    }
}
