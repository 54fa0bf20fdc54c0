//! Security across crates: the socket's mode and owner, the peer uid
//! allow-list against a real process of another user (the soak binary's
//! `plugin` mode started through `setpriv` as uid/gid 65534), and the
//! default validator against attempts to smuggle an OCI hook in.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use bytes::Bytes;
use common::*;
use nri_api::api::{
    self, ContainerAdjustment, CreateContainerResponse, Event, Hook, Hooks,
    ValidateContainerAdjustmentResponse,
};
use nri_api::{EventMask, method};
use nri_runtime::Error;
use nri_runtime::validate::DefaultValidatorConfig;
use tokio::io::{AsyncBufReadExt, BufReader};

const NOBODY: u32 = 65534;

fn my_euid() -> u32 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// `setpriv` from util-linux, when we are root and it exists.
fn setpriv() -> Option<&'static str> {
    if my_euid() != 0 {
        eprintln!("skipping: needs root to switch to uid {NOBODY}");
        return None;
    }
    for p in ["/usr/bin/setpriv", "/bin/setpriv"] {
        if Path::new(p).exists() {
            return Some(p);
        }
    }
    eprintln!("skipping: setpriv (util-linux) not installed");
    None
}

/// The soak binary's plugin mode, run as uid/gid 65534.
fn plugin_as_nobody(setpriv: &str, socket: &Path, name: &str) -> tokio::process::Child {
    let bin = env!("CARGO_BIN_EXE_soak");
    tokio::process::Command::new(setpriv)
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            bin,
            "plugin",
            "--idx",
            "10",
            "--name",
            name,
            "--socket",
        ])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Opens the temp dirs on the way to the socket to everybody, so that only
/// the socket itself (mode, allow-list) decides.
fn open_dirs(env: &Env) {
    for d in [env.dir.path(), env.socket.parent().unwrap()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

async fn stderr_of(mut child: tokio::process::Child) -> (std::process::ExitStatus, String) {
    // Keep stdin open: its end would make the plugin stop by itself.
    let _stdin = child.stdin.take();
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("child ends")
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn socket_is_0600_owned_by_the_runtime_user_and_refuses_other_users() {
    let guard = no_panics();
    let env = Env::new();
    let a = env.start(env.builder()).await;
    let md = std::fs::metadata(&env.socket).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o600, "{:o}", md.mode());
    assert_eq!(md.uid(), my_euid(), "socket owned by the runtime's user");
    let Some(setpriv) = setpriv() else {
        a.stop().await;
        return;
    };
    open_dirs(&env);
    let child = plugin_as_nobody(setpriv, &env.socket, "intruder");
    let (status, stderr) = stderr_of(child).await;
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot connect to the NRI socket") && stderr.contains("ermission denied"),
        "the SDK's typed connect error with the OS cause: {stderr}"
    );
    assert!(a.plugins().is_empty());
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread")]
async fn peer_uid_allow_list_rejects_another_user_and_admits_listed_ones() {
    let guard = no_panics();
    let Some(setpriv) = setpriv() else {
        return;
    };
    let (logs, _sub) = LogCapture::install();

    // 1. Only root allowed; the socket opened to everybody (as an admin
    //    might do by mistake): the allow-list alone must keep uid 65534 out.
    let env = Env::new();
    let a = env.start(env.builder().allowed_uids([0])).await;
    open_dirs(&env);
    std::fs::set_permissions(&env.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let child = plugin_as_nobody(setpriv, &env.socket, "intruder");
    let (status, stderr) = stderr_of(child).await;
    assert!(!status.success(), "rejected peer must not run: {stderr}");
    assert!(a.plugins().is_empty());
    let warn = logs.lines_with(&[
        "refusing a message from an NRI peer",
        "kind=\"peer_not_allowed\"",
        "connection from uid 65534",
    ]);
    assert_eq!(warn.len(), 1, "{}", logs.text());
    // An allowed uid (us, root) works on the same runtime.
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
    good.still_serves(&a, "c1").await;
    good.stop().await;
    a.stop().await;

    // 2. uid 65534 listed: the same process is admitted and gets events.
    let env = Env::new();
    let a = env.start(env.builder().allowed_uids([0, NOBODY])).await;
    open_dirs(&env);
    std::fs::set_permissions(&env.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut child = plugin_as_nobody(setpriv, &env.socket, "friend");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    env.probe.active(1).await;
    assert_eq!(a.plugins()[0].id.to_string(), "10-friendg0");
    a.run_pod_sandbox(&pod("p")).await.unwrap();
    loop {
        let l = tokio::time::timeout(WAIT, out.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("plugin output");
        if l == "e" {
            break; // the event reached the process running as 65534
        }
    }
    drop(child.stdin.take()); // ends the plugin
    a.stop().await;
    let _ = tokio::time::timeout(WAIT, child.wait()).await;
    guard.check();
}

// ------------------------------------------------------- default validator

fn hook(path: &str) -> Hook {
    Hook {
        path: path.into(),
        args: vec![path.into()],
        ..Default::default()
    }
}

fn hooks_act(h: Hooks) -> Act {
    Act::ok(&CreateContainerResponse {
        adjust: Some(ContainerAdjustment {
            hooks: Some(h),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn reject_hooks() -> DefaultValidatorConfig {
    let mut c = DefaultValidatorConfig::default();
    c.enable = true;
    c.reject_oci_hook_adjustment = true;
    c
}

/// Connects raw plugin `idx-name` answering CreateContainer with `act`
/// (and approving every validation if subscribed to it).
async fn hook_plugin(
    env: &Env,
    idx: &str,
    name: &str,
    validator: bool,
    act: fn() -> Act,
) -> RawPlugin {
    let mut events = vec![Event::CreateContainer];
    if validator {
        events.push(Event::ValidateContainerAdjustment);
    }
    let opts = RawOpts {
        events: EventMask::from_events(&events).as_i32(),
    };
    let mut p = RawPlugin::connect(&env.socket, opts, move |m: &str, _: &Bytes| match m {
        method::CREATE_CONTAINER => Some(act()),
        method::VALIDATE_CONTAINER_ADJUSTMENT => {
            Some(Act::ok(&ValidateContainerAdjustmentResponse {
                reject: false,
                reason: String::new(),
            }))
        }
        _ => None,
    })
    .await;
    p.register(name, idx).await.unwrap();
    p
}

fn assert_rejected(err: &Error, plugins: &[&str]) {
    match err {
        Error::ValidationRejected { plugin, reason } => {
            assert!(plugin.contains("default-validator"), "{err}");
            for p in plugins {
                assert!(reason.contains(p), "reason names {p}: {reason}");
            }
        }
        other => panic!("expected a validation rejection, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn default_validator_blocks_hooks_unless_allowed() {
    let guard = no_panics();
    let one = || {
        hooks_act(Hooks {
            prestart: vec![hook("/usr/bin/evil")],
            ..Default::default()
        })
    };
    // Rejected by default configuration of the validator.
    let env = Env::new();
    let a = env
        .start(env.builder().default_validator(reject_hooks()))
        .await;
    let _p = hook_plugin(&env, "10", "injector", false, one).await;
    env.probe.active(1).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .unwrap_err();
    assert_rejected(&err, &["10-injector"]);
    a.stop().await;

    // Allowed when hook injection is allowed.
    let env = Env::new();
    let mut allow = reject_hooks();
    allow.reject_oci_hook_adjustment = false;
    let a = env.start(env.builder().default_validator(allow)).await;
    let _p = hook_plugin(&env, "10", "injector", false, one).await;
    env.probe.active(1).await;
    let out = a
        .create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .unwrap();
    assert_eq!(
        out.adjustment.hooks.unwrap().prestart[0].path,
        "/usr/bin/evil"
    );
    a.stop().await;
    guard.check();
}

/// Attempts to get a hook past the validator by splitting it: two plugins
/// each adding a different kind of hook; one plugin adding it and a later
/// plugin answering an empty `Hooks` (trying to clear what the validator
/// would see, or its owner); the injector approving itself as a validator
/// plugin; and the same over many containers (no state carried between
/// events lets a later one through).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn hook_injection_cannot_be_split_across_plugins_or_events() {
    let guard = no_panics();
    let env = Env::new();
    let a = env
        .start(env.builder().default_validator(reject_hooks()))
        .await;
    let _a = hook_plugin(&env, "10", "half-a", true, || {
        hooks_act(Hooks {
            create_runtime: vec![hook("/a")],
            ..Default::default()
        })
    })
    .await;
    let _b = hook_plugin(&env, "20", "half-b", true, || {
        hooks_act(Hooks {
            poststart: vec![hook("/b")],
            ..Default::default()
        })
    })
    .await;
    let _c = hook_plugin(&env, "30", "eraser", true, || hooks_act(Hooks::default())).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(4).await;
    for i in 0..20 {
        let err = a
            .create_container(&pod("p"), &ctr("p", &format!("c{i}")))
            .await
            .unwrap_err();
        assert_rejected(&err, &["10-half-a", "20-half-b"]);
    }
    // The rejection is for hooks only: the good plugin's own creations
    // still work once the injectors are gone.
    drop((_a, _b, _c));
    env.probe.active(1).await;
    for i in 0..20 {
        let _ = good.next().await; // the 20 rejected creations reached it too
        let _ = i;
    }
    good.still_serves(&a, "clean").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}

/// The only message that carries hooks from a plugin is the CreateContainer
/// adjustment: updates (UpdateContainer, StopContainer, unsolicited
/// UpdateContainers, Synchronize) carry `ContainerUpdate`, which has only
/// resources. Pinned here so a schema change that adds such a path fails.
#[test]
fn no_other_message_can_carry_hooks() {
    let desc = prost_types_free_check();
    assert!(
        desc,
        "ContainerUpdate / LinuxContainerUpdate gained a hooks field"
    );
}

fn prost_types_free_check() -> bool {
    // Encode a ContainerUpdate with every field set as far as the Rust type
    // allows, and check that none of them is a Hooks: the type has no
    // `hooks` member (compile-time), so this is a structural pin.
    let u = api::ContainerUpdate {
        container_id: "c".into(),
        linux: Some(api::LinuxContainerUpdate::default()),
        ignore_failure: true,
    };
    let api::ContainerUpdate {
        container_id: _,
        linux,
        ignore_failure: _,
    } = u;
    let api::LinuxContainerUpdate { resources: _ } = linux.unwrap();
    true
}
