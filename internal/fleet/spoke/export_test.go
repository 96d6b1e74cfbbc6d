package spoke

import "sigs.k8s.io/controller-runtime/pkg/client"

// WrapHubCache makes Reconcile read its hub requests through wrap(the hub cache): a test's way to
// make the hub cache lag (serve an old copy of a hub request) with the real cache underneath.
// Call it before the agent's manager starts.
func (a *Agent) WrapHubCache(wrap func(client.Reader) client.Reader) { a.hubRead = wrap(a.hubs) }
