//! Who makes each pair's link with connections on demand: one link a pair,
//! even when both ranks need it at once.
//!
//! A send to a peer with no link dials it unless a dial or an accept of
//! that peer is already under way (then it waits for that link). An
//! accepted hello from a peer this rank is itself dialing is the crossing
//! of two dials: the higher rank's dial carries the pair, so the higher
//! rank refuses the lower's hello ([`Refusal::Crossed`]) and the lower rank
//! accepts the higher's, then waits for it after its own dial is refused.
//!
//! ```text
//!  Idle ──send──> Dialing ──link──> Up
//!    └──hello──> Accepting ──link──> Up
//!  Dialing + hello from a higher rank: accepted (its link makes Up)
//!  Dialing + hello from a lower rank, Accepting, Up: refused as crossed
//! ```

use super::handshake::Refusal;
use crate::tag::Rank;

/// Where a pair's link stands, seen from one end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pair {
    Idle,
    Dialing,
    Accepting,
    Up,
}

/// What a send to a peer with no link does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnSend {
    /// Dial the peer.
    Dial,
    /// Wait: a dial or an accept of the peer is under way.
    Wait,
}

/// One rank's view of its pairs.
#[derive(Debug)]
pub(crate) struct Pairing {
    me: Rank,
    pairs: Vec<Pair>,
}

impl Pairing {
    pub(crate) fn new(me: Rank, size: usize) -> Self {
        Self {
            me,
            pairs: vec![Pair::Idle; size],
        }
    }

    fn at(&mut self, peer: Rank) -> Option<&mut Pair> {
        self.pairs.get_mut(peer)
    }

    /// A send to `peer` found no link.
    pub(crate) fn on_send(&mut self, peer: Rank) -> OnSend {
        match self.at(peer) {
            Some(p @ Pair::Idle) => {
                *p = Pair::Dialing;
                OnSend::Dial
            }
            _ => OnSend::Wait,
        }
    }

    /// `peer`'s proven hello arrived: accept it, or refuse it as crossed.
    pub(crate) fn on_hello(&mut self, peer: Rank) -> Result<(), Refusal> {
        let me = self.me;
        match self.at(peer) {
            Some(p @ Pair::Idle) => {
                *p = Pair::Accepting;
                Ok(())
            }
            Some(Pair::Dialing) if peer > me => Ok(()),
            _ => Err(Refusal::Crossed),
        }
    }

    /// `peer`'s link is made (dialed or accepted).
    pub(crate) fn on_link(&mut self, peer: Rank) {
        if let Some(p) = self.at(peer) {
            *p = Pair::Up;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_dials_once_and_later_sends_wait() {
        let mut p = Pairing::new(1, 4);
        assert_eq!(p.on_send(2), OnSend::Dial);
        assert_eq!(p.on_send(2), OnSend::Wait);
        p.on_link(2);
        assert_eq!(p.on_send(2), OnSend::Wait, "a link is up: nothing to dial");
    }

    #[test]
    fn an_accepted_peer_is_not_dialed() {
        let mut p = Pairing::new(1, 4);
        assert_eq!(p.on_hello(0), Ok(()));
        assert_eq!(p.on_send(0), OnSend::Wait);
        assert_eq!(p.on_hello(0), Err(Refusal::Crossed), "a second hello");
        p.on_link(0);
        assert_eq!(p.on_send(0), OnSend::Wait);
    }

    /// Both ends dial at once: the higher refuses the lower's hello, the
    /// lower accepts the higher's: one link.
    #[test]
    fn crossed_dials_leave_the_higher_ranks_link() {
        let (mut low, mut high) = (Pairing::new(1, 4), Pairing::new(3, 4));
        assert_eq!(low.on_send(3), OnSend::Dial);
        assert_eq!(high.on_send(1), OnSend::Dial);
        assert_eq!(high.on_hello(1), Err(Refusal::Crossed));
        assert_eq!(low.on_hello(3), Ok(()));
        low.on_link(3);
        high.on_link(1);
        assert_eq!(low.on_send(3), OnSend::Wait);
        assert_eq!(high.on_send(1), OnSend::Wait);
    }

    #[test]
    fn a_hello_after_the_link_is_refused_and_ranks_outside_are_ignored() {
        let mut p = Pairing::new(0, 2);
        assert_eq!(p.on_send(1), OnSend::Dial);
        p.on_link(1);
        assert_eq!(p.on_hello(1), Err(Refusal::Crossed));
        assert_eq!(p.on_send(7), OnSend::Wait);
        assert_eq!(p.on_hello(7), Err(Refusal::Crossed));
        p.on_link(7);
    }
}
