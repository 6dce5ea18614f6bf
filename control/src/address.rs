//! Where a worker's data plane can be reached: a [`PeerAddress`] lists one
//! [`DataEndpoint`] per transport the worker offers (TCP, or the in-process
//! fabric of workers that share one process; a QUIC port or a shared-memory
//! segment name later). The coordinator stores it per slot
//! and copies it into every rank's [`crate::Assignment::peers`] unread.
//!
//! On the wire each endpoint is a kind name and an address text, so that a
//! kind this build does not know is a decoding error that names it (and the
//! frame is refused with that reason), never a panic or a misread.

use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One way to reach a worker's data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "WireEndpoint")]
#[non_exhaustive]
pub enum DataEndpoint {
    /// The TCP mesh's listening socket.
    Tcp(SocketAddr),
    /// An endpoint of the in-memory fabric (`collectives::MemAddress`):
    /// meaningful only to workers in the same process as the one that
    /// published it (tests, an in-process cluster).
    Mem(u64),
    /// The QUIC data plane's UDP socket, and the public half of the TLS key
    /// the worker made, for the coordinator to certify.
    Quic {
        addr: SocketAddr,
        key: LeafPublicKey,
    },
    /// The TLS-over-TCP data plane's listening socket, and the public half
    /// of the worker's TLS key, as for QUIC.
    Tls {
        addr: SocketAddr,
        key: LeafPublicKey,
    },
    /// Not a way in but the process behind the others: a number it drew
    /// when it started, the same in every generation it joins. A peer that
    /// held a link to it in the last generation may carry that link on
    /// instead of dialing anew (`collectives`' `LinkCarry`).
    Process(u64),
}

/// A worker's TLS public key: the 32 bytes of an Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeafPublicKey(pub [u8; 32]);

impl std::fmt::Debug for LeafPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeafPublicKey(")?;
        hex_into(f, &self.0[..4])?;
        f.write_str(")")
    }
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Every data-plane endpoint of one worker.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeerAddress {
    /// Shared, not copied, by every clone: an address is handed to many
    /// (each assignment of a large generation carries some thirty, each
    /// shared by thirty assignments).
    pub endpoints: Arc<[DataEndpoint]>,
}

impl PeerAddress {
    /// A worker reachable over TCP at `addr` only.
    pub fn tcp(addr: SocketAddr) -> Self {
        Self {
            endpoints: Arc::new([DataEndpoint::Tcp(addr)]),
        }
    }

    /// A worker reachable over QUIC at `addr` only, whose TLS key is `key`.
    pub fn quic(addr: SocketAddr, key: LeafPublicKey) -> Self {
        Self {
            endpoints: Arc::new([DataEndpoint::Quic { addr, key }]),
        }
    }

    /// The QUIC endpoint and its key, if the worker offers one.
    pub fn quic_addr(&self) -> Option<(SocketAddr, LeafPublicKey)> {
        self.endpoints.iter().find_map(|e| match e {
            DataEndpoint::Quic { addr, key } => Some((*addr, *key)),
            _ => None,
        })
    }

    /// A worker reachable over TLS on TCP at `addr` only, whose TLS key is `key`.
    pub fn tls(addr: SocketAddr, key: LeafPublicKey) -> Self {
        Self {
            endpoints: Arc::new([DataEndpoint::Tls { addr, key }]),
        }
    }

    /// The TLS-over-TCP endpoint and its key, if the worker offers one.
    pub fn tls_addr(&self) -> Option<(SocketAddr, LeafPublicKey)> {
        self.endpoints.iter().find_map(|e| match e {
            DataEndpoint::Tls { addr, key } => Some((*addr, *key)),
            _ => None,
        })
    }

    /// The key of the first endpoint that needs a certificate (QUIC's or
    /// TLS's), if the worker offers one.
    pub fn leaf_key(&self) -> Option<LeafPublicKey> {
        self.endpoints.iter().find_map(|e| match e {
            DataEndpoint::Quic { key, .. } | DataEndpoint::Tls { key, .. } => Some(*key),
            _ => None,
        })
    }

    /// A worker reachable on the in-memory fabric at `address` only.
    pub fn mem(address: u64) -> Self {
        Self {
            endpoints: Arc::new([DataEndpoint::Mem(address)]),
        }
    }

    /// The TCP endpoint, if the worker offers one.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.endpoints.iter().find_map(|e| match e {
            DataEndpoint::Tcp(a) => Some(*a),
            _ => None,
        })
    }

    /// The process behind this address ([`DataEndpoint::Process`]), if
    /// the worker says.
    pub fn process(&self) -> Option<u64> {
        self.endpoints.iter().find_map(|e| match e {
            DataEndpoint::Process(p) => Some(*p),
            _ => None,
        })
    }

    /// This address with the process behind it named.
    pub fn with_process(self, process: u64) -> Self {
        let others = self
            .endpoints
            .iter()
            .filter(|e| !matches!(e, DataEndpoint::Process(_)));
        Self {
            endpoints: others
                .copied()
                .chain([DataEndpoint::Process(process)])
                .collect(),
        }
    }

    /// The in-memory fabric endpoint, if the worker offers one.
    pub fn mem_addr(&self) -> Option<u64> {
        self.endpoints.iter().find_map(|e| match e {
            DataEndpoint::Mem(a) => Some(*a),
            _ => None,
        })
    }
}

impl From<SocketAddr> for PeerAddress {
    fn from(addr: SocketAddr) -> Self {
        Self::tcp(addr)
    }
}

/// Why a data-plane address could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error(
        "unknown data-plane address kind {kind:?} (this build knows: tcp, quic, tls, mem, process)"
    )]
    UnknownKind { kind: String },
    #[error("malformed {kind} data-plane address {address:?}")]
    Malformed { kind: &'static str, address: String },
}

/// An endpoint as it travels: its kind's name and its address as text
/// ([`DataEndpoint`]'s `Serialize` writes the same).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct WireEndpoint {
    kind: String,
    address: String,
}

const TCP: &str = "tcp";
const MEM: &str = "mem";
const QUIC: &str = "quic";
const TLS: &str = "tls";
const PROCESS: &str = "process";

impl DataEndpoint {
    /// Writes the address text of the endpoint to `out`; its kind's name.
    fn wire(&self, out: &mut impl std::fmt::Write) -> Result<&'static str, std::fmt::Error> {
        Ok(match self {
            DataEndpoint::Tcp(a) => {
                write!(out, "{a}")?;
                TCP
            }
            DataEndpoint::Mem(a) => {
                write!(out, "{a}")?;
                MEM
            }
            // `ip:port/key`, the key in hex.
            DataEndpoint::Quic { addr, key } => {
                write!(out, "{addr}/")?;
                hex_into(out, &key.0)?;
                QUIC
            }
            DataEndpoint::Tls { addr, key } => {
                write!(out, "{addr}/")?;
                hex_into(out, &key.0)?;
                TLS
            }
            DataEndpoint::Process(p) => {
                write!(out, "{p:016x}")?;
                PROCESS
            }
        })
    }
}

/// Written as a `WireEndpoint` would be, its address formatted on the
/// stack: a reset at thousands of ranks serializes hundreds of thousands
/// of endpoints, and their strings (and a key's 32 hex digits, one string
/// each) had been a tenth of the coordinator's CPU in it.
impl Serialize for DataEndpoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeStruct};
        let mut address = Text::default();
        let kind = self
            .wire(&mut address)
            .map_err(|_| S::Error::custom("a data-plane address too long to write"))?;
        let mut w = s.serialize_struct("WireEndpoint", 2)?;
        w.serialize_field("kind", kind)?;
        w.serialize_field("address", address.as_str())?;
        w.end()
    }
}

fn hex_into(out: &mut impl std::fmt::Write, bytes: &[u8]) -> std::fmt::Result {
    bytes.iter().try_for_each(|b| write!(out, "{b:02x}"))
}

/// Text on the stack, as long as the longest address (a QUIC or TLS
/// endpoint's `[IPv6%scope]:port/` and 64 hex digits, under 140 bytes).
struct Text {
    bytes: [u8; 160],
    len: usize,
}

impl Default for Text {
    fn default() -> Self {
        Text {
            bytes: [0; 160],
            len: 0,
        }
    }
}

impl Text {
    fn as_str(&self) -> &str {
        let written = self.bytes.get(..self.len).unwrap_or_default();
        // Only whole `str`s were written: always UTF-8.
        std::str::from_utf8(written).unwrap_or_default()
    }
}

impl std::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl TryFrom<WireEndpoint> for DataEndpoint {
    type Error = AddressError;

    fn try_from(w: WireEndpoint) -> Result<Self, AddressError> {
        match w.kind.as_str() {
            TCP => w
                .address
                .parse()
                .map(DataEndpoint::Tcp)
                .map_err(|_| AddressError::Malformed {
                    kind: TCP,
                    address: w.address,
                }),
            MEM => w
                .address
                .parse()
                .map(DataEndpoint::Mem)
                .map_err(|_| AddressError::Malformed {
                    kind: MEM,
                    address: w.address,
                }),
            QUIC => keyed(QUIC, w.address).map(|(addr, key)| DataEndpoint::Quic { addr, key }),
            TLS => keyed(TLS, w.address).map(|(addr, key)| DataEndpoint::Tls { addr, key }),
            PROCESS => Some(&w.address)
                .filter(|a| a.len() == 16 && a.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|a| u64::from_str_radix(a, 16).ok())
                .map(DataEndpoint::Process)
                .ok_or(AddressError::Malformed {
                    kind: PROCESS,
                    address: w.address,
                }),
            _ => Err(AddressError::UnknownKind { kind: w.kind }),
        }
    }
}

/// A `kind` address of the form `ip:port/key`, the key in hex.
fn keyed(kind: &'static str, address: String) -> Result<(SocketAddr, LeafPublicKey), AddressError> {
    let parsed = address
        .split_once('/')
        .and_then(|(a, k)| Some((a.parse().ok()?, LeafPublicKey(unhex(k)?))));
    parsed.ok_or(AddressError::Malformed { kind, address })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(v, bincode::config::standard()).unwrap()
    }

    fn decode(bytes: &[u8]) -> Result<PeerAddress, bincode::error::DecodeError> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map(|(a, _)| a)
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The endpoint written on the stack is, byte for byte, what a
    /// `WireEndpoint` of its kind and address text was and is read back as.
    #[test]
    fn every_kind_is_written_as_its_wire_form_and_read_back() {
        let key = LeafPublicKey(std::array::from_fn(|i| (i * 37) as u8));
        let v6 = "[fe80::1:2:3:4%4294967295]:65535".parse::<SocketAddr>();
        let v6 = v6.unwrap_or_else(|_| {
            "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"
                .parse()
                .unwrap()
        });
        let cases = [
            (
                DataEndpoint::Tcp("10.1.2.3:4567".parse().unwrap()),
                TCP,
                "10.1.2.3:4567".to_owned(),
            ),
            (DataEndpoint::Mem(42), MEM, "42".to_owned()),
            (
                DataEndpoint::Quic { addr: v6, key },
                QUIC,
                format!("{v6}/{}", hex(&key.0)),
            ),
            (
                DataEndpoint::Tls { addr: v6, key },
                TLS,
                format!("{v6}/{}", hex(&key.0)),
            ),
            (
                DataEndpoint::Process(0xfeed),
                PROCESS,
                "000000000000feed".to_owned(),
            ),
        ];
        for (endpoint, kind, address) in cases {
            let wire = WireEndpoint {
                kind: kind.to_owned(),
                address,
            };
            assert_eq!(encode(&endpoint), encode(&wire), "{endpoint:?}");
            let (back, _): (DataEndpoint, usize) =
                bincode::serde::decode_from_slice(&encode(&endpoint), bincode::config::standard())
                    .unwrap();
            assert_eq!(back, endpoint);
        }
    }

    #[test]
    fn a_tcp_address_round_trips() {
        let a = PeerAddress::tcp("10.1.2.3:4567".parse().unwrap());
        let back = decode(&encode(&a)).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.tcp_addr(), Some("10.1.2.3:4567".parse().unwrap()));
        let v6 = PeerAddress::tcp("[::1]:9".parse().unwrap());
        assert_eq!(decode(&encode(&v6)).unwrap(), v6);
    }

    #[test]
    fn the_process_behind_an_address_round_trips_once_and_garbage_is_refused() {
        let a = PeerAddress::tcp("127.0.0.1:9".parse().unwrap())
            .with_process(0xfeed)
            .with_process(u64::MAX);
        assert_eq!(a.endpoints.len(), 2, "one process, the last named");
        let back = decode(&encode(&a)).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.process(), Some(u64::MAX));
        assert_eq!(PeerAddress::mem(1).process(), None);
        for garbage in [
            "",
            "12",
            "-000000000000001",
            "zzzzzzzzzzzzzzzz",
            "00000000000000001",
            "+00000000000000f",
        ] {
            let bad = vec![WireEndpoint {
                kind: PROCESS.into(),
                address: garbage.into(),
            }];
            assert!(decode(&encode(&bad)).is_err(), "{garbage:?} accepted");
        }
    }

    #[test]
    fn a_mem_address_round_trips_and_is_no_tcp_address() {
        let a = PeerAddress::mem(7);
        let back = decode(&encode(&a)).unwrap();
        assert_eq!((back.mem_addr(), back.tcp_addr()), (Some(7), None));
        let bad = vec![WireEndpoint {
            kind: MEM.into(),
            address: "-1".into(),
        }];
        assert!(decode(&encode(&bad)).is_err());
    }

    #[test]
    fn quic_and_tls_addresses_round_trip_with_their_keys() {
        let key = LeafPublicKey([0xab; 32]);
        let at: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        let back = decode(&encode(&PeerAddress::quic(at, key))).unwrap();
        assert_eq!(back.quic_addr(), Some((at, key)));
        assert_eq!((back.tcp_addr(), back.tls_addr()), (None, None));
        assert_eq!(back.leaf_key(), Some(key));
        let back = decode(&encode(&PeerAddress::tls(at, key))).unwrap();
        assert_eq!(back.tls_addr(), Some((at, key)));
        assert_eq!((back.tcp_addr(), back.quic_addr()), (None, None));
        assert_eq!(back.leaf_key(), Some(key));
        assert_eq!(PeerAddress::tcp(at).leaf_key(), None);
        for kind in [QUIC, TLS] {
            for bad in ["10.0.0.1:7000", "10.0.0.1:7000/abc", "nowhere/00"] {
                let w = vec![WireEndpoint {
                    kind: kind.into(),
                    address: bad.into(),
                }];
                assert!(decode(&encode(&w)).is_err(), "{kind} {bad}");
            }
        }
    }

    #[test]
    fn an_unknown_kind_is_an_error_that_names_it() {
        let future = vec![WireEndpoint {
            kind: "shm".into(),
            address: "10.0.0.1:7000".into(),
        }];
        let e = decode(&encode(&future)).unwrap_err();
        let bincode::error::DecodeError::OtherString(text) = e else {
            panic!("{e:?}");
        };
        assert_eq!(
            text,
            AddressError::UnknownKind { kind: "shm".into() }.to_string()
        );
        assert!(
            text.contains("unknown data-plane address kind \"shm\""),
            "{text}"
        );
    }

    #[test]
    fn a_malformed_address_is_an_error() {
        let bad = vec![WireEndpoint {
            kind: TCP.into(),
            address: "not an address".into(),
        }];
        let e = decode(&encode(&bad)).unwrap_err();
        assert!(
            matches!(&e, bincode::error::DecodeError::OtherString(t) if t.contains("malformed tcp data-plane address")),
            "{e:?}"
        );
    }
}
