package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Each action is one plain API call made with the user's credentials (freeze: a read, then a
// create or a patch), so RBAC and admission answer exactly as they would to kubectl, and that
// answer is what the page shows.

// actionRequest is the body of every action.
type actionRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Freeze only.
	Reason string `json:"reason"`
	Until  string `json:"until"`
}

// errBadRequest marks an action the page asked for wrongly (nothing reached the API server).
var errBadRequest = errors.New("bad request")

// release sets spec.release on a request. The patch carries the uid the page showed, which the
// API server refuses to change, so a request deleted and re-created under the same name is not
// released by mistake.
func release(ctx context.Context, c ctrlclient.Client, a actionRequest) (string, error) {
	if a.Namespace == "" || a.Name == "" || a.UID == "" {
		return "", fmt.Errorf("%w: release needs the request's namespace, name and uid", errBadRequest)
	}
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = a.Namespace, a.Name
	if err := c.Patch(ctx, lr, uidPatch(a.UID, map[string]any{"release": true})); err != nil {
		return "", replaced("lockrequest "+a.Namespace+"/"+a.Name, err)
	}
	return fmt.Sprintf("lockrequest %s/%s released", a.Namespace, a.Name), nil
}

// forceUnlock deletes a ProjectLock, the admin's force-unlock, with the uid the page showed as
// a precondition: a lock re-created since then is not deleted.
func forceUnlock(ctx context.Context, c ctrlclient.Client, a actionRequest) (string, error) {
	if a.Namespace == "" || a.Name == "" || a.UID == "" {
		return "", fmt.Errorf("%w: force-unlock needs the ProjectLock's namespace, name and uid", errBadRequest)
	}
	pl := &locksv1.ProjectLock{}
	pl.Namespace, pl.Name = a.Namespace, a.Name
	uid := types.UID(a.UID)
	if err := c.Delete(ctx, pl, ctrlclient.Preconditions{UID: &uid}); err != nil {
		return "", err
	}
	return fmt.Sprintf("projectlock %s/%s deleted: its holder is being released", a.Namespace, a.Name), nil
}

// freeze creates or updates the CommandLock named after the command, as
// `kubectl turnstile freeze` does.
func freeze(ctx context.Context, c ctrlclient.Client, a actionRequest, now time.Time) (string, error) {
	command := strings.TrimSpace(a.Name)
	if command == "" {
		return "", fmt.Errorf("%w: name the command to freeze, e.g. apply (or all)", errBadRequest)
	}
	spec := locksv1.CommandLockSpec{Locked: true, Reason: a.Reason}
	if u := strings.TrimSpace(a.Until); u != "" {
		t, err := ParseUntil(u, now)
		if err != nil {
			return "", fmt.Errorf("%w: %w", errBadRequest, err)
		}
		spec.Until = &metav1.Time{Time: t}
	}
	if err := FreezeCommand(ctx, c, command, spec); err != nil {
		return "", err
	}
	return fmt.Sprintf("commandlock %s frozen", command), nil
}

// FreezeCommand sets the CommandLock named command to spec (keeping its windows and write freeze),
// creating it if it does not exist, as `kubectl turnstile freeze` and the page's Freeze button both do.
func FreezeCommand(ctx context.Context, c ctrlclient.Client, command string, spec locksv1.CommandLockSpec) error {
	var cl locksv1.CommandLock
	err := c.Get(ctx, ctrlclient.ObjectKey{Name: command}, &cl)
	switch {
	case apierrors.IsNotFound(err):
		cl = locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: command}, Spec: spec}
		return c.Create(ctx, &cl)
	case err != nil:
		return err
	}
	patch := ctrlclient.MergeFrom(cl.DeepCopy())
	// A manual freeze leaves the windows and the write freeze as they are.
	spec.Windows, spec.Admission = cl.Spec.Windows, cl.Spec.Admission
	cl.Spec = spec
	return c.Patch(ctx, &cl, patch)
}

// thaw sets locked: false on a CommandLock, with the uid the page showed as a precondition.
func thaw(ctx context.Context, c ctrlclient.Client, a actionRequest) (string, error) {
	if a.Name == "" || a.UID == "" {
		return "", fmt.Errorf("%w: thaw needs the CommandLock's name and uid", errBadRequest)
	}
	cl := &locksv1.CommandLock{}
	cl.Name = a.Name
	if err := c.Patch(ctx, cl, uidPatch(a.UID, map[string]any{"locked": false})); err != nil {
		return "", replaced("commandlock "+a.Name, err)
	}
	return fmt.Sprintf("commandlock %s thawed", a.Name), nil
}

// ParseUntil reads a freeze's until: an RFC 3339 time, or a duration from now (2h).
func ParseUntil(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("until %q: want an RFC 3339 time (2026-11-22T18:00:00Z) or a duration (2h)", s)
	}
	return t, nil
}

// replaced explains the API server's refusal of a uidPatch whose uid is not the object's: the
// object was deleted and re-created since the page showed it. Other errors pass unchanged.
func replaced(what string, err error) error {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return err
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return fmt.Errorf("%s was replaced by a new one of the same name since the page showed it, so nothing was changed: %w", what, err)
		}
	}
	return err
}

// uidPatch is a merge patch of spec fields that also names the object's uid: the API server
// refuses it (Invalid: "metadata.uid: field is immutable") when the object has been replaced by
// a namesake.
func uidPatch(uid string, spec map[string]any) ctrlclient.Patch {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid}, "spec": spec})
	if err != nil {
		panic(err) // a map of strings and bools
	}
	return ctrlclient.RawPatch(types.MergePatchType, b)
}
