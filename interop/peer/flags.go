package peer

import (
	"flag"
	"time"
)

// RuntimeFlags are the flags both runtime peers take.
type RuntimeFlags struct {
	Socket       string
	PluginDir    string
	ConfigDir    string
	RegTimeout   time.Duration
	ReqTimeout   time.Duration
	Name         string
	Version      string
	UpdatePolicy string
	LogLevel     string
	NoListen     bool
}

// ParseRuntimeFlags defines the runtime flags on the command line (prog
// names the default plugin and config directories and the runtime name;
// nriVersion is the default runtime version; regTimeout and reqTimeout are
// the adaptation's default timeouts), parses the command line, calls check
// (for the caller's own flags, defined before; may be nil), validates the
// common flags and sets up logging. A usage error exits (see Usage).
func ParseRuntimeFlags(prog, nriVersion string, regTimeout, reqTimeout time.Duration, check func()) RuntimeFlags {
	var o RuntimeFlags
	flag.StringVar(&o.Socket, "socket", "", "socket path for external plugins (required unless --no-listen)")
	flag.StringVar(&o.PluginDir, "plugin-dir", "/nonexistent/"+prog+"/plugins", "directory of pre-installed plugins to launch (may not exist)")
	flag.StringVar(&o.ConfigDir, "config-dir", "/nonexistent/"+prog+"/conf.d", "drop-in config directory for launched plugins (may not exist)")
	flag.DurationVar(&o.RegTimeout, "registration-timeout", regTimeout, "plugin registration timeout")
	flag.DurationVar(&o.ReqTimeout, "request-timeout", reqTimeout, "plugin request timeout")
	flag.StringVar(&o.Name, "name", prog, "runtime name sent in Configure")
	flag.StringVar(&o.Version, "version", nriVersion, "runtime version sent in Configure")
	flag.StringVar(&o.UpdatePolicy, "update-policy", "succeed", "answer to unsolicited UpdateContainers: succeed | fail | error")
	flag.StringVar(&o.LogLevel, "log-level", "warn", "stderr log level: debug | info | warn | error")
	flag.BoolVar(&o.NoListen, "no-listen", false, "do not accept external plugin connections")
	flag.Parse()
	if check != nil {
		check()
	}
	if flag.NArg() != 0 {
		Usage("unexpected arguments: %v", flag.Args())
	}
	if o.Socket == "" && !o.NoListen {
		Usage("--socket is required (or --no-listen)")
	}
	if !ValidPolicy(o.UpdatePolicy) {
		Usage("invalid --update-policy %q", o.UpdatePolicy)
	}
	if err := SetupLogging(o.LogLevel); err != nil {
		Usage("%v", err)
	}
	return o
}
