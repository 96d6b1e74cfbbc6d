// Package packed holds the resourceVersion and uid of an object as numbers, for what keeps one
// per object (the manager's cache of LockRequests, the informers' relister): a decoded string
// costs a header and an allocation of its own, and keeps that allocation alive as long as it is
// kept. Each packs only what it gives back exactly; the caller keeps the rest as it came.
package packed

import (
	"encoding/hex"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
)

// RV returns a resourceVersion as a number when it is one, written as strconv writes it.
func RV(rv string) (uint64, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	// guard:compact-rv-exact
	return n, err == nil && n != 0 && strconv.FormatUint(n, 10) == rv
}

// RVString is the resourceVersion RV packed.
func RVString(n uint64) string { return strconv.FormatUint(n, 10) }

// UID returns a uid as its 16 bytes when it is a UUID written as the API server writes one.
func UID(uid types.UID) ([16]byte, bool) {
	var out [16]byte
	s := string(uid)
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return out, false
	}
	hexed := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(out[:], []byte(hexed)); err != nil {
		return out, false
	}
	// guard:compact-uid-exact
	return out, UIDString(out) == uid
}

// UIDString is the uid UID packed.
func UIDString(b [16]byte) types.UID {
	h := hex.EncodeToString(b[:])
	return types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}
