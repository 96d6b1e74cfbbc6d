package queue

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// CommandApply is the command the Atlantis-style server flags refer to.
const CommandApply = "apply"

// FreezeFlags are the operator's flags that override CommandLocks for apply, in Atlantis's
// precedence: DisableApply first, then DisableGlobalApplyLock, then the CommandLock.
type FreezeFlags struct {
	// DisableApply freezes apply always, whatever the CommandLocks say (--disable-apply).
	DisableApply bool
	// DisableGlobalApplyLock ignores CommandLocks for apply (--disable-global-apply-lock).
	DisableGlobalApplyLock bool
}

// Freeze is why a command may not be granted now.
type Freeze struct {
	// Source names what froze the command: a CommandLock's name, or the flag.
	Source string
	// Message is what waiting requests show.
	Message string
}

// Freezes answers "is this command frozen now?". The zero value freezes nothing.
type Freezes struct {
	byCommand map[string]Freeze
	all       *Freeze
	flags     FreezeFlags
	// windows and nsLabels judge freeze windows per request (windows.go).
	windows  map[string]windowsOf
	nsLabels map[string]string
	// scopes and members judge cluster scopes per request (clusters.go).
	scopes  map[string]*locksv1.ClusterScope
	members map[string]map[string]string
}

// IsLockInForce reports whether a CommandLock freezes its command at now, by the clock of its
// reconciler, which judges it: locked, not thawed already (Thawed), and its until (if any) still
// ahead. Grants do not judge until by their own clock (ResolveFreezes).
func IsLockInForce(cl *locksv1.CommandLock, now time.Time) bool {
	if !HoldsGrants(cl) {
		return false
	}
	return cl.Spec.Until == nil || now.Before(cl.Spec.Until.Time)
}

// Thawed reports whether cl's status says its freeze ended by its until: its reconciler, once
// its clock passed spec.until, wrote Locked=False for the current generation (with reason
// Thawed, the only reason it writes Locked=False with; the reason is not checked, since the
// status and the generation already say it all and nothing else writes that status). The thaw
// is a write, so every manager sees it at once and in the same order as the store's other
// writes; no deciding manager's clock ends a freeze (docs/protocol.md, "Freezes and Drained").
func Thawed(cl *locksv1.CommandLock) bool {
	// guard:thaw-of-old-generation
	if cl.Spec.Until == nil || cl.Status.ObservedGeneration != cl.Generation {
		return false
	}
	for _, c := range cl.Status.Conditions {
		if c.Type == locksv1.ConditionLocked {
			// Locked by a window (reason Window) is written only once the manual freeze ended.
			return c.Status == metav1.ConditionFalse || c.Reason == locksv1.ReasonWindow
		}
	}
	return false
}

// HoldsGrants reports whether cl holds its command's grants back: locked, and not thawed by a
// written thaw (Thawed). A freeze past its until holds grants until its reconciler writes the
// thaw: a manager whose clock runs ahead must not grant under a CommandLock that still says
// Locked (and Drained).
func HoldsGrants(cl *locksv1.CommandLock) bool {
	return cl.Spec.Locked && !Thawed(cl)
}

// ResolveFreezes builds the freezes that hold grants back (HoldsGrants), and the next time one
// of them reaches its until by now's clock (zero when none will), when its reconciler thaws it.
// The thaw's write is what lets the grants go (its event decides the keys again); the caller's
// requeue then is only a fallback.
func ResolveFreezes(locks []locksv1.CommandLock, flags FreezeFlags, now time.Time) (Freezes, time.Time) {
	// guard:thaw-by-own-clock
	return resolve(locks, flags, now, HoldsGrants)
}

func resolve(locks []locksv1.CommandLock, flags FreezeFlags, now time.Time, inForce func(*locksv1.CommandLock) bool) (Freezes, time.Time) {
	f := Freezes{byCommand: map[string]Freeze{}, flags: flags}
	var nextThaw time.Time
	for i := range locks {
		cl := &locks[i]
		f.addWindows(cl)
		f.addScope(cl)
		if !inForce(cl) {
			continue
		}
		if u := cl.Spec.Until; u != nil && u.After(now) && (nextThaw.IsZero() || u.Time.Before(nextThaw)) {
			nextThaw = u.Time
		}
		fr := Freeze{Source: "commandlock/" + cl.Name, Message: FreezeMessage(cl.Name, cl.Spec.Reason)}
		if cl.Spec.Clusters != nil {
			fr.Message = scopedFreezeMessage(cl.Name, cl.Spec.Reason, cl.Spec.Clusters)
		}
		if cl.Name == locksv1.CommandAll {
			f.all = &fr
			continue
		}
		f.byCommand[cl.Name] = fr
	}
	return f, nextThaw
}

// For returns the freeze that applies to command, if any. Requests without a command are
// never frozen.
func (f Freezes) For(command string) (Freeze, bool) {
	if command == "" {
		return Freeze{}, false
	}
	if command == CommandApply {
		if f.flags.DisableApply {
			return Freeze{Source: "--disable-apply", Message: "Apply commands are disabled on this server (--disable-apply)"}, true
		}
		if f.flags.DisableGlobalApplyLock {
			return Freeze{}, false
		}
	}
	if fr, ok := f.byCommand[command]; ok {
		return fr, true
	}
	if f.all != nil {
		return *f.all, true
	}
	return Freeze{}, false
}

// Governs reports whether the CommandLock named cl speaks for requests of command, so that its
// counts and its Drained cover them: its own command's, and every command's for "all" -- except
// apply under --disable-global-apply-lock, which no CommandLock holds back then (an apply granted
// is none of "all"'s business, and "all" must not say it drained it). An apply CommandLock still
// counts its own requests under the flag; it reports itself not in force.
func Governs(cl, command string, flags FreezeFlags) bool {
	if command == "" {
		return false
	}
	if cl == command {
		return true
	}
	// guard:all-speaks-for-apply
	return cl == locksv1.CommandAll && (command != CommandApply || !flags.DisableGlobalApplyLock)
}

// CommandLockFreeze is the freeze cl puts its own command under at now, by its reconciler's
// clock (IsLockInForce), once the flags have spoken, which is what cl's status reports: for apply, --disable-apply freezes it whatever cl
// says and --disable-global-apply-lock makes cl inert; "all" reports its own freeze.
func CommandLockFreeze(cl *locksv1.CommandLock, flags FreezeFlags, now time.Time) (Freeze, bool) {
	f, _ := resolve([]locksv1.CommandLock{*cl}, flags, now, func(cl *locksv1.CommandLock) bool { return IsLockInForce(cl, now) })
	return f.For(cl.Name)
}

// FreezeMessage is the Atlantis-style message for a frozen command:
// "Apply commands are locked globally: maintenance window".
func FreezeMessage(command, reason string) string {
	what := "All"
	if command != locksv1.CommandAll {
		what = strings.ToUpper(command[:1]) + command[1:]
	}
	if strings.TrimSpace(reason) == "" {
		return fmt.Sprintf("%s commands are locked globally until they are unlocked", what)
	}
	return fmt.Sprintf("%s commands are locked globally: %s", what, reason)
}
