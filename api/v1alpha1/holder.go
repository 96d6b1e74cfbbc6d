package v1alpha1

import (
	"fmt"
	"strconv"
)

// Identity is the holder identity that the lock protocol compares: the owner, and the pull
// request when there is one ("alice#100", or "alice"). Requests of one identity share the keys
// they hold; a key is never held by two identities at once.
func (h Holder) Identity() string {
	if h.Pull == 0 {
		return h.Owner
	}
	return h.Owner + "#" + strconv.FormatInt(h.Pull, 10)
}

// Describe renders the holder for people: "pull #100 (alice)", or "alice" without a pull.
func (h Holder) Describe() string {
	if h.Pull == 0 {
		return h.Owner
	}
	return fmt.Sprintf("pull #%d (%s)", h.Pull, h.Owner)
}
