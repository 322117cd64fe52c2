//! Turning dirty resource keys into an ordered [`DeltaBatch`].

use foldhash::{HashMap, HashMapExt, HashSet};

use weir_model::{ContentHash, Delta, DeltaBatch, Resource, ResourceKey};

use super::Translator;

/// Emission groups, in the order a data plane must apply them.
fn group(d: &Delta) -> u8 {
    match d {
        Delta::Upsert(Resource::Listener(_) | Resource::Certificate(_)) => 0,
        Delta::Upsert(_) => 1,
        Delta::Remove(ResourceKey::VirtualHost(..) | ResourceKey::Sni(..)) => 2,
        Delta::Remove(_) => 3,
    }
}

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
            t.cert_refs.dec(&h);
        }
        if let Some(Resource::Sni(s)) = &new {
            let h = s.cert;
            certs
                .entry(h)
                .or_insert_with(|| t.emitted.contains_key(&ResourceKey::Certificate(h)));
            // The entry was built from the SNI table's first certificate: it is there.
            if let Some((_, cert)) = t.sni.first(&(s.listener, s.host.clone())) {
                t.cert_refs.inc(h, cert.clone());
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
        let now = t.cert_refs.contains_key(&h);
        if now && !was {
            if let Some(r) = t.desired(&key) {
                t.emitted.insert(key.clone(), r.clone());
                deltas.push((key, Delta::Upsert(r)));
            }
        } else if !now && was {
            t.emitted.remove(&key);
            deltas.push((key.clone(), Delta::Remove(key)));
        }
    }
    // Each delta carries its key from the loop above, so sorting builds no key.
    deltas.sort_by(|(ka, a), (kb, b)| (group(a), ka).cmp(&(group(b), kb)));
    DeltaBatch {
        deltas: deltas.into_iter().map(|(_, d)| d).collect(),
    }
}
