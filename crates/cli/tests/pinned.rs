//! The simulator's behaviour is pinned: `scripts/pin-hashes.sh --check`, run with this build's
//! binary, gives the trace hash of the Fig. 9a command, of eleven §5.2 failure scenarios and of
//! every baseline protocol exactly as `scripts/pin-hashes.expected` records them. A change that
//! moves one changed behaviour; if it meant to, the commit updates the expected file and says why.

use std::path::Path;
use std::process::Command;

#[test]
fn trace_hashes_match_the_pins() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/pin-hashes.sh"))
        .arg("--check")
        .env("B", env!("CARGO_BIN_EXE_onepipe"))
        .current_dir(&root)
        .output()
        .expect("bash runs scripts/pin-hashes.sh");
    assert!(
        out.status.success(),
        "trace hashes moved (expected < > now):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
