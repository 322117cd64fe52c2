use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::str_map::StrMap;

/// v1 Namespace (only its labels matter, for `allowedRoutes` selectors).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Namespace {
    /// Metadata.
    pub metadata: ObjectMeta,
}

/// v1 Secret. For TLS, `type: kubernetes.io/tls` with `tls.crt` and `tls.key`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Secret {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Secret type, e.g. `kubernetes.io/tls`. Shared ([`crate::shared_str`]): nearly
    /// every Secret of a gateway has that one type (a heap block per Secret, at
    /// 1,000,000 TLS domains ~30 MiB, otherwise).
    #[serde(rename = "type", deserialize_with = "crate::meta::shared")]
    pub type_: Arc<str>,
    /// Base64-encoded values (as stored by Kubernetes).
    pub data: StrMap<String>,
    /// Plain values; take precedence over `data` for the same key. Shared buffers, so
    /// that a certificate built from a value (`tls.crt`, `tls.key`) holds the same bytes
    /// instead of a copy.
    pub string_data: StrMap<Arc<str>>,
    /// `tls.crt` and `tls.key` packed ([`Secret::pack_tls`]), then in neither map: the
    /// certificate the translator serves, shared. Read them with [`Secret::value`];
    /// serialized back into `stringData`.
    #[serde(skip)]
    pub tls: Option<Arc<weir_model::Certificate>>,
}

/// The keys of a TLS Secret.
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";

impl Secret {
    /// Packs `tls.crt` and `tls.key` of a `kubernetes.io/tls` Secret into
    /// [`Secret::tls`] when the chain is canonical PEM (the usual case: what OpenSSL and
    /// cert-manager write), taking them out of `stringData` / `data`. Anything else (a
    /// key in both maps, bad base64, other PEM text) is left as it is. The readers call
    /// this on every Secret they read.
    pub fn pack_tls(&mut self) {
        if self.tls.is_some() || *self.type_ != *"kubernetes.io/tls" {
            return;
        }
        let in_both = |k: &str| self.data.contains_key(k) && self.string_data.contains_key(k);
        if in_both(TLS_CRT) || in_both(TLS_KEY) {
            return;
        }
        let (Some(Ok(crt)), Some(Ok(key))) = (self.value(TLS_CRT), self.value(TLS_KEY)) else {
            return;
        };
        // Packed only when canonical PEM (so ASCII), which reads back as the same text.
        let Some(packed) = weir_model::Certificate::pack(&crt, &key) else {
            return;
        };
        for k in [TLS_CRT, TLS_KEY] {
            self.string_data.remove(k);
            self.data.remove(k);
        }
        self.tls = Some(Arc::new(packed));
    }

    /// The bytes of `key` (`stringData` over `data`, which is decoded; `tls.crt` and
    /// `tls.key` from [`Secret::tls`] when packed); `Err(())` for bad base64.
    pub fn value(&self, key: &str) -> Option<Result<std::borrow::Cow<'_, [u8]>, ()>> {
        use base64::Engine as _;
        if let Some(p) = &self.tls {
            match key {
                TLS_CRT => return Some(Ok(std::borrow::Cow::Owned(p.chain_pem().into_owned()))),
                TLS_KEY => return Some(Ok(std::borrow::Cow::Owned(p.key_pem().into_owned()))),
                _ => {}
            }
        }
        if let Some(v) = self.string_data.get(key) {
            return Some(Ok(std::borrow::Cow::Borrowed(v.as_bytes())));
        }
        let v = self.data.get(key)?;
        let compact: Vec<u8> = v.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map(std::borrow::Cow::Owned)
                .map_err(|_| ()),
        )
    }

    /// Whether the Secret holds `key` (in either map, or packed).
    pub fn has(&self, key: &str) -> bool {
        (self.tls.is_some() && (key == TLS_CRT || key == TLS_KEY))
            || self.string_data.contains_key(key)
            || self.data.contains_key(key)
    }

    /// Every key the Secret holds, in order, each once.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.string_data.keys().chain(self.data.keys()).collect();
        if self.tls.is_some() {
            keys.extend([TLS_CRT, TLS_KEY]);
        }
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

impl Serialize for Secret {
    /// As derived, with a packed `tls.crt` and `tls.key` written back into `stringData`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut st = s.serialize_struct("Secret", 4)?;
        st.serialize_field("metadata", &self.metadata)?;
        st.serialize_field("type", &self.type_)?;
        st.serialize_field("data", &self.data)?;
        match &self.tls {
            None => st.serialize_field("stringData", &self.string_data)?,
            Some(p) => {
                let mut all = self.string_data.clone();
                let crt = String::from_utf8_lossy(&p.chain_pem()).into_owned();
                let key = String::from_utf8_lossy(&p.key_pem()).into_owned();
                all.insert(TLS_CRT.into(), crt.into());
                all.insert(TLS_KEY.into(), key.into());
                st.serialize_field("stringData", &all)?;
            }
        }
        st.end()
    }
}

/// v1 ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigMap {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Values.
    pub data: BTreeMap<String, String>,
}

/// v1 Service (the parts that map ports to endpoints).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Service {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ServiceSpec,
}

/// v1 ServiceSpec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceSpec {
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// `ClusterIP`, `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The Service's virtual IP (`None` for a headless Service), where ingress-nginx's
    /// `service-upstream` sends requests.
    #[serde(rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

/// v1 ServicePort.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServicePort {
    /// Port name (matches EndpointSlice port names).
    pub name: Option<String>,
    /// Service port number (what backendRefs name).
    pub port: i32,
    /// Target port: a number or a container port name.
    pub target_port: Option<serde_json::Value>,
    /// `TCP` (default), `UDP`, `SCTP`.
    pub protocol: Option<String>,
    /// e.g. `kubernetes.io/h2c` for HTTP/2 prior knowledge.
    pub app_protocol: Option<String>,
}

/// discovery.k8s.io/v1 EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointSlice {
    /// Metadata; the label `kubernetes.io/service-name` names the Service.
    pub metadata: ObjectMeta,
    /// `IPv4`, `IPv6` or `FQDN`.
    pub address_type: String,
    /// Endpoints.
    pub endpoints: Vec<EndpointSliceEndpoint>,
    /// Ports (named like the Service's ports).
    pub ports: Vec<EndpointPort>,
}

/// One endpoint of an [`EndpointSlice`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointSliceEndpoint {
    /// Addresses (usually one).
    pub addresses: Vec<String>,
    /// Readiness.
    pub conditions: EndpointConditions,
}

/// Readiness of an endpoint; absent `ready` means ready.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointConditions {
    /// Ready to receive traffic.
    pub ready: Option<bool>,
    /// Serving (may be terminating).
    pub serving: Option<bool>,
    /// Terminating.
    pub terminating: Option<bool>,
}

/// A port of an [`EndpointSlice`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointPort {
    /// Name (matches the Service port name; empty for a single unnamed port).
    pub name: Option<String>,
    /// Port number on the endpoint.
    pub port: Option<i32>,
    /// Protocol.
    pub protocol: Option<String>,
    /// Application protocol.
    pub app_protocol: Option<String>,
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    const CRT: &str = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nAAEC\n-----END PRIVATE KEY-----\n";

    fn tls_secret() -> Secret {
        let mut s = Secret {
            type_: "kubernetes.io/tls".into(),
            ..Secret::default()
        };
        s.string_data.insert(TLS_CRT.into(), CRT.into());
        s.string_data.insert(TLS_KEY.into(), KEY.into());
        s.string_data.insert("ca.crt".into(), CRT.into());
        s
    }

    #[test]
    fn a_packed_secret_reads_and_writes_as_its_text() {
        let text = tls_secret();
        let mut packed = text.clone();
        packed.pack_tls();
        assert!(packed.tls.is_some());
        assert_eq!(packed.string_data.keys().collect::<Vec<_>>(), ["ca.crt"]);
        assert_eq!(packed.keys(), ["ca.crt", "tls.crt", "tls.key"]);
        for k in ["tls.crt", "tls.key", "ca.crt"] {
            assert!(packed.has(k));
            assert_eq!(packed.value(k), text.value(k), "{k}");
        }
        assert!(!packed.has("other") && packed.value("other").is_none());
        // Written back as the text was.
        assert_eq!(
            serde_json::to_value(&packed).unwrap(),
            serde_json::to_value(&text).unwrap()
        );
        // Packing twice, or an equal text packed, gives equal objects.
        let mut again = packed.clone();
        again.pack_tls();
        assert_eq!(again, packed);
        let mut other = text.clone();
        other.pack_tls();
        assert_eq!(other, packed);
    }

    #[test]
    fn secrets_read_from_the_api_servers_json_are_packed() {
        let b64 = |t: &str| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(t)
        };
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"s","namespace":"ns"}},"type":"kubernetes.io/tls","data":{{"tls.crt":"{}","tls.key":"{}"}}}}"#,
            b64(CRT),
            b64(KEY)
        );
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let read = [
            crate::Object::from_json_quick(crate::Kind::Secret, &json).unwrap(),
            crate::Object::from_value(value).unwrap(),
        ];
        for o in read {
            let crate::Object::Secret(s) = o else {
                panic!("not a Secret")
            };
            assert!(s.tls.is_some() && s.data.is_empty(), "{s:?}");
            assert_eq!(
                s.value("tls.key").unwrap().unwrap().as_ref(),
                KEY.as_bytes()
            );
        }
    }

    #[test]
    fn secret_types_are_one_buffer() {
        let read =
            || -> Secret { serde_json::from_str(r#"{"type":"kubernetes.io/tls"}"#).unwrap() };
        let (a, b) = (read(), read());
        assert_eq!(&*a.type_, "kubernetes.io/tls");
        assert!(Arc::ptr_eq(&a.type_, &b.type_));
    }

    #[test]
    fn only_tls_secrets_with_canonical_pem_are_packed() {
        let mut opaque = tls_secret();
        opaque.type_ = "Opaque".into();
        opaque.pack_tls();
        assert!(opaque.tls.is_none());
        // A key in both maps: left alone (what `data` holds under it stays).
        let mut both = tls_secret();
        both.data.insert(TLS_CRT.into(), "eA==".into());
        both.pack_tls();
        assert!(both.tls.is_none());
        let mut crlf = tls_secret();
        crlf.string_data
            .insert(TLS_CRT.into(), CRT.replace('\n', "\r\n").into());
        crlf.pack_tls();
        assert!(crlf.tls.is_none());
        // The key is held as DER only when its text is what writing it back gives.
        let mut key_crlf = tls_secret();
        key_crlf
            .string_data
            .insert(TLS_KEY.into(), KEY.replace('\n', "\r\n").into());
        key_crlf.pack_tls();
        assert!(key_crlf.tls.is_none());
        let mut no_key = tls_secret();
        no_key.string_data.remove(TLS_KEY);
        no_key.pack_tls();
        assert!(no_key.tls.is_none());
    }
}
