package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// inNamespace gives freezes the labels of namespace ns when a freeze window selects namespaces
// by label. They come from the cache (metadata only), which is started the first time a window
// needs it: a manager with no such window watches no namespaces. A label change is seen at the
// key's next decision.
func (r *LockReconciler) inNamespace(ctx context.Context, ns string, freezes *queue.Freezes) error {
	if !freezes.NeedsNamespaceLabels() {
		return nil
	}
	labels, err := namespaceLabels(ctx, r.client, ns)
	if err != nil {
		return err
	}
	*freezes = freezes.InNamespace(labels)
	return nil
}

// namespaceLabels reads the labels of namespace ns (metadata only; none if it is gone).
func namespaceLabels(ctx context.Context, c client.Reader, ns string) (map[string]string, error) {
	var meta metav1.PartialObjectMetadata
	meta.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &meta); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("read namespace %s for freeze windows: %w", ns, err)
	}
	return meta.Labels, nil
}

// recordBypass records a grant that spec.bypassFreeze let past a freeze: a Warning event on
// the request naming the freeze and the reason given, and turnstile_freeze_bypasses_total.
func (r *LockReconciler) recordBypass(u queue.Update, freezes queue.Freezes) {
	fr, ok := freezes.Bypassed(u.Request)
	if !ok {
		return
	}
	// guard:window-bypass-recorded
	r.metrics.Bypasses.WithLabelValues(u.Request.Spec.Command).Inc()
	r.recorder.Eventf(u.Request, nil, "Warning", locksv1.ReasonFreezeBypassed, "Grant",
		"granted past a freeze (%s: %s) by spec.bypassFreeze: %s", fr.Source, fr.Message, u.Request.Spec.BypassFreeze.Reason)
}
