//! What an allow-list checks beyond its entries: the parts of a request
//! that decide what the runtime does, whatever the entries say (a mount's
//! type and options).

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

/// Whether `p` is an absolute path without a `..` component.
pub(crate) fn absolute_without_dot_dot(p: &str) -> bool {
    p.starts_with('/') && !p.split('/').any(|c| c == "..")
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
}
