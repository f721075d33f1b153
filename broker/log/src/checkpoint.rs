//! Checkpoint files in Kafka's text format, written atomically (temp file, fsync, rename,
//! fsync of the directory):
//! ```text
//! 0                      <- version
//! 2                      <- number of entries
//! orders 0 1234          <- topic partition offset
//! orders 1 99
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{LogError, Result};

/// Writes `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(LogError::io(&tmp))?;
    f.write_all(bytes).map_err(LogError::io(&tmp))?;
    f.sync_all().map_err(LogError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(LogError::io(path))?;
    if let Some(dir) = path.parent() {
        File::open(dir).and_then(|d| d.sync_all()).map_err(LogError::io(dir))?;
    }
    Ok(())
}

/// Writes a `(topic, partition) -> offset` checkpoint.
pub fn write_offsets(path: &Path, entries: &[(String, i32, i64)]) -> Result<()> {
    let mut s = format!("0\n{}\n", entries.len());
    for (t, p, o) in entries {
        s.push_str(&format!("{t} {p} {o}\n"));
    }
    write_atomic(path, s.as_bytes())
}

/// Reads a checkpoint; a missing file is empty, a malformed one is an error.
pub fn read_offsets(path: &Path) -> Result<HashMap<(String, i32), i64>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(LogError::Io { path: path.into(), source: e }),
    };
    let bad = |why: &str| LogError::Corrupt { path: path.into(), reason: why.to_string() };
    let mut lines = text.lines();
    if lines.next() != Some("0") {
        return Err(bad("unknown checkpoint version"));
    }
    let n: usize = lines.next().and_then(|l| l.parse().ok()).ok_or_else(|| bad("bad entry count"))?;
    let mut out = HashMap::with_capacity(n);
    for _ in 0..n {
        let line = lines.next().ok_or_else(|| bad("fewer entries than announced"))?;
        let mut parts = line.rsplitn(3, ' ');
        let (o, p, t) = (parts.next(), parts.next(), parts.next());
        let (Some(o), Some(p), Some(t)) = (o, p, t) else { return Err(bad("malformed entry")) };
        let o: i64 = o.parse().map_err(|_| bad("bad offset"))?;
        let p: i32 = p.parse().map_err(|_| bad("bad partition"))?;
        out.insert((t.to_string(), p), o);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() -> Result<()> {
        let dir = tempfile::tempdir().map_err(LogError::io("tmp"))?;
        let p = dir.path().join("cp");
        assert!(read_offsets(&p)?.is_empty());
        write_offsets(&p, &[("a".into(), 0, 5), ("b-c".into(), 3, 7)])?;
        let m = read_offsets(&p)?;
        assert_eq!(m.get(&("b-c".to_string(), 3)), Some(&7));
        std::fs::write(&p, "0\n3\na 0 1\n").map_err(LogError::io(&p))?;
        assert!(read_offsets(&p).is_err());
        Ok(())
    }
}
