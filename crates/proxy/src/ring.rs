//! The consistent-hash ring of a cluster (the `ConsistentHash` balancer).
//!
//! Each endpoint owns points on a 64-bit circle, placed by a stable hash (xxh3) of its
//! address and the point's number, in proportion to its weight ([`POINTS_PER_WEIGHT`]
//! per unit of weight, scaled down when the ring would exceed [`MAX_POINTS`]). A key
//! belongs to the owner of the first point at or after its hash. Since the points depend
//! on the address and not on the endpoint's place in the cluster, adding or removing one
//! endpoint of N moves only the keys of the points it gains or loses, about 1/N of them;
//! every other key keeps its endpoint, and every data plane (same addresses, same hash)
//! agrees. The ring is built once per cluster version, when the snapshot takes it, never
//! per request; a lookup is a binary search.

use weir_model::{Endpoint, EndpointAddr};

/// Points per unit of endpoint weight (for weights of 1, as EndpointSlices give, each
/// endpoint's share is within a few percent of 1/N).
const POINTS_PER_WEIGHT: u64 = 160;
/// The most points of one ring (weights are scaled down beyond it).
const MAX_POINTS: u64 = 1 << 16;

/// The ring: sorted point hashes and the index of the endpoint owning each.
#[derive(Debug, Default)]
pub(crate) struct Ring {
    points: Box<[u64]>,
    owners: Box<[u32]>,
}

impl Ring {
    /// The ring of `endpoints` (weight 0: no points).
    pub(crate) fn new(endpoints: &[Endpoint]) -> Ring {
        let total: u64 = endpoints.iter().map(|e| u64::from(e.weight)).sum();
        let per_weight = |w: u32| -> u64 {
            if w == 0 {
                0
            } else if total * POINTS_PER_WEIGHT <= MAX_POINTS {
                u64::from(w) * POINTS_PER_WEIGHT
            } else {
                (u64::from(w) * MAX_POINTS / total).max(1)
            }
        };
        let mut pairs: Vec<(u64, u32)> = Vec::new();
        for (i, e) in endpoints.iter().enumerate() {
            let name = addr_bytes(&e.addr);
            let mut buf = Vec::with_capacity(name.len() + 9);
            for p in 0..per_weight(e.weight) {
                buf.clear();
                buf.extend_from_slice(&name);
                buf.push(b'#');
                buf.extend_from_slice(&p.to_le_bytes());
                pairs.push((xxhash_rust::xxh3::xxh3_64(&buf), i as u32));
            }
        }
        // Ties (vanishingly rare) go to the smaller address, so that every data plane
        // builds the same ring whatever the endpoints' order.
        pairs.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                addr_bytes(&endpoints[a.1 as usize].addr)
                    .cmp(&addr_bytes(&endpoints[b.1 as usize].addr))
            })
        });
        pairs.dedup_by_key(|p| p.0);
        Ring {
            points: pairs.iter().map(|p| p.0).collect(),
            owners: pairs.iter().map(|p| p.1).collect(),
        }
    }

    /// Whether the ring has no points.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Endpoint indexes from the owner of `key` on, walking the ring clockwise (at most
    /// one full turn; an endpoint appears once per point it owns).
    pub(crate) fn walk(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let n = self.points.len();
        let start = self.points.partition_point(|p| *p < key);
        (0..n).map(move |k| self.owners[(start + k) % n] as usize)
    }
}

/// A stable byte form of an address (the same on every data plane).
fn addr_bytes(addr: &EndpointAddr) -> Vec<u8> {
    addr.to_string().into_bytes()
}

/// The ring position of a key's bytes (the same on every data plane).
pub(crate) fn key_hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(n: u8) -> Vec<Endpoint> {
        (0..n)
            .map(|i| Endpoint {
                addr: EndpointAddr::Socket(([10, 1, 0, i], 8080).into()),
                weight: 1,
            })
            .collect()
    }

    fn owner(ring: &Ring, eps: &[Endpoint], key: u64) -> EndpointAddr {
        eps[ring.walk(key).next().unwrap()].addr.clone()
    }

    #[test]
    fn removing_one_of_n_moves_only_its_keys() {
        let all = endpoints(10);
        let ring = Ring::new(&all);
        let mut fewer = all.clone();
        let gone = fewer.remove(3).addr;
        let smaller = Ring::new(&fewer);
        let keys = 20_000u32;
        let mut moved = 0;
        let mut share = [0u32; 10];
        for k in 0..keys {
            let key = key_hash(&k.to_le_bytes());
            let before = owner(&ring, &all, key);
            let after = owner(&smaller, &fewer, key);
            share[all.iter().position(|e| e.addr == before).unwrap()] += 1;
            if before != after {
                assert_eq!(
                    before, gone,
                    "key {k} moved between two endpoints that stayed"
                );
                moved += 1;
            }
        }
        // About 1/10 of the keys were the removed endpoint's, and only those moved.
        let fraction = f64::from(moved) / f64::from(keys);
        assert!((0.07..0.13).contains(&fraction), "{fraction}");
        for s in share {
            let f = f64::from(s) / f64::from(keys);
            assert!((0.07..0.13).contains(&f), "{share:?}");
        }
        // Adding it back restores every key; the endpoints' order does not matter.
        let mut reordered = all.clone();
        reordered.reverse();
        let again = Ring::new(&reordered);
        for k in 0..1000u32 {
            let key = key_hash(&k.to_le_bytes());
            assert_eq!(owner(&again, &reordered, key), owner(&ring, &all, key));
        }
    }

    #[test]
    fn weights_set_the_share_and_zero_has_none() {
        let mut eps = endpoints(3);
        eps[0].weight = 2;
        eps[2].weight = 0;
        let ring = Ring::new(&eps);
        let mut share = [0u32; 3];
        for k in 0..30_000u32 {
            share[ring.walk(key_hash(&k.to_le_bytes())).next().unwrap()] += 1;
        }
        assert_eq!(share[2], 0);
        let ratio = f64::from(share[0]) / f64::from(share[1]);
        assert!((1.6..2.5).contains(&ratio), "{share:?}");
        assert!(Ring::new(&[]).is_empty());
        // Huge weights are scaled to the cap.
        let mut big = endpoints(2);
        big[0].weight = 1_000_000;
        big[1].weight = 1_000_000;
        let ring = Ring::new(&big);
        assert!(ring.points.len() as u64 <= MAX_POINTS);
        assert!(!ring.is_empty());
    }
}
