//! What a workload node records — every scattering it sent, every message it delivered, every
//! send-failed notice — and the file it writes them to, which `onepipe up` reads back to run
//! the simulator's checkers over the whole cluster.
//!
//! The file is a sequence of fixed-layout little-endian records, each starting with a tag byte
//! (`S`end, `D`elivery, `F`ailure, optimistic `H`ook); the node's counters go beside it as JSON. Reading never
//! panics: a short or unknown record is an error naming its offset.

use onepipe_proto::byteio::ByteReader;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

/// Bytes at the start of every workload payload: the scattering's sequence number and its send
/// time (`CLOCK_MONOTONIC` ns, the clock every process on the machine shares).
pub const PAYLOAD_HEADER_LEN: usize = 16;

/// `dsts` value meaning "every process".
const ALL: u32 = u32::MAX;

/// One scattering sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRec {
    /// The sending process: the endpoint's id when it sent (a rejoin changes it, §5.2).
    pub proc: u32,
    /// Its sequence number at this sender.
    pub seq: u64,
    /// Its timestamp (raw 48-bit).
    pub ts: u64,
    /// When the application called send (monotonic ns).
    pub send_ns: u64,
    /// Reliable service.
    pub reliable: bool,
    /// Destinations; `None`: every process.
    pub dsts: Option<Vec<u32>>,
}

/// One message delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRec {
    /// Sender.
    pub src: u32,
    /// Receiver: the endpoint's id when it delivered (a rejoin changes it, §5.2).
    pub dst: u32,
    /// Its scattering's sequence number at the sender.
    pub seq: u64,
    /// Its timestamp.
    pub ts: u64,
    /// The barrier that released it.
    pub barrier: u64,
    /// The receiver's timestamp at delivery.
    pub delivered_ts: u64,
    /// When the application received it (monotonic ns).
    pub recv_ns: u64,
    /// Send call to application receive (ns).
    pub latency_ns: u64,
    /// Reliable service.
    pub reliable: bool,
    /// PSN of its first packet.
    pub psn: u32,
}

/// One send-failed notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureRec {
    /// The receiver.
    pub dst: u32,
    /// The message's timestamp.
    pub ts: u64,
    /// Its `NakReason` as on the wire.
    pub reason: u8,
    /// When it was noticed (monotonic ns).
    pub at_ns: u64,
}

/// Which of PLATO's hooks a [`HookRec`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// `optdeliver`.
    Deliver,
    /// `revoke`.
    Revoke,
    /// `confirm`.
    Confirm,
}

impl HookKind {
    /// Its tag: lower case for a best-effort message, upper case for a reliable one.
    fn tag(self, reliable: bool) -> u8 {
        let t = match self {
            HookKind::Deliver => b'd',
            HookKind::Revoke => b'r',
            HookKind::Confirm => b'c',
        };
        match reliable {
            true => t.to_ascii_uppercase(),
            false => t,
        }
    }

    /// The kind and service of a tag.
    fn of(tag: u8) -> Option<(HookKind, bool)> {
        let kind = match tag.to_ascii_lowercase() {
            b'd' => HookKind::Deliver,
            b'r' => HookKind::Revoke,
            b'c' => HookKind::Confirm,
            _ => return None,
        };
        Some((kind, tag.is_ascii_uppercase()))
    }
}

/// One optimistic hook the application took (`--optimistic-delta`), in the order it took them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookRec {
    /// Which hook.
    pub kind: HookKind,
    /// The message's sender.
    pub src: u32,
    /// The receiver.
    pub dst: u32,
    /// Its scattering's sequence number at the sender.
    pub seq: u64,
    /// When the application took the hook (monotonic ns).
    pub at_ns: u64,
    /// A delivery's Tm (monotonic ns); 0 for the others.
    pub usable_ns: u64,
    /// A delivery's send time (monotonic ns, from its payload); 0 for the others.
    pub sent_ns: u64,
    /// Of the reliable service.
    pub reliable: bool,
    /// A revoke at or after Tm, as the role judged it.
    pub rollback: bool,
}

/// Everything one node recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRecords {
    /// Scatterings, in send order (reliable ones in stamping order).
    pub sends: Vec<SendRec>,
    /// Deliveries in delivery order, per service.
    pub deliveries: Vec<DeliveryRec>,
    /// Send failures.
    pub failures: Vec<FailureRec>,
    /// Optimistic hooks, in the order the application took them.
    pub hooks: Vec<HookRec>,
}

impl NodeRecords {
    /// Writes the records to `path`.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        for s in &self.sends {
            w.write_all(b"S")?;
            w.write_all(&s.proc.to_le_bytes())?;
            for x in [s.seq, s.ts, s.send_ns] {
                w.write_all(&x.to_le_bytes())?;
            }
            w.write_all(&[u8::from(s.reliable)])?;
            match &s.dsts {
                None => w.write_all(&ALL.to_le_bytes())?,
                Some(d) => {
                    w.write_all(&(d.len() as u32).to_le_bytes())?;
                    for x in d {
                        w.write_all(&x.to_le_bytes())?;
                    }
                }
            }
        }
        for d in &self.deliveries {
            w.write_all(b"D")?;
            w.write_all(&d.src.to_le_bytes())?;
            w.write_all(&d.dst.to_le_bytes())?;
            for x in [
                d.seq,
                d.ts,
                d.barrier,
                d.delivered_ts,
                d.recv_ns,
                d.latency_ns,
            ] {
                w.write_all(&x.to_le_bytes())?;
            }
            w.write_all(&[u8::from(d.reliable)])?;
            w.write_all(&d.psn.to_le_bytes())?;
        }
        for f in &self.failures {
            w.write_all(b"F")?;
            w.write_all(&f.dst.to_le_bytes())?;
            w.write_all(&f.ts.to_le_bytes())?;
            w.write_all(&[f.reason])?;
            w.write_all(&f.at_ns.to_le_bytes())?;
        }
        for h in &self.hooks {
            w.write_all(&[b'H', h.kind.tag(h.reliable)])?;
            w.write_all(&h.src.to_le_bytes())?;
            w.write_all(&h.dst.to_le_bytes())?;
            for x in [h.seq, h.at_ns, h.usable_ns, h.sent_ns] {
                w.write_all(&x.to_le_bytes())?;
            }
            w.write_all(&[u8::from(h.rollback)])?;
        }
        w.flush()
    }

    /// Reads records written by [`NodeRecords::write`].
    pub fn read(path: &Path) -> io::Result<NodeRecords> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?.read_to_end(&mut bytes)?;
        NodeRecords::parse(&bytes).map_err(|at| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: bad record at byte {at}", path.display()),
            )
        })
    }

    fn parse(bytes: &[u8]) -> Result<NodeRecords, usize> {
        let mut r = ByteReader::new(bytes);
        let mut out = NodeRecords::default();
        while !r.is_empty() {
            let start = r.pos();
            let bad = |_| start;
            match r.u8().map_err(bad)? {
                b'S' => {
                    let proc = r.u32_le().map_err(bad)?;
                    let (seq, ts, send_ns) = (
                        r.u64_le().map_err(bad)?,
                        r.u64_le().map_err(bad)?,
                        r.u64_le().map_err(bad)?,
                    );
                    let reliable = r.u8().map_err(bad)? != 0;
                    let n = r.u32_le().map_err(bad)?;
                    let dsts = if n == ALL {
                        None
                    } else {
                        let n = r.count(n as usize, 4).map_err(bad)?;
                        Some(
                            (0..n)
                                .map(|_| r.u32_le())
                                .collect::<Result<Vec<_>, _>>()
                                .map_err(bad)?,
                        )
                    };
                    out.sends.push(SendRec {
                        proc,
                        seq,
                        ts,
                        send_ns,
                        reliable,
                        dsts,
                    });
                }
                b'D' => {
                    let src = r.u32_le().map_err(bad)?;
                    let dst = r.u32_le().map_err(bad)?;
                    let mut x = [0u64; 6];
                    for v in &mut x {
                        *v = r.u64_le().map_err(bad)?;
                    }
                    let reliable = r.u8().map_err(bad)? != 0;
                    let psn = r.u32_le().map_err(bad)?;
                    out.deliveries.push(DeliveryRec {
                        src,
                        dst,
                        seq: x[0],
                        ts: x[1],
                        barrier: x[2],
                        delivered_ts: x[3],
                        recv_ns: x[4],
                        latency_ns: x[5],
                        reliable,
                        psn,
                    });
                }
                b'F' => {
                    let dst = r.u32_le().map_err(bad)?;
                    let ts = r.u64_le().map_err(bad)?;
                    let reason = r.u8().map_err(bad)?;
                    let at_ns = r.u64_le().map_err(bad)?;
                    out.failures.push(FailureRec {
                        dst,
                        ts,
                        reason,
                        at_ns,
                    });
                }
                b'H' => out.hooks.push(parse_hook(&mut r).ok_or(start)?),
                _ => return Err(start),
            }
        }
        Ok(out)
    }
}

/// A hook record after its `H`.
fn parse_hook(r: &mut ByteReader<'_>) -> Option<HookRec> {
    let (kind, reliable) = HookKind::of(r.u8().ok()?)?;
    let (src, dst) = (r.u32_le().ok()?, r.u32_le().ok()?);
    let mut x = [0u64; 4];
    for v in &mut x {
        *v = r.u64_le().ok()?;
    }
    let rollback = r.u8().ok()? != 0;
    Some(HookRec {
        kind,
        src,
        dst,
        seq: x[0],
        at_ns: x[1],
        usable_ns: x[2],
        sent_ns: x[3],
        reliable,
        rollback,
    })
}

/// A workload payload of `len` bytes (at least [`PAYLOAD_HEADER_LEN`]).
pub fn payload(seq: u64, send_ns: u64, len: usize) -> bytes::Bytes {
    let mut v = vec![0u8; len.max(PAYLOAD_HEADER_LEN)];
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v[8..16].copy_from_slice(&send_ns.to_le_bytes());
    v.into()
}

/// The (sequence number, send time) a workload payload carries, if it is one.
pub fn read_payload(p: &[u8]) -> Option<(u64, u64)> {
    let mut r = ByteReader::new(p);
    Some((r.u64_le().ok()?, r.u64_le().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_an_error() {
        let recs = NodeRecords {
            sends: vec![
                SendRec {
                    proc: 4,
                    seq: 0,
                    ts: 5,
                    send_ns: 6,
                    reliable: false,
                    dsts: None,
                },
                SendRec {
                    proc: 4,
                    seq: 1,
                    ts: 7,
                    send_ns: 8,
                    reliable: true,
                    dsts: Some(vec![1, 2]),
                },
            ],
            deliveries: vec![DeliveryRec {
                src: 3,
                dst: 4,
                seq: 1,
                ts: 9,
                barrier: 10,
                delivered_ts: 11,
                recv_ns: 12,
                latency_ns: 13,
                reliable: true,
                psn: 14,
            }],
            failures: vec![FailureRec {
                dst: 2,
                ts: 7,
                reason: 1,
                at_ns: 20,
            }],
            hooks: vec![HookRec {
                kind: HookKind::Revoke,
                src: 3,
                dst: 4,
                seq: 1,
                at_ns: 21,
                usable_ns: 22,
                sent_ns: 23,
                reliable: true,
                rollback: true,
            }],
        };
        let dir = std::env::temp_dir().join(format!("onepipe-records-{}", std::process::id()));
        recs.write(&dir).unwrap();
        assert_eq!(NodeRecords::read(&dir).unwrap(), recs);
        let bytes = std::fs::read(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        for cut in 1..bytes.len() {
            let _ = NodeRecords::parse(&bytes[..cut]);
        }
        assert_eq!(NodeRecords::parse(b"X"), Err(0));
        assert_eq!(read_payload(&payload(7, 8, 64)), Some((7, 8)));
        assert_eq!(read_payload(b"short"), None);
    }
}
