package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc: Linux fixes it at 100 for
// user space whatever the kernel's own tick rate.
const userHZ = 100

// loadAvg returns the 1, 5 and 15 minute load averages as /proc/loadavg
// states them, or "n/a" where there is no /proc.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// processCPU returns the user plus system CPU time that process pid has used
// (all its threads), from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name in parentheses may hold spaces: count fields after
	// its closing parenthesis, where field 3 (state) comes first, so
	// utime (14) and stime (15) are the 12th and 13th.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return ticksToDuration(ticks), nil
}

// machineBusy returns the CPU time every process and the kernel have used
// on all cores since boot (everything but idle and iowait), from /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal: guest time is
	// already inside user.
	var ticks int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return ticksToDuration(ticks), nil
}

// memUse is a process's resident memory in bytes: now, and the most it has
// had since it started; negative where /proc cannot tell.
type memUse struct {
	rss, peak int64
}

// processMemory reads VmRSS and VmHWM from /proc/<pid>/status.
func processMemory(pid int) memUse {
	use := memUse{rss: -1, peak: -1}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return use
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "VmRSS" && k != "VmHWM" {
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if k == "VmRSS" {
			use.rss = n << 10
		} else {
			use.peak = n << 10
		}
	}
	return use
}

func ticksToDuration(ticks int64) time.Duration {
	return time.Duration(ticks) * time.Second / userHZ
}

// cpuMeter measures, over a window, the CPU the mesh used and the CPU that
// every other process of the machine used (the bench's own load generator
// excluded), both in cores: the second says whether a row ran on a quiet
// machine. A figure that /proc cannot give is negative.
type cpuMeter struct {
	meshPID                int
	start                  time.Time
	mesh, self, machine    time.Duration
	meshOK, selfOK, machOK bool
}

// cpuUse is what a cpuMeter measured, in cores (CPU seconds per second).
type cpuUse struct {
	mesh, others float64
}

func startCPU(meshPID int) *cpuMeter {
	m := &cpuMeter{meshPID: meshPID, start: time.Now()}
	var err error
	m.mesh, err = processCPU(meshPID)
	m.meshOK = err == nil
	m.self, err = processCPU(os.Getpid())
	m.selfOK = err == nil
	m.machine, err = machineBusy()
	m.machOK = err == nil
	return m
}

// stop returns the use since startCPU.
func (m *cpuMeter) stop() cpuUse {
	wall := time.Since(m.start).Seconds()
	use := cpuUse{mesh: -1, others: -1}
	mesh, errMesh := processCPU(m.meshPID)
	self, errSelf := processCPU(os.Getpid())
	machine, errMach := machineBusy()
	if wall <= 0 {
		return use
	}
	if m.meshOK && errMesh == nil {
		use.mesh = (mesh - m.mesh).Seconds() / wall
	}
	if m.meshOK && m.selfOK && m.machOK && errMesh == nil && errSelf == nil && errMach == nil {
		others := (machine - m.machine) - (mesh - m.mesh) - (self - m.self)
		use.others = max(others.Seconds()/wall, 0)
	}
	return use
}
