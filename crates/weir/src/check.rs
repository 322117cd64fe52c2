//! `weir check`: read and translate a config path without serving it, and print every
//! problem with its file, object and field.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use weir_provider_file::FileProvider;
use weir_translate::{ObjectChange, Translator};

use crate::report;
use crate::standalone::translator_options;

/// Options of `weir check`.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// File or directory of manifests.
    pub config: PathBuf,
    /// As for `weir run`.
    pub ingress_http: Option<SocketAddr>,
    /// As for `weir run`.
    pub ingress_https: Option<SocketAddr>,
    /// As for `weir run`.
    pub ingress_class: String,
    /// As for `weir run`.
    pub more_ingress_classes: Vec<String>,
    /// Print one JSON document instead of lines.
    pub json: bool,
}

/// One problem `weir check` found: where, which object, what.
struct Problem {
    /// The file, when known.
    file: Option<String>,
    /// 0-based document index in the file, when known.
    document: Option<usize>,
    /// `Kind namespace/name`, when the problem is one object's.
    object: Option<String>,
    message: String,
}

/// Prints every problem (one line each, or one JSON document with `json`) and a summary;
/// returns the number of problems. Anything reported here would be rejected or left out by
/// `weir run` with the same files.
pub fn check(opts: &CheckOptions, out: &mut dyn Write) -> anyhow::Result<usize> {
    let mut provider = FileProvider::new(opts.config.clone());
    let update = provider.load_all();
    let mut problems: Vec<Problem> = update
        .errors
        .iter()
        .map(|e| Problem {
            file: Some(e.file.display().to_string()),
            document: e.document,
            object: e.object.clone(),
            message: e.message.clone(),
        })
        .collect();
    // Keys are parsed at the first handshake by `weir run` (20,000 at startup would cost
    // seconds); `weir check` parses each TLS Secret's now, so a key that does not belong
    // to its certificate is found before it is served.
    for (key, obj) in &update.upserts {
        if let weir_api::Object::Secret(s) = &**obj
            && *s.type_ == *"kubernetes.io/tls"
            && let Ok(cert) = weir_translate::certificate_from_secret(s)
            && let Some(why) = weir_proxy::certificate_problem(&cert)
        {
            let origin = provider.origin(key);
            problems.push(Problem {
                file: origin.map(|o| o.file.display().to_string()),
                document: origin.map(|o| o.document),
                object: Some(key.to_string()),
                message: format!("certificate unusable: {why}"),
            });
        }
    }
    let objects = update.upserts.len();
    let mut translator = Translator::new(translator_options(
        opts.ingress_http,
        opts.ingress_https,
        &opts.ingress_class,
        &opts.more_ingress_classes,
    ));
    translator.apply(
        update
            .upserts
            .into_iter()
            .map(|(k, o)| ObjectChange::Upsert(k, o)),
    );
    for (key, status) in translator.statuses() {
        let origin = provider.origin(&key);
        for p in report::problems(&status) {
            problems.push(Problem {
                file: origin.map(|o| o.file.display().to_string()),
                document: origin.map(|o| o.document),
                object: Some(key.to_string()),
                message: p,
            });
        }
    }
    if opts.json {
        let list: Vec<serde_json::Value> = problems
            .iter()
            .map(|p| {
                serde_json::json!({
                    "file": p.file, "document": p.document,
                    "object": p.object, "message": p.message,
                })
            })
            .collect();
        let doc = serde_json::json!({"objects": objects, "problems": list});
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        for p in &problems {
            let at = match (&p.file, p.document) {
                (Some(f), Some(d)) => format!("{f}#{d}"),
                (Some(f), None) => f.clone(),
                (None, _) => "-".into(),
            };
            // A reader's message already starts with the object it concerns.
            match &p.object {
                Some(o) if !p.message.starts_with(o.as_str()) => {
                    writeln!(out, "{at}: {o}: {}", p.message)?
                }
                _ => writeln!(out, "{at}: {}", p.message)?,
            }
        }
        writeln!(out, "{objects} objects read, {} problem(s)", problems.len())?;
    }
    Ok(problems.len())
}
