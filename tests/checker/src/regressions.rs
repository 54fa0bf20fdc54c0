//! The regression list (`tests/checker/seeds.txt`): seeds that found a
//! defect, each with the defect and whether it is fixed. CI replays the
//! fixed ones (they must pass) and leaves the open ones out of its seed
//! range (they fail until their fix lands; then the entry says `fixed`).
//!
//! ```text
//! # mode     seed  status  defect
//! runtime    10    open    known containers: an abandoned creation is never pruned
//! proxy      1     fixed   start-up grace ignores the event's deadline
//! ```

use crate::schedule::Mode;

/// The list, compiled in.
pub const SEEDS: &str = include_str!("../seeds.txt");

/// Whether a defect is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Still fails.
    Open,
    /// Fixed: must pass.
    Fixed,
}

/// One line of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The mode.
    pub mode: Mode,
    /// The seed.
    pub seed: u64,
    /// The generator version it was found with (`SEED@VERSION`; a bare
    /// seed is version 1).
    pub generator: u32,
    /// Fixed or not.
    pub status: Status,
    /// The defect it found.
    pub defect: String,
}

/// The entries of `text`; malformed lines are errors naming the line.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("seeds.txt line {}: {what}: {line:?}", n + 1);
        let mut rest = line;
        let mode = match word(&mut rest) {
            Some("runtime") => Mode::Runtime,
            Some("proxy") => Mode::Proxy,
            _ => return Err(bad("mode is runtime or proxy")),
        };
        let (seed, generator) = word(&mut rest)
            .and_then(|w| match w.split_once('@') {
                Some((s, g)) => Some((s.parse().ok()?, g.parse().ok()?)),
                None => Some((w.parse().ok()?, 1)),
            })
            .ok_or_else(|| bad("no seed (SEED or SEED@GENERATOR)"))?;
        let status = match word(&mut rest) {
            Some("open") => Status::Open,
            Some("fixed") => Status::Fixed,
            _ => return Err(bad("status is open or fixed")),
        };
        let defect = rest.trim().to_owned();
        out.push(Entry {
            mode,
            seed,
            generator,
            status,
            defect,
        });
    }
    Ok(out)
}

/// The next whitespace-separated word of `rest`, which moves past it.
fn word<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let r = rest.trim_start();
    if r.is_empty() {
        return None;
    }
    let end = r.find(char::is_whitespace).unwrap_or(r.len());
    let (w, tail) = r.split_at(end);
    *rest = tail;
    Some(w)
}

/// The compiled-in list.
pub fn entries() -> Result<Vec<Entry>, String> {
    parse(SEEDS)
}

/// Whether `seed` in `mode` of the latest generator is listed as open.
pub fn is_open(entries: &[Entry], mode: Mode, seed: u64) -> bool {
    entries.iter().any(|e| {
        e.mode == mode
            && e.seed == seed
            && e.generator == crate::generate::GENERATOR
            && e.status == Status::Open
    })
}

/// The schedule an entry names.
pub fn schedule(e: &Entry) -> crate::Schedule {
    crate::generate::schedule_with(e.seed, e.mode, crate::Size::default(), e.generator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_reads() {
        let e = entries();
        assert!(e.is_ok(), "{e:?}");
        let e = parse("proxy 3 fixed a defect of several words\nruntime 4@2 open d\n# c\n")
            .unwrap_or_default();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].defect, "a defect of several words");
        assert_eq!((e[0].generator, e[1].generator, e[1].seed), (1, 2, 4));
        assert!(parse("runtime x open d").is_err());
    }
}
