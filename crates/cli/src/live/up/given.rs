//! `onepipe up --cluster FILE --spawn PREFIX`: a cluster file given by the operator (real
//! addresses, its own settings and keys) instead of a generated loopback one, and a command
//! prefix that starts each member where it runs (a network namespace, another machine).
//!
//! Nothing else about the run changes: `up` starts the members in the same order, coordinates
//! them over their standard input and output, fires the same faults and runs the same
//! checkers. What it is not: a deployment tool. It needs one directory visible to every member
//! (the records) and one `CLOCK_MONOTONIC` for the start time and the latency it measures, as
//! network namespaces on one machine have (docs/DEPLOY.md).

use super::super::UpArgs;
use onepipe_runtime::cluster::Cluster;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cluster file `--cluster` names, read as the daemons read it (with its `[auth]` section
/// or `auth = "off"`), checked against `--hosts` × `--procs-per-host`; the file's absolute path
/// (the daemons are given it) beside it.
pub(super) fn load(args: &UpArgs, path: &Path) -> Result<(Cluster, PathBuf), String> {
    let path =
        std::fs::canonicalize(path).map_err(|e| format!("--cluster {}: {e}", path.display()))?;
    let cluster = Cluster::load(&path).map_err(|e| format!("--cluster {}: {e}", path.display()))?;
    if cluster.auth.is_none() {
        return Err(format!(
            "--cluster {}: {}",
            path.display(),
            onepipe_runtime::controller::NO_AUTH_SECTION
        ));
    }
    let flags = u64::from(args.layout.hosts) * u64::from(args.layout.procs_per_host);
    if flags != u64::from(cluster.procs()) {
        return Err(format!(
            "--cluster {}: the file has {} processes, but --hosts {} × --procs-per-host {} is {flags} (the report counts by the flags)",
            path.display(),
            cluster.procs(),
            args.layout.hosts,
            args.layout.procs_per_host
        ));
    }
    Ok((cluster, path))
}

/// The command that starts `exe` as `member` (on `host`): `exe` itself, or behind `--spawn`'s
/// prefix with `{member}` and `{host}` replaced.
pub(super) fn command(prefix: Option<&str>, member: &str, host: &str, exe: &Path) -> Command {
    let words: Vec<String> = prefix
        .unwrap_or("")
        .split_whitespace()
        .map(|w| w.replace("{member}", member).replace("{host}", host))
        .collect();
    match words.split_first() {
        None => Command::new(exe),
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(exe);
            cmd
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{member}` and `{host}` are replaced in every word, and the executable follows the
    /// prefix; without one it is the command itself.
    #[test]
    fn the_spawn_prefix_names_the_member_and_its_host() {
        let exe = Path::new("/bin/onepipe");
        let cmd = command(Some("ip netns exec onp-{host}"), "p3", "h1", exe);
        assert_eq!(cmd.get_program(), "ip");
        let args: Vec<_> = cmd.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["netns", "exec", "onp-h1", "/bin/onepipe"]);
        let cmd = command(Some("ssh {member}.example"), "tor-0", "tor-0", exe);
        let args: Vec<_> = cmd.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["tor-0.example", "/bin/onepipe"]);
        assert_eq!(
            command(None, "controller", "controller", exe).get_program(),
            "/bin/onepipe"
        );
    }
}
