//! `watch` reports the changes editors and tools make, within a bounded wait.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use weir_provider_file::{FileProvider, watch};

const WAIT: Duration = Duration::from_secs(5);

/// Receives batches until one names `want` (or gives up after `WAIT`); returns every path
/// received on the way.
async fn wait_for(rx: &mut UnboundedReceiver<Vec<PathBuf>>, want: &Path) -> Vec<PathBuf> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !seen.iter().any(|p: &PathBuf| p == want) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(batch)) => seen.extend(batch),
            Ok(None) => panic!("watcher closed; got {seen:?}"),
            Err(_) => panic!(
                "no event for {} within {WAIT:?}; got {seen:?}",
                want.display()
            ),
        }
    }
    seen
}

fn ns(name: &str, team: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{team: {team}}}}}\n"
    )
}

#[tokio::test]
async fn an_atomic_rename_into_a_watched_directory_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (_watcher, mut rx) = watch(&root).unwrap();
    let mut p = FileProvider::new(&root);
    assert!(p.load_all().is_empty());

    // Editor style: write a hidden temporary file, then rename it into place.
    let target = root.join("app.yaml");
    let tmp = root.join(".app.yaml.tmp");
    std::fs::write(&tmp, ns("a", "v1")).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    let paths = wait_for(&mut rx, &target).await;
    assert!(paths.iter().all(|p| p != &tmp), "{paths:?}");
    let u = p.reload(&paths);
    assert_eq!(u.upserts.len(), 1, "{u:?}");

    // Again over the existing file (a new inode each time).
    std::fs::write(&tmp, ns("a", "v2")).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    let paths = wait_for(&mut rx, &target).await;
    let u = p.reload(&paths);
    assert_eq!(u.upserts[0].1.metadata().labels["team"], "v2");

    // In a new subdirectory.
    let nested = root.join("sub/deeper/b.yaml");
    std::fs::create_dir_all(nested.parent().unwrap()).unwrap();
    std::fs::write(&nested, ns("b", "v1")).unwrap();
    let mut paths = Vec::new();
    // The new directory or the file itself is reported, depending on timing.
    let deadline = tokio::time::Instant::now() + WAIT;
    while p
        .get(&weir_api::ObjectKey::new(
            weir_api::Kind::Namespace,
            "",
            "b",
        ))
        .is_none()
    {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(batch)) => {
                paths.extend(batch.clone());
                p.reload(&batch);
            }
            other => panic!("b.yaml not picked up: {other:?}, saw {paths:?}"),
        }
    }

    // Removal.
    std::fs::remove_file(&target).unwrap();
    let paths = wait_for(&mut rx, &target).await;
    let u = p.reload(&paths);
    assert_eq!(u.deletes.len(), 1, "{u:?}");
}

#[tokio::test]
async fn a_single_file_is_watched_through_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let file = root.join("weir.yaml");
    std::fs::write(&file, ns("a", "v1")).unwrap();
    let (_watcher, mut rx) = watch(&file).unwrap();
    let mut p = FileProvider::new(&file);
    assert_eq!(p.load_all().upserts.len(), 1);

    // A sibling changing is not reported; the file replaced by rename is.
    std::fs::write(root.join("other.yaml"), ns("x", "v1")).unwrap();
    let tmp = root.join("weir.yaml.new");
    std::fs::write(&tmp, ns("a", "v2")).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let paths = wait_for(&mut rx, &file).await;
    assert!(paths.iter().all(|p| p == &file), "{paths:?}");
    let u = p.reload(&paths);
    assert_eq!(u.upserts[0].1.metadata().labels["team"], "v2");
}

#[test]
fn watching_a_missing_path_fails() {
    let dir = tempfile::tempdir().unwrap();
    let err = watch(&dir.path().join("nope")).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test]
async fn reading_the_watched_tree_reports_nothing() {
    // Reading files and rescanning directories opens them; those accesses must not come
    // back as changes, or every rescan would trigger the next one.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("a.yaml"), ns("a", "x")).unwrap();
    std::fs::write(dir.path().join("sub/b.yaml"), ns("b", "x")).unwrap();
    let (_w, mut rx) = watch(dir.path()).unwrap();
    let mut p = FileProvider::new(dir.path());
    p.load_all();
    p.reload(&[dir.path().to_path_buf(), dir.path().join("sub")]);
    // Bounded wait for something that must not arrive.
    let got = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
    assert!(got.is_err(), "reading the tree reported changes: {got:?}");
}

#[tokio::test]
async fn a_mounted_volume_swapping_its_data_link_is_seen() {
    // The layout Kubernetes gives a mounted Secret or ConfigMap: the visible file is a
    // link through `..data`, itself a link to a timestamped directory, swapped by rename.
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let v1 = root.join("..2026_12_01");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(v1.join("app.yaml"), ns("a", "v1")).unwrap();
    std::os::unix::fs::symlink("..2026_12_01", root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/app.yaml", root.join("app.yaml")).unwrap();
    let (_watcher, mut rx) = watch(&root).unwrap();
    let mut p = FileProvider::new(&root);
    assert_eq!(p.load_all().upserts.len(), 1);

    let v2 = root.join("..2026_12_02");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v2.join("app.yaml"), ns("a", "v2")).unwrap();
    std::os::unix::fs::symlink("..2026_12_02", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    let paths = wait_for(&mut rx, &root.join("..data")).await;
    let u = p.reload(&paths);
    assert_eq!(u.upserts.len(), 1, "{u:?}");
    assert_eq!(u.upserts[0].1.metadata().labels["team"], "v2");
}

#[tokio::test]
async fn a_linked_directory_is_watched_and_dropping_the_watcher_closes_the_channel() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = std::fs::canonicalize(elsewhere.path()).unwrap();
    std::os::unix::fs::symlink(&target, root.join("linked")).unwrap();
    let (watcher, mut rx) = watch(&root).unwrap();
    // Written through the link's target: reported under the watched tree's path.
    std::fs::write(target.join("c.yaml"), ns("c", "v1")).unwrap();
    wait_for(&mut rx, &root.join("linked/c.yaml")).await;

    drop(watcher);
    let end = tokio::time::timeout(WAIT, async { while rx.recv().await.is_some() {} }).await;
    assert!(
        end.is_ok(),
        "the channel stayed open after the watcher was dropped"
    );
}

#[tokio::test]
async fn a_directory_moved_out_of_the_tree_is_no_longer_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("cfg");
    let outside = root.with_file_name("outside");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let (_watcher, mut rx) = watch(&root).unwrap();
    std::fs::rename(root.join("sub"), &outside).unwrap();
    wait_for(&mut rx, &root.join("sub")).await;
    // Written where it now is: not under the watched tree, so nothing comes.
    std::fs::write(outside.join("x.yaml"), ns("x", "v1")).unwrap();
    let got = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
    assert!(
        got.is_err(),
        "a change outside the tree was reported: {got:?}"
    );
    // Moved back in: reported, and watched again.
    std::fs::rename(&outside, root.join("back")).unwrap();
    wait_for(&mut rx, &root.join("back")).await;
    std::fs::write(root.join("back/y.yaml"), ns("y", "v1")).unwrap();
    wait_for(&mut rx, &root.join("back/y.yaml")).await;
}
