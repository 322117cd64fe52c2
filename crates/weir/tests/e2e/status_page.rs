//! The status page in a real browser (headless Chromium) over `weir run`, and its JSON API.
//!
//! Chromium comes from Debian's `chromium` package (`.ci/run` installs it). Without it the
//! browser test is skipped with a message, unless `WEIR_REQUIRE_CHROMIUM` is set (CI),
//! where it fails. `WEIR_STATUS_SCREENSHOT=PATH` (absolute: tests run in `crates/weir`)
//! keeps the screenshot (docs/status-page.png was taken so).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 1400;

/// A self-signed certificate for `names`, valid 2025-01-01 to 2030-06-15.
fn certificate(names: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2030, 6, 15);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A configuration with routes, a certificate, a Backend with a dead endpoint under a
/// health check, a route to a missing Backend (refused by the translator) and a route
/// whose hostname is markup (refused by validation; its message quotes the value).
fn manifests(
    http: u16,
    https: u16,
    live: SocketAddr,
    dead: SocketAddr,
) -> Vec<(&'static str, String)> {
    let (cert, key) = certificate(&["shop.status.test"]);
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {http}}}
  - name: https
    protocol: HTTPS
    port: {https}
    hostname: shop.status.test
    tls: {{certificateRefs: [{{name: shop-cert}}]}}
"
    );
    let routes = format!(
        "{}---\n{}---\n{}",
        http_route("storefront", "shop.status.test", "pool"),
        http_route("checkout", "pay.status.test", "pool"),
        http_route("broken", "broken.status.test", "missing-backend"),
    );
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: pool-health}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: pool}]
  healthCheck: {type: TCP, interval: 100ms, timeout: 100ms, unhealthyThreshold: 1}
"
    .to_string();
    let markup = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: markup}
spec:
  parentRefs: [{name: gw}]
  hostnames: [\"<img src=x onerror=document.title='pwned'>\"]
  rules: [{backendRefs: [{group: weir.dev, kind: Backend, name: pool}]}]
"
    .to_string();
    vec![
        ("gateway.yaml", gateway),
        ("routes.yaml", routes),
        ("backend.yaml", backend("default", "pool", &[live, dead])),
        ("policy.yaml", policy),
        ("cert.yaml", tls_secret("default", "shop-cert", &cert, &key)),
        ("markup.yaml", markup),
    ]
}

async fn start() -> (Gateway, SocketAddr) {
    let live = echo("live").await;
    let dead: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let files = manifests(free_port(), free_port(), live, dead);
    let files: Vec<(&str, String)> = files.into_iter().collect();
    let gw = Gateway::start(&files).await;
    // The probes take the dead endpoint out.
    assert!(
        eventually(Duration::from_secs(10), || async {
            gw.admin_get("/api/v1/backends?unhealthy=1").await.json()["matched"] == 1
        })
        .await,
        "the dead endpoint is found unhealthy"
    );
    (gw, dead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_api_reports_what_the_page_shows() {
    let (gw, dead) = start().await;
    let s = gw.admin_get("/api/v1/status").await;
    assert_eq!(s.status, 200);
    assert_eq!(s.headers["content-type"], "application/json");
    let v = s.json();
    assert_eq!(v["mode"], "weir run");
    assert_eq!(v["ready"], true);
    let c = &v["counts"];
    assert_eq!(c["listeners"], 2, "{v:#}");
    assert_eq!(c["certificates"], 1);
    assert_eq!(c["unhealthy_endpoints"], 1);
    assert_eq!(c["rejected_objects"], 2, "broken and markup: {v:#}");
    let phases: Vec<&str> = v["propagation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "end_to_end",
            "parse",
            "translate",
            "apply",
            "data_plane_apply"
        ]
    );
    assert!(v["propagation"][0]["count"].as_u64().unwrap() >= 1);
    // No markup reaches the body unescaped.
    assert!(!s.body.contains('<'), "{}", s.body);

    // On both listeners (the HTTPS one's hostname is the route's).
    let r = gw.admin_get("/api/v1/routes?q=storefront").await.json();
    assert_eq!(r["matched"], 2, "{r:#}");
    let protocols: Vec<&str> = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(protocols.len(), 2);
    assert!(
        protocols.contains(&"HTTP") && protocols.contains(&"HTTPS"),
        "{r:#}"
    );
    assert_eq!(r["items"][0]["host"], "shop.status.test");
    assert_eq!(r["items"][0]["routes"][0], "HTTPRoute default/storefront");

    let b = gw.admin_get("/api/v1/backends?q=pool").await.json();
    let eps = b["items"][0]["endpoints"].as_array().unwrap().clone();
    let dead_ep = eps
        .iter()
        .find(|e| e["address"] == dead.to_string())
        .unwrap();
    assert_eq!(dead_ep["health"], "unhealthy", "{b:#}");
    assert!(eps.iter().any(|e| e["health"] == "healthy"), "{b:#}");

    let certs = gw.admin_get("/api/v1/certificates").await.json();
    assert_eq!(certs["items"][0]["not_after"], "2030-06-15T00:00:00Z");
    assert_eq!(certs["items"][0]["names"][0], "shop.status.test");
    assert!(!certs.to_string().contains("PRIVATE"));

    let rej = gw.admin_get("/api/v1/rejections?q=broken").await.json();
    let problem = &rej["items"][0]["problems"][0];
    assert_eq!(
        rej["items"][0]["object"], "HTTPRoute default/broken",
        "{rej:#}"
    );
    assert_eq!(problem["reason"], "BackendNotFound", "{rej:#}");
    assert_eq!(problem["condition"], "ResolvedRefs=False");
    assert!(
        rej["items"][0]["origin"]
            .as_str()
            .unwrap()
            .contains("routes.yaml#2")
    );

    // The page itself: HTML, a policy that runs only its own script.
    let page = gw.admin_get("/").await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'sha256-") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(gw.admin_get("/status").await.body, page.body);

    // A fix is seen: the broken route gets its backend.
    gw.write(
        "missing.yaml",
        &backend("default", "missing-backend", &[dead]),
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            gw.admin_get("/api/v1/status").await.json()["counts"]["rejected_objects"] == 1
        })
        .await,
        "the fixed route is no longer rejected"
    );
    gw.gw.stop().await;
}

/// Chromium, if present: `WEIR_CHROMIUM`, else `chromium` on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEIR_CHROMIUM") {
        return Some(p.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs headless Chromium on `url` with `args`, killed after 90 s; returns its stdout.
fn browse(browser: &Path, profile: &Path, args: &[String], url: &str) -> String {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--mute-audio",
        "--force-device-scale-factor=1",
        // Scripts run and the page's fetches finish before the DOM is dumped.
        "--virtual-time-budget=6000",
    ]);
    cmd.arg(format!("--user-data-dir={}", profile.display()));
    if running_as_root() {
        // Chromium refuses to start its sandbox as root (CI containers).
        cmd.arg("--no-sandbox");
    }
    cmd.args(args).arg(url);
    let out_path = profile.join("stdout");
    let err_path = profile.join("stderr");
    cmd.stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .stdin(Stdio::null());
    let mut child = cmd.spawn().expect("start chromium");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish in 90 s: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "chromium failed ({status}): {}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    std::fs::read_to_string(&out_path).unwrap()
}

/// Distinct RGB colours of a PNG of exactly `width` × `height` (panics otherwise).
fn png_colours(path: &Path, width: u32, height: u32) -> usize {
    let mut decoder =
        png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!(
        (info.width, info.height),
        (width, height),
        "screenshot size"
    );
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected colour type {other:?}"),
    };
    let mut colours = std::collections::HashSet::new();
    for px in buf[..info.buffer_size()].chunks_exact(channels) {
        colours.insert((px[0], px[1], px[2]));
    }
    colours.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("WEIR_REQUIRE_CHROMIUM").is_none(),
            "WEIR_REQUIRE_CHROMIUM is set but chromium is not on the PATH"
        );
        eprintln!("skipped: no chromium on the PATH (apt-get install chromium)");
        return;
    };
    let (gw, dead) = start().await;
    let url = format!("http://{}/", gw.gw.admin_addr);
    let profile = tempfile::tempdir().unwrap();

    let dom = {
        let (b, p, u) = (browser.clone(), profile.path().to_path_buf(), url.clone());
        tokio::task::spawn_blocking(move || browse(&b, &p, &["--dump-dom".into()], &u))
            .await
            .unwrap()
    };
    // What the scripts wrote from the API (none of it is in the page's source).
    for needle in [
        "HTTPRoute default/storefront",
        "HTTPRoute default/checkout",
        "shop.status.test",
        "2030-06-15T00:00:00Z",
        "BackendNotFound",
        "HTTPRoute default/broken",
        &format!("{dead} unhealthy"),
        "weir run",
        "end to end",
    ] {
        assert!(
            dom.contains(needle),
            "{needle} missing from the DOM:\n{dom}"
        );
    }
    // The markup in a rejection message is shown as text, never parsed.
    assert!(
        dom.contains("&lt;img src=x onerror="),
        "the markup is shown as text:\n{dom}"
    );
    assert!(!dom.contains("<img"), "an element was injected:\n{dom}");
    assert!(
        dom.contains("<title>weir status</title>"),
        "no handler ran:\n{dom}"
    );
    // Every fetch succeeded: the error banner is empty and hidden.
    assert!(
        dom.contains(r#"<div id="error" class="error" style="display: none;"></div>"#),
        "{dom}"
    );

    let shot = profile.path().join("page.png");
    {
        let (b, p, u) = (browser, profile.path().to_path_buf(), url);
        let args = vec![
            format!("--screenshot={}", shot.display()),
            format!("--window-size={WIDTH},{HEIGHT}"),
        ];
        tokio::task::spawn_blocking(move || browse(&b, &p, &args, &u))
            .await
            .unwrap();
    }
    let colours = png_colours(&shot, WIDTH, HEIGHT);
    // Text, badges, cards and bars: a blank or single-colour page has 1 or 2.
    assert!(colours >= 16, "only {colours} colours: a blank page?");
    if let Some(keep) = std::env::var_os("WEIR_STATUS_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    gw.gw.stop().await;
}
