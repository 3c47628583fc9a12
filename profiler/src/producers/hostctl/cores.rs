//! `--cores N`: a host run as it would run on an N-core machine, on this one. What a compile
//! leaves behind depends on the machine's parallelism, not on its speed: Cranelift compiles a
//! component's functions on a rayon pool of one thread per core, tokio runs one worker per
//! core, and glibc gives each new thread an arena of its own, up to eight per core (jemalloc
//! makes four per core). Those read their sizes from the environment, so any host built on
//! wasmtime's parallel compilation, tokio and glibc or jemalloc takes an N-core machine's
//! sizes from it.

use crate::record::host::Cores;

/// glibc's default arena limit per core (`NARENAS_FROM_NCORES` on 64-bit).
const ARENAS_PER_CORE: u32 = 8;
/// jemalloc's default arenas per core (`opt_narenas`, on a machine of more than one CPU).
const JEMALLOC_ARENAS_PER_CORE: u32 = 4;

/// The environment variables the emulation sets, in order: rayon's pool, tokio's workers,
/// glibc's arena limit, jemalloc's options (its arenas; glibc ignores it).
pub const VARIABLES: [&str; 4] = [
    "RAYON_NUM_THREADS",
    "TOKIO_WORKER_THREADS",
    "MALLOC_ARENA_MAX",
    "MALLOC_CONF",
];

impl Cores {
    pub fn new(cores: u32, real_cores: u32) -> Cores {
        Cores {
            cores,
            real_cores,
            compile_threads: cores,
            async_workers: cores,
            arena_max: cores.saturating_mul(ARENAS_PER_CORE),
            jemalloc_arenas: Some(cores.saturating_mul(JEMALLOC_ARENAS_PER_CORE)),
        }
    }

    /// The host's environment for it.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut values = vec![
            self.compile_threads.to_string(),
            self.async_workers.to_string(),
            self.arena_max.to_string(),
        ];
        values.extend(
            self.jemalloc_arenas
                .map(|arenas| format!("narenas:{arenas}")),
        );
        VARIABLES
            .iter()
            .zip(values)
            .map(|(name, value)| ((*name).to_owned(), value))
            .collect()
    }

    /// What was emulated and what cannot be, in one sentence (explain.md, the run's head).
    pub fn said(&self) -> String {
        format!(
            "emulated a {}-core machine's parallelism on this {}-core one (--cores {}): {} \
             compile threads (RAYON_NUM_THREADS), {} async workers (TOKIO_WORKER_THREADS), \
             malloc's arena limit {} (MALLOC_ARENA_MAX){}. Not emulated: memory bandwidth and \
             caches, and parallel wall time ({} threads share {} cores, so times are this \
             machine's, and a host that sizes other pools by the cores it sees sizes them for \
             {})",
            self.cores,
            self.real_cores,
            self.cores,
            self.compile_threads,
            self.async_workers,
            self.arena_max,
            match self.jemalloc_arenas {
                Some(arenas) =>
                    format!(", {arenas} jemalloc arenas for a host on jemalloc (MALLOC_CONF)"),
                None => String::new(),
            },
            self.compile_threads,
            self.real_cores,
            self.real_cores
        )
    }

    /// Refuses an environment that already sets one of the emulation's variables: which of
    /// the two was meant cannot be guessed.
    pub fn check_env(env: &[(String, String)]) -> Result<(), String> {
        match env
            .iter()
            .find(|(name, _)| VARIABLES.contains(&name.as_str()))
        {
            Some((name, value)) => Err(format!(
                "--cores sets {name}, and the host's environment already sets {name}={value} \
                 (--host-env or the host profile): drop one of the two"
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_16_core_machine_has_16_threads_of_each_and_128_arenas() {
        let cores = Cores::new(16, 2);
        assert_eq!(
            cores.env(),
            [
                ("RAYON_NUM_THREADS".to_owned(), "16".to_owned()),
                ("TOKIO_WORKER_THREADS".to_owned(), "16".to_owned()),
                ("MALLOC_ARENA_MAX".to_owned(), "128".to_owned()),
                ("MALLOC_CONF".to_owned(), "narenas:64".to_owned()),
            ]
        );
        assert!(
            cores
                .said()
                .contains("16-core machine's parallelism on this 2-core one")
        );
    }

    #[test]
    fn an_environment_that_sets_a_variable_of_its_own_is_refused() {
        let env = [("MALLOC_ARENA_MAX".to_owned(), "4".to_owned())];
        let why = Cores::check_env(&env).unwrap_err();
        assert!(why.contains("MALLOC_ARENA_MAX=4"), "{why}");
        assert!(Cores::check_env(&[("RUST_LOG".to_owned(), "info".to_owned())]).is_ok());
    }
}
