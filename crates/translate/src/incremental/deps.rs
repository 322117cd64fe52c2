//! Which derived objects were computed from which objects.

use std::collections::hash_map::Entry;

use foldhash::HashMap;

use weir_api::ObjectKey;

use crate::incremental::MultiIndex;
use crate::store::Dep;

/// What each derived object (Gateway, XListenerSet, route, Ingress) was computed from,
/// and the reverse: when a [`Dep`] changes, its dependents are recomputed.
#[derive(Default)]
pub(crate) struct DepIndex {
    dependents: MultiIndex<Dep, ObjectKey>,
    /// Boxed slices: 8 bytes less per entry than a `Vec` (at 1,000,000 Ingresses a table
    /// of 2,097,152 slots, 16 MiB).
    of: HashMap<ObjectKey, Box<[Dep]>>,
}

impl DepIndex {
    /// Replaces what `key` depends on by `deps` (in any order, duplicates allowed).
    pub(crate) fn set(&mut self, key: &ObjectKey, mut deps: Vec<Dep>) {
        deps.sort();
        deps.dedup();
        // One probe of `of` (a new key's is a cache miss at a large load). Kept for as
        // long as `key` exists: without the spare room it was collected with.
        let (old, new): (Option<Box<[Dep]>>, &[Dep]) = match self.of.entry(key.clone()) {
            Entry::Occupied(o) if **o.get() == *deps => return,
            Entry::Occupied(o) if deps.is_empty() => (Some(o.remove()), &[]),
            Entry::Occupied(mut o) => {
                let old = std::mem::replace(o.get_mut(), deps.into_boxed_slice());
                (Some(old), &**o.into_mut())
            }
            Entry::Vacant(_) if deps.is_empty() => return,
            Entry::Vacant(v) => (None, &**v.insert(deps.into_boxed_slice())),
        };
        for dep in old.iter().flat_map(|o| o.iter()) {
            self.dependents.remove(dep, key);
        }
        for dep in new {
            self.dependents.insert(dep.clone(), key.clone());
        }
    }

    /// What `key` was computed from.
    pub(crate) fn of(&self, key: &ObjectKey) -> &[Dep] {
        self.of.get(key).map_or(&[], |d| &**d)
    }

    /// The objects computed from `dep`.
    pub(crate) fn dependents<'a>(
        &'a self,
        dep: &Dep,
    ) -> impl Iterator<Item = &'a ObjectKey> + use<'a> {
        self.dependents.get(dep)
    }

    /// Makes room for `objects` more dependent objects and `deps` more dependencies.
    pub(crate) fn reserve(&mut self, objects: usize, deps: usize) {
        self.of.reserve(objects);
        self.dependents.reserve(deps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_api::Kind;

    #[test]
    fn replaces_and_forgets() {
        let route = ObjectKey::new(Kind::HttpRoute, "ns", "r");
        let svc = Dep::Object(ObjectKey::new(Kind::Service, "ns", "s"));
        let grants = Dep::grants_in("other");
        let mut d = DepIndex::default();
        d.set(&route, vec![svc.clone(), grants.clone(), svc.clone()]);
        assert_eq!(d.dependents(&svc).collect::<Vec<_>>(), [&route]);
        d.set(&route, vec![grants.clone()]);
        assert_eq!(d.dependents(&svc).count(), 0);
        assert_eq!(d.dependents(&grants).count(), 1);
        d.set(&route, Vec::new());
        assert_eq!(d.dependents(&grants).count(), 0);
        assert!(d.of.is_empty());
    }
}
