//! tracefs, which classic tracepoints need (the attach reads the event id from it). It is not
//! mounted on a fresh machine of the kind skillprof runs on, so we mount it.

use std::{ffi::CStr, fmt, io, path::Path};

use crate::record::probes::Tracefs;

const MOUNT_POINT: &CStr = c"/sys/kernel/tracing";

impl fmt::Display for Tracefs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = MOUNT_POINT.to_string_lossy();
        match self {
            Self::AlreadyMounted => write!(f, "already mounted at {path}"),
            Self::MountedNow => write!(f, "was not mounted; mounted it at {path}"),
        }
    }
}

/// Mounts tracefs at /sys/kernel/tracing unless its `events` folder is already there.
pub fn ensure_mounted() -> Result<Tracefs, String> {
    let path = MOUNT_POINT.to_string_lossy();
    match std::fs::metadata(Path::new(&*path).join("events")) {
        Ok(events) if events.is_dir() => return Ok(Tracefs::AlreadyMounted),
        // Mounted, but its folder is root's alone (mode 0700 by default): an unprivileged
        // skillprof with CAP_BPF and CAP_PERFMON gets here.
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
            return Err(format!(
                "tracefs at {path} cannot be read ({error}): a classic tracepoint's attach reads \
                 its event id there, which takes root or CAP_DAC_READ_SEARCH"
            ));
        }
        _ => {}
    }
    // SAFETY: every pointer is a NUL-terminated literal; tracefs takes no mount data.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            MOUNT_POINT.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "tracefs is not mounted and mounting it failed ({}); mount it by hand: \
             `mount -t tracefs nodev {path}`",
            io::Error::last_os_error()
        ));
    }
    Ok(Tracefs::MountedNow)
}
