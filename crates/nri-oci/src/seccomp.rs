//! `linux.seccomp`: the whole policy is replaced.

use nri_api::api;
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompFilterFlag,
    LinuxSeccompOperator, LinuxSyscall, Spec,
};

use crate::Error;
use crate::util::{self, non_empty, non_empty_vec, parse_oci_enum};

fn syscall(s: &api::LinuxSyscall) -> Result<LinuxSyscall, Error> {
    if s.names.is_empty() || s.names.iter().any(String::is_empty) {
        return Err(Error::MissingField {
            field: "linux.seccomp_policy.syscalls",
            what: "syscall names",
        });
    }
    let action: LinuxSeccompAction =
        parse_oci_enum("linux.seccomp_policy.syscalls.action", &s.action)?;
    let mut args = Vec::with_capacity(s.args.len());
    for a in &s.args {
        let op: LinuxSeccompOperator =
            parse_oci_enum("linux.seccomp_policy.syscalls.args.op", &a.op)?;
        let index = usize::try_from(a.index).map_err(|_| Error::OutOfRange {
            field: "linux.seccomp_policy.syscalls.args.index",
            value: a.index.to_string(),
            reason: "does not fit usize",
        })?;
        let mut b = LinuxSeccompArgBuilder::default()
            .index(index)
            .value(a.value)
            .op(op);
        if a.value_two != 0 {
            b = b.value_two(a.value_two);
        }
        let o = b.build().map_err(|source| Error::Oci {
            field: "linux.seccomp_policy.syscalls.args",
            source,
        })?;
        args.push(o);
    }
    let mut o = LinuxSyscall::default();
    o.set_names(s.names.clone())
        .set_action(action)
        .set_errno_ret(s.errno_ret.as_ref().map(|e| e.value))
        .set_args(non_empty_vec(&args));
    Ok(o)
}

/// Converts the NRI policy and replaces `linux.seccomp` with it. Actions,
/// architectures, flags and operators use the OCI spelling
/// (`SCMP_ACT_ERRNO`, `SCMP_ARCH_X86_64`, `SECCOMP_FILTER_FLAG_LOG`,
/// `SCMP_CMP_EQ`); anything else is an [`Error::UnknownValue`].
pub(crate) fn seccomp(spec: &mut Spec, policy: Option<&api::LinuxSeccomp>) -> Result<(), Error> {
    let Some(p) = policy else { return Ok(()) };
    let default_action: LinuxSeccompAction =
        parse_oci_enum("linux.seccomp_policy.default_action", &p.default_action)?;
    let architectures = p
        .architectures
        .iter()
        .map(|a| parse_oci_enum::<Arch>("linux.seccomp_policy.architectures", a))
        .collect::<Result<Vec<_>, _>>()?;
    let flags = p
        .flags
        .iter()
        .map(|f| parse_oci_enum::<LinuxSeccompFilterFlag>("linux.seccomp_policy.flags", f))
        .collect::<Result<Vec<_>, _>>()?;
    let syscalls = p
        .syscalls
        .iter()
        .map(syscall)
        .collect::<Result<Vec<_>, _>>()?;

    let mut o = LinuxSeccomp::default();
    o.set_default_action(default_action)
        .set_default_errno_ret(p.default_errno.as_ref().map(|e| e.value))
        .set_architectures(non_empty_vec(&architectures))
        .set_flags(non_empty_vec(&flags))
        .set_listener_path(non_empty(&p.listener_path).map(Into::into))
        .set_listener_metadata(non_empty(&p.listener_metadata))
        .set_syscalls(non_empty_vec(&syscalls));
    util::linux(spec).set_seccomp(Some(o));
    Ok(())
}
