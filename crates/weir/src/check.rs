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
}

/// Prints one line per problem to `out` and a summary; returns the number of problems.
pub fn check(opts: &CheckOptions, out: &mut dyn Write) -> anyhow::Result<usize> {
    let mut provider = FileProvider::new(opts.config.clone());
    let update = provider.load_all();
    let mut problems = 0;
    for e in &update.errors {
        writeln!(out, "{e}")?;
        problems += 1;
    }
    let objects = update.upserts.len();
    let mut translator = Translator::new(translator_options(
        opts.ingress_http,
        opts.ingress_https,
        &opts.ingress_class,
    ));
    translator.apply(update.upserts.into_iter().map(ObjectChange::Upsert));
    for (key, status) in translator.statuses() {
        let at = provider
            .origin(&key)
            .map(|o| format!("{}#{}", o.file.display(), o.document))
            .unwrap_or_else(|| "-".into());
        for p in report::problems(&status) {
            writeln!(out, "{at}: {key}: {p}")?;
            problems += 1;
        }
    }
    writeln!(out, "{objects} objects read, {problems} problem(s)")?;
    Ok(problems)
}
