//! Transparent huge pages for the simulator's heap.
//!
//! A simulation of a thousand hosts keeps hundreds of megabytes of per-host, per-peer state
//! (receive windows, reorder lists, ACK trackers) and reads it at random: with 4 KiB pages
//! nearly every such read also misses the TLB, and the page walk costs as much as the cache
//! miss it precedes. Backed by 2 MiB pages, the whole working set fits the TLB. On the k = 16
//! fat tree of docs/BENCHMARKS.md ("Simulator speed") that made the run 1.13× faster (geometric
//! mean of 22 paired runs), with the same trace.
//!
//! Linux hands out huge pages to memory that asks for them (`madvise`, the default mode of
//! `/sys/kernel/mm/transparent_hugepage/enabled` on many distributions), and glibc's allocator
//! asks when its tunable `glibc.malloc.hugetlb=1` is set. Tunables are read when a process
//! starts, so the simulation commands (`sim`, `vopr`, `bench`) re-execute the binary once with
//! it set. Nothing else changes: the same arguments, standard streams and exit code, and the
//! same results — where the allocator puts memory never reaches a simulated outcome.
//!
//! Skipped when `ONEPIPE_HUGE_PAGES=0`, when `GLIBC_TUNABLES` already names the tunable (the
//! user's choice, or the re-executed process itself), or off glibc Linux; if the re-execution
//! fails the command runs as it is.

/// The environment variable that turns the re-execution off (`0`).
pub const OPT_OUT: &str = "ONEPIPE_HUGE_PAGES";
/// glibc's tunable that makes `malloc` ask for transparent huge pages.
const TUNABLE: &str = "glibc.malloc.hugetlb";

/// The value `GLIBC_TUNABLES` should have for huge pages, given its current value, or `None`
/// when nothing should change.
pub fn tunables_with_huge_pages(current: Option<&str>, opt_out: Option<&str>) -> Option<String> {
    if opt_out.is_some_and(|v| v.trim() == "0") {
        return None;
    }
    match current {
        Some(c) if c.contains(TUNABLE) => None,
        Some(c) if !c.is_empty() => Some(format!("{c}:{TUNABLE}=1")),
        _ => Some(format!("{TUNABLE}=1")),
    }
}

/// Re-executes this process with huge pages asked for (module docs); returns only if it did not.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn reexec_with_huge_pages() {
    use std::os::unix::process::CommandExt;
    let current = std::env::var_os("GLIBC_TUNABLES");
    // A value that is not UTF-8 is left alone.
    let current = match current.as_ref().map(|c| c.to_str()) {
        Some(None) => return,
        Some(Some(c)) => Some(c),
        None => None,
    };
    let opt_out = std::env::var(OPT_OUT).ok();
    let Some(tunables) = tunables_with_huge_pages(current, opt_out.as_deref()) else {
        return;
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    // `exec` returns only on failure: then the command runs without huge pages.
    let _ = cmd.args(args).env("GLIBC_TUNABLES", tunables).exec();
}

/// Off glibc Linux there is no such tunable: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn reexec_with_huge_pages() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_once_and_the_user_can_opt_out() {
        let set = Some("glibc.malloc.hugetlb=1".to_string());
        assert_eq!(tunables_with_huge_pages(None, None), set);
        assert_eq!(tunables_with_huge_pages(Some(""), None), set);
        assert_eq!(
            tunables_with_huge_pages(Some("glibc.malloc.arena_max=2"), None).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        // Already there (the re-executed process, or the user's own value): no loop.
        assert_eq!(tunables_with_huge_pages(set.as_deref(), None), None);
        assert_eq!(
            tunables_with_huge_pages(Some("glibc.malloc.hugetlb=0"), None),
            None
        );
        assert_eq!(tunables_with_huge_pages(None, Some("0")), None);
        assert_eq!(tunables_with_huge_pages(None, Some("1")), set);
    }
}
