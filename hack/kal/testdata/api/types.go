// Package api is a tiny API package for hack/kal's tests.
package api

// Widget is a test type.
type Widget struct {
	// enabled is a bool: nobools reports it.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// ratio is a float: nofloats reports it.
	// +optional
	Ratio float64 `json:"ratio,omitempty"`

	// count is fine.
	// +optional
	Count int32 `json:"count,omitempty"`
}
