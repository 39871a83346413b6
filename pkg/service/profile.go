package service

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// CPUProfileEnv names a directory where each service process writes a CPU
// profile of its whole run (<name>-<pid>.pprof), for benchmarks that run
// the services as processes (go tool pprof reads it with the binary). A
// diagnostic aid like the timeline: unset, nothing is recorded.
const CPUProfileEnv = "CHATD_CPU_PROFILE"

// startCPUProfile starts the profile CPUProfileEnv asks for and returns
// what stops it; a failure is reported on stderr and profiles nothing.
func startCPUProfile(name string, lookupEnv func(string) (string, bool), stderr io.Writer) (stop func()) {
	dir, ok := lookupEnv(CPUProfileEnv)
	if !ok || dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "chatd-%s: no CPU profile: %s\n", name, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "chatd-%s: no CPU profile: %s\n", name, err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
