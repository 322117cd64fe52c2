//! Incremental equivalence: applying random changes one at a time must end in exactly the
//! state a fresh translator computes from the final objects.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Accumulator, load, options};
use weir_api::{Object, ObjectKey};
use weir_translate::{ObjectChange, Staged, TranslateOutput, Translator};

const POOL: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: https, port: 443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, hostname: "*.test", allowedRoutes: {namespaces: {from: All}}}
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: cert}]}}
  - {name: https-b, port: 443, protocol: HTTPS, hostname: b.test, tls: {certificateRefs: [{name: cert2}]}}
  - {name: other-certs, port: 443, protocol: HTTPS, hostname: c.test, tls: {certificateRefs: [{name: cert, namespace: other}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  tls:
    frontend:
      default: {validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]}}
      perPort:
      - {port: 8443, tls: {validation: {mode: AllowInsecureFallback, caCertificateRefs: [{group: "", kind: ConfigMap, name: ca, namespace: other}]}}}
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}
  - {name: https-alt, port: 8443, protocol: HTTPS, tls: {certificateRefs: [{name: cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - name: sel
    port: 8080
    protocol: HTTP
    allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: blue}}}}
  - {name: http, port: 80, protocol: HTTP, hostname: a.test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  tls: {backend: {clientCertificateRef: {name: cert}}}
  listeners: [{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  tls: {backend: {clientCertificateRef: {kind: Secret, name: cert, namespace: other}}}
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  tls: {backend: {clientCertificateRef: {name: cert2}}}
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  listeners: [{name: ingress-port, port: 8443, protocol: HTTP}]
  addresses: [{value: 127.0.0.1}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  addresses: [{value: 127.0.0.1}]
  listeners: [{name: broken, port: 8080, protocol: HTTPS, tls: {certificateRefs: [{name: nope}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.test]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.test]
  rules: [{backendRefs: [{name: svc, port: 80}], retry: {codes: [503], attempts: 1}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.test]
  rules:
  - {matches: [{path: {value: /x}}], backendRefs: [{name: svc, port: 80}]}
  - {name: main, backendRefs: [{name: svc, port: 80}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.test]
  rules:
  - {matches: [{path: {value: /x}}], backendRefs: [{name: svc, port: 80}], sessionPersistence: {type: Header}}
  - {name: main, backendRefs: [{name: svc, port: 80}], sessionPersistence: {sessionName: s}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p1, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  timeouts: {request: 10s}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p1, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}, {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  rateLimit: {local: {requests: 5, unit: Second}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p1, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  rateLimit: {local: {requests: 0, unit: Second}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p2, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1, sectionName: main}]
  retry: {attempts: 2, retryOn: [5xx]}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: pl, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}]
  rateLimit: {local: {requests: 3, unit: Second}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: pl, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: missing}]
  timeouts: {request: 4s}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: pl, namespace: default}
spec:
  # Listeners that are TCP or TLS in some of the Gateways above and absent in others:
  # Invalid (no HTTP) / TargetNotFound / resolved as the Gateway changes.
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: tcp}
  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: pass}
  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}
  rateLimit: {local: {requests: 3, unit: Second}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: ps, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XListenerSet, name: s1}]
  timeouts: {request: 5s}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: ps, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XListenerSet, name: s1, sectionName: a}]
  retry: {attempts: 3}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p2, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  timeouts: {backendRequest: 1s}
  retry: {attempts: 1}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p4, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  apiKeyAuth: {secretRefs: [{name: api-keys}], header: x-key}
---
apiVersion: v1
kind: Secret
metadata: {name: api-keys, namespace: default}
type: Opaque
stringData: {alice: alice-key-1234}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p4, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1, sectionName: main}]
  ipRules: {allow: [10.0.0.0/8], deny: [10.1.0.0/16]}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p7, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}]
  healthCheck: {type: HTTP, interval: 1s, http: {path: /healthz}}
  circuitBreaker: {maxRequests: 100, perEndpoint: {maxConnections: 10}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p7, namespace: default}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: b1}, {group: "", kind: Service, name: svc}]
  healthCheck: {type: TCP}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p8, namespace: other}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: b1}]
  healthCheck: {type: GRPC, interval: 2s}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p9, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}]
  loadBalancer:
    type: ConsistentHash
    consistentHash: {type: Cookie, cookie: {name: sid, generate: true, ttl: 1h}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p9, namespace: default}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: b1}]
  loadBalancer: {type: LatencyAware}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p10, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}]
  outlierDetection: {consecutive5xx: 2, baseEjectionTime: 1s, panicThresholdPercent: 40}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p10, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}]
  outlierDetection: {enabled: false}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p11, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  accessLog: {disabled: true}
  tracing: {samplingRatio: 0.25}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p11, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1, sectionName: main}]
  accessLog: {fields: [time, status, route], errorsOnly: true}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p11, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  accessLog: {fields: [time, bogus]}
  tracing: {samplingRatio: 1.5}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p12, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}, {group: gateway.networking.k8s.io, kind: Gateway, name: gw2}]
  tracing: {disabled: true}
  accessLog: {fields: [all]}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p12, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1, sectionName: main}]
  tracing: {samplingRatio: 0}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p5, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  basicAuth: {secretRef: {name: htpasswd}, realm: Shop}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p6, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  jwtAuth: {providers: [{name: corp, issuer: https://corp, jwks: {secretRef: {name: jwks}}}]}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p9, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  extAuth: {url: 'http://auth:9000/check', responseHeaders: [x-user], cache: {ttl: 10s}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p9, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  extAuth: {url: 'https://auth.example/', failOpen: true}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p10, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  jwtAuth: {providers: [{name: idp, remoteJwks: {uri: 'https://idp.example/jwks', refreshInterval: 1m}}]}
---
apiVersion: v1
kind: Secret
metadata: {name: jwks, namespace: default}
type: Opaque
stringData: {jwks: '{"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}'}
---
apiVersion: v1
kind: Secret
metadata: {name: jwks, namespace: default}
type: Opaque
stringData: {jwks: '{"keys": []}'}
---
apiVersion: v1
kind: Secret
metadata: {name: htpasswd, namespace: default}
type: Opaque
stringData: {auth: "ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi."}
---
apiVersion: v1
kind: Secret
metadata: {name: htpasswd, namespace: default}
type: Opaque
stringData: {auth: "ann:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\nbob:plain"}
---
apiVersion: v1
kind: Secret
metadata: {name: api-keys, namespace: default}
type: Opaque
stringData: {alice: alice-key-5678, bob: short}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: p3, namespace: default, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}, {group: gateway.networking.k8s.io, kind: Gateway, name: gw2}]
  retry: {attempts: 4}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: default}
spec:
  parentRefs: [{name: gw}, {name: gw2}]
  hostnames: [a.test, b.test]
  rules:
  - matches: [{path: {value: /x}}, {path: {type: Exact, value: /y}}]
    backendRefs: [{name: svc, port: 81, weight: 2}, {name: svc2, namespace: other, port: 80}]
  - matches: [{path: {value: bad}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r2, namespace: other}
spec:
  parentRefs: [{name: gw, namespace: default}, {name: gw2, namespace: default}]
  rules:
  - backendRefs: [{name: svc2, port: 80}, {group: weir.dev, kind: Backend, name: b1}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r2, namespace: other}
spec:
  parentRefs: [{name: gw, namespace: default, sectionName: sel}]
  hostnames: [c.test]
  rules:
  - filters: [{type: ExtensionRef, extensionRef: {group: weir.dev, kind: DirectResponse, name: d1}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r3, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: https}, {name: gw2}]
  rules:
  - filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {value: /api}}]
    backendRefs: [{name: svc, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r3, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: ["*.test"]
  rules:
  - filters: [{type: ExtensionRef, extensionRef: {group: weir.dev, kind: DirectResponse, name: d1}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 80, protocol: HTTP, hostname: a.test}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r3, namespace: default, creationTimestamp: "2021-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw}, {name: gw2}]
  hostnames: [a.test]
  rules:
  - matches: [{path: {value: /}}]
    backendRefs: [{name: svc, port: 80, weight: 0}]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{port: 80, name: http}]}
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{port: 80, name: http}, {port: 81, name: grpc, appProtocol: kubernetes.io/h2c}]}
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{port: 80, name: http}, {port: 80, name: dns, protocol: UDP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-2, namespace: default, labels: {kubernetes.io/service-name: svc}}
addressType: IPv4
ports: [{name: dns, port: 1053, protocol: UDP}]
endpoints: [{addresses: [10.0.0.5]}]
---
apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: other}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-1, namespace: default, labels: {kubernetes.io/service-name: svc}}
addressType: IPv4
ports: [{name: http, port: 8080}, {name: grpc, port: 9090}]
endpoints: [{addresses: [10.0.0.1]}, {addresses: [10.0.0.2], conditions: {ready: false}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-1, namespace: default, labels: {kubernetes.io/service-name: svc}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.0.0.3]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-1, namespace: default, labels: {kubernetes.io/service-name: other-svc}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.0.0.4]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc2-a, namespace: other, labels: {kubernetes.io/service-name: svc2}}
addressType: IPv4
ports: [{port: 7070}]
endpoints: [{addresses: [10.1.0.1, bogus]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: grant, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}, {group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]
  to: [{group: "", kind: Service}, {group: "", kind: Secret}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: grant, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service, name: not-svc2}]
---
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: blue}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: red}}
---
apiVersion: weir.dev/v1alpha1
kind: Backend
metadata: {name: b1, namespace: other}
spec: {endpoints: ["10.9.9.9:80", "svc.example:81"]}
---
apiVersion: weir.dev/v1alpha1
kind: Backend
metadata: {name: b1, namespace: other}
spec: {endpoints: ["bad"], protocol: H2C}
---
apiVersion: weir.dev/v1alpha1
kind: DirectResponse
metadata: {name: d1, namespace: other}
spec: {status: 404, body: nope}
---
apiVersion: weir.dev/v1alpha1
kind: DirectResponse
metadata: {name: d1, namespace: default}
spec: {status: 503}
---
apiVersion: weir.dev/v1alpha1
kind: DirectResponse
metadata: {name: d1, namespace: default}
spec: {status: 1000}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: weir
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec: {controller: weir.dev/ingress-controller}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: weir}
spec: {controller: weir.dev/ingress-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i1, namespace: default}
spec:
  tls: [{hosts: [a.test], secretName: cert}, {hosts: [b.test], secretName: cert2}]
  rules:
  - host: a.test
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {name: http}}}}]}
  - host: b.test
    http: {paths: [{path: /b, pathType: Exact, backend: {service: {name: svc, port: {number: 81}}}}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i1, namespace: default}
spec:
  ingressClassName: nginx
  rules: [{host: a.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i2, namespace: default}
spec:
  tls: [{hosts: [a.test], secretName: cert2}]
  defaultBackend: {service: {name: svc, port: {number: 80}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i2, namespace: default}
spec:
  defaultBackend: {resource: {apiGroup: weir.dev, kind: Backend, name: b1}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: i2
  namespace: default
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "5"
    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8
    nginx.ingress.kubernetes.io/auth-type: basic
    nginx.ingress.kubernetes.io/auth-secret: htpasswd
    nginx.ingress.kubernetes.io/enable-cors: "true"
spec:
  rules: [{host: a.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: i1
  namespace: default
  annotations: {nginx.ingress.kubernetes.io/limit-rpm: "60", nginx.ingress.kubernetes.io/server-snippet: "x"}
spec:
  rules: [{host: b.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: i3
  namespace: default
  annotations:
    nginx.ingress.kubernetes.io/ssl-passthrough: "true"
    nginx.ingress.kubernetes.io/limit-connections: "2"
    nginx.ingress.kubernetes.io/proxy-body-size: 1m
    kubernetes.io/ingress.class: weir
spec:
  rules: [{host: a.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: i1
  namespace: default
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/proxy-ssl-verify: "on"
    nginx.ingress.kubernetes.io/proxy-ssl-secret: default/cert
    nginx.ingress.kubernetes.io/default-backend: svc
    nginx.ingress.kubernetes.io/custom-http-errors: "503"
spec:
  rules:
  - host: b.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}
      - {path: /x, pathType: Prefix, backend: {service: {name: missing, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: i3
  namespace: default
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: GRPCS
    nginx.ingress.kubernetes.io/default-backend: svc
spec:
  rules: [{host: a.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw3, namespace: default}
spec:
  gatewayClassName: weir
  allowedListeners: {namespaces: {from: Same}}
  listeners: [{name: http, port: 9080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw3
  namespace: default
  annotations: {weir.dev/idle-timeout: 5s, weir.dev/merge-slashes: "false"}
spec:
  gatewayClassName: weir
  allowedListeners: {namespaces: {from: Same}}
  listeners: [{name: http, port: 9080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw3
  namespace: default
  annotations: {weir.dev/max-connections: "10", weir.dev/max-headers: "oops"}
spec:
  gatewayClassName: weir
  allowedListeners: {namespaces: {from: All}}
  listeners: [{name: http, port: 9080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw3, namespace: default}
spec:
  gatewayClassName: weir
  allowedListeners: {namespaces: {from: Selector, selector: {matchLabels: {team: blue}}}}
  listeners: [{name: https, port: 9443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw3, namespace: default}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 9080, protocol: HTTP}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: s1, namespace: default}
spec:
  parentRef: {name: gw3}
  listeners:
  - {name: a, port: 9443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}
  - {name: b, port: 9443, protocol: HTTPS, hostname: b.test, tls: {certificateRefs: [{name: cert2}]}}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: s1, namespace: default}
spec:
  parentRef: {name: gw3}
  listeners: [{name: a, port: 9080, protocol: HTTP, hostname: c.test}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: s3, namespace: default, creationTimestamp: "2020-06-01T00:00:00Z"}
spec:
  parentRef: {name: gw3}
  listeners: [{name: b, port: 9443, protocol: HTTPS, hostname: b.test, tls: {certificateRefs: [{name: cert2}]}}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: s3, namespace: default}
spec:
  parentRef: {name: gw3}
  listeners: [{name: b, port: 9443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw3, namespace: default}
spec:
  gatewayClassName: weir
  allowedListeners: {namespaces: {from: All}}
  listeners: [{name: http, port: 9080, protocol: HTTP, hostname: c.test}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: s2, namespace: other}
spec:
  parentRef: {name: gw3, namespace: default}
  listeners:
  - {name: b, port: 9443, protocol: HTTPS, hostname: b.test, tls: {certificateRefs: [{name: cert}]}, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: s2, namespace: other}
spec:
  parentRef: {name: gw, namespace: default}
  listeners: [{name: b, port: 9443, protocol: HTTPS, hostname: b.test, tls: {certificateRefs: [{name: cert}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r4, namespace: default}
spec:
  parentRefs: [{group: gateway.networking.x-k8s.io, kind: XListenerSet, name: s1, sectionName: a}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r4, namespace: default}
spec:
  parentRefs: [{group: gateway.networking.x-k8s.io, kind: XListenerSet, name: s2, namespace: other}, {name: gw3}]
  hostnames: [b.test]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
# ListenerSet (v1) beside XListenerSet: s1 of both kinds compete for a.test/b.test.
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: s1, namespace: default, creationTimestamp: "2020-03-01T00:00:00Z"}
spec:
  parentRef: {name: gw3}
  listeners:
  - {name: a, port: 9443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert2}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: s1, namespace: default}
spec:
  parentRef: {name: gw3}
  listeners: [{name: a, port: 9081, protocol: HTTP, hostname: c.test}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: s4, namespace: other}
spec:
  parentRef: {name: gw3, namespace: default}
  listeners:
  - {name: b, port: 9443, protocol: HTTPS, hostname: b.test, tls: {certificateRefs: [{name: cert, namespace: default}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: s4, namespace: other}
spec:
  parentRef: {name: gw3, namespace: default}
  listeners: [{name: b, port: 9080, protocol: HTTP, hostname: d.test, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: sets, namespace: default}
spec:
  from: [{group: gateway.networking.k8s.io, kind: ListenerSet, namespace: other}]
  to: [{group: "", kind: Secret}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: sets, namespace: default}
spec:
  from: [{group: gateway.networking.x-k8s.io, kind: XListenerSet, namespace: other}]
  to: [{group: "", kind: Secret}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r5, namespace: default}
spec:
  parentRefs: [{kind: ListenerSet, name: s1, sectionName: a}, {kind: ListenerSet, name: s4, namespace: other}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r5, namespace: default}
spec:
  parentRefs: [{kind: ListenerSet, name: s1}, {group: gateway.networking.x-k8s.io, kind: XListenerSet, name: s1}]
  hostnames: [c.test]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}
  - {name: pass, port: 443, protocol: TLS, hostname: "*.test", tls: {mode: Passthrough}, allowedRoutes: {namespaces: {from: All}}}
  - {name: pass-only, port: 8443, protocol: TLS, tls: {mode: Passthrough}}
  - {name: tcp, port: 9000, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: tcp, port: 80, protocol: TCP}
  - {name: pass, port: 8443, protocol: TLS, hostname: b.test, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: t1, namespace: default}
spec:
  parentRefs: [{name: gw}, {name: gw2}]
  hostnames: [b.test, "*.test"]
  rules: [{backendRefs: [{name: svc, port: 80, weight: 2}, {name: svc2, namespace: other, port: 7070}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: t1, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: pass-only}]
  rules: [{backendRefs: [{group: weir.dev, kind: Backend, name: b1, namespace: other}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha3
kind: TLSRoute
metadata: {name: t2, namespace: other}
spec:
  parentRefs: [{name: gw, namespace: default}]
  hostnames: [b.test]
  rules: [{backendRefs: [{name: svc2, port: 7070}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: c1, namespace: default}
spec:
  parentRefs: [{name: gw}, {name: gw2}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: c1, namespace: default}
spec:
  parentRefs: [{name: gw, port: 9000}]
  rules: [{backendRefs: [{name: svc2, namespace: other, port: 7070, weight: 0}, {name: nope, port: 1}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: c2, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g1, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{method: {service: pkg.Echo, method: Echo}}, {headers: [{name: version, value: two}]}]
    backendRefs: [{name: svc, port: 80, weight: 3}, {name: svc2, namespace: other, port: 80}]
  - matches: [{method: {type: RegularExpression, service: "pkg\\..*"}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 81}}}]
    backendRefs: [{name: svc, port: 81}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g1, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: http}, {name: gw2}]
  hostnames: [a.test, b.test]
  rules: [{backendRefs: [{group: weir.dev, kind: Backend, name: b1, namespace: other}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g2, namespace: other}
spec:
  parentRefs: [{name: gw, namespace: default}]
  hostnames: [a.test]
  rules: [{matches: [{method: {service: pkg.Echo}}], backendRefs: [{name: svc2, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw3, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: dns, port: 53, protocol: UDP}
  - {name: udp2, port: 9000, protocol: UDP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw3, namespace: default}
spec:
  gatewayClassName: weir
  addresses: [{type: IPAddress, value: 10.9.9.9}]
  listeners:
  - {name: dns, port: 53, protocol: UDP, allowedRoutes: {namespaces: {from: All}}}
  - {name: tcp, port: 9000, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: u1, namespace: default}
spec:
  parentRefs: [{name: gw3}, {name: gw}]
  rules: [{backendRefs: [{name: svc, port: 80, weight: 2}, {name: svc2, namespace: other, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: u1, namespace: default}
spec:
  parentRefs: [{name: gw3, sectionName: udp2}]
  rules: [{backendRefs: [{group: weir.dev, kind: Backend, name: b1, namespace: other}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: u2, namespace: other}
spec:
  parentRefs: [{name: gw3, namespace: default, port: 53}]
  rules: [{backendRefs: [{name: svc2, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: grant, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: UDPRoute, namespace: default}]
  to: [{group: "", kind: Service}, {group: weir.dev, kind: Backend}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: grant, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: default}, {group: gateway.networking.k8s.io, kind: TCPRoute, namespace: default}]
  to: [{group: "", kind: Service}, {group: weir.dev, kind: Backend}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: grant, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: GRPCRoute, namespace: default}, {group: gateway.networking.k8s.io, kind: TCPRoute, namespace: default}]
  to: [{group: "", kind: Service}, {group: weir.dev, kind: Backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: a.test, tls: {certificateRefs: [{name: cert}]}}
  - {name: pass, port: 443, protocol: TLS, hostname: "*.test", tls: {mode: Terminate, certificateRefs: [{name: cert2}]}, allowedRoutes: {namespaces: {from: All}}}
  - {name: pass-only, port: 8443, protocol: TLS, tls: {certificateRefs: [{name: cert, namespace: other}]}}
  - {name: tcp, port: 9000, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: term, port: 8443, protocol: TLS, hostname: a.test, tls: {mode: Terminate, certificateRefs: [{name: cert}]}}
  - {name: pass, port: 8443, protocol: TLS, hostname: b.test, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - filters: [{type: CORS, cors: {allowOrigins: ["https://*.a.test", "http://b.test"], allowMethods: [GET], allowCredentials: true}}]
    backendRefs: [{name: svc, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /open}}]
    filters: [{type: CORS, cors: {allowOrigins: ["*"], allowHeaders: ["*"], maxAge: 60}}]
    backendRefs: [{name: svc, port: 80}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ca, namespace: default}
data:
  ca.crt: |
    -----BEGIN CERTIFICATE-----
    MIIBezCCASGgAwIBAgIUbICzj2fwrA7AFxGL1R3ryw62YrwwCgYIKoZIzj0EAwIw
    EjEQMA4GA1UEAwwHdGVzdCBDQTAgFw0yNjExMjQyMzQyNDdaGA8yMTI2MTAzMTIz
    NDI0N1owEjEQMA4GA1UEAwwHdGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEH
    A0IABBTmTOcnZd0zIf5NhhnlQYSR4vSusc9X2eJAPhTWZVLDUam+Xzqqu2Ici3GM
    9uGo7L/50KEZhx7SkH4yc4PE5OKjUzBRMB0GA1UdDgQWBBS7mwn97IulMDvmMGVl
    V98CzOSB2TAfBgNVHSMEGDAWgBS7mwn97IulMDvmMGVlV98CzOSB2TAPBgNVHRMB
    Af8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIC2s6//4qIIL+DjLcsDC17s+wRaQ
    17/K1I6kRBjlWNCdAiEAyP9BaTk8ieXeTHUeK/n00hX2jVrmUGzu/iB44siMD8c=
    -----END CERTIFICATE-----
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ca, namespace: default}
data: {ca.crt: garbage}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: btls, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}]
  validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}], hostname: svc.internal}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: btls, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc, sectionName: grpc}]
  validation: {wellKnownCACertificates: System, hostname: grpc.internal}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: btls2, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}, {group: "", kind: Service, name: svc, sectionName: http}]
  validation:
    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    hostname: other.internal
    subjectAltNames: [{type: URI, uri: "spiffe://td/ns/default/sa/svc"}]
"#;

/// Pool of variants per object key: the documents above plus certificate Secrets taken
/// from the TLS golden input.
fn pool() -> Vec<Vec<Arc<Object>>> {
    let mut objects = load(POOL);
    let tls = load(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/tls.in.yaml"))
            .unwrap(),
    );
    let secrets: Vec<weir_api::Secret> = tls
        .iter()
        .filter_map(|o| match &**o {
            Object::Secret(s) if ["a", "b", "wild"].contains(&s.metadata.name.as_ref()) => {
                Some(s.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(secrets.len(), 3);
    for (ns, name) in [("default", "cert"), ("default", "cert2"), ("other", "cert")] {
        for s in &secrets {
            let mut s = s.clone();
            s.metadata.name = name.into();
            s.metadata.namespace = ns.into();
            objects.push(Arc::new(Object::Secret(s)));
        }
        let mut broken = secrets[0].clone();
        broken.metadata.name = name.into();
        broken.metadata.namespace = ns.into();
        broken
            .string_data
            .insert("tls.crt".into(), "garbage".into());
        objects.push(Arc::new(Object::Secret(broken)));
    }
    // CA bundles for client certificate validation: two CAs, a broken bundle and none, in
    // the Gateway's namespace and another one.
    for ns in ["default", "other"] {
        for crt in [
            secrets[0].string_data.get("tls.crt").cloned(),
            secrets[2].string_data.get("tls.crt").cloned(),
            Some("garbage".into()),
            None,
        ] {
            let mut cm = weir_api::ConfigMap::default();
            cm.metadata.name = "ca".into();
            cm.metadata.namespace = ns.into();
            if let Some(c) = crt {
                cm.data.insert("ca.crt".into(), c.to_string());
            }
            objects.push(Arc::new(Object::ConfigMap(cm)));
        }
    }
    let mut by_key: BTreeMap<ObjectKey, Vec<Arc<Object>>> = BTreeMap::new();
    for o in objects {
        by_key.entry(o.key()).or_default().push(o);
    }
    by_key.into_values().collect()
}

/// xorshift64*: small, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn check_equivalent(
    t: &Translator,
    acc: &Accumulator,
    current: &[Arc<Object>],
    standalone: bool,
    step: usize,
) {
    let incremental: Vec<_> = acc.resources.values().cloned().collect();
    assert_eq!(
        incremental,
        t.resources(),
        "step {step}: accumulated deltas != resources()"
    );
    let mut fresh = Translator::new(options(standalone));
    fresh.apply(current.iter().cloned().map(ObjectChange::upsert));
    let want = fresh.resources();
    if incremental != want {
        let a: Vec<_> = incremental.iter().filter(|r| !want.contains(r)).collect();
        let b: Vec<_> = want.iter().filter(|r| !incremental.contains(r)).collect();
        panic!(
            "step {step}: incremental IR differs from fresh\nonly incremental: {a:#?}\nonly fresh: {b:#?}"
        );
    }
    assert_eq!(
        t.statuses(),
        fresh.statuses(),
        "step {step}: statuses differ from fresh"
    );
    for (k, s) in fresh.statuses() {
        assert_eq!(
            acc.statuses.get(&k),
            Some(&*s),
            "step {step}: emitted status of {k} is stale"
        );
    }
}

fn run(seed: u64, standalone: bool, steps: usize) {
    let pool = pool();
    let mut rng = Rng(seed);
    // Whether and where a step's batch is split into staged parts: its own sequence, so
    // the steps themselves are those of the seed.
    let mut split = Rng(seed ^ 0x5eed_5eed_5eed_5eed);
    let mut t = Translator::new(options(standalone));
    let mut acc = Accumulator::default();
    // Current objects in first-seen order (what a fresh translator must be fed).
    let mut current: Vec<Arc<Object>> = Vec::new();
    for step in 0..steps {
        let n = 1 + rng.below(3);
        let mut changes = Vec::new();
        for _ in 0..n {
            let slot = &pool[rng.below(pool.len())];
            let key = slot[0].key();
            let pos = current.iter().position(|o| o.key() == key);
            if let Some(p) = pos.filter(|_| rng.below(10) < 3) {
                current.remove(p);
                changes.push(ObjectChange::Delete(key));
            } else {
                let obj = slot[rng.below(slot.len())].clone();
                match pos {
                    Some(p) => current[p] = obj.clone(),
                    None => current.push(obj.clone()),
                }
                changes.push(ObjectChange::upsert(obj));
            }
        }
        if std::env::var_os("WEIR_TRACE").is_some() {
            for c in &changes {
                match c {
                    ObjectChange::Upsert(k, o) => eprintln!("{step}: upsert {k} {o:?}"),
                    ObjectChange::Delete(k) => eprintln!("{step}: delete {k}"),
                }
            }
        }
        let outs = if split.below(2) == 0 {
            vec![t.apply(changes)]
        } else {
            staged_in_parts(&mut t, changes, &mut split)
        };
        for out in &outs {
            acc.apply(out);
        }
        check_equivalent(&t, &acc, &current, standalone, step);
    }
    // Deleting everything leaves nothing behind.
    let out = t.apply(current.iter().map(|o| ObjectChange::Delete(o.key())));
    acc.apply(&out);
    assert!(
        t.resources().is_empty(),
        "resources left after deleting everything: {:?}",
        t.resources()
    );
    assert!(acc.resources.is_empty());
    assert!(t.statuses().is_empty());
}

/// `changes` staged in parts of random sizes, some parts emitted as they are staged
/// (`emit_part`, as the first load of `weir run` does), the rest at once: the batches
/// in order, as outputs without statuses, then the last with every part's statuses.
fn staged_in_parts(
    t: &mut Translator,
    changes: Vec<ObjectChange>,
    rng: &mut Rng,
) -> Vec<TranslateOutput> {
    let expected = changes.len();
    let mut staged = Staged::default();
    let mut rest = changes;
    let mut outputs = Vec::new();
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len());
        let part: Vec<ObjectChange> = rest.drain(..n).collect();
        t.stage(&mut staged, part, expected);
        if rng.below(2) == 0 {
            outputs.push(TranslateOutput {
                batch: t.emit_part(&mut staged),
                statuses: Vec::new(),
            });
        }
    }
    outputs.push(t.emit(staged));
    outputs
}

/// The initial load read while it is translated: every object of the pool staged in
/// parts (of one object up to all of them) emits what one batch of all of them emits.
#[test]
fn a_batch_staged_in_parts_emits_what_one_apply_does() {
    let pool = pool();
    for standalone in [true, false] {
        for variant in 0..3 {
            let all: Vec<ObjectChange> = pool
                .iter()
                .map(|v| ObjectChange::upsert(v[variant % v.len()].clone()))
                .collect();
            let mut whole = Translator::new(options(standalone));
            let want = whole.apply(all.clone());
            for seed in 1..=6u64 {
                let mut t = Translator::new(options(standalone));
                let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut outs = staged_in_parts(&mut t, all.clone(), &mut rng);
                let got = outs.pop().expect("the last output");
                assert_eq!(
                    t.resources(),
                    whole.resources(),
                    "variant {variant} seed {seed}"
                );
                assert_eq!(
                    t.statuses(),
                    whole.statuses(),
                    "variant {variant} seed {seed}"
                );
                let mut acc = Accumulator::default();
                for out in &outs {
                    acc.apply(out);
                }
                acc.apply(&got);
                assert_eq!(
                    acc.resources.values().cloned().collect::<Vec<_>>(),
                    whole.resources(),
                    "variant {variant} seed {seed}: the emitted batches ({} emitted early)",
                    outs.len()
                );
                assert_eq!(got.statuses, want.statuses, "variant {variant} seed {seed}");
            }
        }
    }
}

#[test]
fn incremental_equals_fresh_standalone() {
    for seed in 1..=(std::env::var("WEIR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8u64))
    {
        run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), true, 250);
    }
}

#[test]
fn incremental_equals_fresh_kubernetes_mode() {
    for seed in 1..=4u64 {
        run(seed.wrapping_mul(0x5851_f42d_4c95_7f2d) + 1, false, 250);
    }
}

#[test]
fn identical_upsert_and_unknown_delete_are_noops() {
    let pool = pool();
    let mut t = Translator::new(options(true));
    let all: Vec<_> = pool
        .iter()
        .map(|v| ObjectChange::upsert(v[0].clone()))
        .collect();
    assert!(!t.apply(all.clone()).is_empty());
    assert!(t.apply(all).is_empty());
    let k = ObjectKey::new(weir_api::Kind::HttpRoute, "default", "nope");
    assert!(t.apply([ObjectChange::Delete(k)]).is_empty());
}

#[test]
fn gateway_taking_the_ingress_socket_without_programming_it_removes_the_ingress_listener() {
    let objects = load(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i, namespace: default}
spec:
  defaultBackend: {service: {name: svc, port: {number: 80}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  addresses: [{value: 127.0.0.1}]
  listeners: [{name: broken, port: 8080, protocol: HTTPS, tls: {certificateRefs: [{name: nope}]}}]
"#,
    );
    let mut t = Translator::new(options(true));
    let mut acc = Accumulator::default();
    acc.apply(&t.apply([ObjectChange::upsert(objects[0].clone())]));
    assert_eq!(t.resources().len(), 2, "{:?}", t.resources());
    acc.apply(&t.apply([ObjectChange::upsert(objects[1].clone())]));
    assert!(t.resources().is_empty(), "{:?}", t.resources());
    acc.apply(&t.apply([ObjectChange::Delete(objects[1].key())]));
    assert_eq!(t.resources().len(), 2);
    check_equivalent(&t, &acc, &objects[..1], true, 0);
}

#[test]
fn more_ingress_classes_take_over_ingresses_of_those_classes() {
    let objects = load(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: from-nginx, namespace: default}
spec:
  ingressClassName: nginx
  rules: [{host: a.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: other, namespace: default}
spec:
  ingressClassName: traefik
  rules: [{host: b.test, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}]}}]
"#,
    );
    let hosts = |t: &Translator| -> Vec<String> {
        t.resources()
            .iter()
            .filter_map(|r| match r {
                weir_model::Resource::VirtualHost(v) => Some(format!("{:?}", v.host)),
                _ => None,
            })
            .collect()
    };
    // Only `weir` (the default): neither Ingress is ours.
    let mut t = Translator::new(options(true));
    t.apply(objects.iter().cloned().map(ObjectChange::upsert));
    assert!(hosts(&t).is_empty(), "{:?}", hosts(&t));
    // `--ingress-class weir --ingress-class nginx`: the nginx one is, the traefik one not.
    let mut t = Translator::new(weir_translate::TranslatorOptions {
        more_ingress_classes: vec!["nginx".into()],
        ..options(true)
    });
    t.apply(objects.iter().cloned().map(ObjectChange::upsert));
    let h = hosts(&t);
    assert!(h.iter().any(|k| k.contains("a.test")), "{h:?}");
    assert!(!h.iter().any(|k| k.contains("b.test")), "{h:?}");
}

/// A ConfigMap's arrival or removal recompiles only the Gateways whose
/// `infrastructure.parametersRef` names it; a data-only change or an unrelated ConfigMap
/// changes nothing.
#[test]
fn config_map_changes_reach_only_the_gateways_naming_it() {
    let gateway = |name: &str, port: u16, params: Option<&str>| {
        let mut g = serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"gatewayClassName": "weir",
                     "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}]}});
        if let Some(p) = params {
            g["spec"]["infrastructure"] =
                serde_json::json!({"parametersRef": {"group": "", "kind": "ConfigMap", "name": p}});
        }
        Arc::new(Object::from_value(g).unwrap())
    };
    let config_map = |name: &str, data: &str| {
        Arc::new(
            Object::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default"}, "data": {"k": data}}))
            .unwrap(),
        )
    };
    let mut t = Translator::new(options(true));
    let mut gateways: Vec<_> = (0..20)
        .map(|i| gateway(&format!("plain-{i}"), 9000 + i, None))
        .collect();
    gateways.push(gateway("named", 8999, Some("params")));
    t.apply(gateways.into_iter().map(ObjectChange::upsert));
    let accepted = |out: &weir_translate::TranslateOutput| -> Vec<(String, bool)> {
        out.statuses
            .iter()
            .filter_map(|(k, s)| match &**s {
                weir_api::ObjectStatus::Gateway(g) => Some((
                    k.name.to_string(),
                    g.conditions
                        .iter()
                        .any(|c| c.type_ == "Accepted" && c.is_true()),
                )),
                _ => None,
            })
            .collect()
    };
    let out = t.apply([ObjectChange::upsert(config_map("params", "1"))]);
    assert_eq!(accepted(&out), [("named".to_string(), true)]);
    assert!(
        !out.batch.is_empty(),
        "the accepted Gateway's listener is programmed"
    );
    assert!(
        t.apply([ObjectChange::upsert(config_map("params", "2"))])
            .is_empty()
    );
    assert!(
        t.apply([ObjectChange::upsert(config_map("other", "1"))])
            .is_empty()
    );
    let out = t.apply([ObjectChange::Delete(ObjectKey::new(
        weir_api::Kind::ConfigMap,
        "default",
        "params",
    ))]);
    assert_eq!(accepted(&out), [("named".to_string(), false)]);
}
