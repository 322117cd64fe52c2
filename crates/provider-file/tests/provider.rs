//! FileProvider behaviour on real files in a temporary directory.

use std::path::Path;
use std::sync::Arc;

use weir_api::{Kind, Object, ObjectKey};
use weir_provider_file::{FileErrorKind, FileProvider, Update, watch};

fn ns(name: &str, label: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{team: {label}}}\n"
    )
}

fn route(name: &str, path_type: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: {name}\n  namespace: ns\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - matches:\n    - path: {{type: {path_type}, value: /x}}\n"
    )
}

fn ns_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::Namespace, "", name)
}

fn route_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::HttpRoute, "ns", name)
}

/// The keys upserted, each checked to be its object's.
fn upserted(u: &Update) -> Vec<ObjectKey> {
    u.upserts
        .iter()
        .map(|(k, o)| {
            assert_eq!(*k, o.key(), "an upsert's key is its object's");
            k.clone()
        })
        .collect()
}

fn label(o: &Object) -> String {
    o.metadata().labels.get("team").cloned().unwrap_or_default()
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn reads_multi_document_files_with_document_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("all.yaml");
    write(
        &file,
        &format!(
            "# leading comment\n{}---\n---\n{}",
            ns("a", "x"),
            route("r", "Exact")
        ),
    );
    let mut p = FileProvider::new(dir.path());
    let u = p.load_all();
    assert!(u.errors.is_empty(), "{:?}", u.errors);
    assert_eq!(upserted(&u), vec![route_key("r"), ns_key("a")]);
    assert_eq!(p.origin(&ns_key("a")).unwrap().document, 0);
    let o = p.origin(&route_key("r")).unwrap();
    assert_eq!((&*o.file, o.document), (file.as_path(), 2));
    assert_eq!(p.len(), 2);
}

/// An object the API server would refuse (here an HTTPRoute path type outside its
/// enum, and a label value with a space) is rejected alone, with every field named; on a
/// reload its last good version stays, and its valid siblings are served.
#[test]
fn objects_the_api_server_would_refuse_are_rejected_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.yaml");
    write(
        &file,
        &format!(
            "{}---
{}",
            route("r", "Exact"),
            ns("a", "x")
        ),
    );
    let mut p = FileProvider::new(dir.path());
    assert!(p.load_all().errors.is_empty());

    write(
        &file,
        &format!(
            "{}---
{}",
            route("r", "Glob"),
            ns("a", "two words")
        ),
    );
    let u = p.reload(std::slice::from_ref(&file));
    assert!(u.upserts.is_empty() && u.deletes.is_empty(), "{u:?}");
    let shown: Vec<String> = u.errors.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0].starts_with(&format!(
            "{}#0: HTTPRoute ns/r is invalid: spec.rules[0].matches[0].path.type: Unsupported value: \"Glob\"",
            file.display()
        )),
        "{shown:?}"
    );
    assert!(
        shown[0].ends_with("; keeping its previous version"),
        "{shown:?}"
    );
    assert!(
        shown[1].contains("metadata.labels: Invalid value: \"two words\""),
        "{shown:?}"
    );
    assert_eq!(u.errors[0].object.as_deref(), Some("HTTPRoute ns/r"));
    assert_eq!(u.errors[0].kind, FileErrorKind::InvalidObject);
    assert_eq!(label(p.get(&ns_key("a")).unwrap()), "x");
    assert!(p.get(&route_key("r")).is_some());

    // A valid sibling beside a refused object is served.
    write(
        &file,
        &format!(
            "{}---
{}",
            route("r", "Glob"),
            ns("a", "z")
        ),
    );
    let u = p.reload(std::slice::from_ref(&file));
    assert_eq!(upserted(&u), vec![ns_key("a")], "{u:?}");
    assert_eq!(u.errors.len(), 1, "{:?}", u.errors);
}

#[test]
fn invalid_yaml_in_one_document_keeps_that_document_s_last_good_object() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.yaml");
    write(&file, &format!("{}---\n{}", ns("a", "x"), ns("b", "x")));
    let mut p = FileProvider::new(dir.path());
    assert_eq!(p.load_all().upserts.len(), 2);

    // Document 0 changed, document 1 broken: the change is served, the broken document's
    // object keeps its previous version.
    write(
        &file,
        &format!("{}---\nmetadata: [unclosed\n", ns("a", "changed")),
    );
    let u = p.reload(std::slice::from_ref(&file));
    assert_eq!(upserted(&u), vec![ns_key("a")]);
    assert!(u.deletes.is_empty(), "{u:?}");
    assert_eq!(u.errors.len(), 1, "{:?}", u.errors);
    assert_eq!(u.errors[0].kind, FileErrorKind::Syntax);
    assert_eq!(u.errors[0].document, Some(1));
    let shown = u.errors[0].to_string();
    assert!(
        shown.starts_with(&format!("{}#1: invalid YAML", file.display())),
        "{shown}"
    );
    assert!(shown.contains("line 7"), "{shown}");
    assert!(shown.contains("keeping its previous version"), "{shown}");
    assert_eq!(label(p.get(&ns_key("a")).unwrap()), "changed");
    assert_eq!(label(p.get(&ns_key("b")).unwrap()), "x");

    // The same bad bytes again: not parsed again, nothing reported.
    assert!(p.reload(std::slice::from_ref(&file)).is_empty());

    // Fixed: the difference against the last good objects.
    write(&file, &ns("a", "fixed"));
    let u = p.reload(std::slice::from_ref(&file));
    assert_eq!(upserted(&u), vec![ns_key("a")]);
    assert_eq!(u.deletes, vec![ns_key("b")]);
    assert!(u.errors.is_empty());
}

#[test]
fn a_bad_field_keeps_that_objects_previous_version_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("routes.yaml");
    write(
        &file,
        &format!("{}---\n{}", ns("a", "x"), route("r", "Exact")),
    );
    let mut p = FileProvider::new(dir.path());
    p.load_all();
    let before = p.get(&route_key("r")).unwrap().clone();

    // Document 1 gets a wrongly typed field; document 0 changes validly; document 2 is a
    // new, invalid object with no previous version.
    write(
        &file,
        &format!(
            "{}---\n{}---\n{}",
            ns("a", "z"),
            route("r", "[1]"),
            route("new", "{a: b}")
        ),
    );
    let u = p.reload(std::slice::from_ref(&file));
    assert_eq!(upserted(&u), vec![ns_key("a")]);
    assert!(u.deletes.is_empty());
    assert_eq!(u.errors.len(), 2, "{:?}", u.errors);
    let e = &u.errors[0];
    assert_eq!(
        (e.kind, e.document),
        (FileErrorKind::InvalidObject, Some(1))
    );
    let shown = e.to_string();
    for part in [
        format!("{}#1: ", file.display()),
        "HTTPRoute ns/r".to_string(),
        "spec.rules[0].matches[0].path.type".to_string(),
        "keeping its previous version".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
    assert!(
        u.errors[1].to_string().contains("#2: HTTPRoute ns/new"),
        "{}",
        u.errors[1]
    );
    assert!(Arc::ptr_eq(p.get(&route_key("r")).unwrap(), &before));
    assert!(p.get(&route_key("new")).is_none());

    // Removing the bad document now deletes the object it kept.
    write(&file, &ns("a", "z"));
    let u = p.reload(std::slice::from_ref(&file));
    assert_eq!(u.deletes, vec![route_key("r")]);
    assert!(u.upserts.is_empty() && u.errors.is_empty(), "{u:?}");
}

#[test]
fn unsupported_and_non_object_documents_are_reported_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("mixed.yaml"),
        &format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\n---\njust a string\n---\n{}",
            ns("a", "x")
        ),
    );
    let mut p = FileProvider::new(dir.path());
    let u = p.load_all();
    assert_eq!(upserted(&u), vec![ns_key("a")]);
    let kinds: Vec<_> = u.errors.iter().map(|e| (e.kind, e.document)).collect();
    assert_eq!(
        kinds,
        vec![
            (FileErrorKind::UnsupportedKind, Some(0)),
            (FileErrorKind::InvalidObject, Some(1))
        ]
    );
}

#[test]
fn added_modified_removed_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = FileProvider::new(dir.path());
    assert!(p.load_all().is_empty());

    let a = dir.path().join("a.yaml");
    write(&a, &format!("{}---\n{}", ns("a", "x"), ns("b", "x")));
    let u = p.reload(std::slice::from_ref(&a));
    assert_eq!(upserted(&u), vec![ns_key("a"), ns_key("b")]);

    // Only the changed object is reported.
    write(&a, &format!("{}---\n{}", ns("a", "x"), ns("b", "z")));
    let u = p.reload(std::slice::from_ref(&a));
    assert_eq!(upserted(&u), vec![ns_key("b")]);
    assert!(u.deletes.is_empty());

    // Same bytes, or the same objects written differently: nothing to report.
    assert!(p.reload(std::slice::from_ref(&a)).is_empty());
    write(
        &a,
        &format!("# reformatted\n{}---\n{}", ns("a", "x"), ns("b", "z")),
    );
    assert!(p.reload(std::slice::from_ref(&a)).is_empty());

    std::fs::remove_file(&a).unwrap();
    let u = p.reload(std::slice::from_ref(&a));
    assert_eq!(u.deletes, vec![ns_key("a"), ns_key("b")]);
    assert!(p.is_empty());
}

#[test]
fn a_directory_listed_again_forgets_only_the_files_gone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("a.yaml"), &ns("a", "x"));
    write(&root.join("b.yaml"), &ns("b", "x"));
    write(&root.join("sub/c.yaml"), &ns("c", "x"));
    let mut p = FileProvider::new(root);
    assert_eq!(
        upserted(&p.load_all()),
        vec![ns_key("a"), ns_key("b"), ns_key("c")]
    );
    std::fs::remove_file(root.join("b.yaml")).unwrap();
    write(&root.join("d.yaml"), &ns("d", "x"));
    let u = p.reload(&[root.to_path_buf()]);
    assert_eq!(u.deletes, vec![ns_key("b")]);
    assert_eq!(upserted(&u), vec![ns_key("d")]);
    // A directory whose files were all known is listed again with none gone.
    assert!(p.reload(&[root.join("sub")]).is_empty());
}

#[test]
fn a_key_defined_twice_goes_to_the_first_file_in_path_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    write(&b, &ns("same", "from-b"));
    write(&a, &ns("same", "from-a"));
    let mut p = FileProvider::new(dir.path());
    let u = p.load_all();
    assert_eq!(u.upserts.len(), 1);
    assert_eq!(label(&u.upserts[0].1), "from-a");
    assert_eq!(u.errors.len(), 1, "{:?}", u.errors);
    let e = &u.errors[0];
    assert_eq!(
        (e.kind, e.file.as_path()),
        (FileErrorKind::Duplicate, b.as_path())
    );
    assert!(
        e.message.contains(&format!(
            "duplicate of Namespace same defined in {}",
            a.display()
        )),
        "{e}"
    );

    // Changing the losing definition changes nothing but is reported again.
    write(&b, &ns("same", "from-b2"));
    let u = p.reload(std::slice::from_ref(&b));
    assert!(!u.has_changes());
    assert_eq!(u.errors.len(), 1);

    // The winner goes away: the other definition takes over.
    std::fs::remove_file(&a).unwrap();
    let u = p.reload(std::slice::from_ref(&a));
    assert_eq!(u.upserts.len(), 1);
    assert_eq!(label(&u.upserts[0].1), "from-b2");
    assert!(u.deletes.is_empty() && u.errors.is_empty(), "{u:?}");
    assert_eq!(*p.origin(&ns_key("same")).unwrap().file, *b);

    // And back.
    write(&a, &ns("same", "from-a"));
    let u = p.reload(std::slice::from_ref(&a));
    assert_eq!(label(&u.upserts[0].1), "from-a");
    assert_eq!(u.errors.len(), 1);
    assert_eq!(u.errors[0].file, b);
}

#[test]
fn recursion_skips_hidden_and_non_manifest_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("sub/deep/a.yaml"), &ns("a", "x"));
    write(&root.join("sub/b.YML"), &ns("b", "x"));
    write(&root.join(".hidden/c.yaml"), &ns("c", "x"));
    write(&root.join(".d.yaml"), &ns("d", "x"));
    write(&root.join("e.yaml.swp"), &ns("e", "x"));
    write(&root.join("f.json"), &ns("f", "x"));
    let mut p = FileProvider::new(root);
    let u = p.load_all();
    assert_eq!(upserted(&u), vec![ns_key("a"), ns_key("b")]);

    // A hidden or non-manifest path named in a reload is ignored.
    let u = p.reload(&[root.join(".hidden/c.yaml"), root.join("f.json")]);
    assert!(u.is_empty(), "{u:?}");

    // A new directory is scanned; a removed one deletes what it held.
    write(&root.join("new/g.yaml"), &ns("g", "x"));
    assert_eq!(upserted(&p.reload(&[root.join("new")])), vec![ns_key("g")]);
    std::fs::remove_dir_all(root.join("sub")).unwrap();
    let u = p.reload(&[root.join("sub")]);
    assert_eq!(u.deletes, vec![ns_key("a"), ns_key("b")]);

    // Rescanning the root again reports nothing new.
    assert!(p.reload(&[root.to_path_buf()]).is_empty());
    assert!(p.load_all().is_empty());
}

#[cfg(unix)]
#[test]
fn follows_the_kubernetes_data_symlink_swap() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("..2026_01/cfg.yaml"), &ns("a", "v1"));
    symlink("..2026_01", root.join("..data")).unwrap();
    symlink("..data/cfg.yaml", root.join("cfg.yaml")).unwrap();
    let mut p = FileProvider::new(root);
    let u = p.load_all();
    assert_eq!(upserted(&u), vec![ns_key("a")]);
    assert_eq!(
        *p.origin(&ns_key("a")).unwrap().file,
        *root.join("cfg.yaml")
    );

    // What the kubelet does: new directory, new link, rename over `..data`.
    write(&root.join("..2026_02/cfg.yaml"), &ns("a", "v2"));
    symlink("..2026_02", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_01")).unwrap();
    let u = p.reload(&[root.join("..data")]);
    assert_eq!(u.upserts.len(), 1);
    assert_eq!(label(&u.upserts[0].1), "v2");
}

#[test]
fn a_single_file_root() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("weir.conf");
    write(&file, &ns("a", "x"));
    let mut p = FileProvider::new(&file);
    assert_eq!(upserted(&p.load_all()), vec![ns_key("a")]);
    write(&file, &ns("a", "z"));
    assert_eq!(
        upserted(&p.reload(std::slice::from_ref(&file))),
        vec![ns_key("a")]
    );
    std::fs::remove_file(&file).unwrap();
    let u = p.reload(std::slice::from_ref(&file));
    assert_eq!(u.deletes, vec![ns_key("a")]);
    assert_eq!(u.errors.len(), 1);
}

#[test]
fn loads_many_files_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..500 {
        write(
            &dir.path().join(format!("r{i:04}.yaml")),
            &route(&format!("r{i}"), "PathPrefix"),
        );
    }
    write(&dir.path().join("r0250.yaml"), "bad: [\n");
    let mut p = FileProvider::new(dir.path());
    assert!(p.root().is_absolute());
    let u = p.load_all();
    assert_eq!(u.upserts.len(), 499);
    assert_eq!(u.errors.len(), 1);
    assert!(u.errors[0].file.ends_with("r0250.yaml"));
    assert_eq!(
        *p.origin(&route_key("r7")).unwrap().file,
        *dir.path().join("r0007.yaml")
    );
}

/// The first read in parts: the parts hold what one `load_all` returns (a key defined
/// twice once, as the first file's; every error once), each part has up to `part` files,
/// and the provider ends in the same state (a reload after it sees nothing new).
#[test]
fn a_first_read_in_parts_holds_what_load_all_returns() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..300 {
        write(
            &dir.path().join(format!("r{i:04}.yaml")),
            &route(&format!("r{i}"), "PathPrefix"),
        );
    }
    write(&dir.path().join("r0150.yaml"), "bad: [\n");
    // The same key in a file of the first part and one of the last (that one loses).
    write(&dir.path().join("a.yaml"), &ns("same", "from-a"));
    write(&dir.path().join("z.yaml"), &ns("same", "from-z"));
    write(&dir.path().join("sub/s.yaml"), &ns("in-sub", "sub"));
    let whole = FileProvider::new(dir.path()).load_all();
    let key_set = |u: &[(ObjectKey, Arc<Object>)]| {
        let mut v: Vec<(ObjectKey, String)> = u
            .iter()
            .map(|(k, o)| {
                assert_eq!(*k, o.key());
                (k.clone(), label(o))
            })
            .collect();
        v.sort();
        v
    };
    // The first read lists the tree itself, or takes the watcher's listing (made as the
    // directories were watched): the same either way.
    for (part, watched) in [(1, false), (7, false), (7, true), (64, true), (1000, false)] {
        let mut watcher = watched.then(|| watch(dir.path()).unwrap().0);
        let listing = watcher.as_mut().and_then(|w| w.take_listing());
        assert_eq!(listing.as_ref().map(|l| l.files()), watched.then_some(303));
        assert!(watcher.as_mut().is_none_or(|w| w.take_listing().is_none()));
        let mut p = FileProvider::new(dir.path());
        let mut upserts = Vec::new();
        let mut errors = Vec::new();
        let mut progress = Vec::new();
        p.load_all_in_parts(part, listing, |u, at| {
            assert!(u.deletes.is_empty(), "{u:?}");
            upserts.extend(u.upserts);
            errors.extend(
                u.errors
                    .into_iter()
                    .map(|e| (format!("{:?}", e.kind), e.file)),
            );
            progress.push(at);
        });
        assert_eq!(key_set(&upserts), key_set(&whole.upserts), "part {part}");
        assert_eq!(
            upserts.len(),
            whole.upserts.len(),
            "part {part}: each key once"
        );
        let mut want: Vec<_> = whole
            .errors
            .iter()
            .map(|e| (format!("{:?}", e.kind), e.file.clone()))
            .collect();
        want.sort();
        errors.sort();
        assert_eq!(errors, want, "part {part}");
        let files: usize = 303;
        assert_eq!(progress.len(), files.div_ceil(part), "part {part}");
        assert!(progress.iter().all(|at| at.files == files));
        assert!(progress.windows(2).all(|w| w[1].read - w[0].read <= part));
        assert_eq!(progress.last().unwrap().read, files);
        assert_eq!(label(p.get(&ns_key("same")).unwrap()), "from-a");
        let again = p.reload(&[dir.path().to_path_buf()]);
        assert!(!again.has_changes(), "part {part}: {again:?}");
    }
}

#[test]
fn a_directory_replaced_by_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("x.yaml");
    write(&sub.join("inner.yaml"), &ns("inner", "x"));
    let mut p = FileProvider::new(dir.path());
    assert_eq!(upserted(&p.load_all()), vec![ns_key("inner")]);
    std::fs::remove_dir_all(&sub).unwrap();
    write(&sub, &ns("outer", "x"));
    let u = p.reload(std::slice::from_ref(&sub));
    assert_eq!(upserted(&u), vec![ns_key("outer")]);
    assert_eq!(u.deletes, vec![ns_key("inner")]);
}
