//! Issue 35: the newcomer's program (`examples/newcomer.rs`) runs in the suite — three
//! endpoints that join one after another with no thread tricks, broadcasts on both services, a
//! scattering, an event loop, one leave.
#![allow(clippy::disallowed_methods)]

#[path = "../examples/newcomer.rs"]
#[allow(dead_code)]
mod newcomer;

use onepipe::FailReason;

#[test]
fn the_newcomer_program_joins_sends_scatters_and_leaves() {
    let seen = newcomer::run();
    assert!(seen.views.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(seen.views[0].members.len(), 3);
    // a and b: the broadcast and their part of the scattering; c: the broadcast.
    assert_eq!(
        seen.reliable.iter().map(Vec::len).collect::<Vec<_>>(),
        [2, 2, 1]
    );
    assert!(seen
        .best_effort
        .iter()
        .all(|m| m.len() == 1 && m[0].1 == "hi from b"));
    assert_eq!(seen.departure.len(), 2);
    for (reason, view) in &seen.departure {
        assert_eq!(*reason, FailReason::Left);
        assert_eq!(view.members.len(), 2);
    }
}
