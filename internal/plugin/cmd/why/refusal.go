package why

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

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
