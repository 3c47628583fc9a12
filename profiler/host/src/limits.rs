//! A per-request memory budget across all core memories of one component instance.
//! wasmtime's `StoreLimits` caps each memory on its own; a componentize-py component has
//! several, so the budget has to be summed to mean "this request may use N MiB".

use wasmtime::ResourceLimiter;

pub struct MemoryLimiter {
    limit: usize,
    in_use: usize,
    refused: Option<(usize, usize)>,
}

impl MemoryLimiter {
    pub fn new(limit: usize) -> Self {
        MemoryLimiter {
            limit,
            in_use: 0,
            refused: None,
        }
    }

    /// Why growth was last refused, in words, if it ever was.
    pub fn refusal(&self) -> Option<String> {
        self.refused.map(|(in_use, wanted)| {
            format!(
                "limit {} MiB, in use {} MiB, asked for {} MiB more",
                self.limit >> 20,
                in_use >> 20,
                wanted >> 20
            )
        })
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        if self.in_use.saturating_add(growth) > self.limit {
            self.refused = Some((self.in_use, growth));
            return Ok(false);
        }
        self.in_use += growth;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}
