//! What an allow-list checks beyond its entries: the parts of a request
//! that decide what the runtime does, whatever the entries say (a mount's
//! type and options, a device's numbers and type, whether a sysctl is one
//! of the pod's own namespaces, the syntax of names).

/// The mount options a fenced mount may carry without the operator
/// listing them: flags that restrict, keep or only tune a bind mount.
/// Propagation that can reach the host (`shared`, `rshared`) and every
/// option with a value are not among them.
pub(crate) const SAFE_MOUNT_OPTIONS: &[&str] = &[
    "bind",
    "rbind",
    "ro",
    "rw",
    "rro",
    "rrw",
    "nosuid",
    "suid",
    "rnosuid",
    "rsuid",
    "nodev",
    "dev",
    "rnodev",
    "rdev",
    "noexec",
    "exec",
    "rnoexec",
    "rexec",
    "private",
    "rprivate",
    "slave",
    "rslave",
    "unbindable",
    "runbindable",
    "atime",
    "noatime",
    "ratime",
    "rnoatime",
    "relatime",
    "norelatime",
    "rrelatime",
    "rnorelatime",
    "strictatime",
    "nostrictatime",
    "rstrictatime",
    "rnostrictatime",
    "diratime",
    "nodiratime",
    "rdiratime",
    "rnodiratime",
    "symfollow",
    "nosymfollow",
    "rsymfollow",
    "rnosymfollow",
    "sync",
    "async",
    "dirsync",
    "lazytime",
    "nolazytime",
    "defaults",
];

/// Options never allowed, even when the operator's `mountOptions` match
/// them: they name another path or source, or change what the source
/// means (overlay layers, a loop device, a subvolume, a credentials file,
/// an SELinux context, an ID-mapped view of the source). Compared on the
/// option's name (before `=`), ignoring case.
pub(crate) const NEVER_MOUNT_OPTIONS: &[&str] = &[
    "lowerdir",
    "lowerdir+",
    "upperdir",
    "workdir",
    "datadir+",
    "redirect_dir",
    "metacopy",
    "loop",
    "offset",
    "sizelimit",
    "src",
    "source",
    "subvol",
    "subvolid",
    "credentials",
    "cred",
    "context",
    "fscontext",
    "defcontext",
    "rootcontext",
    "idmap",
    "ridmap",
    "uidmap",
    "gidmap",
    "remount",
    "move",
];

/// Why an option can never be allowed, if it cannot: `None` for one the
/// operator may allow.
pub(crate) fn never_option(option: &str) -> Option<&'static str> {
    if option.is_empty() || option.contains(',') || option.chars().any(char::is_control) {
        return Some("an empty option, a comma or a control character (one option per entry)");
    }
    let name = option
        .split('=')
        .next()
        .unwrap_or(option)
        .to_ascii_lowercase();
    if name.starts_with("x-") {
        return Some("options of the mount helpers (x-*)");
    }
    NEVER_MOUNT_OPTIONS
        .contains(&name.as_str())
        .then_some("options that name a path or a source, or change what the source means")
}

/// Whether a mount is a bind mount for the OCI runtime: its type is
/// `bind`, or it has the `bind` or `rbind` option (runc binds the source
/// whatever the type then).
pub(crate) fn is_bind(r#type: &str, options: &[String]) -> bool {
    r#type == "bind" || options.iter().any(|o| o == "bind" || o == "rbind")
}

/// Whether `p` is an absolute path without a `..` component and without
/// control characters (a line break, an escape sequence or a NUL would
/// make the runtime, its logs and the fence see different paths).
pub(crate) fn absolute_without_dot_dot(p: &str) -> bool {
    p.starts_with('/') && !p.split('/').any(|c| c == "..") && !p.chars().any(char::is_control)
}

/// Largest major device number the kernel has (12 bits).
pub(crate) const MAX_MAJOR: i64 = (1 << 12) - 1;
/// Largest minor device number the kernel has (20 bits).
pub(crate) const MAX_MINOR: i64 = (1 << 20) - 1;

/// Whether a sysctl `name` (`.` or `/` spelling) belongs to one of the
/// pod's own namespaces, and which: `network`, `ipc` or `uts` (the
/// namespaced sysctls, as the OCI runtimes and the kubelet know them).
/// `None` for a sysctl of the node.
pub(crate) fn sysctl_namespace(name: &str) -> Option<&'static str> {
    const IPC: [&str; 8] = [
        "msgmax",
        "msgmnb",
        "msgmni",
        "sem",
        "shmall",
        "shmmax",
        "shmmni",
        "shm_rmid_forced",
    ];
    let parts: Vec<&str> = name.split(['.', '/']).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    match parts.as_slice() {
        ["net", _, ..] => Some("network"),
        ["fs", "mqueue", _, ..] => Some("ipc"),
        ["kernel", k] if IPC.contains(k) => Some("ipc"),
        ["kernel", "hostname" | "domainname"] => Some("uts"),
        _ => None,
    }
}

/// Whether an allow-list entry (a sysctl prefix) can allow any namespaced
/// sysctl: it is one, is under one of the namespaced trees, or is a
/// prefix of one (`kernel` allows `kernel.shmmax`).
pub(crate) fn sysctl_entry_can_be_namespaced(entry: &str) -> bool {
    let parts: Vec<&str> = entry.split(['.', '/']).collect();
    match parts.as_slice() {
        ["net", ..] | ["kernel"] | ["fs"] | ["fs", "mqueue", ..] => true,
        _ => sysctl_namespace(entry).is_some(),
    }
}

/// Whether `name` can be a Linux interface name: 1 to 15 bytes, none of
/// `/`, `:` or white space, not `.` or `..` (the kernel's rules; a longer
/// name could only be an alternative name, which pods do not choose).
pub(crate) fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// Whether `name` is a fully qualified CDI device name,
/// `vendor.com/class=device`: a vendor of letters, digits, `.`, `_`, `-`
/// starting with a letter; a class of letters, digits, `_`, `-`; a device
/// name of letters, digits, `_`, `-`, `.`, `:`, starting and ending with
/// a letter or digit.
pub(crate) fn valid_cdi_name(name: &str) -> bool {
    let Some((kind, device)) = name.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    let word = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    let alnum_ends = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    word(vendor, &['.', '_', '-'])
        && vendor.starts_with(|c: char| c.is_ascii_alphabetic())
        && word(class, &['_', '-'])
        && word(device, &['_', '-', '.', ':'])
        && alnum_ends(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_name_paths_are_never_allowed() {
        for bad in [
            "lowerdir=/",
            "upperdir=/x",
            "workdir=/y",
            "LowerDir=/",
            "lowerdir+=/",
            "datadir+=/",
            "loop",
            "context=system_u:object_r:container_file_t:s0",
            "x-mount.idmap=0:0:1",
            "idmap",
            "subvol=/@",
            "size=1m,lowerdir=/",
            "",
            "a\nb",
        ] {
            assert!(never_option(bad).is_some(), "{bad:?}");
        }
        for ok in ["size=1m", "mode=0755", "ro", "rshared"] {
            assert_eq!(never_option(ok), None, "{ok}");
        }
    }

    #[test]
    fn namespaced_sysctls() {
        assert_eq!(sysctl_namespace("net.core.somaxconn"), Some("network"));
        assert_eq!(
            sysctl_namespace("net/ipv4/conf/eth0.100/forwarding"),
            Some("network")
        );
        assert_eq!(sysctl_namespace("kernel.shmmax"), Some("ipc"));
        assert_eq!(sysctl_namespace("fs.mqueue.msg_max"), Some("ipc"));
        assert_eq!(sysctl_namespace("kernel.hostname"), Some("uts"));
        for node in [
            "kernel.core_pattern",
            "kernel.shmmax.x",
            "vm.overcommit_memory",
            "fs.file-max",
            "net",
            "net..core",
            "kernel",
        ] {
            assert_eq!(sysctl_namespace(node), None, "{node}");
        }
        assert!(sysctl_entry_can_be_namespaced("kernel"));
        assert!(sysctl_entry_can_be_namespaced("net.core"));
        assert!(!sysctl_entry_can_be_namespaced("vm"));
        assert!(!sysctl_entry_can_be_namespaced("kernel.core_pattern"));
    }

    #[test]
    fn names() {
        assert!(valid_ifname("sriov-vf0") && valid_ifname("eth0.100"));
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "sixteen-bytes-xx",
        ] {
            assert!(!valid_ifname(bad), "{bad:?}");
        }
        assert!(valid_cdi_name("nvidia.com/gpu=0"));
        assert!(valid_cdi_name("vendor.com/class=dev:1.a"));
        for bad in [
            "nvidia.com/gpu",
            "nvidia.com/gpu=",
            "nvidia.com/gpu=0 other.com/x=y",
            "nvidia.com/gpu=a/b=c",
            "/gpu=0",
            "nvidia.com/gpu=0,",
            "1vendor/x=y",
        ] {
            assert!(!valid_cdi_name(bad), "{bad:?}");
        }
    }
}
