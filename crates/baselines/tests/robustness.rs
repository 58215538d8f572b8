//! Distrust the wire (STYLE.md §7): arbitrary packet sequences, interleaved with timeouts and
//! sends, fed to every role of every baseline, never panic — including the roles' own debug
//! invariants, which run after every mutation in test builds. Field values are drawn from small
//! ranges so that packets often pass the first checks and reach the protocol logic.

use bytes::Bytes;
use onepipe_baselines::{BaseNode, BasePacket, Body, Dests, Holding, Protocol, PORT};
use onepipe_proto::{Input, Instant, Node, ProcId};
use proptest::prelude::*;

const PROCS: u32 = 3;

#[derive(Clone, Debug)]
enum Step {
    Packet { node: usize, src: u32, body: Body },
    Timeout { node: usize, advance_ns: u64 },
    Send { node: usize, all: bool },
}

fn small() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..8, Just(u64::MAX), Just(1 << 62), Just((1 << 62) + 1)]
}

fn holding() -> impl Strategy<Value = Option<Holding>> {
    proptest::option::of((0u32..PROCS + 1, small()).prop_map(|(h, s)| Holding {
        holder: ProcId(h),
        start: s,
    }))
}

fn body() -> impl Strategy<Value = Body> {
    let payload = Just(Bytes::from_static(b"x"));
    prop_oneof![
        (small(), any::<bool>()).prop_map(|(m, all)| Body::Submit {
            msg_id: m,
            dests: if all {
                Dests::all()
            } else {
                Dests::list([ProcId(1), ProcId(7)])
            },
            payload: Bytes::new(),
        }),
        (small(), small(), 0u32..PROCS + 2, payload.clone()).prop_map(|(g, r, o, p)| {
            Body::Ordered {
                gseq: g,
                rseq: r,
                origin: ProcId(o),
                payload: p,
            }
        }),
        (small(), small()).prop_map(|(a, b)| Body::SeqSync {
            rseq_next: a,
            gseq_last: b
        }),
        small().prop_map(|r| Body::SyncAck { rseq_next: r }),
        (small(), 0u32..4).prop_map(|(m, c)| Body::SubmitLost {
            msg_id: m,
            count: c
        }),
        (small(), 0u32..5, small(), small()).prop_map(|(s, c, l, h)| Body::Nack {
            seq: s,
            count: c,
            index_lo: l,
            index_hi: h,
        }),
        (small(), 0u32..5).prop_map(|(s, c)| Body::Lost { seq: s, count: c }),
        (small(), small(), holding()).prop_map(|(s, p, l)| Body::TokenPass {
            seq: s,
            pass: p,
            last: l
        }),
        small().prop_map(|p| Body::TokenAck { pass: p }),
        (small(), small(), payload.clone()).prop_map(|(m, c, p)| Body::Propose {
            msg_id: m,
            cseq: c,
            payload: p,
        }),
        (small(), small()).prop_map(|(m, t)| Body::Proposal { msg_id: m, ts: t }),
        (small(), small()).prop_map(|(m, t)| Body::Final { msg_id: m, ts: t }),
        small().prop_map(|m| Body::FinalRequest { msg_id: m }),
        (small(), small(), holding(), any::<bool>(), payload.clone()).prop_map(
            |(g, h, prev, a, p)| Body::TokenData {
                gseq: g,
                holding_start: h,
                prev,
                addressed: a,
                payload: p,
            }
        ),
        (small(), 0u32..5, small(), holding()).prop_map(|(g, c, h, prev)| Body::TokenLost {
            gseq: g,
            count: c,
            holding_start: h,
            prev,
        }),
        (small(), small(), small(), payload).prop_map(|(t, c, i, p)| Body::Stamped {
            ts: t,
            cseq: c,
            index: i,
            payload: p,
        }),
        (small(), small(), small()).prop_map(|(t, c, i)| Body::Clock {
            ts: t,
            cseq_next: c,
            index_next: i,
        }),
        Just(Body::ClockRequest),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let node = 0usize..(PROCS as usize + 1);
    prop_oneof![
        6 => (node.clone(), 0u32..PROCS + 1, body()).prop_map(|(node, src, body)| Step::Packet { node, src, body }),
        2 => (node.clone(), 0u64..100_000).prop_map(|(node, advance_ns)| Step::Timeout { node, advance_ns }),
        1 => (node, any::<bool>()).prop_map(|(node, all)| Step::Send { node, all }),
    ]
}

fn feed(protocol: Protocol, steps: &[Step]) {
    let mut nodes = BaseNode::group(protocol, PROCS);
    let mut now = 0u64;
    for s in steps {
        let node = match *s {
            Step::Packet { node, .. } | Step::Timeout { node, .. } | Step::Send { node, .. } => {
                node % nodes.len()
            }
        };
        match s {
            Step::Packet { src, body, .. } => {
                let packet = BasePacket {
                    src: ProcId(*src),
                    dst: nodes[node].id(),
                    body: body.clone(),
                };
                nodes[node].handle(Instant(now), Input::Packet { port: PORT, packet });
            }
            Step::Timeout { advance_ns, .. } => {
                now += advance_ns;
                nodes[node].handle(Instant(now), Input::Timeout);
            }
            Step::Send { all, .. } => {
                let dests = if *all {
                    Dests::all()
                } else {
                    Dests::one(ProcId(0))
                };
                let _ = nodes[node].send(Instant(now), Bytes::from_static(b"app"), dests);
            }
        }
        while nodes[node].poll_output().is_some() {}
        let _ = nodes[node].poll_timeout();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_input_never_panics_any_role(steps in proptest::collection::vec(step(), 0..80)) {
        for protocol in Protocol::ALL {
            feed(protocol, &steps);
        }
    }
}
