//! The `nri` command.
fn main() {}
