//! ToTo(n, φ), §4 of Dolev, Kramer and Malki, "Early Delivery Totally Ordered Multicast in
//! Asynchronous Environments" (FTCS 1993): what machine `p` computes from its DAG to decide
//! the next set of messages of the total order.
//!
//! * §4.1 items 1–4: `Tail_p(m)` and `NTail_p(m)` ([`Dag::tail_of`]), the extended vector time
//!   stamp `VT_p(m)` ([`Vt`], [`vt`]) and `NVT_p(m)` ([`nvt`]), for every candidate `m`.
//! * §4.1: the comparison functions `Win_p` ([`win`]) and `Future_p` ([`future`]).
//! * §4.2: the sources `S_p` ([`sources`]) and the delivery criterion (DEL) ([`decide`]).
//!
//! A delivered source set goes into the total order in lexicographical order (Fig. 3) of the
//! paper's message identifier `<sender, counter>` (§2); a source set holds at most one message
//! per sender (a sender's second pending message follows its first), so this is sender order.
//!
//! §5.2: a defunct machine (Crash(q)) is in `Tail_p`, and its entry of `VT_p(m)` is ∞ for
//! every candidate its log does not already decide ([`vt`]). `n` stays the size of the
//! group the run started with: the configuration change (which would shrink it) is not
//! built, so defunct machines stay in `Tail_p` for good.

use super::causal::CausalMsg;
use super::dag::{Dag, MsgId};
use core::fmt;
use onepipe_proto::ids::ProcId;

/// A threshold φ outside `n/2 ≤ φ < n` (§4.2: "Let n/2 ≤ φ < n").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhiError {
    /// The threshold asked for.
    pub phi: u32,
    /// The number of machines.
    pub n: u32,
}

impl fmt::Display for PhiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ToTo needs n/2 <= phi < n (§4.2): phi = {} with n = {} machines",
            self.phi, self.n
        )
    }
}

impl std::error::Error for PhiError {}

/// Checks §4.2's range of φ for `n` machines.
pub fn check_phi(phi: u32, n: u32) -> Result<(), PhiError> {
    if 2 * u64::from(phi) >= u64::from(n) && phi < n {
        Ok(())
    } else {
        Err(PhiError { phi, n })
    }
}

/// The paper's default threshold: the least φ with `φ ≥ n/2`, i.e. `⌈n/2⌉` (φ = 4 of 8 in
/// §6; "the optimal φ is n/2" on a single LAN, §4.2).
pub fn default_phi(n: u32) -> u32 {
    n.div_ceil(2)
}

/// One entry of an extended vector time stamp (§4.1 item 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vt {
    /// ⊥: `q ∉ Tail_p` — nothing heard from `q` after any candidate yet.
    Bottom,
    /// `k`: `m_{q,k}`, `q`'s first message following any candidate, follows this one.
    At(u64),
    /// ∞: `q`'s first message following any candidate does not follow this one.
    Inf,
}

impl Vt {
    /// `a < b` between two decided entries (⊥ compares with nothing; `k < ∞`).
    fn lt(self, b: Vt) -> bool {
        match (self, b) {
            (Vt::At(x), Vt::At(y)) => x < y,
            (Vt::At(_), Vt::Inf) => true,
            _ => false,
        }
    }

    /// `a ≤ b` between two decided entries (`∞ ≤ ∞`).
    fn le(self, b: Vt) -> bool {
        self.lt(b) || (self == b && self != Vt::Bottom)
    }

    fn is_number(self) -> bool {
        matches!(self, Vt::At(_))
    }
}

/// §4.1 item 3: `VT_p(m)` for candidate `m`, one entry per machine.
pub fn vt(dag: &Dag, m: &CausalMsg) -> Vec<Vt> {
    (0..dag.procs())
        .map(|q| match dag.first_following(q) {
            // §5.2, Fig. 4: "if q ∉ Tail_p then set VT_p_i[q] = ∞ for every m_i ∈ M_p" — and
            // for every later candidate, since q sends nothing more.
            None if dag.is_defunc(q) => Vt::Inf,
            None => Vt::Bottom,
            Some(first) if first.follows(m.origin, m.seq) => Vt::At(first.seq),
            Some(_) => Vt::Inf,
        })
        .collect()
}

/// §4.1 item 4: `NVT_p(m)`, the entries of `VT_p(m)` that are neither ⊥ nor ∞.
pub fn nvt(vt: &[Vt]) -> usize {
    vt.iter().filter(|v| v.is_number()).count()
}

/// A value of `Win_p` (§4.1): 1, 0, or ⊥ (undecided).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Win {
    /// 1: the first argument precedes.
    One,
    /// 0: the second argument precedes.
    Zero,
    /// ⊥: neither, yet.
    Undecided,
}

/// §4.1: `Win_p(VT1, VT2)` is 1 if more than φ entries have `VT1[j] < VT2[j]`, 0 if more than
/// φ have `VT2[j] < VT1[j]`, ⊥ otherwise.
pub fn win(vt1: &[Vt], vt2: &[Vt], phi: u32) -> Win {
    let count = |a: &[Vt], b: &[Vt]| a.iter().zip(b).filter(|(x, y)| x.lt(**y)).count();
    if count(vt1, vt2) > phi as usize {
        Win::One
    } else if count(vt2, vt1) > phi as usize {
        Win::Zero
    } else {
        Win::Undecided
    }
}

/// `Future_p(VT1, VT2)` (§4.1): the values `Win_p` may still take for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Future {
    /// 1 ∈ Future.
    pub one: bool,
    /// 0 ∈ Future.
    pub zero: bool,
    /// ⊥ ∈ Future.
    pub undecided: bool,
}

impl Future {
    /// `Future = {1}`.
    pub fn is_only_one(self) -> bool {
        self.one && !self.zero && !self.undecided
    }
}

/// §4.1: "1 ∈ Future_p(VT1, VT2) ⟺ |{j | VT2[j] ≤ VT1[j]}| < n − φ".
fn one_possible(vt1: &[Vt], vt2: &[Vt], phi: u32) -> bool {
    let settled_against = vt2.iter().zip(vt1).filter(|(b, a)| b.le(**a)).count();
    settled_against < vt1.len() - phi as usize
}

/// §4.1: `Future_p(VT1, VT2)` — 1 as above; ⊥ ⟺ `Win_p(VT1, VT2) = ⊥`; 0 ⟺
/// 1 ∈ `Future_p(VT2, VT1)`.
pub fn future(vt1: &[Vt], vt2: &[Vt], phi: u32) -> Future {
    Future {
        one: one_possible(vt1, vt2, phi),
        zero: one_possible(vt2, vt1, phi),
        undecided: win(vt1, vt2, phi) == Win::Undecided,
    }
}

/// A candidate with the quantities §4.1 associates with it (a row of Table 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The message.
    pub id: MsgId,
    /// `Tail_p(m)`.
    pub tail: Vec<ProcId>,
    /// `VT_p(m)`.
    pub vt: Vec<Vt>,
}

impl Row {
    /// `NTail_p(m)`.
    pub fn ntail(&self) -> usize {
        self.tail.len()
    }

    /// `NVT_p(m)`.
    pub fn nvt(&self) -> usize {
        nvt(&self.vt)
    }
}

/// The candidates `M_p` with their quantities, in identifier order (Table 1).
pub fn table(dag: &Dag) -> Vec<Row> {
    dag.candidates()
        .into_iter()
        .map(|m| Row {
            id: (m.origin, m.seq),
            tail: dag.tail_of(m),
            vt: vt(dag, m),
        })
        .collect()
}

/// §4.2: the sources `S_p` — the candidates `m` with `1 ∉ Future_p(VT_p(m'), VT_p(m))` for
/// every other candidate `m'` — as indexes into `rows`.
pub fn sources(rows: &[Row], phi: u32) -> Vec<usize> {
    (0..rows.len())
        .filter(|&i| {
            rows.iter()
                .enumerate()
                .all(|(j, other)| j == i || !future(&other.vt, &rows[i].vt, phi).one)
        })
        .collect()
}

/// §4.2, (DEL): the source set to deliver now, in lexicographical order of `<sender,
/// counter>`, or `None` while the criterion does not hold.
///
/// 1. Internal stability: every candidate that is not a source has a candidate `m'` with
///    `Future_p(VT_p(m'), VT_p(m)) = {1}`.
/// 2. External stability: (a) some source has `NVT_p(s) > φ` and every source has
///    `NTail_p(s) ≥ n − φ`; or (b) `NTail_p = n`.
pub fn decide(dag: &Dag, phi: u32) -> Option<Vec<MsgId>> {
    let rows = table(dag);
    if rows.is_empty() {
        return None;
    }
    let n = dag.procs();
    let s = sources(&rows, phi);
    let internal = (0..rows.len()).filter(|i| !s.contains(i)).all(|i| {
        rows.iter()
            .any(|other| future(&other.vt, &rows[i].vt, phi).is_only_one())
    });
    let phi_n = phi as usize;
    let external_a =
        s.iter().any(|&i| rows[i].nvt() > phi_n) && s.iter().all(|&i| rows[i].ntail() >= n - phi_n);
    let external_b = dag.tail().len() == n;
    if !(internal && (external_a || external_b)) {
        return None;
    }
    // The sources cannot be empty: a candidate that no other can beat for good always exists
    // (W.1 for φ ≥ n/2). Delivering an empty set would stall; say so loudly.
    assert!(!s.is_empty(), "DEL held with no source (§4.2)");
    let mut set: Vec<MsgId> = s.into_iter().map(|i| rows[i].id).collect();
    set.sort_unstable();
    Some(set)
}
