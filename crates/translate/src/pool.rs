//! Per-Gateway addresses from a pool, for Gateways that name no address.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 range (CIDR) from which each Gateway without `spec.addresses` gets its own
/// address, so that several Gateways can listen on the same port (e.g. one loopback
/// address per Gateway from `127.10.0.0/16`).
///
/// The address is a pure function of the Gateway's namespace and name (a hash into the
/// range, network and broadcast addresses excluded): it is stable across restarts and
/// independent of the order objects arrive in. Two Gateways whose names hash to the same
/// address and share a port conflict like any two Gateways on the same socket (the older
/// one keeps it); a larger range makes that rarer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddressPool {
    base: u32,
    prefix_len: u8,
}

/// A pool that is not an IPv4 CIDR with at least 4 addresses.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid address pool {0:?}: expected an IPv4 CIDR such as 127.10.0.0/16 (prefix length 8..=30)"
)]
pub struct InvalidAddressPool(String);

impl FromStr for AddressPool {
    type Err = InvalidAddressPool;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidAddressPool(s.to_string());
        let (ip, len) = s.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix_len: u8 = len.parse().map_err(|_| bad())?;
        if !(8..=30).contains(&prefix_len) {
            return Err(bad());
        }
        let mask = u32::MAX << (32 - prefix_len);
        Ok(AddressPool {
            base: u32::from(ip) & mask,
            prefix_len,
        })
    }
}

impl fmt::Display for AddressPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix_len)
    }
}

impl AddressPool {
    /// Whether `ip` is inside the range.
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        match ip {
            std::net::IpAddr::V4(v4) => {
                let mask = u32::MAX << (32 - self.prefix_len);
                u32::from(v4) & mask == self.base
            }
            std::net::IpAddr::V6(_) => false,
        }
    }

    /// The address of Gateway `namespace/name`: never the range's first or last address.
    pub fn address_for(&self, namespace: &str, name: &str) -> Ipv4Addr {
        // FNV-1a: stable across builds and platforms (std's hasher is not guaranteed to be).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in namespace.bytes().chain([b'/']).chain(name.bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let hosts = (1u64 << (32 - self.prefix_len)) - 2;
        Ipv4Addr::from(self.base + 1 + (h % hosts) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_stays_inside_the_range() {
        let p: AddressPool = "127.10.3.4/16".parse().unwrap();
        assert_eq!(p.to_string(), "127.10.0.0/16");
        for i in 0..1000 {
            let a = p.address_for("ns", &format!("gw-{i}"));
            let o = a.octets();
            assert_eq!((o[0], o[1]), (127, 10));
            assert_ne!((o[2], o[3]), (0, 0));
            assert_ne!((o[2], o[3]), (255, 255));
        }
        let small: AddressPool = "10.0.0.0/30".parse().unwrap();
        for i in 0..50 {
            let a = small.address_for("a", &i.to_string());
            assert!(a == Ipv4Addr::new(10, 0, 0, 1) || a == Ipv4Addr::new(10, 0, 0, 2));
        }
    }

    #[test]
    fn stable_and_name_sensitive() {
        let p: AddressPool = "127.10.0.0/16".parse().unwrap();
        assert_eq!(p.address_for("a", "b"), p.address_for("a", "b"));
        assert_ne!(p.address_for("a", "bc"), p.address_for("ab", "c"));
    }

    #[test]
    fn contains() {
        let p: AddressPool = "127.10.0.0/16".parse().unwrap();
        assert!(p.contains("127.10.255.1".parse().unwrap()));
        assert!(!p.contains("127.11.0.1".parse().unwrap()));
        assert!(!p.contains("::1".parse().unwrap()));
    }

    #[test]
    fn rejects_bad_pools() {
        for s in [
            "127.10.0.0",
            "127.10.0.0/31",
            "127.10.0.0/4",
            "::1/64",
            "x/16",
        ] {
            assert!(s.parse::<AddressPool>().is_err(), "{s}");
        }
    }
}
