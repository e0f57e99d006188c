//! The replica plane's handshake, run on every connection before any VSR message: each side
//! proves it holds the cluster's pre-shared key with an HMAC-SHA256 over both sides' fresh
//! nonces and replica ids and, inside TLS, the session's channel binding, so neither a
//! recorded handshake nor a peer without the key gets in, in either direction, and a proof
//! relayed from another TLS session (a relay that terminates TLS towards each node and
//! passes the handshake between them) does not verify. During a key rotation a node signs with its current key and
//! accepts the previous one as well. With `[cluster.auth]` off the same exchange runs with
//! an empty key: it authenticates nothing, but a client that dials the replica port by
//! mistake, or a node configured differently, is refused with a reason.
//!
//! Dialer → acceptor: `HELLO = magic(8) auth(1) dialer_id(1) nonce_d(32)`.
//! Acceptor → dialer: `CHALLENGE = magic(8) auth(1) acceptor_id(1) nonce_a(32) tag_a(32)`.
//! Dialer → acceptor: `PROOF = tag_d(32)`.
//! `tag_x = HMAC(key, role_x ‖ dialer_id ‖ acceptor_id ‖ nonce_d ‖ nonce_a ‖ binding)`, where
//! `binding` is the TLS session's exported keying material (32 bytes), or nothing on plain TCP.

use aws_lc_rs::hmac;

use crate::link::BINDING_LEN;

/// The first bytes on every replica connection (and a version: a new layout gets a new magic).
pub const MAGIC: [u8; 8] = *b"RILLVSR1";
pub const NONCE_LEN: usize = 32;
pub const TAG_LEN: usize = 32;
pub const HELLO_LEN: usize = 8 + 1 + 1 + NONCE_LEN;
pub const CHALLENGE_LEN: usize = HELLO_LEN + TAG_LEN;

const ACCEPTOR_ROLE: &[u8] = b"rill replica acceptor";
const DIALER_ROLE: &[u8] = b"rill replica dialer";

/// The keys one node holds: the one it signs with and, during a rotation, a retiring one it
/// still accepts. An empty `current` means authentication is off.
#[derive(Clone, Default)]
pub struct Keys {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key bytes, not even in a debug print.
        f.debug_struct("Keys").field("auth", &self.enabled()).field("rotating", &self.previous.is_some()).finish()
    }
}

impl Keys {
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Self {
        Self { current: current.to_vec(), previous: previous.filter(|key| !key.is_empty()).map(<[u8]>::to_vec) }
    }

    /// Authentication off: the handshake only checks that both ends speak it.
    pub fn none() -> Self {
        Self::default()
    }

    pub fn enabled(&self) -> bool {
        !self.current.is_empty()
    }

    fn sign(&self, role: &[u8], transcript: &[u8]) -> [u8; TAG_LEN] {
        tag(&self.current, role, transcript)
    }

    /// Whether `tag` was made with the current key or the retiring one (in constant time).
    fn accepts(&self, role: &[u8], transcript: &[u8], tag: &[u8]) -> bool {
        let check = |key: &[u8]| {
            let key = hmac::Key::new(hmac::HMAC_SHA256, key);
            hmac::verify(&key, &[role, transcript].concat(), tag).is_ok()
        };
        check(&self.current) || self.previous.as_deref().is_some_and(check)
    }
}

fn tag(key: &[u8], role: &[u8], transcript: &[u8]) -> [u8; TAG_LEN] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(hmac::sign(&key, &[role, transcript].concat()).as_ref());
    out
}

/// The TLS session's channel binding, signed with the nonces: None on plain TCP.
pub type Binding = Option<[u8; BINDING_LEN]>;

fn transcript(
    dialer: u8,
    acceptor: u8,
    nonce_d: &[u8; NONCE_LEN],
    nonce_a: &[u8; NONCE_LEN],
    binding: &Binding,
) -> Vec<u8> {
    let mut out = vec![dialer, acceptor];
    out.extend_from_slice(nonce_d);
    out.extend_from_slice(nonce_a);
    if let Some(binding) = binding {
        out.extend_from_slice(binding);
    }
    out
}

/// Why a handshake failed, for the log line that refuses the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a replica handshake (a client speaking to the replica port?)")]
    NotAReplica,
    #[error("the peer has cluster.auth {}, this node has it {}", on_off(*.peer), on_off(*.ours))]
    AuthMismatch { peer: bool, ours: bool },
    #[error(
        "the peer's proof does not verify: its key is not this cluster's (wrong shared_secret), or, over TLS, \
         it was made for another TLS session (something between the nodes relays the handshake)"
    )]
    WrongKey,
    #[error("the peer claims replica id {0}, which is not another member of this cluster")]
    UnknownReplica(u8),
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn nonce() -> [u8; NONCE_LEN] {
    rand::random()
}

/// The dialer's side, step by step: `hello`, then `answer` the acceptor's challenge.
pub struct Dialer {
    keys: Keys,
    id: u8,
    expected_acceptor: u8,
    nonce: [u8; NONCE_LEN],
    binding: Binding,
}

impl Dialer {
    pub fn new(keys: Keys, id: u8, expected_acceptor: u8, binding: Binding) -> Self {
        Self { keys, id, expected_acceptor, nonce: nonce(), binding }
    }

    pub fn hello(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8] = u8::from(self.keys.enabled());
        out[9] = self.id;
        out[10..].copy_from_slice(&self.nonce);
        out
    }

    /// Checks the acceptor's proof and returns this side's.
    pub fn answer(&self, challenge: &[u8; CHALLENGE_LEN]) -> Result<[u8; TAG_LEN], Refusal> {
        if challenge[..8] != MAGIC {
            return Err(Refusal::NotAReplica);
        }
        let peer_auth = challenge[8] == 1;
        if peer_auth != self.keys.enabled() {
            return Err(Refusal::AuthMismatch { peer: peer_auth, ours: self.keys.enabled() });
        }
        let acceptor = challenge[9];
        if acceptor != self.expected_acceptor {
            return Err(Refusal::UnknownReplica(acceptor));
        }
        let nonce_a: [u8; NONCE_LEN] = challenge[10..HELLO_LEN].try_into().expect("fixed layout");
        let transcript = transcript(self.id, acceptor, &self.nonce, &nonce_a, &self.binding);
        if !self.keys.accepts(ACCEPTOR_ROLE, &transcript, &challenge[HELLO_LEN..]) {
            return Err(Refusal::WrongKey);
        }
        Ok(self.keys.sign(DIALER_ROLE, &transcript))
    }
}

/// The acceptor's side: `challenge` a hello, then `verify` the dialer's proof.
pub struct Acceptor {
    keys: Keys,
    transcript: Vec<u8>,
    /// Which replica the verified peer is.
    pub peer: u8,
}

impl Acceptor {
    /// Answers a hello from a dialer that must be one of `replicas` other than this node,
    /// over a connection whose channel binding is `binding`.
    pub fn challenge(
        keys: Keys,
        (id, replicas): (u8, u8),
        hello: &[u8; HELLO_LEN],
        binding: &Binding,
    ) -> Result<(Self, [u8; CHALLENGE_LEN]), Refusal> {
        if hello[..8] != MAGIC {
            return Err(Refusal::NotAReplica);
        }
        let peer_auth = hello[8] == 1;
        if peer_auth != keys.enabled() {
            return Err(Refusal::AuthMismatch { peer: peer_auth, ours: keys.enabled() });
        }
        let peer = hello[9];
        if peer >= replicas || peer == id {
            return Err(Refusal::UnknownReplica(peer));
        }
        let nonce_d: [u8; NONCE_LEN] = hello[10..].try_into().expect("fixed layout");
        let nonce_a = nonce();
        let transcript = transcript(peer, id, &nonce_d, &nonce_a, binding);
        let mut out = [0u8; CHALLENGE_LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8] = u8::from(keys.enabled());
        out[9] = id;
        out[10..HELLO_LEN].copy_from_slice(&nonce_a);
        out[HELLO_LEN..].copy_from_slice(&keys.sign(ACCEPTOR_ROLE, &transcript));
        Ok((Self { keys, transcript, peer }, out))
    }

    pub fn verify(&self, proof: &[u8; TAG_LEN]) -> Result<(), Refusal> {
        match self.keys.accepts(DIALER_ROLE, &self.transcript, proof) {
            true => Ok(()),
            false => Err(Refusal::WrongKey),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const OTHER: &[u8] = b"fedcba9876543210fedcba9876543210";

    /// Runs a whole handshake between dialer 1 and acceptor 0 of a 3-node cluster.
    fn run(dialer: Keys, acceptor: Keys) -> Result<u8, (&'static str, Refusal)> {
        let d = Dialer::new(dialer, 1, 0, None);
        let (a, challenge) = Acceptor::challenge(acceptor, (0, 3), &d.hello(), &None).map_err(|r| ("acceptor", r))?;
        let proof = d.answer(&challenge).map_err(|r| ("dialer", r))?;
        a.verify(&proof).map_err(|r| ("acceptor", r))?;
        Ok(a.peer)
    }

    #[test]
    fn a_proof_made_for_another_tls_session_is_refused() {
        let (ours, relayed) = (Some([1u8; BINDING_LEN]), Some([2u8; BINDING_LEN]));
        // Both ends of one session agree on its binding: the handshake passes.
        let d = Dialer::new(Keys::new(KEY, None), 1, 0, ours);
        let (a, challenge) = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &d.hello(), &ours).unwrap();
        assert_eq!(a.verify(&d.answer(&challenge).unwrap()), Ok(()));
        // A relay holds two sessions, one towards each node: the dialer refuses the
        // acceptor's tag, and the acceptor refuses a dialer's proof made in the other session.
        let d = Dialer::new(Keys::new(KEY, None), 1, 0, relayed);
        let (a, challenge) = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &d.hello(), &ours).unwrap();
        assert_eq!(d.answer(&challenge), Err(Refusal::WrongKey));
        let nonce_a: [u8; NONCE_LEN] = challenge[10..HELLO_LEN].try_into().unwrap();
        let proof = tag(KEY, DIALER_ROLE, &transcript(1, 0, &d.nonce, &nonce_a, &relayed));
        assert_eq!(a.verify(&proof), Err(Refusal::WrongKey));
        let proof = tag(KEY, DIALER_ROLE, &transcript(1, 0, &d.nonce, &nonce_a, &ours));
        assert_eq!(a.verify(&proof), Ok(()), "the same proof made in the acceptor's session verifies");
    }

    #[test]
    fn the_same_key_gets_in_both_ways() {
        assert_eq!(run(Keys::new(KEY, None), Keys::new(KEY, None)), Ok(1));
        assert_eq!(run(Keys::none(), Keys::none()), Ok(1));
    }

    #[test]
    fn a_wrong_key_is_refused_by_the_side_that_checks_first() {
        // The dialer checks the acceptor's tag before it proves anything itself.
        assert_eq!(run(Keys::new(OTHER, None), Keys::new(KEY, None)), Err(("dialer", Refusal::WrongKey)));
        assert_eq!(run(Keys::new(KEY, None), Keys::new(OTHER, None)), Err(("dialer", Refusal::WrongKey)));
    }

    #[test]
    fn an_acceptor_refuses_a_dialer_that_fakes_its_proof() {
        let d = Dialer::new(Keys::new(OTHER, None), 1, 0, None);
        let (a, _) = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &d.hello(), &None).unwrap();
        assert_eq!(a.verify(&[0u8; TAG_LEN]), Err(Refusal::WrongKey));
        assert_eq!(a.verify(&tag(OTHER, DIALER_ROLE, &a.transcript)), Err(Refusal::WrongKey));
    }

    #[test]
    fn a_recorded_proof_does_not_open_a_new_connection() {
        let d = Dialer::new(Keys::new(KEY, None), 1, 0, None);
        let (first, challenge) = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &d.hello(), &None).unwrap();
        let proof = d.answer(&challenge).unwrap();
        assert_eq!(first.verify(&proof), Ok(()));
        // The same hello and proof replayed meet a fresh acceptor nonce.
        let (second, _) = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &d.hello(), &None).unwrap();
        assert_eq!(second.verify(&proof), Err(Refusal::WrongKey));
    }

    #[test]
    fn a_rotation_accepts_the_retiring_key_in_every_step() {
        let step1 = Keys::new(KEY, Some(OTHER)); // old key signs, new accepted
        let step2 = Keys::new(OTHER, Some(KEY)); // new key signs, old accepted
        let step3 = Keys::new(OTHER, None);
        for (a, b) in [(&step1, &step2), (&step2, &step1), (&step2, &step3), (&step3, &step2), (&step1, &step1)] {
            assert_eq!(run(a.clone(), b.clone()), Ok(1), "{a:?} with {b:?}");
        }
        // Skipping a step (old alone against new alone) is refused.
        assert!(run(Keys::new(KEY, None), step3).is_err());
    }

    #[test]
    fn clients_misconfigured_nodes_and_strangers_are_named() {
        // An Iggy client's first bytes: a length and a command code.
        let mut client = [0u8; HELLO_LEN];
        client[..8].copy_from_slice(&[8, 0, 0, 0, 1, 0, 0, 0]);
        let refused = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &client, &None).err();
        assert_eq!(refused, Some(Refusal::NotAReplica));
        assert_eq!(
            run(Keys::none(), Keys::new(KEY, None)),
            Err(("acceptor", Refusal::AuthMismatch { peer: false, ours: true }))
        );
        let stranger = Dialer::new(Keys::new(KEY, None), 7, 0, None);
        let refused = Acceptor::challenge(Keys::new(KEY, None), (0, 3), &stranger.hello(), &None).err();
        assert_eq!(refused, Some(Refusal::UnknownReplica(7)));
        assert!(!format!("{:?}", Keys::new(KEY, None)).contains("0123"), "no key in debug output");
    }
}
