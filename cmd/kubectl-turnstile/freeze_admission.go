package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

const admissionHelp = `--enforce also freezes writes to the cluster while the freeze is in force, refused by the API
server for every client (Flux, Argo CD, Helm, kubectl): --kind (GROUP/KIND, KIND for the core
group, GROUP/* for a whole group; default every kind), --enforce-namespaces (a label selector;
default every namespace), --user, --group, --service-account NAMESPACE/NAME (who is frozen;
default everyone), --except-user, --except-group, --except-service-account (who never is: a
break-glass group), --mode Warn (admit with a warning first), --bypass (how to get past it,
shown in every refusal). Any of them implies --enforce. See docs/freeze-admission.md.`

// admissionFlags are freeze's flags for spec.admission.
type admissionFlags struct {
	enforce                              bool
	mode, namespaces, bypass             string
	kinds, users, groups, sas            []string
	exceptUsers, exceptGroups, exceptSAs []string
}

func (a *admissionFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&a.enforce, "enforce", false, "Also freeze writes to the cluster (a ValidatingAdmissionPolicy refuses them for every client).")
	f.StringVar(&a.mode, "mode", "", "Deny (refuse; the default) or Warn (admit with a warning: try the freeze first).")
	f.StringSliceVar(&a.kinds, "kind", nil, "Kinds to freeze, GROUP/KIND (apps/Deployment), KIND for the core group (ConfigMap), or GROUP/* (repeatable; default every kind).")
	f.StringVar(&a.namespaces, "enforce-namespaces", "", "Only objects in namespaces with these labels, e.g. env=prod (default every namespace).")
	f.StringSliceVar(&a.users, "user", nil, "Freeze this user's writes (repeatable; default everyone).")
	f.StringSliceVar(&a.groups, "group", nil, "Freeze this group's writes (repeatable; default everyone).")
	f.StringSliceVar(&a.sas, "service-account", nil, "Freeze this ServiceAccount's writes, NAMESPACE/NAME or NAMESPACE/* (repeatable; default everyone).")
	f.StringSliceVar(&a.exceptUsers, "except-user", nil, "Never freeze this user (repeatable).")
	f.StringSliceVar(&a.exceptGroups, "except-group", nil, "Never freeze this group, e.g. a break-glass group (repeatable).")
	f.StringSliceVar(&a.exceptSAs, "except-service-account", nil, "Never freeze this ServiceAccount, NAMESPACE/NAME or NAMESPACE/* (repeatable).")
	f.StringVar(&a.bypass, "bypass", "", "How to get past the freeze, shown in every refusal, e.g. \"page #platform-oncall\".")
}

// build turns the flags into spec.admission; nil when no flag asks for enforcement.
func (a *admissionFlags) build() (*locksv1.AdmissionFreeze, error) {
	if !a.enforce && a.mode == "" && a.namespaces == "" && a.bypass == "" && len(a.kinds)+len(a.users)+len(a.groups)+len(a.sas)+
		len(a.exceptUsers)+len(a.exceptGroups)+len(a.exceptSAs) == 0 {
		return nil, nil
	}
	out := &locksv1.AdmissionFreeze{Mode: locksv1.AdmissionDeny, Bypass: a.bypass}
	switch strings.ToLower(a.mode) {
	case "", "deny":
	case "warn":
		out.Mode = locksv1.AdmissionWarn
	default:
		return nil, fmt.Errorf("--mode must be Deny or Warn, not %q", a.mode)
	}
	byGroup := map[string]*locksv1.AdmissionResources{}
	for _, k := range a.kinds {
		group, kind := "", k
		if i := strings.LastIndex(k, "/"); i >= 0 {
			group, kind = k[:i], k[i+1:]
		}
		if kind == "" {
			return nil, fmt.Errorf("--kind %q: want GROUP/KIND, KIND or GROUP/*, e.g. apps/Deployment", k)
		}
		r, ok := byGroup[group]
		if !ok {
			out.Resources = append(out.Resources, locksv1.AdmissionResources{APIGroups: []string{group}})
			r = &out.Resources[len(out.Resources)-1]
			byGroup[group] = r
		}
		r.Kinds = append(r.Kinds, kind)
	}
	if a.namespaces != "" {
		sel, err := metav1.ParseToLabelSelector(a.namespaces)
		if err != nil {
			return nil, fmt.Errorf("--enforce-namespaces: %w", err)
		}
		out.NamespaceSelector = sel
	}
	if len(a.users)+len(a.groups)+len(a.sas) > 0 {
		out.Subjects = &locksv1.AdmissionSubjects{Users: a.users, Groups: a.groups, ServiceAccounts: a.sas}
	}
	if len(a.exceptUsers)+len(a.exceptGroups)+len(a.exceptSAs) > 0 {
		out.Except = &locksv1.AdmissionSubjects{Users: a.exceptUsers, Groups: a.exceptGroups, ServiceAccounts: a.exceptSAs}
	}
	return out, nil
}

// setAdmission writes spec.admission of the CommandLock name, creating it (unlocked, with no
// windows) when it does not exist.
func setAdmission(ctx context.Context, c ctrlclient.Client, name string, a *locksv1.AdmissionFreeze, out io.Writer) error {
	var cl locksv1.CommandLock
	err := c.Get(ctx, ctrlclient.ObjectKey{Name: name}, &cl)
	switch {
	case apierrors.IsNotFound(err):
		cl = locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: locksv1.CommandLockSpec{Admission: a}}
		err = c.Create(ctx, &cl)
	case err == nil:
		patch := ctrlclient.MergeFrom(cl.DeepCopy())
		cl.Spec.Admission = a
		err = c.Patch(ctx, &cl, patch)
	}
	if err != nil {
		return fmt.Errorf("enforce %s: %w", name, err)
	}
	fmt.Fprintf(out, "commandlock/%s freezes writes (mode %s) while it is in force\n", name, a.Mode)
	return nil
}

func newBreakGlassCmd(g *globals) *cobra.Command {
	var (
		reason string
		ttl    time.Duration
		lock   string
	)
	cmd := &cobra.Command{
		Use:   "break-glass FREEZE --reason WHY",
		Short: "Write past a write freeze in this namespace for a while, recorded (needs the bypassfreeze permission)",
		Long: `Takes a break-glass grant: a LockRequest of the frozen command with spec.bypassFreeze, which
only a holder of the bypassfreeze permission on lockrequests in the namespace may create (the
turnstile-admin role). Once it is granted, your writes in this namespace pass the CommandLock's
write freeze until it expires (--ttl) or you release it; the grant is recorded as a BreakGlass
event on the CommandLock and in turnstile_admission_bypasses_total, and each write in the API
server's audit log.`,
		Example: `  kubectl turnstile break-glass weekend -n shop --reason "incident 4711: roll back the checkout" --ttl 30m
  kubectl apply -n shop -f checkout.yaml
  kubectl turnstile release -n shop <the request it printed>`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return errors.New("--reason is required: say why you break the glass (it is recorded)")
			}
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			user, err := client.WhoAmI(ctx, c)
			if err != nil {
				return err
			}
			command := args[0]
			if command == locksv1.CommandAll {
				command = "break-glass" // "all" governs every command; a request may not name it
			}
			r := client.Request{GenerateName: "break-glass-", Command: command, Reason: reason, TTL: ttl, BypassFreeze: reason,
				Holder: locksv1.Holder{Owner: user}}
			t := locksv1.LockTarget{Repo: "break-glass/" + args[0], Path: lockPath(user), Workspace: "default"}
			if lock != "" {
				if t, err = parseTarget(lock); err != nil {
					return err
				}
			}
			r.Locks = []locksv1.LockTarget{t}
			l, err := acquire(cmd, c, client.New(c, ns), r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s granted: %s may write in namespace %s past commandlock %s until %s; release it when done: kubectl turnstile release -n %s %s\n",
				l.Name, user, ns, args[0], l.ExpiresAt.UTC().Format(time.RFC3339), ns, l.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "Why, recorded in the event and the request (required).")
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Minute, "How long the grant lasts.")
	cmd.Flags().StringVar(&lock, "lock", "", "The lock to hold meanwhile, REPO:PATH[:WORKSPACE] (default break-glass/FREEZE:YOUR-NAME).")
	return cmd
}

var unsafePath = regexp.MustCompile(`[^A-Za-z0-9_.@+=~-]+`)

// lockPath is a user name as a lock path segment.
func lockPath(user string) string {
	p := strings.Trim(unsafePath.ReplaceAllString(user, "."), ".")
	if p == "" || p == "." {
		return "user"
	}
	return p
}

var refusal = regexp.MustCompile(`frozen by commandlock ([a-z][-a-z0-9]*)`)

// refusedCommandLock returns the CommandLock a pasted refusal names, if the text is one.
func refusedCommandLock(text string) (string, bool) {
	m := refusal.FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// refusedWrite is the write a refusal names ("update of configmaps app in namespace shop by
// alice"): what stands between the last ": " before " is refused;" and it. The policy's message
// is "... (REASON)WHEN: WHAT by USER is refused; ...": WHEN (" since ... until ...", with or
// without a window) and REASON may hold ": ", WHAT and USER do not.
func refusedWrite(text string) string {
	i := strings.Index(text, " is refused;")
	if i < 0 {
		return ""
	}
	j := strings.LastIndex(text[:i], ": ")
	if j < 0 {
		return ""
	}
	return strings.TrimSpace(text[j+2 : i])
}

// explainRefusal explains a write freeze's refusal: the CommandLock it names, whether it is in
// force now and why, whom and what it freezes, and how to get past it.
func explainRefusal(ctx context.Context, c ctrlclient.Client, text string, out io.Writer) error {
	name, _ := refusedCommandLock(text)
	if w := refusedWrite(text); w != "" {
		fmt.Fprintf(out, "refused: %s\n", w)
	}
	var cl locksv1.CommandLock
	if err := c.Get(ctx, ctrlclient.ObjectKey{Name: name}, &cl); err != nil {
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(out, "commandlock/%s no longer exists: nothing freezes these writes now; try again\n", name)
			return nil
		}
		return err
	}
	a := cl.Spec.Admission
	if a == nil {
		fmt.Fprintf(out, "commandlock/%s no longer freezes writes (spec.admission is unset); try again\n", name)
		return nil
	}
	fmt.Fprintf(out, "commandlock/%s freezes writes (mode %s): %s\n", name, orDefault(string(a.Mode), "Deny"), orDefault(cl.Spec.Reason, "no reason given"))
	fmt.Fprintf(out, "  now: %s\n", writeFreezeNow(&cl, time.Now()))
	fmt.Fprintf(out, "  kinds: %s\n", describeKinds(a.Resources))
	ns := "every namespace, and cluster-scoped objects"
	if a.NamespaceSelector != nil {
		ns = "namespaces matching " + metav1.FormatLabelSelector(a.NamespaceSelector)
	}
	fmt.Fprintf(out, "  namespaces: %s\n", ns)
	fmt.Fprintf(out, "  frozen: %s\n", describeSubjects(a.Subjects, "everyone (except the cluster's own controllers)"))
	if a.Except != nil {
		fmt.Fprintf(out, "  never frozen: %s\n", describeSubjects(a.Except, "nobody"))
	}
	if st := cl.Status.Admission; st != nil {
		for _, b := range st.Bypasses {
			fmt.Fprintf(out, "  break glass: %s in namespace %s until %s (lockrequest %s: %s)\n", b.User, b.Namespace, b.Until.UTC().Format(time.RFC3339), b.Request, b.Reason)
		}
	}
	if a.Bypass != "" {
		fmt.Fprintf(out, "  to get past it: %s\n", a.Bypass)
	} else {
		fmt.Fprintf(out, "  to get past it: a turnstile-admin of the namespace breaks glass (kubectl turnstile break-glass %s -n NAMESPACE --reason ...), or a platform admin thaws it (kubectl turnstile thaw %s)\n", name, name)
	}
	return nil
}

// writeFreezeNow says whether and why cl freezes writes at now, as the policy judges a create.
func writeFreezeNow(cl *locksv1.CommandLock, now time.Time) string {
	if cl.Spec.Locked && (cl.Spec.Until == nil || now.Before(cl.Spec.Until.Time)) {
		if cl.Spec.Until != nil {
			return "frozen by hand until " + cl.Spec.Until.UTC().Format(time.RFC3339)
		}
		return "frozen by hand until it is thawed (kubectl turnstile thaw " + cl.Name + ")"
	}
	if st := cl.Status.Admission; st != nil {
		for _, iv := range st.Intervals {
			if !now.Before(iv.From.Time) && (iv.Until == nil || now.Before(iv.Until.Time)) {
				if iv.Until == nil {
					return "frozen by " + iv.Window + " since " + iv.From.UTC().Format(time.RFC3339) + ", until a manager judges the windows again"
				}
				return "frozen by window " + iv.Window + " until " + iv.Until.UTC().Format(time.RFC3339)
			}
			if now.Before(iv.From.Time) {
				return "not frozen; next from " + iv.From.UTC().Format(time.RFC3339) + " (" + iv.Window + ")"
			}
		}
	}
	return "not frozen"
}

func describeKinds(rs []locksv1.AdmissionResources) string {
	if len(rs) == 0 {
		return "every kind (except the cluster's own: docs/freeze-admission.md)"
	}
	var out []string
	for _, r := range rs {
		kinds := r.Kinds
		if len(kinds) == 0 {
			kinds = []string{"*"}
		}
		for _, g := range r.APIGroups {
			for _, k := range kinds {
				if g == "" {
					out = append(out, k)
				} else {
					out = append(out, g+"/"+k)
				}
			}
		}
	}
	return strings.Join(out, ", ")
}

func describeSubjects(s *locksv1.AdmissionSubjects, none string) string {
	if s == nil {
		return none
	}
	var out []string
	for _, u := range s.Users {
		out = append(out, "user "+u)
	}
	for _, g := range s.Groups {
		out = append(out, "group "+g)
	}
	for _, sa := range s.ServiceAccounts {
		out = append(out, "serviceaccount "+sa)
	}
	if len(out) == 0 {
		return "nobody"
	}
	return strings.Join(out, ", ")
}
