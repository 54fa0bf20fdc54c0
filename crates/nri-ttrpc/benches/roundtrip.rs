//! Placeholder; replaced by the round-trip benchmark.
fn main() {}
