package run

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// Annotations --keep-on-failure writes on the LockRequest it keeps (the status is the
// manager's): that it is kept and why, the command's exit code, and the pipeline's URL.
const (
	annotationKept     = "locks.turnstile.dev/kept-on-failure"
	annotationExitCode = "locks.turnstile.dev/exit-code"
	annotationURL      = "locks.turnstile.dev/pipeline-url"
)

// keep leaves the locks held after COMMAND failed, as Atlantis keeps a lock after a failed
// apply: the request says why (spec.reason, shown to everyone waiting, and annotations), and
// the holder Lease is handed from this process to no one, renewed once to last as long as the
// grant, so it does not lapse when run exits. They stay until someone releases the request
// (kubectl turnstile release NAME) or its ttl runs out.
func (rn *runner) keep(ctx context.Context, lock *client.Lock, code int, leaseName, url string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reason := fmt.Sprintf("kept after a failed run: exit code %d", code)
	if url != "" {
		reason += " (" + url + ")"
	}
	ann := map[string]string{annotationKept: reason, annotationExitCode: fmt.Sprint(code)}
	if url != "" {
		ann[annotationURL] = url
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": ann},
		"spec":     map[string]any{"reason": reason},
	})
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = lock.Namespace, lock.Name
	if err := rn.c.Patch(ctx, lr, ctrlclient.RawPatch(types.MergePatchType, patch)); err != nil {
		rn.say("warning: --keep-on-failure: record the failure on lockrequest/%s: %v; releasing instead", lock.Name, err)
		rn.release(lock)
		return
	}
	expiry := lr.Status.ExpiresAt
	until := time.Hour
	if expiry != nil {
		until = time.Until(expiry.Time) + time.Minute
	}
	var lease coordinationv1.Lease
	err := rn.c.Get(ctx, types.NamespacedName{Namespace: rn.ns, Name: leaseName}, &lease)
	if err == nil {
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = ptr.To("kept-on-failure")
		lease.Spec.RenewTime = &now
		lease.Spec.LeaseDurationSeconds = ptr.To(int32(until.Round(time.Second) / time.Second))
		err = rn.c.Update(ctx, &lease)
	}
	if err != nil {
		rn.say("warning: --keep-on-failure: keep the holder Lease %s: %v; the locks pass on when it lapses", leaseName, err)
		return
	}
	rn.say("lockrequest/%s kept after exit code %d: release it with kubectl turnstile release %s", lock.Name, code, lock.Name)
}
