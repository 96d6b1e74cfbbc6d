package deadlock

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Policy chooses which waiting request on a cycle to fail.
type Policy string

// Policies. Newest is the default: the request that arrived last has waited least, so failing
// it wastes the least waiting.
const (
	// PolicyNewest fails the request that started waiting last.
	PolicyNewest Policy = "newest"
	// PolicyOldest fails the request that started waiting first.
	PolicyOldest Policy = "oldest"
	// PolicyLowestPriority fails the least important request; among equals, the newest.
	PolicyLowestPriority Policy = "lowest-priority"
)

var policies = []Policy{PolicyNewest, PolicyOldest, PolicyLowestPriority}

// ParsePolicy reads a policy name, as given in the operator's flags. Empty means PolicyNewest.
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyNewest, nil
	}
	for _, p := range policies {
		if s == string(p) {
			return p, nil
		}
	}
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown deadlock victim policy %q: want one of %s", s, strings.Join(names, ", "))
}

// Victim picks the hop of c whose waiting request to fail: the request is Waiter.Request, waiting
// on Key, for identity From. Only requests that make the cycle's hops are candidates, so failing
// the victim removes a hop. Ties on the policy's criterion go to the smaller request name, then
// key, so the choice is deterministic. An unknown policy acts as PolicyNewest. An empty cycle
// gives the zero Edge.
//
// If From has more requests queued on Key, the next of them takes the victim's place and the
// cycle stays; the next pass of FindCycles then picks again.
func (p Policy) Victim(c Cycle) Edge {
	if len(c.Edges) == 0 {
		return Edge{}
	}
	return slices.MinFunc(c.Edges, func(a, b Edge) int {
		return cmp.Or(
			p.compare(a.Waiter, b.Waiter),
			strings.Compare(a.Waiter.Request, b.Waiter.Request),
			strings.Compare(a.Key, b.Key),
			compareIdentity(a.From, b.From),
		)
	})
}

// compare is negative when a makes a better victim than b under p, zero when p cannot tell them
// apart.
func (p Policy) compare(a, b Waiter) int {
	newerFirst := b.Arrival.Compare(a.Arrival)
	switch p {
	case PolicyOldest:
		return -newerFirst
	case PolicyLowestPriority:
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), newerFirst)
	default:
		return newerFirst
	}
}
