package queue

import (
	"fmt"
	"path"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Freeze windows, per request: a CommandLock's status lists its windows as its reconciler judged
// them at the last transition (in force or not, invalid or not, with their scope), and a request
// is matched against them here. The windows' clock is the reconciler's: a transition is a status
// write, which every manager sees in the same order as the store's other writes, as a thaw is.

// windowsOf is the windows of the CommandLock named name, as its status shows them.
type windowsOf struct {
	name    string
	windows []locksv1.FreezeWindowStatus
}

// addWindows records cl's judged windows (called by resolve for every CommandLock).
func (f *Freezes) addWindows(cl *locksv1.CommandLock) {
	if len(cl.Status.Windows) == 0 {
		return
	}
	if f.windows == nil {
		f.windows = map[string]windowsOf{}
	}
	f.windows[cl.Name] = windowsOf{name: cl.Name, windows: cl.Status.Windows}
}

// NeedsNamespaceLabels reports whether a window in f matches namespaces by labels, so that the
// caller must give the request's namespace labels (InNamespace).
func (f Freezes) NeedsNamespaceLabels() bool {
	for _, ws := range f.windows {
		for _, w := range ws.windows {
			if w.NamespaceSelector != nil {
				return true
			}
		}
	}
	return false
}

// InNamespace returns f with the labels of the namespace the requests it judges live in (a lock
// key's requests share one namespace). Without them a selector sees only
// kubernetes.io/metadata.name.
func (f Freezes) InNamespace(nsLabels map[string]string) Freezes {
	f.nsLabels = nsLabels
	return f
}

// ForRequest returns the freeze that holds req back, if any, in this order: --disable-apply
// (nothing bypasses the operator's flag); spec.bypassFreeze (an admin's emergency bypass of every
// CommandLock); the manual freezes (spec.locked, For); then the windows of the CommandLocks named
// after req's command and "all" that match req (windowFreeze).
func (f Freezes) ForRequest(req *locksv1.LockRequest) (Freeze, bool) {
	command := req.Spec.Command
	if command == "" {
		return Freeze{}, false
	}
	if command == CommandApply && f.flags.DisableApply {
		return f.For(command)
	}
	// guard:window-bypass-only-when-set
	if req.Spec.BypassFreeze != nil {
		return Freeze{}, false
	}
	// guard:window-manual-beats-windows
	if fr, ok := f.forCluster(command, req.Spec.Holder.Cluster); ok {
		return fr, true
	}
	if command == CommandApply && f.flags.DisableGlobalApplyLock {
		return Freeze{}, false
	}
	return f.windowFreeze(req)
}

// Bypassed returns the freeze req's spec.bypassFreeze lets it past now, if any.
func (f Freezes) Bypassed(req *locksv1.LockRequest) (Freeze, bool) {
	if req.Spec.BypassFreeze == nil {
		return Freeze{}, false
	}
	if _, frozen := f.ForRequest(req); frozen {
		return Freeze{}, false // bypassed nothing: --disable-apply still holds it
	}
	plain := *req
	plain.Spec.BypassFreeze = nil
	return f.ForRequest(&plain)
}

// windowFreeze is the window freeze of req: frozen when any of its targets is.
func (f Freezes) windowFreeze(req *locksv1.LockRequest) (Freeze, bool) {
	var owners []windowsOf
	for _, name := range []string{req.Spec.Command, locksv1.CommandAll} {
		// guard:fleet-window-cluster-scope
		if ws, ok := f.windows[name]; ok && f.inClusterScope(name, req.Spec.Holder.Cluster) {
			owners = append(owners, ws)
		}
	}
	if len(owners) == 0 {
		return Freeze{}, false
	}
	ns := labels.Set{}
	for k, v := range f.nsLabels {
		ns[k] = v
	}
	ns["kubernetes.io/metadata.name"] = req.Namespace
	inCluster := func(s *locksv1.ClusterScope) bool { return f.clusterScopeHolds(s, req.Spec.Holder.Cluster) }
	for _, t := range req.Spec.Locks {
		if fr, ok := targetWindowFreeze(req.Spec.Command, owners, ns, inCluster, t); ok {
			return fr, true
		}
	}
	return Freeze{}, false
}

// targetWindowFreeze judges one lock target in a namespace with labels ns, of a request whose
// cluster inCluster judges a window's cluster scope for, against the windows of the
// CommandLocks in owners: a matching invalid window freezes it (fail safe), a matching Deny
// window in force freezes it (Deny beats Allow), and when Allow windows match it, it is frozen
// unless one of them is in force. Pure.
func targetWindowFreeze(command string, owners []windowsOf, ns labels.Set, inCluster func(*locksv1.ClusterScope) bool, t locksv1.LockTarget) (Freeze, bool) {
	var allow *locksv1.FreezeWindowStatus
	allowOwner := ""
	allowOpen := false
	for _, o := range owners {
		for i := range o.windows {
			w := &o.windows[i]
			if !scopeMatches(&w.WindowScope, ns, inCluster, t) {
				continue
			}
			switch {
			// guard:window-invalid-fails-safe
			case w.Invalid != "":
				return windowMessage(command, o.name, w, "it cannot be evaluated, so it freezes its scope: "+w.Invalid), true
			// guard:window-deny-beats-allow
			case w.Action == locksv1.WindowDeny && w.State == locksv1.WindowOpen:
				return windowMessage(command, o.name, w, "Deny window in force"+until(w.NextTransition, " until ")), true
			case w.Action == locksv1.WindowAllow:
				if allow == nil {
					allow, allowOwner = w, o.name
				}
				allowOpen = allowOpen || w.State == locksv1.WindowOpen
			}
		}
	}
	// guard:window-outside-allow-frozen
	if allow != nil && !allowOpen {
		return windowMessage(command, allowOwner, allow, "outside every Allow window"+until(allow.NextTransition, "; the next opens at ")), true
	}
	return Freeze{}, false
}

func until(t *metav1.Time, prefix string) string {
	if t == nil {
		return ""
	}
	return prefix + t.UTC().Format(time.RFC3339)
}

func windowMessage(command, owner string, w *locksv1.FreezeWindowStatus, why string) Freeze {
	what := "All"
	if command != "" {
		what = strings.ToUpper(command[:1]) + command[1:]
	}
	return Freeze{
		Source:  "commandlock/" + owner,
		Message: fmt.Sprintf("%s commands are frozen by window %s of commandlock %s: %s", what, w.Name, owner, why),
	}
}

// scopeMatches reports whether a target in a namespace with labels ns, of a request whose
// cluster inCluster judges a cluster scope for, is in scope. A selector or pattern that cannot
// be read matches everything: a scope that cannot be judged freezes more, never less.
func scopeMatches(s *locksv1.WindowScope, ns labels.Set, inCluster func(*locksv1.ClusterScope) bool, t locksv1.LockTarget) bool {
	// guard:fleet-window-own-cluster-scope
	if s.Clusters != nil && !inCluster(s.Clusters) {
		return false
	}
	if s.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector)
		// guard:window-scope-namespace
		if err == nil && !sel.Matches(ns) {
			return false
		}
	}
	p := t.Path
	if p == "" {
		p = "."
	}
	return globAny(s.Repos, t.Repo) && globAny(s.Paths, p)
}

// globAny reports whether value matches one of patterns; no patterns match everything, and a
// malformed pattern matches everything (fail safe).
func globAny(patterns []string, value string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, err := path.Match(p, value); ok || err != nil {
			return true
		}
	}
	return false
}

// WindowsLockFreeze is what a CommandLock's windows (judged, in windows) say about its command
// as a whole, for its status: frozen when a window is invalid, a Deny window is in force, or Allow
// windows exist and none is in force. The freeze may cover only the windows' scope; grants are
// judged per request (ForRequest). Under --disable-global-apply-lock, apply's windows freeze
// nothing.
func WindowsLockFreeze(name string, windows []locksv1.FreezeWindowStatus, flags FreezeFlags) (Freeze, bool) {
	if len(windows) == 0 || (name == CommandApply && flags.DisableGlobalApplyLock) {
		return Freeze{}, false
	}
	command := name
	if name == locksv1.CommandAll {
		command = ""
	}
	var allow *locksv1.FreezeWindowStatus
	allowOpen := false
	for i := range windows {
		w := &windows[i]
		switch {
		case w.Invalid != "":
			return windowMessage(command, name, w, "it cannot be evaluated, so it freezes its scope"+scopeText(&w.WindowScope)+": "+w.Invalid), true
		case w.Action == locksv1.WindowDeny && w.State == locksv1.WindowOpen:
			return windowMessage(command, name, w, "Deny window in force"+scopeText(&w.WindowScope)+until(w.NextTransition, " until ")), true
		case w.Action == locksv1.WindowAllow:
			if allow == nil {
				allow = w
			}
			allowOpen = allowOpen || w.State == locksv1.WindowOpen
		}
	}
	if allow != nil && !allowOpen {
		return windowMessage(command, name, allow, "outside every Allow window"+scopeText(&allow.WindowScope)+until(allow.NextTransition, "; the next opens at ")), true
	}
	return Freeze{}, false
}

// scopeText describes a scope for a message; empty for one that matches everything.
func scopeText(s *locksv1.WindowScope) string {
	var parts []string
	if s.NamespaceSelector != nil {
		parts = append(parts, "namespaces "+metav1.FormatLabelSelector(s.NamespaceSelector))
	}
	if len(s.Repos) > 0 {
		parts = append(parts, "repos "+strings.Join(s.Repos, ","))
	}
	if len(s.Paths) > 0 {
		parts = append(parts, "paths "+strings.Join(s.Paths, ","))
	}
	if s.Clusters != nil {
		parts = append(parts, ClusterScopeText(s.Clusters))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (for " + strings.Join(parts, ", ") + ")"
}
