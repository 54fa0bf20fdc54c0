//! Finding the Go interop peers (`scripts/build-go-peers.sh` builds them
//! into `$NRI_INTEROP_BIN`, default `<repo>/interop/bin`).
//!
//! A test that needs a peer skips (returns early) when the peer is missing,
//! unless `NRI_REQUIRE_INTEROP=1`, which CI sets: then a missing peer fails
//! the test.

use std::path::{Path, PathBuf};

/// The directory of the Go interop peers: `$NRI_INTEROP_BIN` when set and
/// not empty, else `<repo>/interop/bin`.
pub fn bin_dir() -> PathBuf {
    match std::env::var_os("NRI_INTEROP_BIN") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/bin"),
    }
}

/// Whether `NRI_REQUIRE_INTEROP=1`: a missing peer fails the test.
pub fn required() -> bool {
    std::env::var("NRI_REQUIRE_INTEROP").is_ok_and(|v| v == "1")
}

/// The path of Go peer `name` in [`bin_dir`], or `None` (after printing
/// why) when it is missing and not [`required`].
///
/// # Panics
///
/// When the peer is missing and [`required`].
pub fn go_peer(name: &str) -> Option<PathBuf> {
    find(&bin_dir(), name, required())
}

/// [`go_peer`] in `dir`, with `required` given.
///
/// # Panics
///
/// When the peer is missing and `required`.
pub fn find(dir: &Path, name: &str, required: bool) -> Option<PathBuf> {
    let bin = dir.join(name);
    if bin.is_file() {
        return Some(bin);
    }
    let why = format!(
        "Go peer {} missing (build it with `bash scripts/build-go-peers.sh`, or set NRI_INTEROP_BIN)",
        bin.display()
    );
    assert!(!required, "{why}; NRI_REQUIRE_INTEROP=1");
    eprintln!("skipping: {why}");
    None
}
