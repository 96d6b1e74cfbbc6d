package queue

import (
	"fmt"
	"strings"
	"time"

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
}

// IsLockInForce reports whether a CommandLock freezes its command at now: locked, and its
// until (if any) still ahead.
func IsLockInForce(cl *locksv1.CommandLock, now time.Time) bool {
	if !cl.Spec.Locked {
		return false
	}
	return cl.Spec.Until == nil || now.Before(cl.Spec.Until.Time)
}

// ResolveFreezes builds the freezes in force at now, and the next time one of them thaws by
// itself (zero when none will), so the caller can requeue then instead of polling.
func ResolveFreezes(locks []locksv1.CommandLock, flags FreezeFlags, now time.Time) (Freezes, time.Time) {
	f := Freezes{byCommand: map[string]Freeze{}, flags: flags}
	var nextThaw time.Time
	for i := range locks {
		cl := &locks[i]
		if !IsLockInForce(cl, now) {
			continue
		}
		if cl.Spec.Until != nil && (nextThaw.IsZero() || cl.Spec.Until.Time.Before(nextThaw)) {
			nextThaw = cl.Spec.Until.Time
		}
		fr := Freeze{Source: "commandlock/" + cl.Name, Message: FreezeMessage(cl.Name, cl.Spec.Reason)}
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

// CommandLockFreeze is the freeze cl puts its own command under at now once the flags have
// spoken, which is what cl's status reports: for apply, --disable-apply freezes it whatever cl
// says and --disable-global-apply-lock makes cl inert; "all" reports its own freeze.
func CommandLockFreeze(cl *locksv1.CommandLock, flags FreezeFlags, now time.Time) (Freeze, bool) {
	f, _ := ResolveFreezes([]locksv1.CommandLock{*cl}, flags, now)
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
