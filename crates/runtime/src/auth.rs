//! Authenticated datagrams: per-link keys and epochs, sealing, opening and replay windows.
//!
//! Every datagram a live member sends on a link is *sealed* with AES-128-GCM under the key of
//! that directed link (`from → to`) and key epoch, with a 64-bit counter as the nonce and a
//! header the tag covers (docs/SECURITY.md, "The sealed datagram"):
//!
//! ```text
//! kind u8 | 0 u8 | from u16 | to u16 | 0 u16 | epoch u32 | counter u64 | body | tag (16 bytes)
//! ```
//!
//! With GSO each segment is sealed on its own ([`HEADER_LEN`] and [`TAG_LEN`] are reserved in
//! every segment by the coalescer), so a receiver without GRO opens each datagram alone. A
//! receiver finds the key of the header's link and epoch, verifies the tag, and only then checks
//! and marks the counter in that key's [`ReplayWindow`] (RFC 6479): a forged datagram never
//! moves a window. Every refusal is counted by reason ([`AuthStats`]) and costs at most one tag
//! check.
//!
//! Keys come from the controller ([`ClusterSecret::link_key`]: HKDF-SHA256 of the cluster
//! secret) over its TLS channel, as [`KeyUpdate`]s that the control thread hands the driver
//! through a [`KeyInbox`]. A link keeps up to three epochs for receiving: the previous one
//! (until `grace` after the switch), the current one, and the next one (installed, not yet sent
//! with). Senders switch when the controller activates the next epoch, after every member
//! installed it, so no datagram is sealed with a key its receiver does not hold.
//!
//! What it is not: the policy of when to rotate (the controller's [`crate::keys`]), or the
//! control channel's protection ([`crate::tls`]).

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use onepipe_proto::ids::PortId;
use onepipe_proto::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of the auth header at the start of every sealed datagram (segment).
pub const HEADER_LEN: usize = 20;
/// Bytes of the AEAD tag at the end of every sealed datagram (segment).
pub const TAG_LEN: usize = 16;
/// Bytes sealing adds to every datagram (segment).
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Bytes of a link key (AES-128).
pub const KEY_LEN: usize = 16;
/// Bytes of the cluster secret.
pub const SECRET_LEN: usize = 32;
/// Counters a replay window remembers below the highest seen. Links are FIFO (one socket pair
/// through single-threaded daemons); this is room for a 64-segment GSO send to arrive reversed
/// 32 times over.
pub const REPLAY_WINDOW_BITS: usize = 2048;
/// How long the previous epoch stays accepted after a switch, by default.
pub const KEY_GRACE_NS_DEFAULT: u64 = 500_000_000;

const KIND_AUTH: u8 = 0xA1;
const KIND_ENCRYPT: u8 = 0xA2;
const WINDOW_BLOCKS: usize = REPLAY_WINDOW_BITS / 64 + 1;
const HKDF_SALT: &[u8] = b"onepipe v1 link keys";
const HKDF_INFO: &[u8] = b"onepipe link";

const _: () = assert!(
    REPLAY_WINDOW_BITS.is_multiple_of(64)
        && REPLAY_WINDOW_BITS >= 32 * crate::config::GSO_SEGMENTS_MAX
);
// A sealed Ethernet datagram still holds an ACK batch of two (the host sends smaller batches).
const _: () = assert!(
    OVERHEAD
        + onepipe_proto::wire::ACK_BATCH_HEADER_LEN
        + 2 * onepipe_proto::wire::ACK_BATCH_ENTRY_LEN
        <= crate::config::DATAGRAM_LEN_MAX_DEFAULT
);

/// How a cluster protects its datagrams (`auth` in the cluster file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No protection: anyone who can send a datagram to a member is believed.
    Off,
    /// Every datagram authenticated (the whole datagram is the AEAD's associated data), not
    /// encrypted.
    #[default]
    On,
    /// Every datagram authenticated and its body encrypted.
    Encrypt,
}

impl AuthMode {
    /// Whether datagrams are sealed.
    pub fn seals(self) -> bool {
        self != AuthMode::Off
    }

    fn kind(self) -> u8 {
        match self {
            AuthMode::Encrypt => KIND_ENCRYPT,
            _ => KIND_AUTH,
        }
    }
}

impl fmt::Display for AuthMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthMode::Off => "off",
            AuthMode::On => "on",
            AuthMode::Encrypt => "encrypt",
        })
    }
}

impl std::str::FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AuthMode, String> {
        match s {
            "off" => Ok(AuthMode::Off),
            "on" => Ok(AuthMode::On),
            "encrypt" => Ok(AuthMode::Encrypt),
            other => Err(format!(
                "unknown auth mode '{other}': \"on\", \"encrypt\" or \"off\""
            )),
        }
    }
}

/// A member of the cluster by number: aggregators in file order, then processes by id
/// ([`crate::keys::member_ix`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MemberIx(pub u16);

/// A directed link between two members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LinkId {
    /// The sender.
    pub from: MemberIx,
    /// The receiver.
    pub to: MemberIx,
}

impl LinkId {
    /// The link the other way.
    pub fn reverse(self) -> LinkId {
        LinkId {
            from: self.to,
            to: self.from,
        }
    }
}

/// A key epoch. Every epoch's keys are handed to one incarnation of each member only, and
/// epochs only grow, so no (key, counter) pair is used twice (docs/SECURITY.md, "Keys").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Epoch(pub u32);

/// 16 bytes of key material (redacted in `Debug`; hex in JSON).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial(pub [u8; KEY_LEN]);

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyMaterial(..)")
    }
}

impl Serialize for KeyMaterial {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&to_hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for KeyMaterial {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KeyMaterial, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let mut key = [0u8; KEY_LEN];
        from_hex(&s, &mut key).map_err(serde::de::Error::custom)?;
        Ok(KeyMaterial(key))
    }
}

/// One link's key of one epoch, as the controller hands it to a member of the link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkKey {
    /// The directed link.
    pub link: LinkId,
    /// Its key.
    pub key: KeyMaterial,
}

/// The cluster secret: the controller's only, the root of every link key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret([u8; SECRET_LEN]);

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// A fresh secret from the operating system's random source.
    ///
    /// # Errors
    /// The random source failed.
    pub fn generate() -> io::Result<ClusterSecret> {
        let mut s = [0u8; SECRET_LEN];
        aws_lc_rs::rand::fill(&mut s).map_err(|_| io::Error::other("no randomness"))?;
        Ok(ClusterSecret(s))
    }

    /// The secret of these bytes (tests, and secrets kept elsewhere).
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> ClusterSecret {
        ClusterSecret(bytes)
    }

    /// Parses 64 hexadecimal digits (surrounding white space ignored).
    ///
    /// # Errors
    /// Anything else; the message says what was wrong, never the secret.
    pub fn from_hex(text: &str) -> Result<ClusterSecret, String> {
        let mut s = [0u8; SECRET_LEN];
        from_hex(text.trim(), &mut s)?;
        Ok(ClusterSecret(s))
    }

    /// The secret as 64 hexadecimal digits.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// Reads a secret file (64 hexadecimal digits).
    ///
    /// # Errors
    /// The file cannot be read or does not hold a secret: the message names the file.
    pub fn load(path: &Path) -> Result<ClusterSecret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the cluster secret: {e}", path.display()))?;
        ClusterSecret::from_hex(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes the secret to a new file readable by its owner only.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        write_private(path, format!("{}\n", self.to_hex()).as_bytes())
    }

    /// The key of `link` in `epoch`: HKDF-SHA256 (RFC 5869) with a fixed salt, the secret as
    /// input key material and `"onepipe link" ‖ from ‖ to ‖ epoch` (big-endian) as info.
    pub fn link_key(&self, link: LinkId, epoch: Epoch) -> KeyMaterial {
        use aws_lc_rs::hkdf::{KeyType, Salt, HKDF_SHA256};
        struct Len;
        impl KeyType for Len {
            fn len(&self) -> usize {
                KEY_LEN
            }
        }
        let mut info = [0u8; 8];
        info[0..2].copy_from_slice(&link.from.0.to_be_bytes());
        info[2..4].copy_from_slice(&link.to.0.to_be_bytes());
        info[4..8].copy_from_slice(&epoch.0.to_be_bytes());
        let prk = Salt::new(HKDF_SHA256, HKDF_SALT).extract(&self.0);
        let mut key = [0u8; KEY_LEN];
        prk.expand(&[HKDF_INFO, &info], Len)
            .and_then(|okm| okm.fill(&mut key))
            .expect("16 bytes is a valid HKDF-SHA256 output length");
        KeyMaterial(key)
    }
}

/// Writes `bytes` to a new file at `path` with mode 0600.
///
/// # Errors
/// The file cannot be created or written.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str, out: &mut [u8]) -> Result<(), String> {
    if text.len() != out.len() * 2 {
        return Err(format!(
            "expected {} hexadecimal digits, found {} characters",
            out.len() * 2,
            text.len()
        ));
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(text.get(2 * i..2 * i + 2).unwrap_or("zz"), 16)
            .map_err(|_| "not hexadecimal".to_string())?;
    }
    Ok(())
}

/// Why a counter was refused by a [`ReplayWindow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Seen before.
    Duplicate,
    /// Older than the window remembers.
    TooOld,
}

/// RFC 6479's anti-replay window: a ring of bit blocks, the highest counter seen, and room for
/// [`REPLAY_WINDOW_BITS`] counters below it. Moving the top clears the blocks it passes, so
/// every operation costs O(1) amortised and no bit is shifted.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// The highest counter accepted, once any was.
    top: Option<u64>,
    blocks: [u64; WINDOW_BLOCKS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: None,
            blocks: [0; WINDOW_BLOCKS],
        }
    }
}

impl ReplayWindow {
    /// The highest counter marked, once any was.
    pub fn top(&self) -> Option<u64> {
        self.top
    }

    /// Whether `counter` would be accepted, without marking it.
    pub fn check(&self, counter: u64) -> Result<(), Replay> {
        let Some(top) = self.top else {
            return Ok(());
        };
        if counter > top {
            return Ok(());
        }
        if top - counter >= REPLAY_WINDOW_BITS as u64 {
            return Err(Replay::TooOld);
        }
        let (block, bit) = Self::position(counter);
        if self.blocks[block] & bit != 0 {
            return Err(Replay::Duplicate);
        }
        Ok(())
    }

    /// Checks `counter` and marks it seen. Call only for a datagram whose tag verified.
    pub fn mark(&mut self, counter: u64) -> Result<(), Replay> {
        self.check(counter)?;
        let top = self.top.unwrap_or(0);
        if self.top.is_none() || counter > top {
            // Clear the blocks between the old top's and the new one's (at most all of them).
            let from = if self.top.is_none() { 0 } else { top / 64 + 1 };
            let to = counter / 64;
            let span = (to + 1).saturating_sub(from).min(WINDOW_BLOCKS as u64);
            for i in 0..span {
                let b = ((to - i) % WINDOW_BLOCKS as u64) as usize;
                self.blocks[b] = 0;
            }
            self.top = Some(counter);
        }
        let (block, bit) = Self::position(counter);
        self.blocks[block] |= bit;
        debug_assert!(self.check(counter) == Err(Replay::Duplicate));
        Ok(())
    }

    fn position(counter: u64) -> (usize, u64) {
        (
            ((counter / 64) % WINDOW_BLOCKS as u64) as usize,
            1u64 << (counter % 64),
        )
    }
}

/// Why a received datagram was refused. Each has its counter in [`AuthStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// Shorter than a header and a tag.
    Short,
    /// Not a sealed datagram of this cluster's mode (an unsealed datagram, another version).
    BadHeader,
    /// For another member, or from a member this one has no link with.
    UnknownLink,
    /// From an address other than the link's peer.
    WrongLink,
    /// An epoch this member does not hold (never installed, or retired).
    UnknownEpoch,
    /// The tag did not verify.
    BadTag,
    /// A counter seen before, or older than the window.
    Replay,
}

/// Counters of the auth layer; never reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthStats {
    /// Datagrams (segments) sealed.
    pub sealed: u64,
    /// Datagrams (segments) opened: tag verified, counter fresh.
    pub ok: u64,
    /// Refused: [`AuthFailure::Short`].
    pub short: u64,
    /// Refused: [`AuthFailure::BadHeader`].
    pub bad_header: u64,
    /// Refused: [`AuthFailure::UnknownLink`].
    pub unknown_link: u64,
    /// Refused: [`AuthFailure::WrongLink`].
    pub wrong_link: u64,
    /// Refused: [`AuthFailure::UnknownEpoch`].
    pub unknown_epoch: u64,
    /// Refused: [`AuthFailure::BadTag`].
    pub bad_tag: u64,
    /// Refused: [`AuthFailure::Replay`].
    pub replay: u64,
    /// Datagrams not sent: no key to seal them with yet (or any more).
    pub no_key: u64,
    /// Datagrams opened with a counter below the highest seen on their key: reordering on
    /// the link, what the replay window's span must cover.
    pub reordered: u64,
    /// The farthest such a datagram was behind the highest counter seen.
    pub reorder_depth_max: u64,
    /// Epochs installed.
    pub epochs_installed: u64,
    /// Epochs switched to for sending.
    pub epochs_activated: u64,
    /// The epoch sent with now (0 before any).
    pub epoch: u64,
}

/// The reasons a datagram is refused (an [`AuthFailure`] each), as the `auth_<reason>`
/// counters of [`AuthStats::counters`] name them.
pub const REFUSAL_REASONS: [&str; 7] = [
    "short",
    "bad_header",
    "unknown_link",
    "wrong_link",
    "unknown_epoch",
    "bad_tag",
    "replay",
];

impl AuthStats {
    /// Datagrams refused, whatever the reason.
    pub fn refused(&self) -> u64 {
        self.short
            + self.bad_header
            + self.unknown_link
            + self.wrong_link
            + self.unknown_epoch
            + self.bad_tag
            + self.replay
    }

    fn count(&mut self, f: AuthFailure) {
        *match f {
            AuthFailure::Short => &mut self.short,
            AuthFailure::BadHeader => &mut self.bad_header,
            AuthFailure::UnknownLink => &mut self.unknown_link,
            AuthFailure::WrongLink => &mut self.wrong_link,
            AuthFailure::UnknownEpoch => &mut self.unknown_epoch,
            AuthFailure::BadTag => &mut self.bad_tag,
            AuthFailure::Replay => &mut self.replay,
        } += 1;
    }

    /// The counters by name (`auth_*`), for reports and health messages.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("auth_sealed", self.sealed),
            ("auth_ok", self.ok),
            ("auth_short", self.short),
            ("auth_bad_header", self.bad_header),
            ("auth_unknown_link", self.unknown_link),
            ("auth_wrong_link", self.wrong_link),
            ("auth_unknown_epoch", self.unknown_epoch),
            ("auth_bad_tag", self.bad_tag),
            ("auth_replay", self.replay),
            ("auth_no_key", self.no_key),
            ("auth_reordered", self.reordered),
            ("auth_reorder_depth_max", self.reorder_depth_max),
            ("auth_epochs_installed", self.epochs_installed),
            ("auth_epochs_activated", self.epochs_activated),
            ("auth_epoch", self.epoch),
        ]
    }
}

/// No key to seal with: the port has no link, or its link no current epoch yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoKey;

impl fmt::Display for NoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no key to seal the datagram with")
    }
}

impl std::error::Error for NoKey {}

/// A change of keys, from the controller to a member's driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyUpdate {
    /// Install `epoch`'s keys of the member's links: accepted for receiving at once. With
    /// `activate`, also sent with at once (a member's first keys).
    Install {
        /// The epoch.
        epoch: Epoch,
        /// The keys of the member's links, both directions.
        keys: Vec<LinkKey>,
        /// Send with them at once.
        activate: bool,
    },
    /// Send with `epoch`'s keys from now on; accept the epoch before it for `grace_ns` more.
    Activate {
        /// The epoch.
        epoch: Epoch,
        /// How long the previous epoch stays accepted.
        grace_ns: u64,
    },
}

/// Where a control thread leaves [`KeyUpdate`]s for a driver, which takes them at its next turn
/// (one atomic load per turn when there are none).
#[derive(Debug, Default)]
pub struct KeyInbox {
    dirty: AtomicBool,
    updates: Mutex<Vec<KeyUpdate>>,
}

impl KeyInbox {
    /// An empty inbox.
    pub fn new() -> Arc<KeyInbox> {
        Arc::new(KeyInbox::default())
    }

    /// Leaves an update (the driver applies updates in the order they were left).
    pub fn push(&self, update: KeyUpdate) {
        let mut u = self.updates.lock().unwrap_or_else(|p| p.into_inner());
        u.push(update);
        self.dirty.store(true, Ordering::Release);
    }

    /// Takes every update left, if any.
    pub fn take(&self) -> Vec<KeyUpdate> {
        if !self.dirty.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.updates.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// One epoch's key of an output link, with its counter.
struct SendKey {
    epoch: Epoch,
    key: LessSafeKey,
    /// The counter the next datagram gets.
    counter: u64,
}

/// One epoch's key of an input link, with its replay window.
struct RecvKey {
    epoch: Epoch,
    key: LessSafeKey,
    window: ReplayWindow,
}

/// An output link: where datagrams to one peer are sealed.
struct OutLink {
    link: LinkId,
    current: Option<SendKey>,
    next: Option<SendKey>,
}

/// An input link: the keys datagrams from one peer may be sealed with.
struct InLink {
    port: PortId,
    /// The previous epoch and when it stops being accepted.
    previous: Option<(RecvKey, Instant)>,
    current: Option<RecvKey>,
    next: Option<RecvKey>,
}

impl InLink {
    fn key(&mut self, epoch: Epoch, now: Instant) -> Option<&mut RecvKey> {
        if self
            .previous
            .as_ref()
            .is_some_and(|(_, until)| *until <= now)
        {
            self.previous = None;
        }
        [
            self.current.as_mut(),
            self.next.as_mut(),
            self.previous.as_mut().map(|(k, _)| k),
        ]
        .into_iter()
        .flatten()
        .find(|k| k.epoch == epoch)
    }

    fn epochs(&self) -> impl Iterator<Item = Epoch> + '_ {
        [
            self.current.as_ref(),
            self.next.as_ref(),
            self.previous.as_ref().map(|(k, _)| k),
        ]
        .into_iter()
        .flatten()
        .map(|k| k.epoch)
    }
}

/// One link of a member as its driver sees it: the peer, and the ports its datagrams leave by
/// and arrive on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkPorts {
    /// The member at the other end.
    pub peer: MemberIx,
    /// The output port to it.
    pub out: PortId,
    /// The input port its datagrams arrive on.
    pub input: PortId,
}

/// A driver's auth state: the keys of every link of one member, by port. See the module docs.
pub struct LinkAuth {
    mode: AuthMode,
    me: MemberIx,
    /// By output port.
    out: Vec<Option<OutLink>>,
    /// By peer.
    ins: BTreeMap<MemberIx, InLink>,
    inbox: Arc<KeyInbox>,
    stats: AuthStats,
}

impl fmt::Debug for LinkAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkAuth")
            .field("mode", &self.mode)
            .field("me", &self.me)
            .field("links", &self.ins.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl LinkAuth {
    /// The auth state of member `me` with `links`, in `mode` (which must seal), taking key
    /// updates from `inbox`. It holds no key until an update installs some.
    ///
    /// # Panics
    /// If `mode` is [`AuthMode::Off`], or two links share a peer or an output port.
    pub fn new(
        mode: AuthMode,
        me: MemberIx,
        links: &[LinkPorts],
        inbox: Arc<KeyInbox>,
    ) -> LinkAuth {
        assert!(mode.seals(), "LinkAuth for a cluster without auth");
        let outs = links.iter().map(|l| l.out.index() + 1).max().unwrap_or(0);
        let mut out: Vec<Option<OutLink>> = (0..outs).map(|_| None).collect();
        let mut ins = BTreeMap::new();
        for l in links {
            let slot = &mut out[l.out.index()];
            assert!(slot.is_none(), "two links on output {}", l.out);
            *slot = Some(OutLink {
                link: LinkId {
                    from: me,
                    to: l.peer,
                },
                current: None,
                next: None,
            });
            let fresh = InLink {
                port: l.input,
                previous: None,
                current: None,
                next: None,
            };
            assert!(
                ins.insert(l.peer, fresh).is_none(),
                "two links to {:?}",
                l.peer
            );
        }
        LinkAuth {
            mode,
            me,
            out,
            ins,
            inbox,
            stats: AuthStats::default(),
        }
    }

    /// The mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The counters.
    pub fn stats(&self) -> &AuthStats {
        &self.stats
    }

    /// Applies the updates waiting in the inbox, at local time `now`.
    pub fn poll_updates(&mut self, now: Instant) {
        for u in self.inbox.take() {
            self.apply(now, u);
        }
    }

    /// Applies one key update at local time `now`. Keys of links this member does not have are
    /// ignored; an activation of an epoch never installed leaves the keys as they are.
    pub fn apply(&mut self, now: Instant, update: KeyUpdate) {
        match update {
            KeyUpdate::Install {
                epoch,
                keys,
                activate,
            } => {
                self.install(epoch, &keys);
                if activate {
                    self.activate(now, epoch, KEY_GRACE_NS_DEFAULT);
                }
            }
            KeyUpdate::Activate { epoch, grace_ns } => self.activate(now, epoch, grace_ns),
        }
    }

    fn install(&mut self, epoch: Epoch, keys: &[LinkKey]) {
        self.stats.epochs_installed += 1;
        for k in keys {
            if k.link.from == self.me {
                let Some(out) = self.out.iter_mut().flatten().find(|o| o.link == k.link) else {
                    continue;
                };
                let held = [out.current.as_ref(), out.next.as_ref()]
                    .into_iter()
                    .flatten()
                    .any(|s| s.epoch >= epoch);
                if !held {
                    out.next = Some(SendKey {
                        epoch,
                        key: aead_key(&k.key),
                        counter: 0,
                    });
                }
            } else if k.link.to == self.me {
                let Some(input) = self.ins.get_mut(&k.link.from) else {
                    continue;
                };
                if input.epochs().all(|e| e < epoch) {
                    input.next = Some(RecvKey {
                        epoch,
                        key: aead_key(&k.key),
                        window: ReplayWindow::default(),
                    });
                }
            }
        }
    }

    /// Switches every link to `epoch`: links that installed it send and receive with it; the
    /// epoch before it is accepted for `grace_ns` more. A link that did not get the epoch (its
    /// peer was removed) keeps only that grace: a removed member's keys open nothing after it.
    fn activate(&mut self, now: Instant, epoch: Epoch, grace_ns: u64) {
        let until = now + grace_ns;
        let mut switched = false;
        for out in self.out.iter_mut().flatten() {
            if out.next.as_ref().is_some_and(|n| n.epoch == epoch) {
                out.current = out.next.take();
                switched = true;
            } else if out.current.as_ref().is_some_and(|c| c.epoch < epoch) {
                out.current = None;
            }
        }
        for input in self.ins.values_mut() {
            let older = input.current.as_ref().is_some_and(|c| c.epoch < epoch);
            if input.next.as_ref().is_some_and(|n| n.epoch == epoch) {
                input.previous = input.current.take().map(|k| (k, until));
                input.current = input.next.take();
            } else if older {
                input.previous = input.current.take().map(|k| (k, until));
            }
        }
        if switched {
            self.stats.epochs_activated += 1;
            self.stats.epoch = u64::from(epoch.0);
        }
    }

    /// Seals one datagram (GSO segment) for output `port` in place: `segment` holds
    /// [`HEADER_LEN`] bytes of room, the body, and [`TAG_LEN`] bytes of room.
    ///
    /// # Errors
    /// No key for the port yet (or a port without a link): the datagram must not be sent.
    pub fn seal(&mut self, port: PortId, segment: &mut [u8]) -> Result<(), NoKey> {
        debug_assert!(segment.len() >= OVERHEAD);
        let Some(out) = self.out.get_mut(port.index()).and_then(Option::as_mut) else {
            self.stats.no_key += 1;
            return Err(NoKey);
        };
        let Some(k) = out.current.as_mut() else {
            self.stats.no_key += 1;
            return Err(NoKey);
        };
        let counter = k.counter;
        k.counter += 1;
        write_header(
            &mut segment[..HEADER_LEN],
            self.mode.kind(),
            out.link,
            k.epoch,
            counter,
        );
        let (sealed, tag_room) = segment.split_at_mut(segment.len() - TAG_LEN);
        let nonce = nonce(counter);
        let tag = match self.mode {
            AuthMode::Encrypt => {
                let (header, body) = sealed.split_at_mut(HEADER_LEN);
                k.key
                    .seal_in_place_separate_tag(nonce, Aad::from(&*header), body)
            }
            _ => k
                .key
                .seal_in_place_separate_tag(nonce, Aad::from(&*sealed), &mut []),
        }
        .expect("AES-GCM seals any datagram a UDP socket carries");
        tag_room.copy_from_slice(tag.as_ref());
        self.stats.sealed += 1;
        Ok(())
    }

    /// Opens one received datagram (GSO segment) in place, at local time `now`, that arrived
    /// from the address of input `port`. Returns the body's range within `segment` (decrypted
    /// in place in `encrypt` mode).
    ///
    /// # Errors
    /// Why it was refused (counted).
    pub fn open(
        &mut self,
        now: Instant,
        port: PortId,
        segment: &mut [u8],
    ) -> Result<std::ops::Range<usize>, AuthFailure> {
        let mut r = self.try_open(now, port, segment);
        if r == Err(AuthFailure::UnknownEpoch) && self.inbox.dirty.load(Ordering::Acquire) {
            // Keys the control thread left since this turn began (a peer that switched to an
            // epoch this member acknowledged a moment ago).
            self.poll_updates(now);
            r = self.try_open(now, port, segment);
        }
        match &r {
            Ok(_) => self.stats.ok += 1,
            Err(f) => self.stats.count(*f),
        }
        r
    }

    fn try_open(
        &mut self,
        now: Instant,
        port: PortId,
        segment: &mut [u8],
    ) -> Result<std::ops::Range<usize>, AuthFailure> {
        if segment.len() < OVERHEAD {
            return Err(AuthFailure::Short);
        }
        let header = read_header(&segment[..HEADER_LEN]).ok_or(AuthFailure::BadHeader)?;
        if header.kind != self.mode.kind() {
            return Err(AuthFailure::BadHeader);
        }
        if header.link.to != self.me {
            return Err(AuthFailure::UnknownLink);
        }
        let input = self
            .ins
            .get_mut(&header.link.from)
            .ok_or(AuthFailure::UnknownLink)?;
        if input.port != port {
            return Err(AuthFailure::WrongLink);
        }
        let k = input
            .key(header.epoch, now)
            .ok_or(AuthFailure::UnknownEpoch)?;
        let nonce = nonce(header.counter);
        let len = segment.len();
        let verified = match self.mode {
            AuthMode::Encrypt => {
                let (head, rest) = segment.split_at_mut(HEADER_LEN);
                k.key
                    .open_in_place(nonce, Aad::from(&*head), rest)
                    .map(|_| ())
            }
            _ => {
                let (sealed, tag) = segment.split_at_mut(len - TAG_LEN);
                k.key
                    .open_in_place(nonce, Aad::from(&*sealed), tag)
                    .map(|_| ())
            }
        };
        // How far behind the highest counter seen this one is (reordering on the link).
        let behind = k
            .window
            .top()
            .map_or(0, |t| t.saturating_sub(header.counter));
        verified.map_err(|_| AuthFailure::BadTag)?;
        // RFC 6479 / IPsec: the window moves only for a datagram whose tag verified.
        k.window
            .mark(header.counter)
            .map_err(|_| AuthFailure::Replay)?;
        if behind > 0 {
            self.stats.reordered += 1;
            self.stats.reorder_depth_max = self.stats.reorder_depth_max.max(behind);
        }
        Ok(HEADER_LEN..len - TAG_LEN)
    }
}

fn aead_key(k: &KeyMaterial) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &k.0).expect("16 bytes is an AES-128 key"))
}

fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// A sealed datagram's header, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `0xA1` (authenticated) or `0xA2` (encrypted).
    pub kind: u8,
    /// The directed link.
    pub link: LinkId,
    /// The key epoch.
    pub epoch: Epoch,
    /// The counter (the nonce).
    pub counter: u64,
}

fn write_header(h: &mut [u8], kind: u8, link: LinkId, epoch: Epoch, counter: u64) {
    h[0] = kind;
    h[1] = 0;
    h[2..4].copy_from_slice(&link.from.0.to_be_bytes());
    h[4..6].copy_from_slice(&link.to.0.to_be_bytes());
    h[6..8].copy_from_slice(&[0, 0]);
    h[8..12].copy_from_slice(&epoch.0.to_be_bytes());
    h[12..20].copy_from_slice(&counter.to_be_bytes());
}

/// Reads the auth header at the start of `bytes`: `None` if it is shorter than a header, its
/// kind unknown, or a reserved byte not zero.
pub fn read_header(bytes: &[u8]) -> Option<Header> {
    let h = bytes.get(..HEADER_LEN)?;
    if !matches!(h[0], KIND_AUTH | KIND_ENCRYPT) || h[1] != 0 || h[6] != 0 || h[7] != 0 {
        return None;
    }
    let u16_at = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    Some(Header {
        kind: h[0],
        link: LinkId {
            from: MemberIx(u16_at(2)),
            to: MemberIx(u16_at(4)),
        },
        epoch: Epoch(u32::from_be_bytes(h[8..12].try_into().ok()?)),
        counter: u64::from_be_bytes(h[12..20].try_into().ok()?),
    })
}

#[cfg(test)]
mod tests;
