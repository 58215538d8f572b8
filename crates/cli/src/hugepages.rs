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
//! With it go two more tunables, `glibc.malloc.mmap_threshold` and `glibc.malloc.trim_threshold`,
//! both at 32 MiB (glibc's largest mmap threshold). By default glibc serves every allocation
//! above 128 KiB (its threshold then adapts upwards) with a mapping of its own — the radix heap's
//! buckets, the packet slab, per-host tables, many too small for a 2 MiB page — and trims the
//! heap's top once 128 KiB of it are free. With the thresholds raised they come from the
//! huge-page heap: the k = 16 run took 1,000 page faults instead of 4,900 and was 1.07× faster
//! (geometric mean of 10 paired runs; 16 rounds: 12 above 1). Peak memory rose by 3% (262 →
//! 269 MB).
//!
//! Skipped when `ONEPIPE_HUGE_PAGES=0`, when `GLIBC_TUNABLES` already names the tunable (the
//! user's choice, or the re-executed process itself), or off glibc Linux; if the re-execution
//! fails the command runs as it is.

/// The environment variable that turns the re-execution off (`0`).
pub const OPT_OUT: &str = "ONEPIPE_HUGE_PAGES";
/// glibc's tunable that makes `malloc` ask for transparent huge pages.
const TUNABLE: &str = "glibc.malloc.hugetlb";
/// The tunables set with it, unless the user set them (module docs).
const WITH: [(&str, &str); 2] = [
    ("glibc.malloc.mmap_threshold", "33554432"),
    ("glibc.malloc.trim_threshold", "33554432"),
];

/// The value `GLIBC_TUNABLES` should have for huge pages, given its current value, or `None`
/// when nothing should change.
pub fn tunables_with_huge_pages(current: Option<&str>, opt_out: Option<&str>) -> Option<String> {
    if opt_out.is_some_and(|v| v.trim() == "0") {
        return None;
    }
    let current = current.unwrap_or("");
    if current.contains(TUNABLE) {
        return None;
    }
    let mut tunables: Vec<String> = Vec::new();
    if !current.is_empty() {
        tunables.push(current.to_string());
    }
    tunables.push(format!("{TUNABLE}=1"));
    for (name, value) in WITH {
        if !current.contains(name) {
            tunables.push(format!("{name}={value}"));
        }
    }
    Some(tunables.join(":"))
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
        let set = Some(
            "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:\
             glibc.malloc.trim_threshold=33554432"
                .to_string(),
        );
        assert_eq!(tunables_with_huge_pages(None, None), set);
        assert_eq!(tunables_with_huge_pages(Some(""), None), set);
        assert_eq!(
            tunables_with_huge_pages(Some("glibc.malloc.arena_max=2"), None).as_deref(),
            Some(
                "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1:\
                 glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=33554432"
            )
        );
        // A threshold the user set is theirs.
        assert_eq!(
            tunables_with_huge_pages(Some("glibc.malloc.trim_threshold=0"), None).as_deref(),
            Some(
                "glibc.malloc.trim_threshold=0:glibc.malloc.hugetlb=1:\
                 glibc.malloc.mmap_threshold=33554432"
            )
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
