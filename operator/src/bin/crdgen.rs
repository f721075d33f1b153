//! Writes the CRDs generated from the Rust types into `crds/` and the Helm chart.
//!
//! `crdgen` rewrites the files; `crdgen --check` fails (exit 1) if any differs, which CI runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The checkout to write or check: cargo's (`cargo run`), else the one the current directory is
/// in, else the one this binary was built from. A binary reused from a shared target dir may have
/// been built in another checkout, whose files `--check` would otherwise compare.
fn checkout() -> PathBuf {
    if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
        return oxbow_operator::manifest_dir().join("..");
    }
    let is_checkout = |d: &Path| d.join("operator/Cargo.toml").is_file() && d.join("crds").is_dir();
    std::env::current_dir()
        .ok()
        .and_then(|cwd| cwd.ancestors().find(|d| is_checkout(d)).map(Path::to_path_buf))
        .unwrap_or_else(|| oxbow_operator::manifest_dir().join(".."))
}

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    let root = checkout();
    let mut drifted = Vec::new();
    for (path, text) in oxbow_operator::crdgen::files() {
        let full = root.join(&path);
        let current = std::fs::read_to_string(&full).unwrap_or_default();
        if current == text {
            continue;
        }
        if check {
            drifted.push(path);
        } else if let Err(e) = write(&full, &text) {
            eprintln!("crdgen: cannot write {}: {e}", full.display());
            return ExitCode::FAILURE;
        } else {
            println!("crdgen: wrote {path}");
        }
    }
    if drifted.is_empty() {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "crdgen: generated CRDs differ from the checked-in files: {}\nrun `cargo run -p oxbow-operator --bin crdgen` and commit the result",
        drifted.join(", ")
    );
    ExitCode::FAILURE
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}
