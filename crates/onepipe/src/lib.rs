//! # onepipe
//!
//! Scalable total-order communication for clusters: an implementation of 1Pipe (Li et al.,
//! SIGCOMM 2021). This facade re-exports the protocol core and the simulator; the live UDP
//! runtime joins it in a later release.

pub use onepipe_proto as proto;
pub use onepipe_sim as sim;
