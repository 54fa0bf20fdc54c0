//! Events and event subscription masks.

use std::fmt;
use std::str::FromStr;

use crate::Error;
use crate::api::Event;

impl Event {
    /// Every subscribable event, in wire order (`RunPodSandbox` = 1 ...
    /// `ValidateContainerAdjustment` = 14).
    pub const ALL_EVENTS: [Event; 14] = [
        Event::RunPodSandbox,
        Event::StopPodSandbox,
        Event::RemovePodSandbox,
        Event::CreateContainer,
        Event::PostCreateContainer,
        Event::StartContainer,
        Event::PostStartContainer,
        Event::UpdateContainer,
        Event::PostUpdateContainer,
        Event::StopContainer,
        Event::RemoveContainer,
        Event::UpdatePodSandbox,
        Event::PostUpdatePodSandbox,
        Event::ValidateContainerAdjustment,
    ];

    /// Human-friendly name, e.g. `"RunPodSandbox"`; `"Unknown"`/`"Last"`
    /// for the two values that are not events.
    pub const fn pretty_name(self) -> &'static str {
        match self {
            Event::Unknown => "Unknown",
            Event::RunPodSandbox => "RunPodSandbox",
            Event::StopPodSandbox => "StopPodSandbox",
            Event::RemovePodSandbox => "RemovePodSandbox",
            Event::CreateContainer => "CreateContainer",
            Event::PostCreateContainer => "PostCreateContainer",
            Event::StartContainer => "StartContainer",
            Event::PostStartContainer => "PostStartContainer",
            Event::UpdateContainer => "UpdateContainer",
            Event::PostUpdateContainer => "PostUpdateContainer",
            Event::StopContainer => "StopContainer",
            Event::RemoveContainer => "RemoveContainer",
            Event::UpdatePodSandbox => "UpdatePodSandbox",
            Event::PostUpdatePodSandbox => "PostUpdatePodSandbox",
            Event::ValidateContainerAdjustment => "ValidateContainerAdjustment",
            Event::Last => "Last",
        }
    }

    /// The event's bit in an [`EventMask`] (`1 << (event - 1)`), or `None`
    /// for [`Event::Unknown`] and [`Event::Last`], which are not events.
    pub const fn mask_bit(self) -> Option<i32> {
        match self {
            Event::Unknown | Event::Last => None,
            e => Some(1 << (e as i32 - 1)),
        }
    }

    /// True for the events that runtimes before NRI v0.12 deliver through
    /// `StateChange`, and that newer runtimes send there when the plugin
    /// answers the dedicated RPC with UNIMPLEMENTED: RunPodSandbox,
    /// StopPodSandbox, RemovePodSandbox, PostUpdatePodSandbox,
    /// PostCreateContainer, StartContainer, PostStartContainer,
    /// PostUpdateContainer and RemoveContainer.
    pub const fn is_state_change_event(self) -> bool {
        matches!(
            self,
            Event::RunPodSandbox
                | Event::StopPodSandbox
                | Event::RemovePodSandbox
                | Event::PostUpdatePodSandbox
                | Event::PostCreateContainer
                | Event::StartContainer
                | Event::PostStartContainer
                | Event::PostUpdateContainer
                | Event::RemoveContainer
        )
    }

    /// True for pod sandbox events.
    pub const fn is_pod_event(self) -> bool {
        matches!(
            self,
            Event::RunPodSandbox
                | Event::StopPodSandbox
                | Event::RemovePodSandbox
                | Event::UpdatePodSandbox
                | Event::PostUpdatePodSandbox
        )
    }

    /// Bare ttRPC method name of the event's dedicated `Plugin` RPC, or
    /// `None` for the values that are not events.
    pub const fn method_name(self) -> Option<&'static str> {
        match crate::service::PluginMethod::of_event(self) {
            Some(m) => Some(m.name()),
            None => None,
        }
    }

    /// Looks an event up by its lower-cased pretty name (e.g.
    /// `"runpodsandbox"`), as accepted in event lists.
    fn from_lower_pretty_name(name: &str) -> Option<Event> {
        Event::ALL_EVENTS
            .into_iter()
            .find(|e| e.pretty_name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.pretty_name())
    }
}

/// A set of events a plugin subscribes to; an `int32` on the wire
/// (`ConfigureResponse.events`), event `e` at bit `e - 1`.
///
/// A mask of 0 sent to a runtime means "all events the runtime knows".
///
/// ```
/// use nri_api::{EventMask, api::Event};
///
/// let mask: EventMask = "RunPodSandbox,createcontainer".parse()?;
/// assert!(mask.contains(Event::CreateContainer));
/// assert_eq!(mask.as_i32(), 0x9);
/// assert_eq!(mask.to_string(), "RunPodSandbox,CreateContainer");
/// # Ok::<(), nri_api::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct EventMask(i32);

impl EventMask {
    /// No events.
    pub const EMPTY: EventMask = EventMask(0);

    /// Every event of this crate's protocol version (`0x3FFF`), the valid
    /// events of runtimes on NRI v0.10 and later.
    pub const ALL: EventMask = EventMask(0x3FFF);

    /// The valid events of runtimes on NRI before v0.10 (`0x7FF`): they
    /// refuse a subscription with any other bit.
    pub const ALL_BEFORE_V0_10: EventMask = EventMask(0x7FF);

    /// A mask from its wire value (any bits, known or not).
    pub const fn from_i32(bits: i32) -> EventMask {
        EventMask(bits)
    }

    /// The wire value.
    pub const fn as_i32(self) -> i32 {
        self.0
    }

    /// A mask with the given events set.
    pub const fn from_events(events: &[Event]) -> EventMask {
        let mut mask = 0;
        let mut i = 0;
        while i < events.len() {
            if let Some(bit) = events[i].mask_bit() {
                mask |= bit;
            }
            i += 1;
        }
        EventMask(mask)
    }

    /// Sets `event` (no-op for [`Event::Unknown`]/[`Event::Last`]).
    pub fn set(&mut self, event: Event) -> &mut Self {
        if let Some(bit) = event.mask_bit() {
            self.0 |= bit;
        }
        self
    }

    /// Clears `event`.
    pub fn clear(&mut self, event: Event) -> &mut Self {
        if let Some(bit) = event.mask_bit() {
            self.0 &= !bit;
        }
        self
    }

    /// The mask with `event` set.
    #[must_use]
    pub fn with(mut self, event: Event) -> Self {
        self.set(event);
        self
    }

    /// True if `event` is set.
    pub const fn contains(self, event: Event) -> bool {
        match event.mask_bit() {
            Some(bit) => self.0 & bit != 0,
            None => false,
        }
    }

    /// True if no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True if every bit of `other` is set in `self`.
    pub const fn contains_all(self, other: EventMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Bits set in both.
    #[must_use]
    pub const fn intersection(self, other: EventMask) -> EventMask {
        EventMask(self.0 & other.0)
    }

    /// Bits set in either.
    #[must_use]
    pub const fn union(self, other: EventMask) -> EventMask {
        EventMask(self.0 | other.0)
    }

    /// Bits of `self` not set in `other`.
    #[must_use]
    pub const fn difference(self, other: EventMask) -> EventMask {
        EventMask(self.0 & !other.0)
    }

    /// Bits that correspond to no known event.
    pub const fn unknown_bits(self) -> i32 {
        self.0 & !EventMask::ALL.0
    }

    /// The known events that are set, in wire order.
    pub fn iter(self) -> impl Iterator<Item = Event> {
        Event::ALL_EVENTS
            .into_iter()
            .filter(move |e| self.contains(*e))
    }

    /// Parses a comma-separated, case-insensitive list of event names, the
    /// way upstream NRI does.
    ///
    /// Accepted names: each event's pretty name (`RunPodSandbox`, ...),
    /// `all` (every event), `pod` or `podsandbox` (every event whose name
    /// contains "pod") and `container` (every event whose name contains
    /// "container", which includes `ValidateContainerAdjustment`). Blanks
    /// around names are ignored. Any other name, including an empty one, is
    /// an [`Error::UnknownEvent`].
    pub fn parse(list: &str) -> Result<EventMask, Error> {
        let mut mask = EventMask::EMPTY;
        for raw in list.split(',') {
            let name = raw.trim().to_ascii_lowercase();
            match name.as_str() {
                "all" => mask = mask.union(EventMask::ALL),
                "pod" | "podsandbox" | "container" => {
                    let part = if name == "container" {
                        "container"
                    } else {
                        "pod"
                    };
                    for e in Event::ALL_EVENTS {
                        if e.pretty_name().to_ascii_lowercase().contains(part) {
                            mask.set(e);
                        }
                    }
                }
                _ => match Event::from_lower_pretty_name(&name) {
                    Some(e) => {
                        mask.set(e);
                    }
                    None => return Err(Error::UnknownEvent { name }),
                },
            }
        }
        Ok(mask)
    }

    /// Parses several lists (see [`EventMask::parse`]) into one mask; no
    /// list at all gives the empty mask.
    pub fn parse_all<I, S>(lists: I) -> Result<EventMask, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        lists.into_iter().try_fold(EventMask::EMPTY, |acc, s| {
            Ok(acc.union(EventMask::parse(s.as_ref())?))
        })
    }
}

impl FromStr for EventMask {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventMask::parse(s)
    }
}

/// Pretty names joined with `,` in wire order, then `unknown(0x..)` for bits
/// of no known event; the empty mask prints as the empty string.
impl fmt::Display for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for e in self.iter() {
            write!(f, "{sep}{}", e.pretty_name())?;
            sep = ",";
        }
        let rest = self.unknown_bits();
        if rest != 0 {
            write!(f, "{sep}unknown({:#x})", rest)?;
        }
        Ok(())
    }
}

impl fmt::Debug for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventMask({:#x}: {})", self.0, self)
    }
}

impl From<i32> for EventMask {
    fn from(bits: i32) -> Self {
        EventMask(bits)
    }
}

impl From<EventMask> for i32 {
    fn from(mask: EventMask) -> Self {
        mask.0
    }
}

impl From<Event> for EventMask {
    fn from(event: Event) -> Self {
        EventMask::from_events(&[event])
    }
}

impl FromIterator<Event> for EventMask {
    fn from_iter<T: IntoIterator<Item = Event>>(iter: T) -> Self {
        let mut mask = EventMask::EMPTY;
        for e in iter {
            mask.set(e);
        }
        mask
    }
}

impl std::ops::BitOr for EventMask {
    type Output = EventMask;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl std::ops::BitOrAssign for EventMask {
    fn bitor_assign(&mut self, rhs: Self) {
        *self = self.union(rhs);
    }
}

impl std::ops::BitAnd for EventMask {
    type Output = EventMask;
    fn bitand(self, rhs: Self) -> Self {
        self.intersection(rhs)
    }
}

impl std::ops::BitAndAssign for EventMask {
    fn bitand_assign(&mut self, rhs: Self) {
        *self = self.intersection(rhs);
    }
}
