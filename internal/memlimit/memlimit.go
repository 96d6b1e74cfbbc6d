// Package memlimit sets the Go runtime's soft memory limit from the container's memory limit.
//
// A container's memory limit counts more than what the Go runtime does: the page cache of the
// binary — its code and read-only data, read from the image — is charged to the container too,
// about 56 MiB for the manager, of which the running process keeps about 40 MiB hot. A runtime
// limit equal to the container's lets the heap fill the container, and the kernel then takes
// the room back from the code pages, which the process faults in again and again: measured in
// a 256 Mi memory cgroup on 100,000 requests with the runtime at 90% of it, 38 million
// reclaims and 53,000 major faults in two minutes, and the caches never synced
// (docs/performance.md). So the runtime's limit is the container's less a reserve for the
// binary.
package memlimit

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Env is the variable that carries the container's memory limit, in bytes (the chart sets it
// from the container's limits.memory with a resourceFieldRef) or as a quantity ("256Mi").
const Env = "MEMORY_LIMIT"

// DefaultReserve is what the runtime leaves of the container's limit for what it does not
// count: the binary's page cache (37 MiB measured in a memory cgroup, about 25 of it mapped)
// and the kernel's own.
const DefaultReserve = 48 << 20

// Limit is the soft memory limit the runtime runs under and where it came from.
type Limit struct {
	// Bytes is the runtime's limit; math.MaxInt64 when there is none.
	Bytes int64
	// Source says where it came from: "GOMEMLIMIT" (the user's own, which the runtime read at
	// start), Env (the container's limit less the reserve) or "none".
	Source string
	// Container is the container's limit as Env gave it; 0 without one.
	Container int64
}

// Set sets the runtime's soft memory limit (through set, debug.SetMemoryLimit) to the
// container's limit in getenv(Env) less reserve, but never below half of it, unless
// getenv("GOMEMLIMIT") is set: that is the user's own choice, which the runtime has already
// applied. It returns the limit the runtime runs under.
func Set(getenv func(string) string, reserve int64, set func(int64) int64) (Limit, error) {
	if reserve < 0 {
		return Limit{}, fmt.Errorf("memory limit reserve %d: must not be negative", reserve)
	}
	var container int64
	if raw := getenv(Env); raw != "" {
		q, err := resource.ParseQuantity(raw)
		if err != nil || q.Sign() <= 0 {
			return Limit{}, fmt.Errorf("$%s=%q: not a memory limit (bytes, or a quantity such as 256Mi)", Env, raw)
		}
		container = q.Value()
	}
	// guard:memlimit-gomemlimit-wins
	if getenv("GOMEMLIMIT") != "" {
		return Limit{Bytes: set(-1), Source: "GOMEMLIMIT", Container: container}, nil
	}
	if container == 0 {
		return Limit{Bytes: set(-1), Source: "none"}, nil
	}
	// guard:memlimit-reserve
	soft := max(container-reserve, container/2)
	set(soft)
	return Limit{Bytes: soft, Source: Env, Container: container}, nil
}
