//! The cmds language: any text is a plan or a list of the bad lines, never a panic; and a
//! plan's entries, written back as the harness logs them, parse to the same plan.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillprof::cmds::{self, Command, InFlightCap, Plan};

fn commands(plan: &Plan) -> Vec<(u32, Command)> {
    plan.entries.iter().map(|entry| (entry.repeat, entry.command.clone())).collect()
}

fuzz_target!(|text: &str| {
    // The cap changes which lines are valid: the default and a tight one.
    for cap in [InFlightCap::DEFAULT, InFlightCap::new(2)] {
        let Ok(plan) = cmds::parse("fuzz.cmds", text, cap) else {
            continue;
        };
        let logged: String = plan
            .entries
            .iter()
            .filter(|entry| entry.line.is_some())
            .map(|entry| format!("{}\n", entry.name))
            .collect();
        let again = cmds::parse("logged.cmds", &logged, cap)
            .unwrap_or_else(|error| panic!("a plan's own lines do not parse: {error}\n{logged}"));
        assert_eq!(commands(&again), commands(&plan), "{logged}");
    }
});
