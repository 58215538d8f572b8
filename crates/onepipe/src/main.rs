//! The `onepipe` command: `onepipe sim` runs the deterministic data-center simulator, `onepipe
//! bench` its experiments.
#![allow(clippy::disallowed_methods)] // a CLI may read files and clocks.

mod bench;
mod cli;
mod vopr;

fn main() {
    std::process::exit(cli::main());
}
