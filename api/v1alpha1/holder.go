package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
)

// HolderID is the holder identity that the lock protocol compares: owner, pull request, session
// and cluster, compared field by field with ==. Requests of one identity share the keys they hold;
// a key is never held by two identities at once. It is never joined into one string to compare:
// an owner may contain '#' (an OIDC user "https://issuer#claim"), so {alice, pull 1} and
// {"alice#1", no pull} are two identities (docs/protocol.md, "Identity is structural"). The
// cluster is the fleet member the holder runs in (docs/fleet.md, "Identity is per cluster"):
// without it two gated Jobs named apply in two clusters would be one identity, session job/apply,
// and re-entrancy would grant both.
// +kubebuilder:object:generate=false
type HolderID struct {
	Owner   string
	Pull    int64
	Session string
	Cluster string
}

// ID is the holder's identity.
// guard:identity-cluster
func (h Holder) ID() HolderID {
	return HolderID{Owner: h.Owner, Pull: h.Pull, Session: h.Session, Cluster: h.Cluster}
}

// ID is the identity of a ProjectLock's holder.
func (h LockHolder) ID() HolderID {
	return HolderID{Owner: h.Owner, Pull: h.Pull, Session: h.Session, Cluster: h.Cluster}
}

// String renders the identity for people and logs: "alice#100", "alice", with " (session s)"
// when it has one and " in eu-west-1" when it runs in another cluster of a fleet. Two
// identities may render alike; never compare the rendering.
func (id HolderID) String() string {
	s := id.Owner
	if id.Pull != 0 {
		s += "#" + strconv.FormatInt(id.Pull, 10)
	}
	if id.Session != "" {
		s += " (session " + id.Session + ")"
	}
	if id.Cluster != "" {
		s += " in " + id.Cluster
	}
	return s
}

// Key is an injective string form of the identity, for an index or a map keyed by string: each
// field is length-prefixed, so no two identities share a key whatever their owners contain.
// guard:identity-key-not-injective
func (id HolderID) Key() string {
	var b strings.Builder
	b.Grow(len(id.Owner) + len(id.Session) + len(id.Cluster) + 32)
	b.WriteString(strconv.Itoa(len(id.Owner)))
	b.WriteByte(':')
	b.WriteString(id.Owner)
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(id.Pull, 10))
	b.WriteByte('/')
	b.WriteString(strconv.Itoa(len(id.Session)))
	b.WriteByte(':')
	b.WriteString(id.Session)
	// guard:identity-key-cluster
	if id.Cluster != "" { // a key without a cluster stays what it was before fleets
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(len(id.Cluster)))
		b.WriteByte(':')
		b.WriteString(id.Cluster)
	}
	return b.String()
}

// Describe renders the holder for people: "pull #100 (alice)", or "alice" without a pull, with
// " in eu-west-1" when it runs in another cluster of a fleet.
func (h Holder) Describe() string {
	s := h.Owner
	if h.Pull != 0 {
		s = fmt.Sprintf("pull #%d (%s)", h.Pull, h.Owner)
	}
	if h.Cluster != "" {
		s += " in " + h.Cluster
	}
	return s
}

// HolderRequests are the requests that hold the key, H(k) of docs/protocol.md: the exclusive
// holder's requests, or the shared holders' (one of the two is empty).
func (s ProjectLockStatus) HolderRequests() []HolderRequest {
	var out []HolderRequest
	if s.Holder != nil {
		out = append(out, s.Holder.Requests...)
	}
	for _, h := range s.SharedHolders {
		out = append(out, h.Request)
	}
	return out
}

// Held reports whether anyone holds the key, in either mode.
func (s ProjectLockStatus) Held() bool { return s.Holder != nil || len(s.SharedHolders) > 0 }
