//! Changing a sysctl for the length of an experiment: the original value is handed to a
//! guardian before the new one is written, so it comes back on every exit path.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};

use crate::producers::system::guardian::{Guardian, Restore};

/// What `--scale-factor` sets: the distance between the watermarks, in 1/10000 of memory.
pub const SCALE_FACTOR: &str = "vm.watermark_scale_factor";

/// What `--boost-factor` sets: how far, in 1/10000 of the high watermark, the kernel raises
/// every watermark after an allocation takes part of another migrate type's pageblock.
pub const BOOST_FACTOR: &str = "vm.watermark_boost_factor";

/// A watermark sysctl a band experiment may set, the flag that sets it, and the value asked.
#[derive(Clone, Copy, Debug)]
pub struct WatermarkSetting {
    pub sysctl: &'static str,
    pub flag: &'static str,
    pub value: Option<u32>,
}

/// `--scale-factor` and `--boost-factor`, in the order they are set.
pub fn watermark_settings(scale: Option<u32>, boost: Option<u32>) -> [WatermarkSetting; 2] {
    [
        WatermarkSetting {
            sysctl: SCALE_FACTOR,
            flag: "--scale-factor",
            value: scale,
        },
        WatermarkSetting {
            sysctl: BOOST_FACTOR,
            flag: "--boost-factor",
            value: boost,
        },
    ]
}

/// A sysctl set to another value until [`SysctlChange::restore`] (or drop).
pub struct SysctlChange {
    name: &'static str,
    original: String,
    guardian: Guardian,
}

/// `vm.watermark_scale_factor` → /proc/sys/vm/watermark_scale_factor.
fn path(name: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(name.replace('.', "/"))
}

pub fn read(name: &str) -> Result<String> {
    let path = path(name);
    Ok(fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_string())
}

impl SysctlChange {
    pub fn set(name: &'static str, value: &str) -> Result<SysctlChange> {
        let path = path(name);
        let original = read(name)?;
        let guardian = Guardian::protect(
            Restore::sysctl(&path, &original)?,
            &format!("{name} to {original}"),
        )?;
        fs::write(&path, format!("{value}\n"))
            .with_context(|| format!("setting {name} to {value} ({})", path.display()))?;
        Ok(SysctlChange {
            name,
            original,
            guardian,
        })
    }

    pub fn guardian_pid(&self) -> u32 {
        self.guardian
            .pid()
            .expect("a guardian is waited for only when restoring")
    }

    pub fn original(&self) -> &str {
        &self.original
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Puts the original value back and checks that it holds.
    pub fn restore(self) -> Result<()> {
        let SysctlChange {
            name,
            original,
            guardian,
        } = self;
        guardian.restore()?;
        let now = read(name)?;
        ensure!(
            now == original,
            "{name} is {now} after restoring {original}: set it by hand with \
             `sysctl -w {name}={original}`"
        );
        Ok(())
    }
}
