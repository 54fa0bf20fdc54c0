//! Invariant 5 (what the library holds is bounded by the truth) and the
//! finale's checks (stopping the runtime leaves nothing behind).
//!
//! The library keeps the set of containers it knows (created or listed,
//! not removed), and bounds what a peer may send by it (known containers +
//! `extra_updates` entries per message). That set is what grows when the
//! library forgets to prune; the probe measures it from outside: an
//! unsolicited UpdateContainers with one entry more than the truth allows
//! must be refused, and the refusal names the count.

use std::sync::Arc;
use std::time::Duration;

use nri_api::EventMask;
use nri_api::api::ContainerUpdate;

use crate::env::Env;
use crate::invariants::Violation;
use crate::observe::Observer;
use crate::schedule::{Peer, PluginSpec, Policy};

/// The error text and its sources.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// The number before " known containers" in `text`.
fn known_count(text: &str) -> Option<usize> {
    let at = text.find(" known containers")?;
    let digits: String = text[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

/// The probe's verdict: the answer to an update of `truth` + extra + 1
/// entries.
pub fn judge(r: Result<Vec<ContainerUpdate>, String>, truth: usize) -> Vec<Violation> {
    let detail = match r {
        Ok(_) => format!(
            "an update naming {} containers was accepted: the library counts more than the {truth} containers the runtime has",
            truth + crate::env::EXTRA_UPDATES + 1
        ),
        Err(e) => match known_count(&e) {
            Some(n) if n != truth => {
                format!("the library counts {n} known containers, the runtime has {truth}")
            }
            _ => return Vec::new(),
        },
    };
    vec![Violation::new(5, "known-containers", None, None, detail)]
}

/// A plugin starts registering, `us` microseconds later the runtime the
/// plugins dial stops: afterwards no plugin is connected or active and the
/// socket is gone. With `turns` (generator 4 on), `us` under a millisecond
/// counts scheduler turns instead.
pub async fn finale(env: &mut Env, us: u64, turns: bool) -> Vec<Violation> {
    let spec = PluginSpec {
        index: "99".into(),
        name: "finale".into(),
        peer: Peer::Sdk,
        policy: Policy::Default,
        events: EventMask::ALL,
        echo: false,
        streaming: false,
        reconnect: false,
        legacy: false,
        wasm_faults: Vec::new(),
    };
    let obs = Arc::new(Observer::new(spec, usize::MAX, env.clock.clone()));
    let late = crate::sdk::stub(obs, &env.plugin_socket).ok();
    let late_handle = late.as_ref().map(|s| crate::env::Handle::Sdk(s.handle()));
    if let Some(stub) = late {
        env.stubs.spawn(async move {
            let _ = stub.run().await;
        });
    }
    // Paused time does not move while the plugin registers (its I/O is
    // always ready): a sleep ends once the registration is over. Scheduler
    // turns let the stop land in the middle of the registration.
    if turns && us < 1000 {
        for _ in 0..us {
            tokio::task::yield_now().await;
        }
    } else {
        tokio::time::sleep(Duration::from_micros(us)).await;
    }
    match &mut env.proxy {
        Some(p) => {
            p.shutdown.cancel();
            if let Some(t) = p.task.take() {
                let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
            }
        }
        None => env.plugin_side.stop().await,
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut out = Vec::new();
    let mut flag = |kind, plugin: Option<String>, detail: String| {
        out.push(Violation::new(4, kind, plugin, None, detail));
    };
    let active = env.plugin_side.plugins();
    if !active.is_empty() {
        let names: Vec<String> = active.iter().map(|p| p.id.to_string()).collect();
        flag(
            "stop-left-active",
            None,
            format!("active after stop: {names:?}"),
        );
    }
    if env.plugin_socket.exists() {
        flag(
            "stop-left-socket",
            None,
            "the socket is still there after stop".into(),
        );
    }
    let handles = (env.slots.iter())
        .filter_map(|s| s.handle.clone().map(|h| (s.obs.spec.full_name(), h)))
        .chain(late_handle.map(|h| ("99-finale".to_owned(), h)));
    for (name, h) in handles {
        if h.is_connected() {
            flag(
                "stop-left-connected",
                Some(name),
                "still connected 3s after stop".into(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::known_count;

    #[test]
    fn reads_the_count_of_a_refusal() {
        let t = "UpdateContainersRequest with at least 12 update entries, more than the 11 allowed (7 known containers + 4)";
        assert_eq!(known_count(t), Some(7));
        assert_eq!(known_count("nothing"), None);
    }
}
