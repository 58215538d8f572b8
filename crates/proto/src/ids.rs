//! Identifier newtypes that must not be mixed up.

use core::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// The identifier as a `usize`, for indexing dense tables.
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A process: the unit that sends and receives messages (1Pipe §2.1). Dense, cluster-wide.
    ProcId,
    "p"
);
id_type!(
    /// A node in the routing graph: a host or a logical switch (§3.1, Fig. 3).
    NodeId,
    "n"
);
id_type!(
    /// A port of a node: the index of one of its input or output links, local to that node.
    PortId,
    "port"
);
id_type!(
    /// A directed link of the routing graph, cluster-wide.
    LinkId,
    "l"
);

/// A packet sequence number, per (sender process, receiver process) pair (§6.1).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Psn(pub u32);

impl Psn {
    /// The next sequence number (wrapping).
    pub const fn next(self) -> Psn {
        Psn(self.0.wrapping_add(1))
    }
}
