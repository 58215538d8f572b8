//! TPC-C's New-Order and Payment as independent transactions on 1Pipe (§7.3.2, extending
//! §2.2.3's distributed atomic operations), with a sharded, replicated in-memory database and
//! the checker every run uses.
//!
//! New-Order and Payment are *independent* transactions: what each shard does depends only on
//! the transaction's inputs, never on what another shard read. So a transaction is **one reliable
//! scattering** of one request — the same bytes — to every replica of every shard it touches
//! (Eris's method, with 1Pipe's timestamps in place of Eris's sequencer, §7.3.2). Every replica
//! applies what it is delivered in timestamp order, so all replicas of a shard go through the
//! same states and the transactions are serializable in timestamp order, with no locks, no
//! aborts and no coordination between shards. Each replica answers the initiator with what its
//! part read or decided; the initiator commits when every live replica has answered, alike.
//!
//! * [`gen`] — inputs and the initial population as the specification (v5.11) draws them:
//!   NURand, clause 2.4.1 (New-Order), 2.5.1 (Payment), 4.3.3 (population), the 45:43 mix.
//! * [`db`] — the database: rows, the placement of rows on shards and of shards on processes
//!   ([`db::placement`]), and a [`db::Shard`] that executes its part of a transaction
//!   deterministically (clauses 2.4.2 and 2.5.2).
//! * [`codec`] — the request and the reply on the wire, bounds-checked.
//! * [`reference`](mod@reference) — New-Order and Payment written apart from [`db`], from the specification
//!   (clauses 2.4.2, 2.5.2), on plain tables of its own: the checker's model.
//! * [`check`] — the checker: replays the committed transactions in their serialization order on
//!   the reference and compares every returned result, checks real time, the specification's
//!   consistency conditions (clause 3.3.2) over the replicas' final rows, replica agreement and
//!   every replica's rows against the reference's.
//! * [`onepipe`] — [`TpccProcess`], the 1Pipe application: replica and initiator.
//! * The baselines of Fig. 15, on direct messages (exactly once, FIFO per pair; no failures
//!   handled), each **with two-phase commit and primary-backup replication** (replica 0 of a
//!   shard is its primary; a prepared part goes to the two backups, acknowledged, before the
//!   primary votes yes; commits are forwarded to them in the primary's commit order):
//!   * [`lock`] — [`TpccLockProcess`]: strict two-phase locking at row granularity (shared for a
//!     read, exclusive for a write, held until the commit), deadlocks avoided by wait-die,
//!     execution in place with an undo;
//!   * [`occ`] — [`TpccOccProcess`]: OCC — execute without locks, then prepare (lock without
//!     waiting and validate the rows' versions), then commit;
//!   * [`twopc`] — what they share: the messages, the coordinator (aborts retried after a
//!     randomized exponential backoff), the replication and the backups, and the serialization
//!     order they state for the checker (primaries' stamps of the decisive step, largest wins).
//!
//!   With few warehouses every Payment writes, and every New-Order reads, one of a few hot
//!   warehouse rows, held locked across replication and 2PC: "2PL and OCC do not scale"
//!   (§7.3.2). Their processes implement [`TpccApp`] too, so one driver and one checker serve
//!   all three.
//!
//! **Failures** (§5.2). 1Pipe's reliable service delivers the same messages below a failed
//! process's failure timestamp to every correct receiver (restricted failure atomicity), so the
//! live replicas of a shard agree on what they applied without any protocol of their own; an
//! initiator stops addressing a failed replica and stops waiting for it. A scattering that a
//! failed receiver never acknowledged may be *recalled* — delivered nowhere — after it got its
//! timestamp; the application is not told which. So every scattering carries a copy of the
//! request to its initiator too (a receipt): once the initiator's released commit barrier has
//! passed the timestamp, the copy was delivered (and so was every live replica's part) or the
//! scattering was recalled, and the transaction is sent again.
//!
//! **Departures from the specification**, all to keep rows small (runs use up to 512 processes,
//! each holding its shard): no initial orders (`D_NEXT_O_ID` starts at 1, clause 4.3.3.1 loads
//! 3000 orders per district); no dates; `C_FIRST` kept as a random 64-bit sort key (what the
//! by-last-name choice needs of it); `C_DATA` as a hash and a length; `H_C_ID` as the payment's
//! customer selector (a by-name payment's home district may live on another shard than the
//! customer, and the transaction stays independent); item names and data, stock district info
//! and `OL_DIST_INFO` omitted; item prices computed from the seed rather than stored. Money is in
//! cents, tax and discount rates in 1/10 000.

pub mod check;
pub mod codec;
pub mod db;
pub mod gen;
pub mod history;
pub mod lock;
pub mod occ;
pub mod onepipe;
pub mod reference;
pub mod twopc;

pub use lock::TpccLockProcess;
pub use occ::TpccOccProcess;
pub use onepipe::{TpccConfig, TpccProcess};

use crate::App;
use serde::{Deserialize, Serialize};

/// Money, in cents.
pub type Cents = i64;

/// A rate (tax, discount) in units of 1/10 000: TPC-C's `NUMERIC(4,4)`, `0.2000` as 2000.
pub type Rate = u16;

/// Fewest order lines in a New-Order (clause 2.4.1.3).
pub const LINES_MIN: usize = 5;
/// Most order lines in a New-Order (clause 2.4.1.3); a request with more is malformed.
pub const LINES_MAX: usize = 15;

/// Most last-name codes (clause 4.3.2.3: three digits, a syllable each).
pub const LAST_NAMES: u16 = 1000;

/// One order line of a New-Order's input (clause 2.4.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderLineInput {
    /// `OL_I_ID`: an item, or an unused number (the transaction rolls back).
    pub i_id: u32,
    /// `OL_SUPPLY_W_ID`.
    pub supply_w_id: u32,
    /// `OL_QUANTITY`, 1..=10.
    pub quantity: u8,
}

/// A New-Order's input (clause 2.4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderInput {
    /// The home warehouse.
    pub w_id: u32,
    /// The district.
    pub d_id: u32,
    /// The customer.
    pub c_id: u32,
    /// The order lines, [`LINES_MIN`]..=[`LINES_MAX`] of them.
    pub lines: Vec<OrderLineInput>,
}

/// How a Payment names its customer (clause 2.5.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CustomerSelector {
    /// By `C_ID`.
    Id(u32),
    /// By `C_LAST`, as its syllable code `0..1000` ([`gen::last_name`]).
    LastName(u16),
}

/// A Payment's input (clause 2.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentInput {
    /// The home warehouse: where the payment is made.
    pub w_id: u32,
    /// The home district.
    pub d_id: u32,
    /// The customer's warehouse (another one for a remote payment).
    pub c_w_id: u32,
    /// The customer's district.
    pub c_d_id: u32,
    /// The customer.
    pub customer: CustomerSelector,
    /// `H_AMOUNT` in cents, 100..=500 000.
    pub amount: u32,
}

/// A transaction's input: all a shard needs to execute its part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnInput {
    /// A New-Order.
    NewOrder(NewOrderInput),
    /// A Payment.
    Payment(PaymentInput),
}

/// A transaction's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TpccTxnKind {
    /// New-Order (clause 2.4).
    NewOrder,
    /// Payment (clause 2.5).
    Payment,
}

impl TxnInput {
    /// Its kind.
    pub fn kind(&self) -> TpccTxnKind {
        match self {
            TxnInput::NewOrder(_) => TpccTxnKind::NewOrder,
            TxnInput::Payment(_) => TpccTxnKind::Payment,
        }
    }

    /// Whether every id lies inside `scale` (item ids excepted: an unused one is how a New-Order
    /// asks to be rolled back), quantities and counts inside the specification's ranges. A
    /// request that is not valid is malformed: dropped and counted, never executed.
    pub fn is_valid(&self, scale: &gen::TpccScale) -> bool {
        let w = |w: u32| (1..=scale.warehouses).contains(&w);
        let d = |d: u32| (1..=scale.districts_per_warehouse).contains(&d);
        let c = |c: u32| (1..=scale.customers_per_district).contains(&c);
        match self {
            TxnInput::NewOrder(t) => {
                w(t.w_id)
                    && d(t.d_id)
                    && c(t.c_id)
                    && (LINES_MIN..=LINES_MAX).contains(&t.lines.len())
                    && t.lines
                        .iter()
                        .all(|l| w(l.supply_w_id) && (1..=10).contains(&l.quantity))
            }
            TxnInput::Payment(t) => {
                w(t.w_id)
                    && d(t.d_id)
                    && w(t.c_w_id)
                    && d(t.c_d_id)
                    && match t.customer {
                        CustomerSelector::Id(id) => c(id),
                        CustomerSelector::LastName(code) => code < LAST_NAMES,
                    }
                    && (100..=500_000).contains(&t.amount)
            }
        }
    }
}

/// `C_CREDIT`: good (`GC`) or bad (`BC`) credit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Credit {
    /// `GC`.
    #[default]
    Good,
    /// `BC`: a Payment prefixes `C_DATA` (clause 2.5.2.2).
    Bad,
}

/// What a New-Order's district part read and decided (clause 2.4.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderDistrict {
    /// `D_TAX`.
    pub d_tax: Rate,
    /// `O_ID`: the district's `D_NEXT_O_ID` (left as it was if the transaction rolled back).
    pub o_id: u32,
    /// The customer's `C_DISCOUNT`.
    pub c_discount: Rate,
    /// The customer's `C_LAST`, as its code.
    pub c_last: u16,
    /// The customer's `C_CREDIT`.
    pub c_credit: Credit,
}

/// A shard's part of a New-Order, as the initiator hears it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NewOrderPart {
    /// An unused item number rolled the transaction back: nothing changed (clause 2.4.2.3).
    pub rolled_back: bool,
    /// `W_TAX`, if the shard holds the home warehouse.
    pub w_tax: Option<Rate>,
    /// The district's part, if the shard holds the district.
    pub district: Option<NewOrderDistrict>,
    /// For each line whose stock row the shard holds, in line order: (line index from 0,
    /// `S_QUANTITY` after the update). Empty if rolled back.
    pub stock: Vec<(u8, u16)>,
}

/// What a Payment's customer part resolved and left (clause 2.5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentCustomer {
    /// The customer, resolved (by last name: the middle one by `C_FIRST`); 0 if no customer of
    /// the district has that last name (possible only at scales below 1000 customers).
    pub c_id: u32,
    /// `C_BALANCE` after the payment.
    pub c_balance: Cents,
    /// `C_CREDIT`.
    pub c_credit: Credit,
}

/// A shard's part of a Payment, as the initiator hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PaymentPart {
    /// `W_YTD` after, if the shard holds the home warehouse.
    pub w_ytd: Option<Cents>,
    /// `D_YTD` after, if the shard holds the home district.
    pub d_ytd: Option<Cents>,
    /// The customer's part, if the shard holds the customer's district.
    pub customer: Option<PaymentCustomer>,
}

/// What one shard's part of a transaction read or decided: what replicas of one shard must
/// agree on, and what the checker compares with its replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartResult {
    /// A New-Order's part.
    NewOrder(NewOrderPart),
    /// A Payment's part.
    Payment(PaymentPart),
}

impl PartResult {
    /// Its fields as (name, value) pairs, in a fixed order: what the checker compares. Absent
    /// parts have no pairs; booleans and enums are 0 or 1.
    pub fn fields(&self) -> Vec<(String, i64)> {
        let mut f: Vec<(String, i64)> = Vec::new();
        match self {
            PartResult::NewOrder(p) => {
                f.push(("kind".into(), 1));
                f.push(("rolled_back".into(), i64::from(p.rolled_back)));
                if let Some(t) = p.w_tax {
                    f.push(("w_tax".into(), i64::from(t)));
                }
                if let Some(d) = &p.district {
                    f.push(("d_tax".into(), i64::from(d.d_tax)));
                    f.push(("o_id".into(), i64::from(d.o_id)));
                    f.push(("c_discount".into(), i64::from(d.c_discount)));
                    f.push(("c_last".into(), i64::from(d.c_last)));
                    f.push(("c_credit".into(), i64::from(d.c_credit == Credit::Bad)));
                }
                for &(line, q) in &p.stock {
                    f.push((format!("s_quantity[{line}]"), i64::from(q)));
                }
            }
            PartResult::Payment(p) => {
                f.push(("kind".into(), 2));
                if let Some(y) = p.w_ytd {
                    f.push(("w_ytd".into(), y));
                }
                if let Some(y) = p.d_ytd {
                    f.push(("d_ytd".into(), y));
                }
                if let Some(c) = &p.customer {
                    f.push(("c_id".into(), i64::from(c.c_id)));
                    f.push(("c_balance".into(), c.c_balance));
                    f.push(("c_credit".into(), i64::from(c.c_credit == Credit::Bad)));
                }
            }
        }
        f
    }
}

/// A transaction that committed (or, from [`TpccApp::unfinished`], one bound to take effect),
/// as its initiator saw it: what [`check::TpccChecker`] replays. System-neutral: any system that
/// states a serialization order (1Pipe's timestamps, a baseline's commit order) records these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpccCommitted {
    /// Its id ([`crate::kv::txn_id`]: the initiator in the top 24 bits).
    pub txn: u64,
    /// Its initiator.
    pub client: u32,
    /// Its place in the serialization order, with `client`, `seq` and `txn` to break ties (in
    /// that order): for 1Pipe its timestamp (raw ns).
    pub key: u64,
    /// Among its initiator's transactions of one `key`, its place: for 1Pipe, the order the
    /// initiator's host stamped them, which is the order 1Pipe delivers them in (a host stamps
    /// non-decreasing timestamps, so several sends may share one; a transaction sent again after
    /// a refusal may share it with a newer one sent before it). A system whose keys are unique
    /// may leave it 0.
    pub seq: u64,
    /// Its input.
    pub input: TxnInput,
    /// What each shard it touched answered, by shard, ascending. For an unfinished one, the
    /// answers its initiator heard before it gave it up (some shards', or none): the replay
    /// compares none of them, the history ([`history`]) takes the values they show.
    pub results: Vec<(u32, PartResult)>,
    /// When the initiator first sent it and when the last reply came (its local time, ns);
    /// `return_ns` is `u64::MAX` for an unfinished one.
    pub call_ns: u64,
    /// See `call_ns`.
    pub return_ns: u64,
    /// Sends it took (a refused or recalled scattering is sent again).
    pub attempts: u32,
}

/// What a TPC-C process counts. Summed over processes with `+=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpccStats {
    /// New-Orders committed (rolled-back ones included: they complete, with no effect).
    pub committed_new_order: u64,
    /// Payments committed.
    pub committed_payment: u64,
    /// Of `committed_new_order`, those rolled back by an unused item (clause 2.4.2.3).
    pub rolled_back: u64,
    /// Transactions that could not commit: a shard they touch has no live replica.
    pub failed: u64,
    /// Sends the host refused (full buffer, failed destination), tried again later.
    pub refused: u64,
    /// Scatterings recalled (§5.2: never delivered), sent again at a new timestamp.
    pub recalled: u64,
    /// Parts a replica applied.
    pub parts_applied: u64,
    /// Replies sent again after a loss report.
    pub replies_resent: u64,
    /// Replies not sent (or no longer kept) because their initiator failed.
    pub replies_dropped: u64,
    /// Messages dropped as malformed: undecodable, invalid input, a request by best effort or to
    /// a process that holds nothing of it, a reply from a process that is not a replica of the
    /// shard it names.
    pub malformed: u64,
    /// Replies to no transaction or attempt in flight, or from a replica already heard.
    pub stale_replies: u64,
    /// Replicas of one shard answered one transaction differently: a violation of replica
    /// agreement (must stay 0).
    pub result_mismatches: u64,
    /// Requests delivered below the (timestamp, sender) of one applied before: 1Pipe's order
    /// broken (must stay 0).
    pub reordered: u64,
    /// Receipts of an attempt judged recalled and sent again: the commit barrier passed it
    /// before it was delivered, against 1Pipe's contract; the transaction may have taken effect
    /// twice (must stay 0).
    pub late_receipts: u64,
    /// Attempts aborted and tried again after a backoff (the baselines, [`twopc`]: a shard
    /// voted no).
    pub aborts: u64,
    /// Lock requests that waited in a lock's queue (2PL's wait-die: the older waits).
    pub lock_waits: u64,
    /// Lock requests that died (2PL's wait-die: the younger dies, its attempt aborts).
    pub lock_dies: u64,
    /// OCC prepares that found a row locked by another transaction (no waiting: a no vote).
    pub lock_conflicts: u64,
    /// OCC prepares that found a row's version changed since the execution (a no vote).
    pub validation_failures: u64,
    /// Transactions given up: aborted after the initiators stopped issuing, not tried again
    /// (the baselines, [`twopc`]). They took no effect.
    #[serde(default)]
    pub given_up: u64,
}

impl std::ops::AddAssign<&TpccStats> for TpccStats {
    fn add_assign(&mut self, o: &TpccStats) {
        self.committed_new_order += o.committed_new_order;
        self.committed_payment += o.committed_payment;
        self.rolled_back += o.rolled_back;
        self.failed += o.failed;
        self.refused += o.refused;
        self.recalled += o.recalled;
        self.parts_applied += o.parts_applied;
        self.replies_resent += o.replies_resent;
        self.replies_dropped += o.replies_dropped;
        self.malformed += o.malformed;
        self.stale_replies += o.stale_replies;
        self.result_mismatches += o.result_mismatches;
        self.reordered += o.reordered;
        self.late_receipts += o.late_receipts;
        self.aborts += o.aborts;
        self.lock_waits += o.lock_waits;
        self.lock_dies += o.lock_dies;
        self.lock_conflicts += o.lock_conflicts;
        self.validation_failures += o.validation_failures;
        self.given_up += o.given_up;
    }
}

impl std::ops::AddAssign for TpccStats {
    fn add_assign(&mut self, o: TpccStats) {
        *self += &o;
    }
}

impl TpccStats {
    /// Transactions committed, both kinds.
    pub fn committed(&self) -> u64 {
        self.committed_new_order + self.committed_payment
    }
}

/// A TPC-C process as a driver (the simulator, the live runtime) sees it beside [`App`]: what
/// it committed, its counters, whether it has work open, and the shard it keeps. 1Pipe's
/// [`TpccProcess`] implements it; so do the baselines (2PL, OCC), so one driver and one checker
/// serve all.
pub trait TpccApp: App {
    /// The next transaction it committed since the last call.
    fn poll_committed(&mut self) -> Option<TpccCommitted>;
    /// Its counters.
    fn stats(&self) -> &TpccStats;
    /// No transaction in flight, no reply waiting to be sent.
    fn idle(&self) -> bool;
    /// Transactions still open that are bound to take effect (stamped, for 1Pipe), as records
    /// with no results that never returned: the checker applies them in their place.
    fn unfinished(&self) -> Vec<TpccCommitted>;
    /// The shard it keeps as a replica, with its id; `None` for a pure initiator (or a process
    /// told it failed).
    fn shard(&self) -> Option<(u32, &db::Shard)>;
    /// What its replica applied, in order, with what it answered
    /// ([`onepipe::TpccConfig::log_applied`]; empty if it logs nothing or keeps no shard).
    fn applied(&self) -> &[onepipe::AppliedTxn] {
        &[]
    }
}

#[cfg(test)]
mod baseline_tests;
#[cfg(test)]
mod tests;
