//! The fault programs of WebAssembly plugins (generator 6 on). A guest
//! cannot see the schedule while it runs (the host gives it no channel
//! back to the checker), so the faults it commits are drawn when the
//! schedule is, and compiled into its module (`wasm.rs`): each entry
//! names an event and the pod or container its request must be about,
//! what the guest does then, and for how many such requests.
//!
//! The targets are the events the schedule's steps cause and the plugin
//! subscribes to. Synchronize gets no faults: every new instance of a
//! plugin synchronizes again, and a guest, which keeps nothing across
//! instances, would commit the same fault again on each.

use nri_api::api::Event;

use crate::rng::Rng;
use crate::schedule::{Fault, PluginSpec, Step, WasmFault};

/// The events step `s` sends about one object, with that object's id.
fn targets(s: &Step) -> Vec<(Event, String)> {
    let (events, id): (&[Event], String) = match *s {
        Step::RunPod { pod, .. } => (&[Event::RunPodSandbox], format!("p{pod}")),
        Step::Create { ctr, .. } => (
            &[
                Event::CreateContainer,
                Event::PostCreateContainer,
                Event::ValidateContainerAdjustment,
            ],
            format!("c{ctr}"),
        ),
        Step::Start { ctr, .. } => (
            &[Event::StartContainer, Event::PostStartContainer],
            format!("c{ctr}"),
        ),
        Step::Update { ctr, .. } => (
            &[Event::UpdateContainer, Event::PostUpdateContainer],
            format!("c{ctr}"),
        ),
        Step::Stop { ctr, .. } | Step::Exit { ctr, .. } => {
            (&[Event::StopContainer], format!("c{ctr}"))
        }
        Step::Remove { ctr, .. } => (&[Event::RemoveContainer], format!("c{ctr}")),
        Step::UpdatePod { pod, .. } => (
            &[Event::UpdatePodSandbox, Event::PostUpdatePodSandbox],
            format!("p{pod}"),
        ),
        Step::StopPod { pod, .. } => (&[Event::StopPodSandbox], format!("p{pod}")),
        Step::RemovePod { pod, .. } => (&[Event::RemovePodSandbox], format!("p{pod}")),
        _ => return Vec::new(),
    };
    events.iter().map(|e| (*e, id.clone())).collect()
}

/// The request timeout of a WebAssembly plugin with a fault program, ms
/// (the shortest of the run's choices, whatever the run's): a delay over
/// it or a hang costs that much wall time.
pub const TIMEOUT_MS: u64 = 500;

/// The fault program of the WebAssembly plugin `spec` in a schedule of
/// `steps`: up to three entries (none in a quarter of the plugins), each a
/// delay (40%: a tenth, half, just under, just over or twice its timeout,
/// [`TIMEOUT_MS`]), a hang (15%), an error answer (25%) or a trap (20%),
/// on one or two requests.
pub fn draw(rng: &mut Rng, spec: &PluginSpec, steps: &[Step]) -> Vec<WasmFault> {
    let mut all: Vec<(Event, String)> = Vec::new();
    for (e, id) in steps.iter().flat_map(targets) {
        if spec.subscribed(e) && !all.contains(&(e, id.clone())) {
            all.push((e, id));
        }
    }
    let n = rng.weighted(&[25, 35, 25, 15]);
    let t = TIMEOUT_MS;
    let mut out = Vec::new();
    for _ in 0..n {
        if all.is_empty() {
            break;
        }
        let (event, object) = rng.pick(&all).clone();
        let fault = match rng.weighted(&[40, 15, 25, 20]) {
            0 => Fault::Delay(*rng.pick(&[t / 10, t / 2, t - 1, t + 1, 2 * t])),
            1 => Fault::Hang,
            2 => Fault::Error,
            _ => Fault::Crash,
        };
        out.push(WasmFault {
            event,
            object,
            fault,
            times: rng.range(1, 2) as u32,
        });
    }
    out
}
