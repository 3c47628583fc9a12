//! kswapd's CPU time, from /proc: the one kswapd figure that needs no probe.

use std::time::Duration;

use anyhow::{Context, Result};

/// The kswapd threads (one per memory node), found once: kernel threads keep their pids.
pub struct Kswapd {
    pids: Vec<i32>,
}

impl Kswapd {
    pub fn find() -> Result<Kswapd> {
        let pids: Vec<i32> = procfs::process::all_processes()
            .context("listing /proc")?
            .filter_map(|process| {
                let stat = process.ok()?.stat().ok()?;
                stat.comm.starts_with("kswapd").then_some(stat.pid)
            })
            .collect();
        anyhow::ensure!(!pids.is_empty(), "no kswapd thread in /proc");
        Ok(Kswapd { pids })
    }

    /// User plus system time of every kswapd since boot (10 ms resolution at USER_HZ 100).
    pub fn cpu_time(&self) -> Result<Duration> {
        let mut ticks = 0;
        for &pid in &self.pids {
            let stat = procfs::process::Process::new(pid)
                .and_then(|process| process.stat())
                .with_context(|| format!("reading /proc/{pid}/stat of kswapd"))?;
            ticks += stat.utime + stat.stime;
        }
        Ok(Duration::from_secs_f64(
            crate::record::process::ticks_to_seconds(ticks),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_a_kswapd() {
        let kswapd = Kswapd::find().unwrap();
        kswapd.cpu_time().unwrap();
    }
}
