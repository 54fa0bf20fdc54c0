//! The set-up the runtime-side fault tests share: a runtime, the good
//! SDK plugin and a raw bad plugin (`10-bad`, called first).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_api::api::{ContainerAdjustment, CreateContainerResponse, Event};
use nri_api::method;
use nri_runtime::ErrorClass;

use super::*;

/// The bad plugin's name.
pub const BAD: &str = "10-bad";

/// A named way for the bad plugin to answer.
pub type Case = (&'static str, fn() -> Act);

pub fn annotate(key: &str, value: &str) -> Act {
    let mut adjust = ContainerAdjustment::default();
    adjust.annotations.insert(key.into(), value.into());
    Act::ok(&CreateContainerResponse {
        adjust: Some(adjust),
        ..Default::default()
    })
}

/// A runtime with `policy` for `bad`, the good plugin and a raw bad plugin
/// (`10-bad`) acting as `on_create` says for CreateContainer.
pub async fn setup(
    env: &Env,
    builder: nri_runtime::Builder,
    on_create: impl Fn() -> Act + Send + Sync + 'static,
) -> (nri_runtime::Adaptation, GoodPlugin, RawPlugin) {
    let (a, good) = env.start_with_good(builder).await;
    let mut raw = RawPlugin::connect(&env.socket, RawOpts::default(), move |m, _| {
        (m == method::CREATE_CONTAINER).then(&on_create)
    })
    .await;
    raw.register("bad", "10").await.expect("registration");
    env.probe.active(2).await;
    (a, good, raw)
}

/// Asserts that `errors` holds exactly one error, of `BAD`, of this class.
pub fn one_error_of_bad(errors: &[nri_runtime::PluginError], class: ErrorClass) {
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].plugin, BAD);
    assert_eq!(errors[0].event, Event::CreateContainer);
    assert_eq!(errors[0].failure.class(), class, "{:?}", errors[0]);
    let text = errors[0].to_string();
    assert!(
        text.contains(BAD) && text.contains("CreateContainer"),
        "{text}"
    );
}
