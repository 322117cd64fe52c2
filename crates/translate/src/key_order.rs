//! Putting many `(ObjectKey, value)` pairs in key order, keeping the last value set for
//! each key: the statuses a translation emits.
//!
//! At the end of a first load of 1,000,000 TLS domains this was a stable sort of about
//! 2,000,000 pairs by [`ObjectKey`]'s order: every comparison followed three pointers
//! (the key's parts, its namespace, its name) to memory nowhere in the caches and
//! compared strings with `memcmp`, 1–1.5 s on the main thread with every other thread
//! done. Here each pair gets a 16-byte sort key of plain integers, held in the vector
//! sorted: the kind, the namespace's rank among the batch's namespaces and the name's
//! first 8 bytes. Only names equal in those bytes are compared in full. The pairs are
//! then moved into that order in place.

use std::cmp::Ordering;

use weir_api::ObjectKey;

/// Below this many pairs the keys' own order is used directly.
const DIRECT: usize = 4096;

/// Namespace ranks fit below the kind (and [`KEEP`]) in [`Entry::high`].
const NAMESPACE_BITS: u32 = 24;

/// Sorts `pairs` by key and keeps, of the pairs with equal keys, only the one that was
/// last in `pairs` (the same result as a stable sort followed by keeping each run's last).
pub(crate) fn sort_keep_last<T>(pairs: &mut Vec<(ObjectKey, T)>) {
    let ranks = (pairs.len() >= DIRECT)
        .then(|| namespace_ranks(pairs))
        .filter(|r| r.len() < 1 << NAMESPACE_BITS);
    let (Some(ranks), Ok(_)) = (ranks, u32::try_from(pairs.len())) else {
        // Stable: of a key set several times, the last set is last in its run.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        keep_last_of_runs(pairs);
        return;
    };
    let mut order: Vec<Entry> = (0u32..)
        .zip(pairs.iter())
        .map(|(at, (key, _))| Entry {
            high: kind_bits(key) | ranks[&*key.namespace],
            name: prefix(&key.name),
            at,
        })
        .collect();
    drop(ranks);
    // Unstable, but the position breaks every tie: the order is that of a stable sort.
    order.sort_unstable_by(|a, b| {
        (a.high, a.name)
            .cmp(&(b.high, b.name))
            .then_with(|| full_name(pairs, a, b))
            .then(a.at.cmp(&b.at))
    });
    // Of a run of equal keys the last is kept: marked in its entry, so that the order
    // itself is the permutation applied below (one 16-byte entry per pair at the peak).
    for i in 0..order.len() {
        if !order
            .get(i + 1)
            .is_some_and(|n| same_key(pairs, &order[i], n))
        {
            order[i].high |= KEEP;
        }
    }
    permute(pairs, &mut order);
    let mut kept = order.iter().map(|e| e.high & KEEP != 0);
    pairs.retain(|_| kept.next().unwrap_or(false));
}

/// The bit of [`Entry::high`] that marks an entry kept (above the kind's bits).
const KEEP: u32 = 1 << 31;

/// The key's kind in [`Entry::high`]: its place in `Kind`'s order (a field-less enum's
/// order is its discriminants'), in the 7 bits below [`KEEP`].
fn kind_bits(key: &ObjectKey) -> u32 {
    let kind = u32::from(key.kind as u8);
    assert!(
        kind < KEEP >> NAMESPACE_BITS,
        "a kind's discriminant above 127"
    );
    kind << NAMESPACE_BITS
}

/// One pair's sort key and position.
struct Entry {
    /// The kind, then the namespace's rank.
    high: u32,
    at: u32,
    /// The name's first 8 bytes, big-endian, zero-padded: for names that differ within
    /// them, integer order is byte order (a name that ends first is padded with zeros,
    /// which sort before any other byte; a NUL within a name ties and is compared in
    /// full).
    name: u64,
}

fn prefix(name: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = name.len().min(8);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    u64::from_be_bytes(b)
}

/// The full names' order, for entries whose kind, namespace and prefix are equal.
fn full_name<T>(pairs: &[(ObjectKey, T)], a: &Entry, b: &Entry) -> Ordering {
    pairs[a.at as usize]
        .0
        .name
        .cmp(&pairs[b.at as usize].0.name)
}

fn same_key<T>(pairs: &[(ObjectKey, T)], a: &Entry, b: &Entry) -> bool {
    (a.high, a.name) == (b.high, b.name)
        && pairs[a.at as usize].0.name == pairs[b.at as usize].0.name
}

/// Moves `v[order[i].at]` to position `i` for every `i`, in place (the positions are a
/// permutation of `0..v.len()`; they are used up).
fn permute<T>(v: &mut [T], order: &mut [Entry]) {
    const DONE: u32 = u32::MAX;
    for start in 0..v.len() {
        if order[start].at == DONE {
            continue;
        }
        // Along the cycle through `start`: `v[start]`'s value moves forward at each swap
        // until the position that wants it.
        let mut at = start;
        loop {
            let from = order[at].at as usize;
            order[at].at = DONE;
            if from == start {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

/// Each distinct namespace's rank in string order.
fn namespace_ranks<T>(pairs: &[(ObjectKey, T)]) -> foldhash::HashMap<&str, u32> {
    let mut distinct: Vec<&str> = pairs
        .iter()
        .map(|(k, _)| &*k.namespace)
        .collect::<foldhash::HashSet<&str>>()
        .into_iter()
        .collect();
    distinct.sort_unstable();
    (0u32..)
        .zip(distinct)
        .map(|(rank, ns)| (ns, rank))
        .collect()
}

/// Keeps the last pair of every run of equal keys (in a vector sorted by key, stably).
fn keep_last_of_runs<T>(pairs: &mut Vec<(ObjectKey, T)>) {
    // `dedup_by` drops the later of two equal neighbours, so the later value is first
    // swapped into the one kept.
    pairs.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        same
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_api::Kind;

    /// What the fast path must equal: a stable sort, then each run's last.
    fn reference(mut v: Vec<(ObjectKey, u32)>) -> Vec<(ObjectKey, u32)> {
        v.sort_by(|a, b| a.0.cmp(&b.0));
        keep_last_of_runs(&mut v);
        v
    }

    fn key(kind: Kind, ns: &str, name: &str) -> ObjectKey {
        ObjectKey::new(kind, ns, name)
    }

    #[test]
    fn equals_a_stable_sort_keeping_the_last_of_each_key() {
        // A deterministic generator (xorshift).
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let kinds = [Kind::Ingress, Kind::Secret, Kind::HttpRoute, Kind::Gateway];
        let namespaces = ["default", "b", "a", "default-2", "", "ns\u{e9}"];
        // Names that differ early, only after 16 bytes, by length, by a NUL, and
        // beyond ASCII.
        let names = [
            "d1",
            "d10",
            "d2",
            "a-very-long-shared-prefix-1",
            "d1000000",
            "d1000000-tls",
            "a-very-long-shared-prefix-2",
            "a-very-long-shar",
            "a-very-long-shared",
            "x\0",
            "x",
            "x\0y",
            "\u{fc}ber",
            "",
        ];
        for len in [0, 1, 5, DIRECT - 1, DIRECT, DIRECT * 3 + 7] {
            let v: Vec<(ObjectKey, u32)> = (0..len)
                .map(|i| {
                    let r = next();
                    let k = key(
                        kinds[(r % 4) as usize],
                        namespaces[((r >> 8) % 6) as usize],
                        names[((r >> 16) % names.len() as u64) as usize],
                    );
                    (k, i as u32)
                })
                .collect();
            let mut fast = v.clone();
            sort_keep_last(&mut fast);
            let want = reference(v);
            assert_eq!(fast.len(), want.len(), "length {len}");
            for (f, w) in fast.iter().zip(&want) {
                assert!(f.0 == w.0 && f.1 == w.1, "length {len}: {f:?} != {w:?}");
            }
        }
    }

    #[test]
    fn permutes_in_place() {
        let mut seed = 99u64;
        for len in [0usize, 1, 2, 10, 1000] {
            let mut perm: Vec<u32> = (0..len as u32).collect();
            // Fisher-Yates with the generator.
            for i in (1..len).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                perm.swap(i, (seed % (i as u64 + 1)) as usize);
            }
            let want: Vec<u32> = perm.iter().map(|&p| p * 10).collect();
            let mut v: Vec<u32> = (0..len as u32).map(|i| i * 10).collect();
            let mut order: Vec<Entry> = perm
                .iter()
                .map(|&at| Entry {
                    high: 0,
                    at,
                    name: 0,
                })
                .collect();
            permute(&mut v, &mut order);
            assert_eq!(v, want, "length {len}");
        }
    }

    #[test]
    fn unique_keys_in_key_order() {
        let mut v: Vec<(ObjectKey, u32)> = (0..10_000u32)
            .rev()
            .map(|i| (key(Kind::Ingress, "default", &format!("d{i}")), i))
            .collect();
        sort_keep_last(&mut v);
        assert_eq!(v.len(), 10_000);
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
