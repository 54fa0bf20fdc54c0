//! Event masks: bits, parsing and printing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::api::Event;
use nri_api::{Error, EventMask};

#[test]
fn bit_is_event_minus_one() {
    for e in Event::ALL_EVENTS {
        let bit = 1 << (e as i32 - 1);
        assert_eq!(e.mask_bit(), Some(bit), "{e}");
        assert_eq!(EventMask::from(e).as_i32(), bit);
    }
    assert_eq!(Event::Unknown.mask_bit(), None);
    assert_eq!(Event::Last.mask_bit(), None);
    assert_eq!(EventMask::from_events(&Event::ALL_EVENTS), EventMask::ALL);
    assert_eq!(EventMask::ALL.as_i32(), 0x3FFF);
    assert_eq!(EventMask::ALL_BEFORE_V0_10.as_i32(), 0x7FF);
}

#[test]
fn set_clear_contains_iter() {
    let mut m = EventMask::EMPTY;
    m.set(Event::CreateContainer).set(Event::RunPodSandbox);
    assert_eq!(m.as_i32(), 0x9);
    assert!(m.contains(Event::CreateContainer));
    assert!(!m.contains(Event::StopContainer));
    assert!(!m.contains(Event::Unknown));
    assert_eq!(
        m.iter().collect::<Vec<_>>(),
        [Event::RunPodSandbox, Event::CreateContainer]
    );
    m.clear(Event::RunPodSandbox);
    assert_eq!(m.as_i32(), 0x8);
    m.set(Event::Unknown);
    assert_eq!(m.as_i32(), 0x8, "Unknown is not an event");
    let collected: EventMask = [Event::StopContainer, Event::ValidateContainerAdjustment]
        .into_iter()
        .collect();
    assert_eq!(collected.as_i32(), 0x2200);
}

#[test]
fn parse_single_names_case_insensitive() {
    for e in Event::ALL_EVENTS {
        let lower = e.pretty_name().to_ascii_lowercase();
        assert_eq!(EventMask::parse(&lower).unwrap(), EventMask::from(e));
        assert_eq!(
            EventMask::parse(e.pretty_name()).unwrap(),
            EventMask::from(e)
        );
        assert_eq!(
            EventMask::parse(&lower.to_ascii_uppercase()).unwrap(),
            EventMask::from(e)
        );
    }
}

#[test]
fn parse_groups() {
    assert_eq!(EventMask::parse("all").unwrap(), EventMask::ALL);
    assert_eq!(EventMask::parse("ALL").unwrap(), EventMask::ALL);
    // Every name containing "pod".
    let pod = 0x1 | 0x2 | 0x4 | 0x800 | 0x1000;
    assert_eq!(EventMask::parse("pod").unwrap().as_i32(), pod);
    assert_eq!(EventMask::parse("podsandbox").unwrap().as_i32(), pod);
    // Every name containing "container", including the validation event.
    let container = 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x2000;
    assert_eq!(EventMask::parse("container").unwrap().as_i32(), container);
    assert_eq!(
        EventMask::parse("pod,container").unwrap(),
        EventMask::ALL,
        "pod and container together cover everything"
    );
}

#[test]
fn parse_lists_and_blanks() {
    let m = EventMask::parse("RunPodSandbox,StopContainer , removecontainer").unwrap();
    assert_eq!(m.as_i32(), 0x1 | 0x200 | 0x400);
    let m = EventMask::parse_all(["runpodsandbox", "createcontainer,stopcontainer"]).unwrap();
    assert_eq!(m.as_i32(), 0x1 | 0x8 | 0x200);
    assert_eq!(
        EventMask::parse_all(Vec::<String>::new()).unwrap(),
        EventMask::EMPTY
    );
    let m: EventMask = "updatepodsandbox".parse().unwrap();
    assert_eq!(m.as_i32(), 0x800);
}

#[test]
fn parse_errors_name_the_culprit() {
    assert_eq!(
        EventMask::parse("createcontainer,frobnicate"),
        Err(Error::UnknownEvent {
            name: "frobnicate".into()
        })
    );
    assert_eq!(
        EventMask::parse(""),
        Err(Error::UnknownEvent { name: "".into() })
    );
    assert!(EventMask::parse("createcontainer,").is_err());
    assert!(EventMask::parse("run_pod_sandbox").is_err());
    assert!(EventMask::parse("pods").is_err());
    let msg = EventMask::parse("Bogus").unwrap_err().to_string();
    assert_eq!(msg, "unknown event \"bogus\"");
}

#[test]
fn display() {
    assert_eq!(EventMask::EMPTY.to_string(), "");
    assert_eq!(
        EventMask::from_i32(0x9).to_string(),
        "RunPodSandbox,CreateContainer"
    );
    assert_eq!(
        EventMask::from_i32(0x2000 | 0x4000).to_string(),
        "ValidateContainerAdjustment,unknown(0x4000)"
    );
    assert_eq!(EventMask::from_i32(0x10000).to_string(), "unknown(0x10000)");
    assert_eq!(
        EventMask::ALL.to_string(),
        "RunPodSandbox,StopPodSandbox,RemovePodSandbox,CreateContainer,PostCreateContainer,\
         StartContainer,PostStartContainer,UpdateContainer,PostUpdateContainer,StopContainer,\
         RemoveContainer,UpdatePodSandbox,PostUpdatePodSandbox,ValidateContainerAdjustment"
    );
    assert_eq!(
        format!("{:?}", EventMask::from_i32(0x8)),
        "EventMask(0x8: CreateContainer)"
    );
}

#[test]
fn display_parse_round_trip() {
    for bits in [0x1, 0x3FFF, 0x7FF, 0x2001, 0x1234] {
        let m = EventMask::from_i32(bits);
        assert_eq!(EventMask::parse(&m.to_string()).unwrap(), m);
    }
}

#[test]
fn set_algebra() {
    let a = EventMask::from_i32(0x3001);
    let b = EventMask::ALL_BEFORE_V0_10;
    assert_eq!((a & b).as_i32(), 0x1);
    assert_eq!(a.difference(b).as_i32(), 0x3000);
    assert_eq!((a | b).as_i32(), 0x37FF);
    assert!(EventMask::ALL.contains_all(a));
    assert!(!b.contains_all(a));
    assert_eq!(EventMask::from_i32(-1).unknown_bits(), !0x3FFF);
}

#[test]
fn state_change_events() {
    let via_state_change: Vec<Event> = Event::ALL_EVENTS
        .into_iter()
        .filter(|e| e.is_state_change_event())
        .collect();
    assert_eq!(
        via_state_change,
        [
            Event::RunPodSandbox,
            Event::StopPodSandbox,
            Event::RemovePodSandbox,
            Event::PostCreateContainer,
            Event::StartContainer,
            Event::PostStartContainer,
            Event::PostUpdateContainer,
            Event::RemoveContainer,
            Event::PostUpdatePodSandbox,
        ]
    );
    for e in Event::ALL_EVENTS {
        assert_eq!(e.method_name(), Some(e.pretty_name()));
    }
    assert_eq!(Event::Unknown.method_name(), None);
}
