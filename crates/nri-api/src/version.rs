//! NRI protocol versions: parsing, what each version supports, and
//! inference of a runtime's NRI version when it does not report one.

use std::fmt;
use std::str::FromStr;

use crate::{Error, EventMask};

/// An NRI (containerd/nri module) version, e.g. `v0.12.2`.
///
/// Only major, minor and patch are kept: pre-release and build suffixes
/// (`v0.3.1-0.20230504231226-94185418e253`, `v0.11.0-37-g41b9c58`,
/// `1.2.3+meta`) are accepted and dropped.
///
/// ```
/// use nri_api::NriVersion;
///
/// let v: NriVersion = "v0.10.0".parse()?;
/// assert_eq!(v, NriVersion::new(0, 10, 0));
/// assert_eq!(v.valid_events().as_i32(), 0x3FFF);
/// assert!(!v.has_dedicated_event_rpcs());
/// assert_eq!(v.to_string(), "v0.10.0");
/// # Ok::<(), nri_api::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NriVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl NriVersion {
    /// The version this crate implements ([`NRI_VERSION`](crate::NRI_VERSION)).
    pub const CURRENT: NriVersion = NriVersion::new(0, 12, 5);

    /// First version with UpdatePodSandbox, PostUpdatePodSandbox and
    /// ValidateContainerAdjustment (valid events grow from `0x7FF` to `0x3FFF`).
    pub const V0_10_0: NriVersion = NriVersion::new(0, 10, 0);

    /// First version with a dedicated RPC per event and `NRI_version` fields.
    pub const V0_12_0: NriVersion = NriVersion::new(0, 12, 0);

    /// First version whose runtimes honour the failure policy a plugin
    /// declares in `ConfigureResponse.failure_policy` (older ones ignore
    /// the field).
    pub const V0_12_4: NriVersion = NriVersion::new(0, 12, 4);

    /// The version assumed when a runtime's NRI version is neither reported
    /// nor inferable (see [`runtime_nri_version`]).
    ///
    /// It is the NRI of containerd 1.7.26+, 2.0 and 2.1. For every decision
    /// this crate derives from a version (valid events `0x7FF`, events
    /// through `StateChange`) it behaves like any release before v0.10, so
    /// a plugin that follows it is accepted by old and new runtimes alike.
    pub const CONSERVATIVE: NriVersion = NriVersion::new(0, 8, 0);

    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> NriVersion {
        NriVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parses `v0.12.2`, `0.8.0`, `v1.2` (missing parts are 0), with any
    /// `-pre-release` or `+build` suffix ignored.
    pub fn parse(text: &str) -> Result<NriVersion, Error> {
        let err = || Error::InvalidVersion {
            version: text.to_owned(),
        };
        let s = text.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let core = s.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut next = |required: bool| -> Result<u32, Error> {
            match parts.next() {
                None if !required => Ok(0),
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                    p.parse().map_err(|_| err())
                }
                _ => Err(err()),
            }
        };
        let major = next(true)?;
        let minor = next(false)?;
        let patch = next(false)?;
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(NriVersion::new(major, minor, patch))
    }

    /// Events a runtime on this version accepts in a subscription:
    /// `0x7FF` before v0.10, `0x3FFF` from v0.10 on.
    pub const fn valid_events(self) -> EventMask {
        if self.at_least(NriVersion::V0_10_0) {
            EventMask::ALL
        } else {
            EventMask::ALL_BEFORE_V0_10
        }
    }

    /// True if a runtime on this version calls the dedicated per-event RPCs
    /// (v0.12.0 and later); older runtimes send the events that need no
    /// answer through `StateChange`.
    pub const fn has_dedicated_event_rpcs(self) -> bool {
        self.at_least(NriVersion::V0_12_0)
    }

    /// True if a runtime on this version honours a plugin-declared failure
    /// policy (v0.12.4 and later).
    pub const fn honours_plugin_failure_policy(self) -> bool {
        self.at_least(NriVersion::V0_12_4)
    }

    const fn at_least(self, other: NriVersion) -> bool {
        if self.major != other.major {
            return self.major > other.major;
        }
        if self.minor != other.minor {
            return self.minor > other.minor;
        }
        self.patch >= other.patch
    }
}

impl fmt::Display for NriVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for NriVersion {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NriVersion::parse(s)
    }
}

/// Events a runtime on NRI `version` accepts (see [`NriVersion::valid_events`]).
pub const fn valid_events(version: NriVersion) -> EventMask {
    version.valid_events()
}

/// True if a runtime on NRI `version` uses the dedicated per-event RPCs
/// (see [`NriVersion::has_dedicated_event_rpcs`]).
pub const fn has_dedicated_event_rpcs(version: NriVersion) -> bool {
    version.has_dedicated_event_rpcs()
}

/// Where a runtime's NRI version came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VersionOrigin {
    /// The runtime sent it in `ConfigureRequest.NRI_version`.
    Reported,
    /// Inferred from the runtime's name and version.
    Inferred,
    /// Neither: [`NriVersion::CONSERVATIVE`] was assumed.
    Assumed,
}

/// A runtime's NRI version and how it was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuntimeNriVersion {
    /// The version.
    pub version: NriVersion,
    /// How it was found.
    pub origin: VersionOrigin,
}

/// The `NRI_version` our runtime library reports in `ConfigureRequest`:
/// [`NRI_VERSION`](crate::NRI_VERSION) with the build metadata
/// [`NRI_RS_BUILD_TAG`](crate::NRI_RS_BUILD_TAG).
pub fn nri_rs_runtime_version() -> String {
    format!("{}+{}", crate::NRI_VERSION, crate::NRI_RS_BUILD_TAG)
}

/// Whether a `ConfigureRequest.NRI_version` says the runtime is built on
/// our runtime library: its build metadata holds
/// [`NRI_RS_BUILD_TAG`](crate::NRI_RS_BUILD_TAG) as one of its
/// dot-separated identifiers.
pub fn is_nri_rs_runtime(nri_version: &str) -> bool {
    nri_version
        .trim()
        .split_once('+')
        .is_some_and(|(_, build)| build.split('.').any(|id| id == crate::NRI_RS_BUILD_TAG))
}

/// Values of `NRI_version` that carry no information: empty, Go's
/// `(devel)` and `0.0.0-unknown`.
fn is_placeholder_version(v: &str) -> bool {
    matches!(
        v.trim(),
        "" | "(devel)" | "0.0.0-unknown" | "v0.0.0-unknown"
    )
}

/// First runtime version (inclusive) from which each NRI version is shipped.
/// Versions between two entries map to the earlier entry.
type VersionTable = &'static [((u32, u32, u32), NriVersion)];

/// containerd releases and the NRI they ship.
const CONTAINERD: VersionTable = &[
    ((1, 7, 0), NriVersion::new(0, 3, 0)),
    ((1, 7, 7), NriVersion::new(0, 4, 0)),
    ((1, 7, 14), NriVersion::new(0, 6, 0)),
    ((1, 7, 16), NriVersion::new(0, 6, 1)),
    ((1, 7, 26), NriVersion::new(0, 8, 0)),
    ((2, 0, 0), NriVersion::new(0, 8, 0)),
    ((2, 2, 0), NriVersion::new(0, 10, 0)),
    ((2, 2, 1), NriVersion::new(0, 11, 0)),
    ((2, 3, 0), NriVersion::new(0, 12, 0)),
    ((2, 4, 0), NriVersion::new(0, 12, 3)),
];

/// CRI-O releases and the NRI they ship (pseudo-versions after a tag are
/// mapped to that tag).
const CRIO: VersionTable = &[
    ((1, 26, 0), NriVersion::new(0, 2, 0)),
    ((1, 26, 2), NriVersion::new(0, 3, 0)),
    ((1, 29, 0), NriVersion::new(0, 5, 0)),
    ((1, 29, 2), NriVersion::new(0, 6, 0)),
    ((1, 31, 0), NriVersion::new(0, 6, 1)),
    ((1, 32, 0), NriVersion::new(0, 9, 0)),
    ((1, 34, 0), NriVersion::new(0, 10, 0)),
    ((1, 35, 0), NriVersion::new(0, 11, 0)),
];

/// Infers the NRI version of a runtime from its name and version, for
/// runtimes that do not report it (all before NRI v0.12).
///
/// Known runtimes: `containerd` (1.7.0 and later: 1.7.26+, 2.0 and 2.1 ship
/// v0.8.0, 2.2.0 v0.10.0, 2.2.1+ v0.11.0, 2.3 v0.12.0, 2.4 v0.12.3) and
/// `cri-o` (also `crio`; 1.26 and later: 1.32/1.33 ship v0.9.0, 1.34
/// v0.10.0, 1.35 v0.11.0). Names match case-insensitively. A runtime version
/// after the last entry maps to the last entry. Returns `None` for another
/// runtime, an older release or an unparsable version.
pub fn infer_nri_version(runtime_name: &str, runtime_version: &str) -> Option<NriVersion> {
    let table = match runtime_name.trim().to_ascii_lowercase().as_str() {
        "containerd" => CONTAINERD,
        "cri-o" | "crio" => CRIO,
        _ => return None,
    };
    let v = NriVersion::parse(runtime_version).ok()?;
    let key = (v.major, v.minor, v.patch);
    table
        .iter()
        .rev()
        .find(|(from, _)| *from <= key)
        .map(|(_, nri)| *nri)
}

/// The NRI version of the runtime that sent a `ConfigureRequest`.
///
/// Uses `nri_version` (the request's `NRI_version`) when it holds a real
/// version; otherwise infers it from the runtime's name and version
/// ([`infer_nri_version`]); otherwise assumes [`NriVersion::CONSERVATIVE`].
pub fn runtime_nri_version(
    nri_version: &str,
    runtime_name: &str,
    runtime_version: &str,
) -> RuntimeNriVersion {
    if !is_placeholder_version(nri_version) {
        if let Ok(version) = NriVersion::parse(nri_version) {
            return RuntimeNriVersion {
                version,
                origin: VersionOrigin::Reported,
            };
        }
    }
    match infer_nri_version(runtime_name, runtime_version) {
        Some(version) => RuntimeNriVersion {
            version,
            origin: VersionOrigin::Inferred,
        },
        None => RuntimeNriVersion {
            version: NriVersion::CONSERVATIVE,
            origin: VersionOrigin::Assumed,
        },
    }
}
