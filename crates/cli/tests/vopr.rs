//! `onepipe vopr` across threads: the output is in seed order and the same whatever `--jobs`,
//! but for its last line, the rates.

mod common;
use common::{describe, onepipe};

/// Runs `onepipe vopr ARGS`, expects exit 0; returns stdout without its last line (the rates,
/// which hold wall time), and that line.
fn vopr_stdout(args: &[&str]) -> (String, String) {
    let mut full = vec!["vopr"];
    full.extend_from_slice(args);
    let out = onepipe(&full);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&full, &out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("seeds/hour"),
        "no progress line when stderr is not a terminal\n{}",
        describe(&full, &out)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (rest, rates) = text
        .trim_end_matches('\n')
        .rsplit_once('\n')
        .expect("more than one line");
    (rest.to_string(), rates.to_string())
}

#[test]
fn vopr_prints_the_same_in_seed_order_whatever_the_jobs() {
    let base = ["--seeds", "6", "--duration", "2ms", "--verbose"];
    let (serial, rates) = vopr_stdout(&[&base[..], &["--jobs", "1"]].concat());
    let (parallel, rates_3) = vopr_stdout(&[&base[..], &["--jobs", "3"]].concat());
    assert_eq!(serial, parallel);
    let seeds: Vec<&str> = serial
        .lines()
        .filter_map(|l| l.strip_prefix("seed ")?.split(':').next())
        .collect();
    assert_eq!(seeds, ["1", "2", "3", "4", "5", "6"], "{serial}");
    assert!(serial.contains("seeds 1..=6: 6 ok"), "{serial}");
    for (line, jobs) in [(rates, "(--jobs 1)"), (rates_3, "(--jobs 3)")] {
        assert!(line.starts_with("  rates: "), "{line}");
        assert!(line.contains("seeds/hour"), "{line}");
        assert!(line.contains("checked deliveries/hour"), "{line}");
        assert!(line.ends_with(jobs), "{line}");
    }
}

#[test]
fn vopr_refuses_zero_jobs() {
    let args = ["vopr", "--seeds", "1", "--jobs", "0"];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--jobs"));
}
