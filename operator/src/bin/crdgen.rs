//! Writes the CRDs generated from the Rust types into `crds/` and the Helm chart.
//!
//! `crdgen` rewrites the files; `crdgen --check` fails (exit 1) if any differs, which CI runs.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    // The checkout to write or check (see manifest_dir: cargo's, else the current directory's).
    let root = oxbow_operator::manifest_dir().join("..");
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
