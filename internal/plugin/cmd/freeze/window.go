package freeze

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/window"
)

const windowHelp = `--window 'Fri 16:00 -> Mon 08:00 Europe/Berlin' is the short form (a day and time, an arrow
'->' or '→' or 'to', a day and time, an optional IANA zone; without days, every day: '22:00 ->
02:00 UTC'); --schedule (five-field cron) with --duration and --time-zone is the long one.
--action Allow makes it a maintenance window (the command runs only inside Allow windows);
--namespace-selector, --repo and --path narrow it. --window-name names it (default: the
action in lower case, e.g. deny). See docs/operations.md, "Freeze windows".`

// windowFlags are freeze's flags for one window.
type windowFlags struct {
	form, name, schedule, zone, action, selector string
	duration                                     time.Duration
	repos, paths                                 []string
}

func (w *windowFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&w.form, "window", "", "A recurring window, e.g. 'Fri 16:00 -> Mon 08:00 Europe/Berlin'.")
	f.StringVar(&w.name, "window-name", "", "The window's name in spec.windows; an existing window of that name is replaced.")
	f.StringVar(&w.schedule, "schedule", "", "When the window opens: a five-field cron expression, e.g. '0 16 * * 5'.")
	f.DurationVar(&w.duration, "duration", 0, "How long the window stays open (with --schedule), on the zone's wall clock.")
	f.StringVar(&w.zone, "time-zone", "", "The IANA zone of --schedule, e.g. Europe/Berlin (default UTC).")
	f.StringVar(&w.action, "action", string(locksv1.WindowDeny), "Deny (frozen inside the window) or Allow (runs only inside Allow windows).")
	f.StringVar(&w.selector, "namespace-selector", "", "Only namespaces with these labels, e.g. team=a.")
	f.StringSliceVar(&w.repos, "repo", nil, "Only repos matching this glob, e.g. 'acme/*' (repeatable).")
	f.StringSliceVar(&w.paths, "path", nil, "Only paths matching this glob, e.g. 'prod/*' (repeatable).")
}

func (w *windowFlags) set() bool { return w.form != "" || w.schedule != "" }

// build turns the flags into a window, checked as the controller will judge it.
func (w *windowFlags) build() (locksv1.FreezeWindow, error) {
	out := locksv1.FreezeWindow{Name: w.name, Action: locksv1.WindowAction(w.action), Schedule: w.schedule, TimeZone: w.zone,
		Duration: metav1.Duration{Duration: w.duration}, WindowScope: locksv1.WindowScope{Repos: w.repos, Paths: w.paths}}
	if w.form != "" {
		if w.schedule != "" || w.duration != 0 || w.zone != "" {
			return out, fmt.Errorf("--window says it all: give it, or --schedule/--duration/--time-zone, not both")
		}
		var err error
		if out.Schedule, out.Duration.Duration, out.TimeZone, err = parseWindow(w.form); err != nil {
			return out, err
		}
	}
	if out.Action != locksv1.WindowDeny && out.Action != locksv1.WindowAllow {
		return out, fmt.Errorf("--action must be Deny or Allow, not %q", w.action)
	}
	if out.Name == "" {
		out.Name = strings.ToLower(string(out.Action))
	}
	if w.selector != "" {
		sel, err := metav1.ParseToLabelSelector(w.selector)
		if err != nil {
			return out, fmt.Errorf("--namespace-selector: %w", err)
		}
		out.NamespaceSelector = sel
	}
	if _, err := window.Parse(&out); err != nil {
		return out, err
	}
	return out, nil
}

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// parseWindow reads 'Fri 16:00 -> Mon 08:00 Europe/Berlin' (or '22:00 -> 02:00 UTC', every day)
// into a cron schedule, a wall-clock duration and a zone.
func parseWindow(form string) (schedule string, d time.Duration, zone string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("--window %q: %s; write e.g. 'Fri 16:00 -> Mon 08:00 Europe/Berlin' or '22:00 -> 02:00 UTC'", form, why)
	}
	var from, to []string
	side := &from
	for _, f := range strings.Fields(form) {
		switch {
		case f == "->" || f == "→" || f == "to" || f == "-":
			if side == &to {
				return "", 0, "", bad("more than one arrow")
			}
			side = &to
		case side == &to && strings.Contains(f, "/") || side == &to && f == "UTC":
			zone = f
		default:
			*side = append(*side, f)
		}
	}
	if side != &to {
		return "", 0, "", bad("no arrow between the start and the end")
	}
	startDay, startMin, err1 := dayTime(from)
	endDay, endMin, err2 := dayTime(to)
	if err1 != nil || err2 != nil || (startDay < 0) != (endDay < 0) {
		return "", 0, "", bad("each side is [day] HH:MM, with a day on both sides or on neither")
	}
	dow, span := "*", 24*60
	if startDay >= 0 {
		dow, span = fmt.Sprint(startDay), 7*24*60
		endMin += ((endDay - startDay + 7) % 7) * 24 * 60
	}
	minutes := ((endMin-startMin)%span + span) % span
	if minutes == 0 {
		return "", 0, "", bad("it ends when it starts")
	}
	return fmt.Sprintf("%d %d * * %s", startMin%60, startMin/60, dow), time.Duration(minutes) * time.Minute, zone, nil
}

// dayTime reads "[day] HH:MM": the weekday (-1: none) and the minute of the day.
func dayTime(f []string) (int, int, error) {
	day := -1
	if len(f) == 2 {
		d := strings.ToLower(f[0])
		day = slices.IndexFunc(weekdays, func(w string) bool { return len(d) >= 3 && strings.HasPrefix(d, w) })
		if day < 0 {
			return 0, 0, fmt.Errorf("no day: %s", f[0])
		}
		f = f[1:]
	}
	if len(f) != 1 {
		return 0, 0, fmt.Errorf("want [day] HH:MM")
	}
	t, err := time.Parse("15:04", f[0])
	if err != nil {
		return 0, 0, err
	}
	return day, t.Hour()*60 + t.Minute(), nil
}

// addWindow adds the window to the CommandLock name (created when missing), replacing the
// window of the same name, and leaves spec.locked as it is.
func addWindow(ctx context.Context, c ctrlclient.Client, name string, flags windowFlags, out io.Writer) error {
	w, err := flags.build()
	if err != nil {
		return err
	}
	var cl locksv1.CommandLock
	switch err := c.Get(ctx, ctrlclient.ObjectKey{Name: name}, &cl); {
	case apierrors.IsNotFound(err):
		cl = locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: locksv1.CommandLockSpec{Windows: []locksv1.FreezeWindow{w}}}
		if err := c.Create(ctx, &cl); err != nil {
			return fmt.Errorf("freeze %s: %w", name, err)
		}
	case err != nil:
		return err
	default:
		patch := ctrlclient.MergeFromWithOptions(cl.DeepCopy(), ctrlclient.MergeFromWithOptimisticLock{})
		cl.Spec.Windows = slices.DeleteFunc(cl.Spec.Windows, func(o locksv1.FreezeWindow) bool { return o.Name == w.Name })
		cl.Spec.Windows = append(cl.Spec.Windows, w)
		if err := c.Patch(ctx, &cl, patch); err != nil {
			return fmt.Errorf("freeze %s: %w", name, err)
		}
	}
	zone := w.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	fmt.Fprintf(out, "commandlock/%s window %s: %s at %q for %s (%s)\n", name, w.Name, w.Action, w.Schedule, w.Duration.Duration, zone)
	return nil
}

// removeWindow takes the window named win out of the CommandLock name.
func removeWindow(ctx context.Context, c ctrlclient.Client, name, win string, out io.Writer) error {
	var cl locksv1.CommandLock
	if err := c.Get(ctx, ctrlclient.ObjectKey{Name: name}, &cl); err != nil {
		return fmt.Errorf("thaw %s window %s: %w", name, win, err)
	}
	patch := ctrlclient.MergeFromWithOptions(cl.DeepCopy(), ctrlclient.MergeFromWithOptimisticLock{})
	n := len(cl.Spec.Windows)
	cl.Spec.Windows = slices.DeleteFunc(cl.Spec.Windows, func(o locksv1.FreezeWindow) bool { return o.Name == win })
	if len(cl.Spec.Windows) == n {
		return fmt.Errorf("commandlock/%s has no window %s", name, win)
	}
	if err := c.Patch(ctx, &cl, patch); err != nil {
		return fmt.Errorf("thaw %s window %s: %w", name, win, err)
	}
	fmt.Fprintf(out, "commandlock/%s window %s removed\n", name, win)
	return nil
}
