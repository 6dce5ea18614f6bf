//! Each connection's packet size and send offload, from the route to its
//! peer: the kernel knows the route's MTU (`IP_MTU` on a UDP socket
//! connected to the peer), 65,536 on loopback, 1,500 or 9,000 on most links.
//!
//! - The largest packet: the route's MTU less the IP and UDP headers, at most
//!   [`QuicConfig::max_udp_payload`]; path MTU discovery climbs to it from
//!   [`QuicConfig::initial_mtu`] (a smaller hop on the way is found by
//!   discovery and its black-hole detection).
//! - UDP segmentation offload (GSO) only for packets of at most
//!   [`GSO_MAX_PACKET`]: a GSO send carries at most one UDP datagram's
//!   65,507 bytes, and quinn batches up to ten packets with no regard to it,
//!   so batches of larger packets (two of 65,000 bytes on loopback, eight of
//!   8,972 on a 9,000-byte link) are refused by the kernel, every packet of
//!   them lost until a timeout. With 1,472-byte packets (a 1,500-byte veth)
//!   GSO doubles throughput; on loopback with 65,000-byte packets, turning it
//!   off did.
//!
//! [`transport`] puts both into quinn's transport settings, the rest of
//! which are tuned for bulk transfer between a few peers.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use quinn::congestion::CubicConfig;
use quinn::{MtuDiscoveryConfig, TransportConfig, VarInt};

use super::QuicConfig;

/// The most packets quinn 0.11 hands the kernel in one GSO send
/// (`MAX_TRANSMIT_SEGMENTS` in its `connection.rs`).
const GSO_BATCH: u16 = 10;

/// The largest packet with which UDP segmentation offload is used: a batch
/// of [`GSO_BATCH`] of them must fit one UDP datagram (65,507 bytes).
pub(crate) const GSO_MAX_PACKET: u16 = 65_507 / GSO_BATCH;

/// IPv4's header (20 bytes, no options) and UDP's (8).
const IPV4_UDP_HEADERS: u32 = 28;

/// The MTU of the route from `local` to `peer`, as the kernel knows it;
/// `None` where it cannot tell (IPv6 here).
pub(crate) fn route_mtu(local: IpAddr, peer: SocketAddr) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt};
    if !peer.is_ipv4() {
        return None;
    }
    let local = match local {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(_) => std::net::Ipv4Addr::UNSPECIFIED,
    };
    let s = UdpSocket::bind((local, 0)).ok()?;
    s.connect(peer).ok()?;
    let mtu = getsockopt(&s, sockopt::IpMtu).ok()?;
    u32::try_from(mtu).ok()
}

/// The largest UDP payload towards a peer whose route has MTU `route_mtu`.
pub(crate) fn payload(config: &QuicConfig, route_mtu: Option<u32>) -> u16 {
    let route = route_mtu
        .map(|m| m.saturating_sub(IPV4_UDP_HEADERS))
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(u16::MAX);
    config.max_udp_payload.min(route).max(1200)
}

/// quinn's transport settings for the connection with `peer`.
pub(crate) fn for_peer(
    config: &QuicConfig,
    local: IpAddr,
    peer: SocketAddr,
) -> Arc<TransportConfig> {
    transport(config, payload(config, route_mtu(local, peer)))
}

/// quinn's transport settings for bulk transfer between ranks, with packets
/// of up to `payload` bytes (see the module docs).
pub(crate) fn transport(config: &QuicConfig, payload: u16) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    let window = VarInt::from_u64(config.stream_window_bytes).unwrap_or(VarInt::MAX);
    t.stream_receive_window(window)
        .receive_window(VarInt::MAX)
        .send_window(config.stream_window_bytes.saturating_mul(2))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .max_concurrent_bidi_streams(VarInt::from_u32(4))
        .keep_alive_interval(Some(config.idle_timeout / 4))
        .initial_rtt(Duration::from_millis(1));
    // A silent peer (killed: UDP says nothing) is lost after the idle timeout.
    t.max_idle_timeout(config.idle_timeout.try_into().ok());
    t.initial_mtu(config.initial_mtu.min(payload).max(1200));
    let mut mtu = MtuDiscoveryConfig::default();
    mtu.upper_bound(payload);
    t.mtu_discovery_config(Some(mtu));
    t.enable_segmentation_offload(payload <= GSO_MAX_PACKET);
    let mut cubic = CubicConfig::default();
    cubic.initial_window(config.initial_window_bytes);
    t.congestion_controller_factory(Arc::new(cubic));
    Arc::new(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A batch of the largest GSO packets fits one datagram, and a
    // 1,500-byte link keeps GSO.
    const _: () = assert!(GSO_MAX_PACKET as usize * GSO_BATCH as usize <= 65_507);
    const _: () = assert!(GSO_MAX_PACKET >= 1_472);

    #[test]
    fn the_payload_is_the_routes_less_headers_within_the_configured_bounds() {
        let c = QuicConfig::default();
        assert_eq!(payload(&c, Some(65_536)), 65_000);
        assert_eq!(payload(&c, Some(1_500)), 1_472);
        assert_eq!(payload(&c, Some(9_000)), 8_972);
        assert_eq!(payload(&c, None), 65_000);
        assert_eq!(payload(&c, Some(576)), 1_200);
    }

    #[test]
    fn loopback_reports_its_mtu() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let mtu = route_mtu(lo, SocketAddr::new(lo, 9)).expect("loopback's MTU");
        assert!(mtu >= 1_500, "{mtu}");
    }
}
