//! Test-only and empty: its dependencies ask for the features the workspace's test build gives
//! them, so `cargo test -p CRATE` reuses that build (see Cargo.toml).
