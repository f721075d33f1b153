//! Helpers shared by the operator's integration tests: a real oxbow-broker process.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Child;

/// A broker process, killed when dropped, and its data directory.
pub struct Process {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The broker binary: OXBOW_BROKER_BIN (tests/run-all sets it), else the target dir's release
/// build. A missing binary fails the test that needs it.
pub fn broker_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("OXBOW_BROKER_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| oxbow_operator::manifest_dir().join("../target"));
    target.join("release/oxbow-broker")
}

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}
