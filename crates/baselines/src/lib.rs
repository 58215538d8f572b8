//! # onepipe-baselines
//!
//! The classic total-order protocols 1Pipe is measured against (Li et al., "1Pipe: Scalable
//! Total Order Communication in Data Center Networks", SIGCOMM 2021, §7.2 "Scalability" and
//! Fig. 8; related work in §8), as sans-IO roles that run in the same simulator and under the
//! same order checkers as 1Pipe:
//!
//! * [`sequencer`] — a fixed sequencer, on a host behind its NIC (\[57\], Kalia et al.) or on a
//!   programmable switch (\[51\], Eris): [`sequencer::Sequencer`] plus one
//!   [`sequencer::SeqEndpoint`] per process;
//! * [`token`] — a token circulating among the senders (\[86\], Rajagopalan and McKinley):
//!   [`token::TokenEndpoint`];
//! * [`lamport`] — Lamport timestamps with clocks exchanged per interval rather than per message
//!   (\[63\], the optimization of §7.2): [`lamport::LamportEndpoint`];
//! * [`isis`] — ISIS agreed order (Skeen's algorithm; \[17\] Birman and Joseph, the evaluation
//!   draft's "ISIS"): receivers propose timestamps, the sender agrees on the largest:
//!   [`isis::IsisEndpoint`];
//! * [`plato`] — PLATO (Balakrishnan, Birman and Phanishayee): optimistic delivery with
//!   revoke and confirm over a fixed sequencer that sends the order `k` places per packet, and
//!   the same data path delivering only when the order arrives (its fixed-sequencer baseline):
//!   [`plato::PlatoEndpoint`] plus [`sequencer::Sequencer`] in batch mode;
//! * [`toto`] — ToTo (Dolev, Kramer and Malki; agreed multicast with early delivery over a
//!   causal layer) and the all-ack protocol it is measured against: [`toto::TotoEndpoint`];
//! * [`unordered`] — 1Pipe's own transport with ordering switched off, what the live
//!   `onepipe up --unordered` runs: [`unordered::UnorderedHost`] speaks 1Pipe's wire format
//!   (`onepipe_proto::wire::Packet`, `onepipe_proto::host::HostEvent`) through 1Pipe's
//!   aggregators and delivers on arrival, so the difference between the two runs is the price
//!   of ordering alone.
//!
//! Every other role implements [`onepipe_proto::node::Node`] with [`BasePacket`] and [`BaseEvent`],
//! has one port ([`PORT`]) and is driven as the 1Pipe roles are: a mutation (`handle`, or the
//! application command [`Endpoint::send`]), then drain `poll_output` until `None`, then re-arm
//! one timer from `poll_timeout`. Packets name their destination *process*; the driver routes
//! each to the node where that process lives. Deliveries come out as [`BaseEvent::Deliver`],
//! increasing in `(seq_or_ts, src)` at every process, with the same key for a message
//! everywhere — the total order.
//!
//! Nothing here reads a clock, opens a socket, spawns a thread or draws randomness: time is an
//! argument, and no protocol needs randomness at all. Faults (loss, duplication, reordering)
//! are the driver's; each module says how its protocol reacts to them. Section and reference
//! numbers (\[57\], \[51\], \[86\], \[63\], \[17\]) are the 1Pipe paper's.
//!
//! What this crate is not: fault-tolerant. As in the paper's comparison, a failed sequencer,
//! ring member or Lamport process stops the protocol; no failover is modelled.

#![forbid(unsafe_code)]

pub mod codec;
pub mod common;
pub mod dests;
pub mod isis;
pub mod lamport;
pub mod packet;
pub mod paxos_model;
pub mod plato;
pub mod sequencer;
pub mod token;
pub mod toto;
pub mod unordered;

pub use codec::DecodeError;
pub use common::{BaseEvent, BaseSendError, BaseStats, Endpoint, PORT};
pub use dests::Dests;
pub use packet::{BasePacket, Body, Holding, PacketClass};

use bytes::Bytes;
use isis::{IsisConfig, IsisEndpoint};
use lamport::{LamportConfig, LamportEndpoint};
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use plato::{PlatoConfig, PlatoEndpoint};
use sequencer::{
    OrderBatchConfig, SeqEndpoint, SeqEndpointConfig, Sequencer, SequencerConfig,
    SequencerPlacement,
};
use token::{TokenConfig, TokenEndpoint};
use toto::{Rule, TotoConfig, TotoEndpoint};

/// Which baseline a group runs (the simulator's `--protocol` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Fixed sequencer on a host (\[57\]).
    Sequencer,
    /// Fixed sequencer on a programmable switch (\[51\]).
    SequencerSwitch,
    /// Token ring (\[86\]).
    Token,
    /// Lamport timestamps with per-interval clock exchange (\[63\]).
    Lamport,
    /// ISIS agreed order: proposals from the receivers, the largest agreed (\[17\]).
    Isis,
    /// PLATO: optimistic delivery over a fixed sequencer that sends the order in batches
    /// ([`plato`]).
    Plato,
    /// PLATO's data path without the prediction: deliver when the batched order arrives (the
    /// fixed sequencer of PLATO's Figs. 8–10, with the same overhead).
    PlatoFixed,
    /// ToTo(n, φ) over a causal layer, φ = ⌈n/2⌉ ([`toto`]).
    Toto,
    /// All-ack over the same causal layer ([`toto::allack`]).
    AllAck,
}

impl Protocol {
    /// Every baseline.
    pub const ALL: [Protocol; 9] = [
        Protocol::Sequencer,
        Protocol::SequencerSwitch,
        Protocol::Token,
        Protocol::Lamport,
        Protocol::Isis,
        Protocol::Plato,
        Protocol::PlatoFixed,
        Protocol::Toto,
        Protocol::AllAck,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Sequencer => "sequencer",
            Protocol::SequencerSwitch => "sequencer-switch",
            Protocol::Token => "token",
            Protocol::Lamport => "lamport",
            Protocol::Isis => "isis",
            Protocol::Plato => "plato",
            Protocol::PlatoFixed => "plato-fixed",
            Protocol::Toto => "toto",
            Protocol::AllAck => "allack",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Any baseline role, so a driver can hold a whole group in one `Vec`.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum BaseNode {
    /// The fixed sequencer.
    Sequencer(Sequencer),
    /// A fixed-sequencer endpoint.
    SeqEndpoint(SeqEndpoint),
    /// A token-ring endpoint.
    Token(TokenEndpoint),
    /// A Lamport endpoint.
    Lamport(LamportEndpoint),
    /// An ISIS endpoint.
    Isis(IsisEndpoint),
    /// A PLATO endpoint (optimistic or not).
    Plato(PlatoEndpoint),
    /// A ToTo or all-ack endpoint.
    Toto(TotoEndpoint),
}

impl BaseNode {
    /// A group running `protocol` over processes `0..procs` with default knobs, indexed by
    /// process id: endpoints `0..procs`, then, for the sequencer protocols, the sequencer as
    /// process `procs` (placed on a switch for [`Protocol::SequencerSwitch`]). ToTo takes
    /// φ = ⌈n/2⌉, and a group of one runs all-ack (no φ suits one machine).
    pub fn group(protocol: Protocol, procs: u32) -> Vec<BaseNode> {
        let ids = (0..procs).map(ProcId);
        match protocol {
            Protocol::Sequencer | Protocol::SequencerSwitch => {
                let mut nodes: Vec<BaseNode> = ids
                    .map(|id| {
                        BaseNode::SeqEndpoint(SeqEndpoint::new(SeqEndpointConfig::new(id, procs)))
                    })
                    .collect();
                let mut cfg = SequencerConfig::new(procs);
                if protocol == Protocol::SequencerSwitch {
                    cfg.placement = SequencerPlacement::Switch;
                }
                nodes.push(BaseNode::Sequencer(Sequencer::new(cfg)));
                nodes
            }
            Protocol::Token => ids
                .map(|id| BaseNode::Token(TokenEndpoint::new(TokenConfig::new(id, procs))))
                .collect(),
            Protocol::Lamport => ids
                .map(|id| BaseNode::Lamport(LamportEndpoint::new(LamportConfig::new(id, procs))))
                .collect(),
            Protocol::Isis => ids
                .map(|id| BaseNode::Isis(IsisEndpoint::new(IsisConfig::new(id, procs))))
                .collect(),
            Protocol::Plato | Protocol::PlatoFixed => {
                let optimistic = protocol == Protocol::Plato;
                let mut nodes: Vec<BaseNode> = ids
                    .map(|id| {
                        let mut cfg = PlatoConfig::new(id, procs);
                        if !optimistic {
                            cfg.opt = None;
                        }
                        BaseNode::Plato(PlatoEndpoint::new(cfg))
                    })
                    .collect();
                let mut cfg = SequencerConfig::new(procs);
                cfg.order_batch = Some(OrderBatchConfig::PAPER_K10);
                nodes.push(BaseNode::Sequencer(Sequencer::new(cfg)));
                nodes
            }
            Protocol::Toto | Protocol::AllAck => {
                // ToTo(n, φ) needs n/2 <= φ < n, which no φ meets for one machine; alone, a
                // machine orders its own messages, and all-ack does exactly that.
                let rule = match protocol {
                    Protocol::Toto if procs >= 2 => Rule::Toto {
                        phi: toto::toto::default_phi(procs),
                    },
                    _ => Rule::AllAck,
                };
                ids.map(|id| {
                    let e = TotoEndpoint::new(TotoConfig::new(id, procs, rule))
                        .expect("the default φ lies in range for two machines or more");
                    BaseNode::Toto(e)
                })
                .collect()
            }
        }
    }

    /// The process this role is.
    pub fn id(&self) -> ProcId {
        match self {
            BaseNode::Sequencer(s) => s.config().id,
            BaseNode::SeqEndpoint(e) => e.id(),
            BaseNode::Token(e) => e.id(),
            BaseNode::Lamport(e) => e.id(),
            BaseNode::Isis(e) => e.id(),
            BaseNode::Plato(e) => e.id(),
            BaseNode::Toto(e) => e.id(),
        }
    }

    /// The endpoint, if this role is one.
    pub fn endpoint_mut(&mut self) -> Option<&mut dyn Endpoint> {
        match self {
            BaseNode::Sequencer(_) => None,
            BaseNode::SeqEndpoint(e) => Some(e),
            BaseNode::Token(e) => Some(e),
            BaseNode::Lamport(e) => Some(e),
            BaseNode::Isis(e) => Some(e),
            BaseNode::Plato(e) => Some(e),
            BaseNode::Toto(e) => Some(e),
        }
    }

    /// Sends as [`Endpoint::send`]; a sequencer refuses with [`BaseSendError::NotASender`].
    pub fn send(
        &mut self,
        now: Instant,
        payload: Bytes,
        dests: Dests,
    ) -> Result<(), BaseSendError> {
        match self.endpoint_mut() {
            Some(e) => e.send(now, payload, dests),
            None => Err(BaseSendError::NotASender),
        }
    }

    /// True when the role owes nothing: nothing buffered, queued or being repaired, no
    /// heartbeat or sync still due. Token packets may still circulate (see
    /// [`PacketClass::Token`]); a driver is quiescent when every role is idle and only token
    /// packets are on the way.
    pub fn is_idle(&self) -> bool {
        match self {
            BaseNode::Sequencer(s) => s.is_idle(),
            BaseNode::SeqEndpoint(e) => e.is_idle(),
            BaseNode::Token(e) => e.is_idle(),
            BaseNode::Lamport(e) => e.is_idle(),
            BaseNode::Isis(e) => e.is_idle(),
            BaseNode::Plato(e) => e.is_idle(),
            BaseNode::Toto(e) => e.is_idle(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> &BaseStats {
        match self {
            BaseNode::Sequencer(s) => s.stats(),
            BaseNode::SeqEndpoint(e) => e.stats(),
            BaseNode::Token(e) => e.stats(),
            BaseNode::Lamport(e) => e.stats(),
            BaseNode::Isis(e) => Endpoint::stats(e),
            BaseNode::Plato(e) => Endpoint::stats(e),
            BaseNode::Toto(e) => Endpoint::stats(e),
        }
    }
}

impl Node for BaseNode {
    type Packet = BasePacket;
    type Event = BaseEvent;
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<BasePacket>) {
        match self {
            BaseNode::Sequencer(n) => n.handle(now, input),
            BaseNode::SeqEndpoint(n) => n.handle(now, input),
            BaseNode::Token(n) => n.handle(now, input),
            BaseNode::Lamport(n) => n.handle(now, input),
            BaseNode::Isis(n) => n.handle(now, input),
            BaseNode::Plato(n) => n.handle(now, input),
            BaseNode::Toto(n) => n.handle(now, input),
        }
    }

    fn poll_output(&mut self) -> Option<Output<BasePacket, BaseEvent>> {
        match self {
            BaseNode::Sequencer(n) => n.poll_output(),
            BaseNode::SeqEndpoint(n) => n.poll_output(),
            BaseNode::Token(n) => n.poll_output(),
            BaseNode::Lamport(n) => n.poll_output(),
            BaseNode::Isis(n) => n.poll_output(),
            BaseNode::Plato(n) => n.poll_output(),
            BaseNode::Toto(n) => n.poll_output(),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            BaseNode::Sequencer(n) => n.poll_timeout(),
            BaseNode::SeqEndpoint(n) => n.poll_timeout(),
            BaseNode::Token(n) => n.poll_timeout(),
            BaseNode::Lamport(n) => n.poll_timeout(),
            BaseNode::Isis(n) => n.poll_timeout(),
            BaseNode::Plato(n) => n.poll_timeout(),
            BaseNode::Toto(n) => n.poll_timeout(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_round_trip() {
        for p in Protocol::ALL {
            assert_eq!(Protocol::from_name(p.name()), Some(p));
        }
        assert_eq!(Protocol::from_name("onepipe-be"), None);
    }

    #[test]
    fn groups_are_indexed_by_process_id() {
        for p in Protocol::ALL {
            let g = BaseNode::group(p, 3);
            for (i, n) in g.iter().enumerate() {
                assert_eq!(n.id(), ProcId(i as u32));
            }
        }
        let mut g = BaseNode::group(Protocol::SequencerSwitch, 2);
        assert!(
            matches!(&g[2], BaseNode::Sequencer(s) if s.config().placement == SequencerPlacement::Switch)
        );
        assert_eq!(
            g[2].send(Instant(0), Bytes::new(), Dests::all()),
            Err(BaseSendError::NotASender)
        );
    }
}
