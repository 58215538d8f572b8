//! Nothing to build: the build-dependencies are here only for their features (Cargo.toml).
fn main() {}
