//! skillhost's metric families on its `/metrics`, in one place: the host registers each under
//! [`PREFIX`] by its short name, and skillprof reads them back by the name the exposition
//! gives them (the prefix, the short name and the type's suffix). Both sides read this table,
//! so a renamed family breaks the build, not a scrape.

/// Every family's prefix (`Registry::with_prefix`).
macro_rules! prefix {
    () => {
        "skillhost"
    };
}
pub const PREFIX: &str = prefix!();

/// A family: its short name as registered, and its name as exposed.
macro_rules! family {
    ($(#[$doc:meta])* $short:ident, $exposed:ident, $name:literal, $suffix:literal) => {
        $(#[$doc])*
        pub const $short: &str = $name;
        $(#[$doc])*
        pub const $exposed: &str = concat!(prefix!(), "_", $name, $suffix);
    };
}

family!(
    /// Requests answered, by HTTP `status` (a counter).
    REQUESTS, REQUESTS_TOTAL, "requests", "_total"
);
family!(
    /// Components compiled by Cranelift (a counter).
    COMPILATIONS, COMPILATIONS_TOTAL, "compilations", "_total"
);
family!(
    /// Skill instances created (a counter).
    INSTANCES, INSTANCES_TOTAL, "instances", "_total"
);
family!(
    /// Bytes the C allocator has handed out (a gauge, in bytes).
    HEAP_IN_USE, HEAP_IN_USE_BYTES, "heap_in_use", "_bytes"
);
family!(
    /// Freed bytes the C allocator keeps (a gauge, in bytes).
    HEAP_FREE, HEAP_FREE_BYTES, "heap_free", "_bytes"
);
family!(
    /// The pooling allocator's slots and the bytes its warm ones keep, by [`POOL_KIND`]
    /// (gauges).
    POOL_SLOTS, POOL_SLOTS_EXPOSED, "pool_slots", ""
);

family!(
    /// Skills in the host's skills directory, by [`SKILL_STATE`] (gauges).
    SKILLS, SKILLS_EXPOSED, "skills", ""
);

/// The label of [`SKILLS`]: `registered` (every skill, the others included), `compiled`
/// (held compiled, ready to instantiate), `failed`.
pub const SKILL_STATE: &str = "state";

/// The label of [`POOL_SLOTS`].
pub const POOL_KIND: &str = "kind";
/// Unused slots whose memory is still mapped, reused first.
pub const UNUSED_WARM_MEMORIES: &str = "unused_warm_memories";
/// The bytes unused memory slots keep resident.
pub const UNUSED_MEMORY_BYTES_RESIDENT: &str = "unused_memory_bytes_resident";
/// The bytes unused table slots keep resident.
pub const UNUSED_TABLE_BYTES_RESIDENT: &str = "unused_table_bytes_resident";
