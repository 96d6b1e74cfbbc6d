package freeze

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
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
