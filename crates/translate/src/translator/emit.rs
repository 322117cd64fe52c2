//! Turning dirty resource keys into an ordered [`DeltaBatch`].

use foldhash::{HashMap, HashMapExt, HashSet};

use weir_model::{ContentHash, Delta, DeltaBatch, Resource, ResourceKey};

use super::Translator;

pub(super) fn emit(t: &mut Translator, dirty: &HashSet<ResourceKey>) -> DeltaBatch {
    let mut deltas: Vec<(ResourceKey, Delta)> = Vec::with_capacity(dirty.len());
    // Certificates touched by SNI changes, with whether they were emitted before.
    let mut certs: HashMap<ContentHash, bool> = HashMap::new();
    for key in dirty {
        let new = t.desired(key);
        let old = t.emitted.get(key);
        if old.map(Resource::hash) == new.as_ref().map(Resource::hash) {
            continue;
        }
        if let Some(Resource::Sni(s)) = old {
            let h = s.cert;
            certs
                .entry(h)
                .or_insert_with(|| t.emitted.contains_key(&ResourceKey::Certificate(h)));
            if let Some(e) = t.cert_refs.get_mut(&h) {
                e.1 -= 1;
            }
        }
        if let Some(Resource::Sni(s)) = &new {
            let h = s.cert;
            certs
                .entry(h)
                .or_insert_with(|| t.emitted.contains_key(&ResourceKey::Certificate(h)));
            let cert = t
                .sni
                .get(&(s.listener, s.host.clone()))
                .and_then(|m| m.values().next())
                .cloned();
            match t.cert_refs.get_mut(&h) {
                Some(e) => e.1 += 1,
                None => {
                    if let Some(c) = cert {
                        t.cert_refs.insert(h, (c, 1));
                    }
                }
            }
        }
        match new {
            Some(r) => {
                t.emitted.insert(key.clone(), r.clone());
                deltas.push((key.clone(), Delta::Upsert(r)));
            }
            None => {
                t.emitted.remove(key);
                deltas.push((key.clone(), Delta::Remove(key.clone())));
            }
        }
    }
    for (h, was) in certs {
        let key = ResourceKey::Certificate(h);
        let now = t.cert_refs.get(&h).is_some_and(|(_, n)| *n > 0);
        if now && !was {
            if let Some(r) = t.desired(&key) {
                t.emitted.insert(key.clone(), r.clone());
                deltas.push((key, Delta::Upsert(r)));
            }
        } else if !now {
            t.cert_refs.remove(&h);
            if was {
                t.emitted.remove(&key);
                deltas.push((key.clone(), Delta::Remove(key)));
            }
        }
    }
    // In the order a data plane applies without dangling references (the model's one
    // list of relations). Each delta carries its key, so sorting builds no key.
    let rank = |k: &ResourceKey, d: &Delta| k.apply_rank(matches!(d, Delta::Upsert(_)));
    deltas.sort_by(|(ka, a), (kb, b)| (rank(ka, a), ka).cmp(&(rank(kb, b), kb)));
    DeltaBatch {
        deltas: deltas.into_iter().map(|(_, d)| d).collect(),
    }
}
