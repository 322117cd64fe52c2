use std::time::Instant;
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20000);
    let dir = std::path::PathBuf::from(format!("/tmp/perf{n}"));
    if !dir.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..n {
            std::fs::write(dir.join(format!("r{i:06}.yaml")), format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r{i}\n  namespace: default\nspec:\n  parentRefs:\n  - name: gw\n  hostnames: [\"h{i}.example.com\"]\n  rules:\n  - matches:\n    - path: {{type: PathPrefix, value: /}}\n    backendRefs:\n    - name: echo\n      port: 8080\n")).unwrap();
        }
    }
    let mut p = weir_provider_file::FileProvider::new(&dir);
    let t = Instant::now();
    let u = p.load_all();
    println!("load_all {n}: {:?} ({} upserts)", t.elapsed(), u.upserts.len());
    let f = dir.join("r000007.yaml");
    for k in 0..std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(5) {
        std::fs::write(&f, format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r7\n  namespace: default\nspec:\n  hostnames: [\"x{k}.example.com\"]\n")).unwrap();
        let t = Instant::now();
        let u = p.reload(std::slice::from_ref(&f));
        if k < 5 || k % 100 == 0 { println!("reload one: {:?} ({} upserts)", t.elapsed(), u.upserts.len()); }
    }
    let t = Instant::now();
    let u = p.load_all();
    println!("load_all again (unchanged): {:?} ({})", t.elapsed(), u.upserts.len());
}
