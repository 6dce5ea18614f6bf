//! Where the coordinator listens and which address each host is told to dial.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

/// The host part of `[user@]host`.
fn bare(host: &str) -> &str {
    host.rsplit_once('@').map_or(host, |(_, h)| h)
}

/// Whether `host` names this machine (its workers are started directly).
pub fn is_this_machine(host: &str) -> bool {
    let host = bare(host);
    matches!(host, "localhost" | "127.0.0.1" | "::1")
        || nix::unistd::gethostname().is_ok_and(|h| h.to_str() == Some(host))
}

#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("network interface {0} has no IP address (or does not exist)")]
    NoInterface(String),
    #[error("cannot list network interfaces: {0}")]
    Interfaces(nix::Error),
    #[error("cannot resolve host {host}: {why}")]
    Resolve { host: String, why: String },
}

/// The first address of interface `name`, IPv4 preferred.
pub fn interface_address(name: &str) -> Result<IpAddr, AddressError> {
    let addrs: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .map_err(AddressError::Interfaces)?
        .filter(|a| a.interface_name == name)
        .filter_map(|a| {
            let a = a.address?;
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| AddressError::NoInterface(name.to_owned()))
}

/// The address this machine sends from to reach `host`: a route lookup
/// (connecting a UDP socket sends nothing).
pub fn source_address_towards(host: &str) -> Result<IpAddr, AddressError> {
    use std::net::ToSocketAddrs;
    let host = bare(host).trim_start_matches('[').trim_end_matches(']');
    let fail = |why: String| AddressError::Resolve {
        host: host.to_owned(),
        why,
    };
    let target = (host, 9)
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("no address".into()))?;
    let any: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(any).map_err(|e| fail(e.to_string()))?;
    sock.connect(target)
        .map_err(|e| fail(format!("no route: {e}")))?;
    Ok(sock.local_addr().map_err(|e| fail(e.to_string()))?.ip())
}

/// The first name of a `--network-interface` list (`eth0,eth1`).
pub fn first_interface(list: Option<&str>) -> Option<&str> {
    list.and_then(|i| i.split(',').map(str::trim).find(|s| !s.is_empty()))
}

/// Where the coordinator binds and what each host dials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlAddresses {
    pub bind: IpAddr,
    /// The address to dial, per host of the job (same order).
    pub advertised: Vec<IpAddr>,
}

/// Loopback when every host is this machine; the address of
/// `--network-interface` when given; otherwise every interface, each remote
/// host told the address this machine reaches it from, and this machine's
/// own workers the address it reaches the first remote host from: they bind
/// their data plane on the address they dial the coordinator at, and remote
/// peers must reach it.
pub fn control_addresses(
    hosts: &[&str],
    interface: Option<&str>,
) -> Result<ControlAddresses, AddressError> {
    if let Some(name) = first_interface(interface) {
        let ip = interface_address(name)?;
        return Ok(ControlAddresses {
            bind: ip,
            advertised: vec![ip; hosts.len()],
        });
    }
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Some(first_remote) = hosts.iter().find(|h| !is_this_machine(h)) else {
        return Ok(ControlAddresses {
            bind: loopback,
            advertised: vec![loopback; hosts.len()],
        });
    };
    let own = source_address_towards(first_remote)?;
    let advertised = hosts
        .iter()
        .map(|h| {
            if is_this_machine(h) {
                Ok(own)
            } else {
                source_address_towards(h)
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(ControlAddresses {
        bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        advertised,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_jobs_stay_on_loopback() {
        let a = control_addresses(&["localhost", "127.0.0.1"], None).unwrap();
        assert_eq!(a.bind, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(a.advertised.len(), 2);
    }

    #[test]
    fn remote_hosts_get_the_route_source() {
        let a = control_addresses(&["localhost", "root@127.0.0.2"], None).unwrap();
        assert!(a.bind.is_unspecified());
        assert_eq!(a.advertised, vec![IpAddr::V4(Ipv4Addr::LOCALHOST); 2]);
    }

    #[test]
    fn an_interface_pins_the_address() {
        let a = control_addresses(&["node1"], Some("lo")).unwrap();
        assert_eq!(a.bind, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(matches!(
            control_addresses(&["node1"], Some("nosuch0")),
            Err(AddressError::NoInterface(_))
        ));
    }

    #[test]
    fn unresolvable_hosts_are_named() {
        let e = control_addresses(&["no-such-host.invalid"], None).unwrap_err();
        assert!(e.to_string().contains("no-such-host.invalid"), "{e}");
    }
}
