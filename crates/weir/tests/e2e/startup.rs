//! The first configuration, read in parts while it is translated: served whole, as one
//! read of every file would be.

use std::net::SocketAddr;

use crate::support::*;

/// 5,000 route files (20 parts of the first read, 256 files each): a route at each end
/// of several parts served, a broken file in a middle part refused alone and named on the
/// status page, and a route defined again in the last file served as the first file has it —
/// while the Gateway and its Backends sort last, so every route read before them is
/// translated again when they arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_configuration_of_several_parts_is_served_whole() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let (a, b) = (echo("a").await, echo("b").await);
    let mut files: Vec<(String, String)> = (0..5000)
        .map(|i| {
            (
                format!("r{i:05}.yaml"),
                http_route(&format!("r{i}"), &format!("h{i}.parts.test"), "a"),
            )
        })
        .collect();
    files[2500].1 = "kind: HTTPRoute\nmetadata: [\n".into();
    files.push((
        "zz-again.yaml".into(),
        http_route("r7", "h7.parts.test", "b"),
    ));
    files.push((
        "zzz-gateway.yaml".into(),
        [
            http_gateway(port),
            backend("default", "a", &[a]),
            backend("default", "b", &[b]),
        ]
        .join("---\n"),
    ));
    let named: Vec<(&str, String)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    let gw = Gateway::start(&named).await;

    for i in [0, 255, 256, 2047, 2048, 4863, 4864, 4999] {
        let r = http1(addr, &format!("h{i}.parts.test"), "/").await.unwrap();
        assert_eq!((r.status.as_u16(), r.echo_name()), (200, Some("a")), "h{i}");
    }
    let r = http1(addr, "h7.parts.test", "/").await.unwrap();
    assert_eq!(
        (r.status.as_u16(), r.echo_name()),
        (200, Some("a")),
        "the first definition wins"
    );
    let r = http1(addr, "h2500.parts.test", "/").await.unwrap();
    assert_eq!(r.status, 404, "the broken file's route");

    let rej = gw.admin_get("/api/v1/rejections?q=r02500").await.json();
    assert_eq!(rej["items"].as_array().map(Vec::len), Some(1), "{rej:#}");
    let dup = gw.admin_get("/api/v1/rejections?q=zz-again").await.json();
    assert!(
        dup.to_string()
            .contains("duplicate of HTTPRoute default/r7"),
        "{dup:#}"
    );
    let status = gw.admin_get("/api/v1/status").await.json();
    assert_eq!(status["counts"]["rejected_objects"], 2, "{status:#}");
    gw.gw.stop().await;
}
