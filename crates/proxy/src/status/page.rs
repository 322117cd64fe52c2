//! Keyset pagination and the query string of the status API.
//!
//! A list of 100,000 virtual hosts must not be sorted, nor turned into JSON, to answer
//! for 50 of them: [`page`] scans the items once, keeps the `limit` smallest keys after
//! the cursor in a bounded heap, and only those are rendered. The cursor is the last key
//! of the previous page, so pages stay consistent while configuration changes under them
//! (an item added before the cursor is not seen, none is seen twice).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The default number of items of a page.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The most items one request may ask for.
pub(crate) const MAX_LIMIT: usize = 500;

/// The query of a list request: `?q=TEXT&limit=N&after=CURSOR&unhealthy=1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Query {
    /// Lower-case text an item must contain (host, name, route, message); empty: all.
    pub(crate) q: String,
    /// Items per page, 1..=[`MAX_LIMIT`].
    pub(crate) limit: usize,
    /// The last key of the previous page.
    pub(crate) after: Option<String>,
    /// Backends: only clusters with an unhealthy or ejected endpoint.
    pub(crate) unhealthy: bool,
}

impl Query {
    /// Reads a query string (without `?`); unknown parameters are ignored, a bad limit
    /// is the default.
    pub(crate) fn parse(query: Option<&str>) -> Query {
        let mut out = Query {
            limit: DEFAULT_LIMIT,
            ..Query::default()
        };
        for pair in query.unwrap_or("").split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v);
            match k {
                "q" => out.q = v.trim().to_lowercase(),
                "limit" => {
                    out.limit = v
                        .parse::<usize>()
                        .map_or(DEFAULT_LIMIT, |n| n.clamp(1, MAX_LIMIT))
                }
                "after" if !v.is_empty() => out.after = Some(v),
                "unhealthy" => out.unhealthy = matches!(v.as_str(), "1" | "true"),
                _ => {}
            }
        }
        out
    }

    /// Whether `text` contains the query (`text` is compared lower-cased).
    pub(crate) fn matches(&self, text: &str) -> bool {
        self.q.is_empty() || text.to_lowercase().contains(&self.q)
    }
}

/// Percent-decoding of a query value (`+` is a space); invalid escapes stay as written
/// and invalid UTF-8 is replaced.
pub(crate) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// One page: the items in key order, how many items matched in all, and the cursor of
/// the next page (`None` on the last page).
#[derive(Debug)]
pub(crate) struct Page<K, T> {
    pub(crate) items: Vec<(K, T)>,
    pub(crate) matched: usize,
    pub(crate) next: Option<K>,
}

/// A heap entry ordered by its key alone.
struct ByKey<K, T>(K, T);

impl<K: Ord, T> PartialEq for ByKey<K, T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<K: Ord, T> Eq for ByKey<K, T> {}
impl<K: Ord, T> PartialOrd for ByKey<K, T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Ord, T> Ord for ByKey<K, T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

/// The `limit` smallest items by key among `items` whose key is after `after`, in one
/// pass and O(limit) memory. `items` are the matching items (filtered by the caller);
/// `matched` counts them all, before and after the cursor. Keys must be unique.
pub(crate) fn page<K: Ord + Clone, T>(
    items: impl Iterator<Item = (K, T)>,
    after: Option<&K>,
    limit: usize,
) -> Page<K, T> {
    let limit = limit.max(1);
    let mut heap: BinaryHeap<ByKey<K, T>> = BinaryHeap::with_capacity(limit + 1);
    let mut matched = 0;
    let mut beyond = 0;
    for (k, t) in items {
        matched += 1;
        if after.is_some_and(|a| k <= *a) {
            continue;
        }
        beyond += 1;
        if heap.len() == limit {
            // Full: keep it only if it sorts before the largest kept.
            if heap.peek().is_some_and(|top| k < top.0) {
                heap.pop();
            } else {
                continue;
            }
        }
        heap.push(ByKey(k, t));
    }
    let items: Vec<(K, T)> = heap
        .into_sorted_vec()
        .into_iter()
        .map(|ByKey(k, t)| (k, t))
        .collect();
    let next = (beyond > items.len())
        .then(|| items.last().map(|(k, _)| k.clone()))
        .flatten();
    Page {
        items,
        matched,
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_are_read() {
        let q = Query::parse(Some(
            "q=A.Example%2Ecom+x&limit=7&after=b%20c&unhealthy=1&x=y",
        ));
        assert_eq!(q.q, "a.example.com x");
        assert_eq!(q.limit, 7);
        assert_eq!(q.after.as_deref(), Some("b c"));
        assert!(q.unhealthy);
        assert_eq!(Query::parse(None).limit, DEFAULT_LIMIT);
        assert_eq!(Query::parse(Some("limit=0")).limit, 1);
        assert_eq!(Query::parse(Some("limit=999999")).limit, MAX_LIMIT);
        assert_eq!(Query::parse(Some("limit=-3")).limit, DEFAULT_LIMIT);
        assert_eq!(Query::parse(Some("after=")).after, None);
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%3Cscript%3E"), "<script>");
        assert_eq!(decode("%ff"), "\u{fffd}");
    }

    #[test]
    fn pages_cover_every_item_once_in_order() {
        // 1,000 keys in scrambled order.
        let keys: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 1000).collect();
        let mut seen = Vec::new();
        let mut after = None;
        for round in 0.. {
            assert!(round < 100, "bounded");
            let p = page(keys.iter().map(|&k| (k, ())), after.as_ref(), 64);
            assert_eq!(p.matched, 1000);
            seen.extend(p.items.iter().map(|(k, _)| *k));
            match p.next {
                Some(n) => {
                    assert_eq!(p.items.len(), 64);
                    after = Some(n);
                }
                None => break,
            }
        }
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn the_last_full_page_has_no_next() {
        let p = page((0..10).map(|k| (k, k * 2)), None, 10);
        assert_eq!(p.items.len(), 10);
        assert_eq!(p.next, None);
        assert_eq!(p.items[3], (3, 6));
        let p = page((0..10).map(|k| (k, ())), Some(&4), 3);
        assert_eq!(
            p.items.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            [5, 6, 7]
        );
        assert_eq!(p.next, Some(7));
        let p = page(std::iter::empty::<(u8, ())>(), None, 3);
        assert!(p.items.is_empty() && p.next.is_none() && p.matched == 0);
    }
}
