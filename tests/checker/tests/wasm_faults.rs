//! WebAssembly observers commit the faults of their program (generator
//! 6): an error answer, a hang the host cuts at the deadline (a new
//! instance follows), a trap (another) and a short delay, each recorded
//! with the request it answered, and the run holds every invariant.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_checker::{Options, Outcome, check_schedule};

const SCHEDULE: &str = "seed 0
generator 6
mode runtime
setup timeout=500 strikes=3 grace=0 deadline=none undo=yes preload=0x0x0
plugin 10-obs0 peer=wasm policy=ignore echo=no streaming=no reconnect=yes legacy=no events=RunPodSandbox,StopPodSandbox,RemovePodSandbox,CreateContainer,StartContainer,StopContainer,RemoveContainer
wasm-fault 0 RunPodSandbox p0 error x1
wasm-fault 0 CreateContainer c1 hang x1
wasm-fault 0 StartContainer c1 crash x1
wasm-fault 0 StopContainer c1 delay=50 x1
run-pod p0
create c1 p0
advance 1000
start c1
advance 1000
stop c1
remove c1
finale 100
";

#[test]
fn a_guest_commits_its_program_and_is_re_instantiated() {
    let s = nri_checker::text::parse(SCHEDULE).unwrap();
    assert_eq!(s.to_string(), SCHEDULE);
    let opts = Options {
        dump: true,
        ..Options::default()
    };
    let report = match check_schedule(&s, &opts, None) {
        Outcome::Pass(r) => r,
        Outcome::Fail(f, _) => panic!("{}", f.describe(None)),
        Outcome::SetupError(e) => panic!("set-up: {e}"),
    };
    let dump = &report.dump;
    for fault in [
        "Some(Error)",
        "Some(Hang)",
        "Some(Crash)",
        "Some(Delay(50))",
    ] {
        assert_eq!(dump.matches(fault).count(), 1, "{fault}:\n{dump}");
    }
    // The first instance, then one after the hang and one after the trap.
    assert!(dump.contains("plugin 10-obs0 instance 2 "), "{dump}");
    assert!(!dump.contains("plugin 10-obs0 instance 3 "), "{dump}");
    assert_eq!(report.instances, 3, "{dump}");
}
