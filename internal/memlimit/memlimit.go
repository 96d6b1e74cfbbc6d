// Package memlimit sets the Go runtime's soft memory limit from the container's memory limit.
//
// A Go process's resident memory is more than what its runtime counts: the binary's code and
// read-only data are mapped from its file and resident beside the heap (about 40 MiB for the
// manager). A runtime limit equal to the container's lets the heap grow into that room, and the
// kernel then takes it back from the code pages, or kills the process. So the runtime's limit is
// a fraction of the container's.
package memlimit

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Env is the variable that carries the container's memory limit, in bytes (the chart sets it
// from the container's limits.memory with a resourceFieldRef) or as a quantity ("256Mi").
const Env = "MEMORY_LIMIT"

// DefaultRatio is the share of the container's limit the runtime may use.
const DefaultRatio = 0.9

// Limit is the soft memory limit the runtime runs under and where it came from.
type Limit struct {
	// Bytes is the runtime's limit; math.MaxInt64 when there is none.
	Bytes int64
	// Source says where it came from: "GOMEMLIMIT" (the user's own, which the runtime read at
	// start), Env (ratio of the container's limit) or "none".
	Source string
	// Container is the container's limit as Env gave it; 0 without one.
	Container int64
}

// Set sets the runtime's soft memory limit (through set, debug.SetMemoryLimit) to ratio of the
// container's limit in getenv(Env), unless getenv("GOMEMLIMIT") is set: that is the user's own
// choice, which the runtime has already applied. It returns the limit the runtime runs under.
func Set(getenv func(string) string, ratio float64, set func(int64) int64) (Limit, error) {
	if ratio <= 0 || ratio > 1 || math.IsNaN(ratio) {
		return Limit{}, fmt.Errorf("memory limit ratio %v: must be in (0, 1]", ratio)
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
	// guard:memlimit-ratio
	soft := int64(float64(container) * ratio)
	set(soft)
	return Limit{Bytes: soft, Source: Env, Container: container}, nil
}
