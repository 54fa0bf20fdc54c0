package peer

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat (100 on
// every mainstream Linux configuration).
const ClockTicks = 100

// Mem is a process's resident set from /proc/<pid>/status, in KiB.
type Mem struct {
	RSSKB int64 `json:"rss_kb"`
	HWMKB int64 `json:"hwm_kb"`
}

// ReadMem reads VmRSS and VmHWM of pid (0 = self).
func ReadMem(pid int) (Mem, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return Mem{}, err
	}
	defer f.Close()
	var m Mem
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSSKB = n
		case "VmHWM":
			m.HWMKB = n
		}
	}
	return m, sc.Err()
}

// ReadCPUTicks returns utime+stime of pid from /proc/<pid>/stat, in clock
// ticks (see ClockTicks).
func ReadCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat for %d", pid)
	}
	fs := strings.Fields(s[i+1:])
	// fields after ")": state(3) ... utime is field 14, stime 15 (1-based).
	if len(fs) < 13 {
		return 0, fmt.Errorf("short stat for %d", pid)
	}
	ut, err1 := strconv.ParseInt(fs[11], 10, 64)
	st, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad stat for %d", pid)
	}
	return ut + st, nil
}

// ReadTreeCPU returns the CPU time of pid and its live descendants (from
// /proc/<pid>/task/*/children): a plugin process that runs others, such as
// nri-proxy with its plugins, is measured with them. Each thread's time
// comes from /proc/<pid>/task/<tid>/schedstat (nanoseconds), or, where no
// thread has schedstat, from the process's stat in clock ticks; threads
// that exited are not counted, so read twice while the same threads live.
func ReadTreeCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	schedstat := false
	for _, t := range tasks {
		// A thread that exited since the listing counts nothing.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			if ns, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
				total += time.Duration(ns)
				schedstat = true
			}
		}
	}
	if !schedstat {
		ticks, err := ReadCPUTicks(pid)
		if err != nil {
			return 0, err
		}
		total = time.Duration(ticks) * time.Second / ClockTicks
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			// A child that exited between the two reads counts nothing.
			if v, err := ReadTreeCPU(child); err == nil {
				total += v
			}
		}
	}
	return total, nil
}

// SelfCPU returns this process's user+system CPU time (getrusage).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
