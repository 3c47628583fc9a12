//! wasmtime's incremental compilation cache, kept in memory as the 2025 Pharia Engine keeps
//! it (128 MiB by default there): cranelift looks each function up by a hash of its code
//! before compiling it, so a component whose functions were compiled before (another copy of
//! the same Python runtime) compiles in a fraction of the time.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use wasmtime::CacheStore;

/// Compiled functions by key, up to a budget of key and value bytes. Full, it keeps what it
/// has and refuses the rest (the engine evicts by recency instead); one copy of a Python
/// runtime's functions takes about 30 MiB, so a cache of the engine's size never fills on
/// the samples.
#[derive(Debug)]
pub struct IncrementalCache {
    budget: usize,
    kept: Mutex<Kept>,
}

/// The entries, and the bytes of their keys and values.
#[derive(Debug, Default)]
struct Kept {
    entries: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl IncrementalCache {
    pub fn new(budget_mib: u64) -> Self {
        IncrementalCache {
            budget: usize::try_from(budget_mib << 20).unwrap_or(usize::MAX),
            kept: Mutex::default(),
        }
    }
}

impl CacheStore for IncrementalCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let kept = self.kept.lock().unwrap();
        kept.entries.get(key).map(|value| Cow::Owned(value.clone()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut kept = self.kept.lock().unwrap();
        let weight = key.len() + value.len();
        if kept.bytes + weight > self.budget || kept.entries.contains_key(key) {
            return false;
        }
        kept.bytes += weight;
        kept.entries.insert(key.to_vec(), value);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_entries_up_to_its_budget_and_refuses_the_rest() {
        let cache = IncrementalCache::new(1);
        assert!(cache.insert(b"a", vec![1; 1000]));
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1; 1000][..]));
        assert!(!cache.insert(b"b", vec![2; 1 << 20]), "over the MiB");
        assert_eq!(cache.get(b"b"), None);
        assert!(cache.insert(b"c", vec![3; 1000]));
    }
}
