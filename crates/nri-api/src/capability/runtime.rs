//! What one runtime can do ([`RuntimeCapabilities`]), from its declaration
//! or by inference, and the check of a plugin's requirements against it.

use std::fmt;

use super::{Capability, CapabilitySet, Requirement, infer_capabilities};
use crate::{EventMask, NriVersion, VersionOrigin, runtime_nri_version};

/// Where a runtime's capabilities come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CapabilityBasis {
    /// The runtime declared them in its `NRI_version`
    /// ([`declared_nri_version`]): a runtime built on `nri-runtime`, or
    /// `nri-proxy` speaking for the runtime behind it.
    Declared,
    /// Inferred from the runtime's name, version and NRI version
    /// ([`infer_capabilities`]): containerd and CRI-O.
    Inferred,
    /// Neither: nothing is known about the runtime's capabilities.
    Unknown,
}

impl fmt::Display for CapabilityBasis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CapabilityBasis::Declared => "declared by the runtime",
            CapabilityBasis::Inferred => "inferred from its name and version",
            CapabilityBasis::Unknown => {
                "unknown: the runtime declares none and is not one whose \
                 versions are known"
            }
        })
    }
}

/// What a runtime can do for its plugins.
///
/// ```
/// use nri_api::{Capability, CapabilityBasis, RuntimeCapabilities, api::Event};
///
/// // containerd 2.1 sends no NRI version; it ships NRI v0.8.0.
/// let rt = RuntimeCapabilities::of_runtime("", "containerd", "v2.1.9");
/// assert_eq!(rt.basis, CapabilityBasis::Inferred);
/// let check = rt.check([Capability::AdjustLinuxSysctl.into(), Event::UpdatePodSandbox.into()]);
/// assert_eq!(check.to_string(), "ADJUST_LINUX_SYSCTL, event UpdatePodSandbox not supported");
///
/// let rt = RuntimeCapabilities::of_runtime("v0.12.3", "containerd", "v2.4.2");
/// assert!(rt.check([Capability::AdjustLinuxSysctl.into()]).is_satisfied());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RuntimeCapabilities {
    /// Where the rest comes from.
    pub basis: CapabilityBasis,
    /// The capabilities the runtime has.
    pub supported: CapabilitySet,
    /// The capabilities the basis speaks for: one outside it is neither
    /// supported nor missing but unknown (every capability for an
    /// inference within the versions whose sources were read; those a
    /// declaring runtime knew of; none for an unknown runtime).
    pub known: CapabilitySet,
    /// The events the runtime delivers.
    pub events: EventMask,
    /// The events the basis speaks for (every event, unless the runtime's
    /// NRI version had to be assumed: then those every NRI version
    /// delivers).
    pub events_known: EventMask,
}

impl RuntimeCapabilities {
    /// A runtime that declares these capabilities and events, speaking for
    /// every capability.
    pub const fn declared(supported: CapabilitySet, events: EventMask) -> RuntimeCapabilities {
        RuntimeCapabilities {
            basis: CapabilityBasis::Declared,
            supported,
            known: CapabilitySet::all(),
            events,
            events_known: EventMask::ALL,
        }
    }

    /// A runtime about which nothing is known but its NRI version (which
    /// gives the events it delivers).
    pub fn unknown(nri_version: NriVersion, origin: VersionOrigin) -> RuntimeCapabilities {
        let events = nri_version.valid_events();
        RuntimeCapabilities {
            basis: CapabilityBasis::Unknown,
            supported: CapabilitySet::EMPTY,
            known: CapabilitySet::EMPTY,
            events,
            events_known: match origin {
                VersionOrigin::Assumed => events,
                _ => EventMask::ALL,
            },
        }
    }

    /// The capabilities of the runtime that sent a `Configure` with these
    /// fields: its declaration in `nri_version` if it has one
    /// ([`parse_declaration`]), else inferred from its name, version and
    /// NRI version ([`infer_capabilities`]), else unknown.
    pub fn of_runtime(
        nri_version: &str,
        runtime_name: &str,
        runtime_version: &str,
    ) -> RuntimeCapabilities {
        if let Some(declared) = parse_declaration(nri_version) {
            return declared;
        }
        let nri = runtime_nri_version(nri_version, runtime_name, runtime_version);
        let known_nri = (nri.origin != VersionOrigin::Assumed).then_some(nri.version);
        infer_capabilities(runtime_name, runtime_version, known_nri)
            .unwrap_or_else(|| RuntimeCapabilities::unknown(nri.version, nri.origin))
    }

    /// Whether the runtime meets `requirement`: `Some(true)` or
    /// `Some(false)`, or `None` when its basis cannot tell.
    pub fn supports(&self, requirement: Requirement) -> Option<bool> {
        match requirement {
            Requirement::Capability(c) if self.supported.contains(c) => Some(true),
            Requirement::Capability(c) if self.known.contains(c) => Some(false),
            Requirement::Capability(_) => None,
            Requirement::Event(e) if self.events.contains(e) => Some(true),
            Requirement::Event(e) if self.events_known.contains(e) => Some(false),
            Requirement::Event(_) => None,
        }
    }

    /// Checks requirements: which are missing and which cannot be told.
    pub fn check<I>(&self, requirements: I) -> CapabilityCheck
    where
        I: IntoIterator<Item = Requirement>,
    {
        let mut check = CapabilityCheck::default();
        for r in requirements {
            let list = match self.supports(r) {
                Some(true) => continue,
                Some(false) => &mut check.missing,
                None => &mut check.unknown,
            };
            if !list.contains(&r) {
                list.push(r);
            }
        }
        check.missing.sort();
        check.unknown.sort();
        check
    }
}

/// The outcome of [`RuntimeCapabilities::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CapabilityCheck {
    /// Requirements the runtime does not meet.
    pub missing: Vec<Requirement>,
    /// Requirements whose support cannot be told.
    pub unknown: Vec<Requirement>,
}

impl CapabilityCheck {
    /// A check's outcome from its parts.
    pub fn new(missing: Vec<Requirement>, unknown: Vec<Requirement>) -> CapabilityCheck {
        CapabilityCheck { missing, unknown }
    }

    /// True when nothing is missing and nothing unknown.
    pub fn is_satisfied(&self) -> bool {
        self.missing.is_empty() && self.unknown.is_empty()
    }
}

/// `A, B not supported; C unknown` (the parts that are non-empty).
impl fmt::Display for CapabilityCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, items: &[Requirement]| -> fmt::Result {
            for (i, r) in items.iter().enumerate() {
                write!(f, "{}{r}", if i == 0 { "" } else { ", " })?;
            }
            Ok(())
        };
        if !self.missing.is_empty() {
            list(f, &self.missing)?;
            f.write_str(" not supported")?;
        }
        if !self.unknown.is_empty() {
            if !self.missing.is_empty() {
                f.write_str("; ")?;
            }
            list(f, &self.unknown)?;
            f.write_str(" unknown")?;
        }
        Ok(())
    }
}

/// Prefix of the build-metadata identifier carrying the capabilities:
/// `caps-<count>-<supported>[-<unknown>]`.
const CAPS_ID: &str = "caps-";
/// Prefix of the identifier carrying the events:
/// `events-<delivered>[-<unknown>]`.
const EVENTS_ID: &str = "events-";

/// The `NRI_version` a runtime sends to declare what it can do
/// ([`RuntimeCapabilities`]): [`NRI_VERSION`](crate::NRI_VERSION) with
/// build metadata `caps-<count>-<supported>[-<unknown>]` and
/// `events-<delivered>[-<unknown>]` (hexadecimal bit sets), after
/// [`NRI_RS_BUILD_TAG`](crate::NRI_RS_BUILD_TAG) when `nri_rs` is set (a
/// socket plugin of `nri-runtime`, which may spin; see
/// [`is_nri_rs_runtime`](crate::is_nri_rs_runtime)). `<count>` is the
/// number of capabilities this crate knows, so a newer reader tells a
/// capability this runtime lacks from one it has never heard of; the
/// `<unknown>` parts, present when not empty, are what the declarer cannot
/// tell (`nri-proxy` speaking for a runtime it knows little about).
///
/// ```
/// use nri_api::{CapabilitySet, EventMask, RuntimeCapabilities, declared_nri_version, parse_declaration};
///
/// let all = RuntimeCapabilities::declared(CapabilitySet::all(), EventMask::ALL);
/// let v = declared_nri_version(true, &all);
/// assert_eq!(v, "v0.12.5+nri-rs.caps-43-7ffffffffff.events-3fff");
/// assert!(nri_api::is_nri_rs_runtime(&v));
/// assert_eq!(parse_declaration(&v), Some(all));
/// ```
pub fn declared_nri_version(nri_rs: bool, capabilities: &RuntimeCapabilities) -> String {
    let all = CapabilitySet::all();
    let count = Capability::ALL.len();
    let supported = capabilities.supported.intersection(all).bits();
    let unknown = all
        .difference(capabilities.known)
        .difference(capabilities.supported)
        .bits();
    let events = capabilities.events.intersection(EventMask::ALL).as_i32();
    let events_unknown = EventMask::ALL
        .difference(capabilities.events_known)
        .difference(capabilities.events)
        .as_i32();
    let mut v = format!("{}+", crate::NRI_VERSION);
    if nri_rs {
        v.push_str(crate::NRI_RS_BUILD_TAG);
        v.push('.');
    }
    v.push_str(&format!("{CAPS_ID}{count}-{supported:x}"));
    if unknown != 0 {
        v.push_str(&format!("-{unknown:x}"));
    }
    v.push_str(&format!(".{EVENTS_ID}{events:x}"));
    if events_unknown != 0 {
        v.push_str(&format!("-{events_unknown:x}"));
    }
    v
}

/// Reads a runtime's declaration from the build metadata of its
/// `NRI_version` (see [`declared_nri_version`]): `None` when it has no
/// capabilities identifier or a malformed one (a runtime that declares
/// nothing). Without an events identifier, the events are those of the
/// NRI version.
pub fn parse_declaration(nri_version: &str) -> Option<RuntimeCapabilities> {
    let (version, build) = nri_version.trim().split_once('+')?;
    let mut caps = None;
    let mut events = None;
    for id in build.split('.') {
        if let Some(rest) = id.strip_prefix(CAPS_ID) {
            let mut parts = rest.split('-');
            let count: u32 = parts.next()?.parse().ok()?;
            let supported = u128::from_str_radix(parts.next()?, 16).ok()?;
            let unknown = match parts.next() {
                Some(p) => u128::from_str_radix(p, 16).ok()?,
                None => 0,
            };
            if parts.next().is_some() {
                return None;
            }
            let known = CapabilitySet::below(count)
                .intersection(CapabilitySet::all())
                .difference(CapabilitySet::from_bits(unknown));
            caps = Some((
                CapabilitySet::from_bits(supported).intersection(known),
                known,
            ));
        } else if let Some(rest) = id.strip_prefix(EVENTS_ID) {
            let mut parts = rest.split('-');
            let delivered = event_bits(parts.next()?)?;
            let unknown = match parts.next() {
                Some(p) => event_bits(p)?,
                None => EventMask::EMPTY,
            };
            if parts.next().is_some() {
                return None;
            }
            events = Some((
                delivered.difference(unknown),
                EventMask::ALL.difference(unknown),
            ));
        }
    }
    let (supported, known) = caps?;
    let (events, events_known) = match events {
        Some(e) => e,
        None => (
            NriVersion::parse(version).ok()?.valid_events(),
            EventMask::ALL,
        ),
    };
    Some(RuntimeCapabilities {
        basis: CapabilityBasis::Declared,
        supported,
        known,
        events,
        events_known,
    })
}

/// A hexadecimal event mask, limited to the known events.
fn event_bits(hex: &str) -> Option<EventMask> {
    let mask = i32::try_from(u32::from_str_radix(hex, 16).ok()?).ok()?;
    Some(EventMask::from_i32(mask).intersection(EventMask::ALL))
}
