//! The frames of a wasmtime host's JIT-compiled WebAssembly code, named without the host's
//! help (no perf map, no debug information), so that any wasmtime host can be read: skillhost
//! and `wasmtime serve` (wasmtime 50), and engines built on wasmtime 33 or a 2024 wasmtime.
//!
//! wasmtime keeps each compiled module or component as one ELF image in memory (its
//! `CodeMemory`, over an `MmapVec` of the whole image). Publishing it makes the image
//! read-only and its page-aligned `.text` read-execute, so an executable mapping holds the
//! text and the ELF header lies a few pages before it. The image's `.wasmtime.addrmap`
//! section maps every text offset to a source position: the byte offset, in the wasm file
//! wasmtime was given (a component's own file, not the core module inside it), of the
//! instruction the code was compiled from, or none (generated code: a function's prologue and
//! epilogue, moves between instructions). Where one function's code ends and the next's
//! begins, the address map does not say (each entry runs up to the next one, the last one to
//! the text's end, over the trampolines after the functions); the unwind information
//! wasmtime writes for each function (`.eh_frame`) does. [`WasmCode`] finds the images that
//! hold some addresses of a running host and reads both; [`ComponentNames`] reads a wasm
//! file's functions (where each body lies, and its name), so that a source position names
//! its function as wasmtime's perf map does: `wasm[M]::function[F]::name`. A host's files
//! are not known to its code, so [`ComponentNames::coverage`] says whether a file is the one
//! an image was compiled from.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;

use anyhow::{Context as _, Result, bail};
use gimli::UnwindSection as _;
use object::LittleEndian as LE;
use object::elf::{ELFCLASS64, ELFDATA2LSB, FileHeader64, SectionHeader64};
use procfs::process::{MMPermissions, Process};
use wasmparser::{Encoding, KnownCustom, Name, NameSectionReader, Parser, Payload, TypeRef};

/// The step of the search for an image's header: the smallest page size; wasmtime aligns the
/// text to the target's page size, which is a multiple of it.
const PAGE: u64 = 4096;
/// How far before its text an image's header is looked for: wasmtime writes only the ELF
/// header and a few small sections before the text (its first page, in practice).
const HEADER_PAGES: u64 = 64;
/// More sections than this is not a wasmtime image (it writes about fifteen, and a few dozen
/// DWARF ones with debug information on).
const MAX_SECTIONS: usize = 4096;
/// A larger section is not a wasmtime image's (a gigabyte of address map would describe a
/// hundred million instructions), and is not read.
const MAX_SECTION: u64 = 1 << 30;

/// The wasmtime code images of a process that hold some addresses.
pub struct WasmCode {
    /// Sorted by text start; texts do not overlap.
    images: Vec<Image>,
}

/// Where an address of wasm code came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WasmFrame {
    /// The image's start (its ELF header's address): which compiled module or component.
    pub image: u64,
    /// A byte offset in the wasm file inside the body of the function whose code holds the
    /// address: that of the instruction the code was compiled from, or where the code has
    /// none (a prologue, an epilogue, a move between instructions), of the nearest one of
    /// the same function (the next, else the one before), so that it names the function.
    /// `None` for code of no wasm function: trampolines, padding between functions.
    pub source: Option<u32>,
}

/// One compiled module or component, as published in the host's memory.
struct Image {
    /// The address of its ELF header.
    start: u64,
    /// Its `.text` section's addresses.
    text: Range<u64>,
    map: AddressMap,
    /// Each function's code (wasm functions and trampolines alike), as text offsets, sorted;
    /// empty where wasmtime wrote no unwind information (`Config::native_unwind_info`).
    functions: Vec<Range<u32>>,
}

impl WasmCode {
    /// Finds the images holding `ips` (any order, duplicates fine) in process `tgid`, reading
    /// its memory through /proc (root, or ptrace access to it). An address outside every
    /// image is left out; an image whose address map is in neither known format is an error,
    /// not a silent gap.
    pub fn scan(tgid: u32, ips: &[u64]) -> Result<WasmCode> {
        let maps = Process::new(tgid as i32)
            .and_then(|process| process.maps())
            .with_context(|| format!("reading /proc/{tgid}/maps"))?;
        let path = format!("/proc/{tgid}/mem");
        let mem = File::open(&path).with_context(|| format!("opening {path}"))?;
        let mut ips = ips.to_vec();
        ips.sort_unstable();
        let mut images = Vec::new();
        for map in maps {
            let (start, end) = map.address;
            // wasmtime never leaves code writable once published (W^X).
            let executable = map.perms.contains(MMPermissions::EXECUTE)
                && !map.perms.contains(MMPermissions::WRITE);
            let first = ips.partition_point(|&ip| ip < start);
            if !executable || ips.get(first).is_none_or(|&ip| ip >= end) {
                continue;
            }
            if let Some(image) = Image::before(&mem, start)? {
                images.push(image);
            }
        }
        images.sort_by_key(|image| image.text.start);
        Ok(WasmCode { images })
    }

    /// The image and the wasm source position of `ip`, if it is in one.
    pub fn locate(&self, ip: u64) -> Option<WasmFrame> {
        let image = self.image_at(ip)?;
        let offset = u32::try_from(ip - image.text.start).ok()?;
        Some(WasmFrame {
            image: image.start,
            source: image.source(offset),
        })
    }

    fn image_at(&self, ip: u64) -> Option<&Image> {
        let after = self.images.partition_point(|image| image.text.start <= ip);
        let image = &self.images[after.checked_sub(1)?];
        image.text.contains(&ip).then_some(image)
    }
}

impl Image {
    /// The source position naming the function at text offset `offset` ([`WasmFrame`]'s).
    /// Without unwind information, the entry covering it, as wasmtime looks it up: right
    /// but for code without entries of its own (a prologue then gets the entry before it:
    /// none, or the previous function's last; a trampoline the last function's).
    fn source(&self, offset: u32) -> Option<u32> {
        if self.functions.is_empty() {
            return self.map.source(offset);
        }
        let after = self
            .functions
            .partition_point(|function| function.start <= offset);
        let function = self.functions[after.checked_sub(1)?].clone();
        if !function.contains(&offset) {
            return None;
        }
        // wasmtime writes a function's entries from its first positioned instruction on, so
        // every entry inside a function's code is that function's.
        let entries = self.map.entries_from(function.start);
        let (mut covering, mut before) = (None, None);
        for (at, source) in entries.take_while(|&(at, _)| at < function.end) {
            if at <= offset {
                covering = source;
                before = source.or(before);
            } else if covering.is_some() || source.is_some() {
                return covering.or(source);
            }
        }
        covering.or(before)
    }

    /// The image whose text starts at `text` (an executable mapping's start), if it is a
    /// wasmtime image: a page at most [`HEADER_PAGES`] before it starts with an ELF header
    /// whose `.text` lies exactly there. The mapping before the text need not start at the
    /// header: the kernel merges neighbouring read-only anonymous mappings, so the pages are
    /// tried one by one until memory ends.
    fn before(mem: &File, text: u64) -> Result<Option<Image>> {
        for page in (1..=HEADER_PAGES).map_while(|pages| text.checked_sub(pages * PAGE)) {
            let mut magic = [0u8; 4];
            if mem.read_exact_at(&mut magic, page).is_err() {
                break;
            }
            if magic == *b"\x7fELF"
                && let Some(image) = Image::at(mem, page, text)?
            {
                return Ok(Some(image));
            }
        }
        Ok(None)
    }

    /// The wasmtime image with its ELF header at `start` and its text at `text`, if that is
    /// what is there.
    fn at(mem: &File, start: u64, text: u64) -> Result<Option<Image>> {
        let Some(header) = read(mem, start, size_of::<FileHeader64<LE>>() as u64) else {
            return Ok(None);
        };
        let Ok((header, _)) = object::pod::from_bytes::<FileHeader64<LE>>(&header) else {
            return Ok(None);
        };
        let count = usize::from(header.e_shnum.get(LE));
        if header.e_ident.class != ELFCLASS64
            || header.e_ident.data != ELFDATA2LSB
            || usize::from(header.e_shentsize.get(LE)) != size_of::<SectionHeader64<LE>>()
            || count > MAX_SECTIONS
        {
            return Ok(None);
        }
        let table = start.checked_add(header.e_shoff.get(LE));
        let table_size = (count * size_of::<SectionHeader64<LE>>()) as u64;
        let Some(table) = table.and_then(|table| read(mem, table, table_size)) else {
            return Ok(None);
        };
        let Ok((sections, _)) = object::pod::slice_from_bytes::<SectionHeader64<LE>>(&table, count)
        else {
            return Ok(None);
        };
        let section_data = |section: &SectionHeader64<LE>| {
            read(
                mem,
                start.checked_add(section.sh_offset.get(LE))?,
                section.sh_size.get(LE),
            )
        };
        let Some(names) = (header.e_shstrndx.get(LE).index())
            .and_then(|index| sections.get(usize::from(index)))
            .and_then(section_data)
        else {
            return Ok(None);
        };
        let named = |wanted: &[u8]| {
            sections.iter().find(|section| {
                let name = names
                    .get(section.sh_name.get(LE) as usize..)
                    .unwrap_or_default();
                name.split(|&byte| byte == 0).next() == Some(wanted)
            })
        };
        let Some(text_section) = named(b".text") else {
            return Ok(None);
        };
        if start.checked_add(text_section.sh_offset.get(LE)) != Some(text) {
            return Ok(None);
        }
        let Some(map) = named(b".wasmtime.addrmap") else {
            return Ok(None);
        };
        let map = section_data(map)
            .with_context(|| format!("reading the address map of the wasm code at {start:#x}"))?;
        let map = AddressMap::parse(map)
            .with_context(|| format!("the address map of the wasm code at {start:#x}"))?;
        let text = text..text + text_section.sh_size.get(LE);
        let functions = match named(b".eh_frame") {
            Some(section) => {
                let bytes = section_data(section).with_context(|| {
                    format!("reading the unwind information of the wasm code at {start:#x}")
                })?;
                let address = start + section.sh_offset.get(LE);
                functions(&bytes, address, &text).with_context(|| {
                    format!("the unwind information of the wasm code at {start:#x}")
                })?
            }
            None => Vec::new(),
        };
        Ok(Some(Image {
            start,
            text,
            map,
            functions,
        }))
    }
}

/// The functions of a text, as text offsets, from the frame description entries of its
/// `.eh_frame` (at `address`): wasmtime writes one per function, its start relative to
/// itself (`DW_EH_PE_pcrel`), so it reads right only at the address it is published at.
fn functions(eh_frame: &[u8], address: u64, text: &Range<u64>) -> Result<Vec<Range<u32>>> {
    let section = gimli::EhFrame::new(eh_frame, gimli::LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(address);
    let mut entries = section.entries(&bases);
    let mut functions = Vec::new();
    while let Some(entry) = entries.next()? {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(gimli::EhFrame::cie_from_offset)?;
            let code = fde.initial_address()..fde.end_address();
            if code.start < text.start || code.end > text.end {
                bail!("a function at {code:#x?} outside the text at {text:#x?}");
            }
            functions.push((code.start - text.start) as u32..(code.end - text.start) as u32);
        }
    }
    functions.sort_by_key(|function| function.start);
    Ok(functions)
}

/// `len` bytes of the host's memory at `at`; `None` where it is not mapped or absurdly long.
fn read(mem: &File, at: u64, len: u64) -> Option<Vec<u8>> {
    if len > MAX_SECTION {
        return None;
    }
    let mut bytes = vec![0; len as usize];
    mem.read_exact_at(&mut bytes, at).ok()?;
    Some(bytes)
}

/// An image's `.wasmtime.addrmap`: text offsets in ascending order, each with the source
/// position of the code from it up to the next one (the last one's up to the text's end).
/// `u32::MAX` is wasmtime's `FilePos::none()`: generated code. Kept encoded (about two
/// bytes an entry in the newer format, eight in the older), as wasmtime keeps it.
enum AddressMap {
    /// wasmtime up to 46 (crates/environ/src/compile/address_map.rs): `count: u32`, then
    /// `count` text offsets, then `count` positions, every number a little-endian u32.
    Flat(Vec<u8>),
    /// wasmtime from 47 on: `entries: u32`, `blocks: u32` (one per [`BLOCK`] entries), an
    /// index of `(first text offset, body position): (u32, u32)` per block, then the blocks'
    /// bodies (positions relative to the first body). A body's entry is a ULEB128 token
    /// `offset delta << 1 | none` (the delta from the entry before, the first one's from the
    /// block's first offset), then, unless `none`, its position: ULEB128 for the block's
    /// first, SLEB128 deltas from the one before for the rest, so each block decodes alone.
    Blocked(Vec<u8>),
}

/// The most entries a block of the newer format holds (wasmtime's `ADDRMAP_BLOCK_SIZE`).
const BLOCK: usize = 128;
/// wasmtime's `FilePos::none()`.
const NONE: u32 = u32::MAX;

impl AddressMap {
    /// Tells the two formats apart by decoding the section whole as each: a flat map's size
    /// is exactly `4 + 8 × count` with its offsets in order, and a blocked one has exactly
    /// one block per [`BLOCK`] entries, each decoding to its entries in order and ending
    /// where the next begins. Both at once would take a coincidence no real section makes;
    /// it is refused rather than guessed.
    fn parse(section: Vec<u8>) -> Result<AddressMap> {
        match (flat_valid(&section), blocked_valid(&section)) {
            (true, false) => Ok(AddressMap::Flat(section)),
            (false, true) => Ok(AddressMap::Blocked(section)),
            (true, true) => bail!("it decodes in both of wasmtime's formats"),
            (false, false) => {
                bail!("it decodes in neither of wasmtime's formats (up to 46, from 47 on)")
            }
        }
    }

    /// The source position of the code at text offset `offset` (`None` for generated code,
    /// or before the first entry): the last entry at or before it, as wasmtime looks it up.
    fn source(&self, offset: u32) -> Option<u32> {
        let position = match self {
            AddressMap::Flat(bytes) => {
                let count = u32_at(bytes, 0)? as usize;
                let index = partition_point(count, |i| u32_at(bytes, 4 + 4 * i) <= Some(offset));
                u32_at(bytes, 4 + 4 * count + 4 * index.checked_sub(1)?)?
            }
            AddressMap::Blocked(bytes) => {
                let blocks = Blocks(bytes);
                let block = partition_point(blocks.count(), |b| blocks.first(b) <= Some(offset));
                let entries = blocks.entries(block.checked_sub(1)?)?;
                entries.take_while(|&(at, _)| at <= offset).last()?.1
            }
        };
        (position != NONE).then_some(position)
    }

    /// The entries from text offset `start` on, in order: `(text offset, position)`, the
    /// position `None` for generated code.
    fn entries_from(&self, start: u32) -> Box<dyn Iterator<Item = (u32, Option<u32>)> + '_> {
        let known =
            |(offset, position): (u32, u32)| (offset, (position != NONE).then_some(position));
        match self {
            AddressMap::Flat(bytes) => {
                let count = u32_at(bytes, 0).unwrap_or(0) as usize;
                let offset = move |i: usize| u32_at(bytes, 4 + 4 * i).unwrap_or(u32::MAX);
                let first = partition_point(count, |i| offset(i) < start);
                Box::new((first..count).map(move |i| {
                    known((
                        offset(i),
                        u32_at(bytes, 4 + 4 * (count + i)).unwrap_or(NONE),
                    ))
                }))
            }
            AddressMap::Blocked(bytes) => {
                let blocks = Blocks(bytes);
                let block = partition_point(blocks.count(), |b| blocks.first(b) <= Some(start));
                Box::new(
                    (block.saturating_sub(1)..blocks.count())
                        .filter_map(move |block| blocks.entries(block))
                        .flatten()
                        .skip_while(move |&(offset, _)| offset < start)
                        .map(known),
                )
            }
        }
    }
}

/// Whether `bytes` is an address map in wasmtime's format up to 46.
fn flat_valid(bytes: &[u8]) -> bool {
    let Some(count) = u32_at(bytes, 0) else {
        return false;
    };
    let offset = |i: usize| u32_at(bytes, 4 + 4 * i);
    bytes.len() as u64 == 4 + 8 * u64::from(count)
        && (1..count as usize).all(|i| offset(i - 1) <= offset(i))
}

/// Whether `bytes` is an address map in wasmtime's format from 47 on.
fn blocked_valid(bytes: &[u8]) -> bool {
    let (Some(entries), Some(count)) = (u32_at(bytes, 0), u32_at(bytes, 4)) else {
        return false;
    };
    let blocks = Blocks(bytes);
    if count as usize != (entries as usize).div_ceil(BLOCK)
        || bodies_at(blocks.count()) > bytes.len()
        || (count > 0 && blocks.body(0).map(|(start, _)| start) != Some(0))
    {
        return false;
    }
    let mut last = 0;
    for block in 0..blocks.count() {
        let Some(mut entries) = blocks.entries(block) else {
            return false;
        };
        let (first, expected) = (entries.offset, entries.left);
        let mut decoded = 0;
        for (offset, _) in entries.by_ref() {
            // The first entry is at the block's first offset, and offsets never go back.
            if offset < last || (decoded == 0 && offset != first) {
                return false;
            }
            last = offset;
            decoded += 1;
        }
        if decoded != expected || !entries.bytes.is_empty() {
            return false;
        }
    }
    true
}

/// The newer format's blocks, read from its index.
#[derive(Clone, Copy)]
struct Blocks<'a>(&'a [u8]);

impl<'a> Blocks<'a> {
    fn count(self) -> usize {
        u32_at(self.0, 4).unwrap_or(0) as usize
    }

    fn first(self, block: usize) -> Option<u32> {
        u32_at(self.0, 8 + 8 * block)
    }

    /// Block `block`'s body: where it starts among the bodies, and its bytes (up to the next
    /// block's body, or the section's end).
    fn body(self, block: usize) -> Option<(usize, &'a [u8])> {
        let bodies = self.0.get(bodies_at(self.count())..)?;
        let start = u32_at(self.0, 12 + 8 * block)? as usize;
        let end = match block + 1 < self.count() {
            true => u32_at(self.0, 12 + 8 * (block + 1))? as usize,
            false => bodies.len(),
        };
        Some((start, bodies.get(start..end)?))
    }

    fn entries(self, block: usize) -> Option<BlockEntries<'a>> {
        let entries = u32_at(self.0, 0)? as usize;
        Some(BlockEntries {
            bytes: self.body(block)?.1,
            offset: self.first(block)?,
            position: None,
            left: (entries.checked_sub(block * BLOCK)?).min(BLOCK),
        })
    }
}

/// Where the newer format's bodies start, after its header and index.
fn bodies_at(blocks: usize) -> usize {
    8 + 8 * blocks
}

/// One block's entries, `(text offset, position)`, decoded in order; it stops early at a
/// malformed entry (which the parse refuses).
struct BlockEntries<'a> {
    bytes: &'a [u8],
    offset: u32,
    position: Option<u32>,
    left: usize,
}

impl Iterator for BlockEntries<'_> {
    type Item = (u32, u32);

    fn next(&mut self) -> Option<(u32, u32)> {
        self.left = self.left.checked_sub(1)?;
        let token = uleb(&mut self.bytes)?;
        self.offset = self.offset.checked_add(u32::try_from(token >> 1).ok()?)?;
        if token & 1 == 1 {
            return Some((self.offset, NONE));
        }
        let position = match self.position {
            None => u32::try_from(uleb(&mut self.bytes)?).ok()?,
            Some(before) => {
                before.checked_add_signed(i32::try_from(sleb(&mut self.bytes)?).ok()?)?
            }
        };
        // A position is never none here: none is the token's flag.
        if position == NONE {
            return None;
        }
        self.position = Some(position);
        Some((self.offset, position))
    }
}

/// The little-endian u32 at byte `at`.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The number of leading indices in `0..len` for which `before` holds (it must hold for a
/// prefix): a binary search over an encoded array.
fn partition_point(len: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, len);
    while low < high {
        let middle = low + (high - low) / 2;
        if before(middle) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low
}

/// An unsigned LEB128 number of at most 64 bits, taken off the front of `bytes`.
fn uleb(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// A signed LEB128 number of at most 64 bits, taken off the front of `bytes`.
fn sleb(bytes: &mut &[u8]) -> Option<i64> {
    let mut value = 0i64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= i64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            // The last byte's sign bit fills the bits above it.
            if shift + 7 < 64 && byte & 0x40 != 0 {
                value |= -1i64 << (shift + 7);
            }
            return Some(value);
        }
    }
    None
}

/// A wasm file's functions (a component's, its nested components' included, or a core
/// module's): where each body lies in the file, and its name.
pub struct ComponentNames {
    /// Sorted by body start; bodies do not overlap.
    functions: Vec<Function>,
}

struct Function {
    /// The body's bytes in the file (its locals and instructions).
    body: Range<u32>,
    module: u32,
    index: u32,
    symbol: Option<String>,
}

/// A function of a wasm file, named as wasmtime's perf map names it (`Display`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WasmFunction<'a> {
    /// wasmtime's static module index, `M` in `wasm[M]`: the core modules of a component
    /// counted in the order their sections come in the file, depth first into nested
    /// components (wasmtime's component translator numbers each as its section is read).
    pub module: u32,
    /// `F` in `function[F]`: the function's index in its module (imported functions first).
    pub index: u32,
    /// Its name in the module's `name` section, as written there.
    pub symbol: Option<&'a str>,
}

impl fmt::Display for WasmFunction<'_> {
    /// `wasm[M]::function[F]::symbol`, a Rust symbol demangled (without its hash) as
    /// `--stacks` demangles the perf map's, or `wasm[M]::function[F]` without a name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wasm[{}]::function[{}]", self.module, self.index)?;
        match self
            .symbol
            .map(|symbol| (symbol, rustc_demangle::try_demangle(symbol)))
        {
            Some((_, Ok(demangled))) => write!(f, "::{demangled:#}"),
            Some((symbol, Err(_))) => write!(f, "::{symbol}"),
            None => Ok(()),
        }
    }
}

/// A core module's functions as its sections are read.
#[derive(Default)]
struct ModuleFunctions {
    imported: u32,
    bodies: Vec<Range<u32>>,
    /// Names by function index; a later name for an index replaces an earlier one.
    names: std::collections::HashMap<u32, String>,
}

impl ModuleFunctions {
    /// The names a `name` section gives, read as wasmtime reads them: up to the first
    /// malformed entry, keeping those before it.
    fn read_names(&mut self, section: NameSectionReader<'_>) {
        let read = || -> wasmparser::Result<()> {
            for subsection in section {
                if let Name::Function(names) = subsection? {
                    for naming in names {
                        let naming = naming?;
                        self.names.insert(naming.index, naming.name.to_owned());
                    }
                }
            }
            Ok(())
        };
        let _ = read();
    }

    fn into_functions(mut self, module: u32) -> impl Iterator<Item = Function> {
        let imported = self.imported;
        self.bodies
            .into_iter()
            .enumerate()
            .map(move |(defined, body)| {
                let index = imported + defined as u32;
                Function {
                    body,
                    module,
                    index,
                    symbol: self.names.remove(&index),
                }
            })
    }
}

impl ComponentNames {
    /// Reads a component file (or a core module file). Nothing is validated: wasmtime already
    /// compiled the file.
    pub fn parse(bytes: &[u8]) -> Result<ComponentNames> {
        let mut functions = Vec::new();
        let mut modules = 0;
        // The core module being read: modules hold no modules, so one at a time.
        let mut module: Option<ModuleFunctions> = None;
        for payload in Parser::new(0).parse_all(bytes) {
            let payload = payload.context("parsing the wasm file")?;
            match payload {
                Payload::Version {
                    encoding: Encoding::Module,
                    ..
                } => module = Some(ModuleFunctions::default()),
                Payload::ImportSection(imports) => {
                    let Some(module) = module.as_mut() else {
                        continue;
                    };
                    for import in imports.into_imports() {
                        let import = import.context("parsing an import")?;
                        if matches!(import.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                            module.imported += 1;
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let range = body.range();
                    let body = u32::try_from(range.start)?..u32::try_from(range.end)?;
                    if let Some(module) = module.as_mut() {
                        module.bodies.push(body);
                    }
                }
                Payload::CustomSection(section) => {
                    if let (Some(module), KnownCustom::Name(names)) =
                        (module.as_mut(), section.as_known())
                    {
                        module.read_names(names);
                    }
                }
                Payload::End(_) => {
                    if let Some(done) = module.take() {
                        functions.extend(done.into_functions(modules));
                        modules += 1;
                    }
                }
                _ => {}
            }
        }
        functions.sort_by_key(|function: &Function| function.body.start);
        Ok(ComponentNames { functions })
    }

    /// The function whose body holds source position `source`.
    pub fn function_at(&self, source: u32) -> Option<WasmFunction<'_>> {
        let after = self
            .functions
            .partition_point(|function| function.body.start <= source);
        let function = &self.functions[after.checked_sub(1)?];
        function.body.contains(&source).then_some(WasmFunction {
            module: function.module,
            index: function.index,
            symbol: function.symbol.as_deref(),
        })
    }

    /// The share (0 to 1) of image `image`'s source positions that lie in this file's
    /// function bodies: about 1 for the file the image was compiled from. Positions are
    /// offsets in the file, so another file's bodies hold only those that happen to fall in
    /// them; the caller picks the best of its candidates and refuses one well below 1. 0 for
    /// an image without positions, or not in `code`.
    pub fn coverage(&self, code: &WasmCode, image: u64) -> f64 {
        let Some(image) = code.images.iter().find(|found| found.start == image) else {
            return 0.0;
        };
        let (mut positions, mut inside) = (0u64, 0u64);
        for (_, source) in image.map.entries_from(0) {
            let Some(source) = source else {
                continue;
            };
            positions += 1;
            inside += u64::from(self.function_at(source).is_some());
        }
        match positions {
            0 => 0.0,
            _ => inside as f64 / positions as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leb(value: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut value = value;
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                bytes.push(byte);
                return bytes;
            }
            bytes.push(byte | 0x80);
        }
    }

    fn signed_leb(value: i64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut value = value;
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if (value == 0 && byte & 0x40 == 0) || (value == -1 && byte & 0x40 != 0) {
                bytes.push(byte);
                return bytes;
            }
            bytes.push(byte | 0x80);
        }
    }

    /// `(text offset, position)` entries as wasmtime up to 46 writes them.
    fn flat(entries: &[(u32, u32)]) -> Vec<u8> {
        let mut bytes = (entries.len() as u32).to_le_bytes().to_vec();
        bytes.extend(entries.iter().flat_map(|entry| entry.0.to_le_bytes()));
        bytes.extend(entries.iter().flat_map(|entry| entry.1.to_le_bytes()));
        bytes
    }

    /// The same as wasmtime from 47 on writes them: blocks of [`BLOCK`] entries.
    fn blocked(entries: &[(u32, u32)]) -> Vec<u8> {
        let blocks = entries.chunks(BLOCK).collect::<Vec<_>>();
        let mut index = Vec::new();
        let mut bodies = Vec::new();
        for block in &blocks {
            index.extend(block[0].0.to_le_bytes());
            index.extend((bodies.len() as u32).to_le_bytes());
            let (mut offset, mut position) = (block[0].0, None);
            for &(at, source) in *block {
                let none = source == NONE;
                bodies.extend(leb(u64::from(at - offset) << 1 | u64::from(none)));
                offset = at;
                if none {
                    continue;
                }
                match position {
                    None => bodies.extend(leb(u64::from(source))),
                    Some(before) => {
                        bodies.extend(signed_leb(i64::from(source) - i64::from(before)))
                    }
                }
                position = Some(source);
            }
        }
        let mut bytes = (entries.len() as u32).to_le_bytes().to_vec();
        bytes.extend((blocks.len() as u32).to_le_bytes());
        bytes.extend(index);
        bytes.extend(bodies);
        bytes
    }

    const SMALL: [(u32, u32); 3] = [(10, 100), (20, NONE), (30, 90)];

    #[test]
    fn the_flat_format_of_wasmtime_up_to_46_is_read() {
        // count, offsets, positions: every number a little-endian u32.
        let bytes = [
            &[3, 0, 0, 0][..],
            &[10, 0, 0, 0, 20, 0, 0, 0, 30, 0, 0, 0],
            &[100, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 90, 0, 0, 0],
        ]
        .concat();
        assert_eq!(bytes, flat(&SMALL));
        let map = AddressMap::parse(bytes).unwrap();
        assert!(matches!(map, AddressMap::Flat(_)));
        assert_small(&map);
    }

    #[test]
    fn the_blocked_format_of_wasmtime_from_47_on_is_read() {
        let bytes = [
            &[3, 0, 0, 0, 1, 0, 0, 0][..], // entries, blocks
            &[10, 0, 0, 0, 0, 0, 0, 0],    // the block's first offset and body position
            &[0x00, 100],                  // delta 0, position 100 (ULEB128)
            &[10 << 1 | 1],                // delta 10, none
            &[10 << 1, 0x76],              // delta 10, position -10 from 100 (SLEB128)
        ]
        .concat();
        assert_eq!(bytes, blocked(&SMALL));
        let map = AddressMap::parse(bytes).unwrap();
        assert!(matches!(map, AddressMap::Blocked(_)));
        assert_small(&map);
    }

    fn assert_small(map: &AddressMap) {
        assert_eq!(map.source(0), None, "before the first entry");
        assert_eq!(map.source(9), None);
        assert_eq!(map.source(10), Some(100));
        assert_eq!(map.source(19), Some(100));
        assert_eq!(map.source(20), None, "generated code");
        assert_eq!(map.source(29), None);
        assert_eq!(map.source(30), Some(90));
        assert_eq!(
            map.source(0x10000),
            Some(90),
            "the last entry runs to the end"
        );
        assert_eq!(
            map.entries_from(0).collect::<Vec<_>>(),
            [(10, Some(100)), (20, None), (30, Some(90))]
        );
    }

    #[test]
    fn both_formats_agree_over_many_blocks_and_long_numbers() {
        // Positions going back and forth by large steps, none at block boundaries, repeated
        // offsets (code without instructions of its own) and multi-byte deltas.
        let entries = (0..1000u32)
            .map(|i| {
                let offset = i * 3 + (i / 100) * 70_000;
                let position = match i % 5 {
                    0 => NONE,
                    1 => 5_000_000 + i * 11,
                    2 => 200 - (i % 200).min(199),
                    _ => 1_000_000 - i * 700,
                };
                (offset, position)
            })
            .collect::<Vec<_>>();
        let maps = [
            AddressMap::parse(flat(&entries)).unwrap(),
            AddressMap::parse(blocked(&entries)).unwrap(),
        ];
        assert!(matches!(maps[0], AddressMap::Flat(_)));
        assert!(matches!(maps[1], AddressMap::Blocked(_)));
        let known = |position: u32| (position != NONE).then_some(position);
        for map in &maps {
            for (i, &(offset, position)) in entries.iter().enumerate() {
                assert_eq!(map.source(offset), known(position), "entry {i}");
                let next = entries.get(i + 1).map_or(u32::MAX, |entry| entry.0);
                assert_eq!(map.source(next - 1), known(position), "inside entry {i}");
            }
            for start in [0, 299, 300, 301, 70_000, 1_000_000] {
                let from = entries.iter().filter(|entry| entry.0 >= start);
                assert!(
                    map.entries_from(start)
                        .eq(from.map(|&(offset, position)| (offset, known(position)))),
                    "from {start}"
                );
            }
        }
    }

    #[test]
    fn a_section_in_neither_format_is_refused() {
        let good = blocked(&SMALL);
        for bad in [
            Vec::new(),
            vec![1, 0, 0],
            good[..good.len() - 1].to_vec(),       // a body cut short
            [&good[..], &[0]].concat(),            // a byte too many
            flat(&[(20, 1), (10, 2)]),             // offsets out of order
            [&flat(&SMALL)[..], &[0; 4]].concat(), // not 4 + 8 × count
        ] {
            assert!(AddressMap::parse(bad.clone()).is_err(), "{bad:?}");
        }
        // The empty maps of both formats.
        assert!(matches!(
            AddressMap::parse(flat(&[])),
            Ok(AddressMap::Flat(_))
        ));
        assert!(matches!(
            AddressMap::parse(blocked(&[])),
            Ok(AddressMap::Blocked(_))
        ));
    }

    fn section(id: u8, contents: &[u8]) -> Vec<u8> {
        [&[id][..], &leb(contents.len() as u64), contents].concat()
    }

    fn string(text: &str) -> Vec<u8> {
        [&leb(text.len() as u64)[..], text.as_bytes()].concat()
    }

    /// A core module importing `imported` functions and defining `defined`, whose `name`
    /// section names `names`; and where each defined function's body lies in it.
    fn module(imported: u32, defined: u32, names: &[(u32, &str)]) -> (Vec<u8>, Vec<Range<usize>>) {
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        bytes.extend(section(1, &[1, 0x60, 0, 0])); // one type: [] -> []
        let import = [string("env"), string("f"), vec![0x00, 0]].concat();
        let imports = [leb(u64::from(imported)), import.repeat(imported as usize)].concat();
        bytes.extend(section(2, &imports));
        let functions = [leb(u64::from(defined)), vec![0; defined as usize]].concat();
        bytes.extend(section(3, &functions));
        // Bodies of different lengths: no locals, `nop`s, `end`.
        let bodies = (0..defined as usize)
            .map(|i| [&[0][..], &vec![0x01; i], &[0x0b]].concat())
            .collect::<Vec<_>>();
        let code = [
            leb(u64::from(defined)),
            bodies.iter().flat_map(|body| section_body(body)).collect(),
        ]
        .concat();
        let code_start = bytes.len() + 1 + leb(code.len() as u64).len();
        bytes.extend(section(10, &code));
        let mut at = code_start + leb(u64::from(defined)).len();
        let mut ranges = Vec::new();
        for body in &bodies {
            at += leb(body.len() as u64).len();
            ranges.push(at..at + body.len());
            at += body.len();
        }
        let namings = names
            .iter()
            .flat_map(|&(index, name)| [leb(u64::from(index)), string(name)].concat())
            .collect::<Vec<u8>>();
        let namings = [leb(names.len() as u64), namings].concat();
        let name_section = [string("name"), section(1, &namings)].concat();
        bytes.extend(section(0, &name_section));
        (bytes, ranges)
    }

    fn section_body(body: &[u8]) -> Vec<u8> {
        [&leb(body.len() as u64)[..], body].concat()
    }

    const RESIDENT_CHUNK: &str = "_RNvCs141OnHEiogI_9sample_rs14resident_chunk";

    #[test]
    fn a_position_names_the_function_whose_body_holds_it() {
        // Two imports come first in the function index space.
        let (bytes, bodies) = module(2, 3, &[(2, "first"), (4, RESIDENT_CHUNK), (9, "none")]);
        let names = ComponentNames::parse(&bytes).unwrap();
        let at = |position: usize| {
            names
                .function_at(position as u32)
                .map(|function| function.to_string())
        };
        assert_eq!(
            at(bodies[0].start).as_deref(),
            Some("wasm[0]::function[2]::first")
        );
        assert_eq!(
            at(bodies[0].end - 1).as_deref(),
            Some("wasm[0]::function[2]::first")
        );
        assert_eq!(at(bodies[1].start).as_deref(), Some("wasm[0]::function[3]"));
        assert_eq!(
            at(bodies[2].end - 1).as_deref(),
            Some("wasm[0]::function[4]::sample_rs::resident_chunk")
        );
        assert_eq!(
            names.function_at(bodies[2].start as u32).unwrap().symbol,
            Some(RESIDENT_CHUNK)
        );
        // Between bodies (a body's size) and outside the code section: no function.
        assert_eq!(at(bodies[0].end), None);
        assert_eq!(at(0), None);
        assert_eq!(at(bytes.len()), None);
    }

    #[test]
    fn a_components_modules_are_numbered_in_file_order_nested_components_included() {
        let (a, a_bodies) = module(0, 1, &[(0, "a")]);
        let (b, b_bodies) = module(1, 2, &[(2, "b")]);
        let (c, c_bodies) = module(0, 1, &[]);
        const COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";
        let mut outer = COMPONENT.to_vec();
        let a_at = outer.len() + 1 + leb(a.len() as u64).len();
        outer.extend(section(1, &a)); // a module section
        let inner = [COMPONENT, &section(1, &b)].concat();
        let b_at = outer.len()
            + 1
            + leb(inner.len() as u64).len()
            + COMPONENT.len()
            + 1
            + leb(b.len() as u64).len();
        outer.extend(section(4, &inner)); // a component section
        let c_at = outer.len() + 1 + leb(c.len() as u64).len();
        outer.extend(section(1, &c));

        let names = ComponentNames::parse(&outer).unwrap();
        let at = |position: usize| names.function_at(position as u32).map(|f| f.to_string());
        // Positions are offsets in the component file, not in the module.
        assert_eq!(
            at(a_at + a_bodies[0].start).as_deref(),
            Some("wasm[0]::function[0]::a")
        );
        assert_eq!(
            at(b_at + b_bodies[1].start).as_deref(),
            Some("wasm[1]::function[2]::b")
        );
        assert_eq!(
            at(b_at + b_bodies[0].start).as_deref(),
            Some("wasm[1]::function[1]")
        );
        assert_eq!(
            at(c_at + c_bodies[0].start).as_deref(),
            Some("wasm[2]::function[0]")
        );
    }

    #[test]
    fn an_address_is_named_by_a_position_of_its_own_function() {
        let (bytes, bodies) = module(0, 2, &[]);
        let (a1, a2) = (bodies[0].start as u32, bodies[0].start as u32 + 1);
        let (b1, b2) = (bodies[1].start as u32, bodies[1].start as u32 + 2);
        // As wasmtime 50 lays a text out: function A (0..0x40) with a prologue, a move
        // between instructions and an epilogue without positions; function B (0x40..0x80)
        // with positions up to its end; a trampoline (0x80..0xa0) without entries; padding.
        let entries = [
            (0x08, a1),
            (0x10, NONE),
            (0x14, a2),
            (0x30, NONE),
            (0x48, b1),
            (0x70, b2),
        ];
        let image = |functions: Vec<Range<u32>>| WasmCode {
            images: vec![Image {
                start: 0x10000,
                text: 0x11000..0x110c0,
                map: AddressMap::parse(flat(&entries)).unwrap(),
                functions,
            }],
        };
        let code = image(vec![0..0x40, 0x40..0x80, 0x80..0xa0]);
        let source = |ip: u64| code.locate(0x11000 + ip).unwrap().source;
        assert_eq!(source(0x00), Some(a1), "A's prologue: its first position");
        assert_eq!(source(0x10), Some(a2), "a move: the next position");
        assert_eq!(source(0x14), Some(a2));
        assert_eq!(source(0x3f), Some(a2), "A's epilogue: the position before");
        assert_eq!(source(0x40), Some(b1), "B's prologue");
        assert_eq!(source(0x7f), Some(b2));
        assert_eq!(source(0x80), None, "the trampoline");
        assert_eq!(source(0xa0), None, "padding");
        assert_eq!(code.locate(0x10fff), None, "before the text");
        assert_eq!(code.locate(0x110c0), None, "after it");
        assert_eq!(
            code.locate(0x11000),
            Some(WasmFrame {
                image: 0x10000,
                source: Some(a1)
            })
        );
        // Without unwind information, the entry covering an address, as wasmtime looks it up.
        let code = image(Vec::new());
        let source = |ip: u64| code.locate(0x11000 + ip).unwrap().source;
        assert_eq!(source(0x00), None);
        assert_eq!(source(0x10), None);
        assert_eq!(source(0x14), Some(a2));
        assert_eq!(source(0x40), None);
        assert_eq!(
            source(0x80),
            Some(b2),
            "the trampoline, as the last function"
        );

        let names = ComponentNames::parse(&bytes).unwrap();
        assert_eq!(names.coverage(&code, 0x10000), 1.0);
        assert_eq!(names.coverage(&code, 0x20000), 0.0, "no such image");
        // The same functions further into another file (after five imports) miss.
        let (other, _) = module(5, 2, &[]);
        let other = ComponentNames::parse(&other).unwrap();
        assert!(other.coverage(&code, 0x10000) < 0.5);
    }
}
