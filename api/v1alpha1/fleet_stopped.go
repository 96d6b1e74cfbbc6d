package v1alpha1

import "strconv"

// AnnotationSpokeStopped is written by a fleet spoke's agent on its hub request (docs/fleet.md,
// "A spoke's grant ends when its spoke has stopped it"): the fencing token of the grant whose
// end the spoke has seen — the request released in the spoke or on the hub, or deleted in the
// spoke — and whose holder it has stopped, or never let go. A spoke's grant that is released
// stays the key's holder on the hub until its request carries this annotation with its token,
// or until the spoke's hub Lease lapses (the partition rule stopped the holder before that), so
// the key never passes to another holder while the spoke may still show the grant; and the hub
// refuses to delete such a grant before then (admission policy turnstile-fleet-stopped).
const AnnotationSpokeStopped = "fleet.turnstile.dev/stopped"

// AnnotationConfirmsStops marks a hub request whose spoke's agent says its stops
// (AnnotationSpokeStopped): an agent that does writes it, "true", on every hub request it makes
// or updates. The hub awaits a stop only for such a request: a request of an older agent, which
// says none, is handed on when it is released, as before (so a hub upgraded before its spokes
// keeps working).
const AnnotationConfirmsStops = "fleet.turnstile.dev/confirms-stops"

// StoppedToken is the value of AnnotationSpokeStopped for a grant of token t.
func StoppedToken(t int64) string { return strconv.FormatInt(t, 10) }

// SpokeStopped says whether lr's spoke has confirmed that it stopped the grant lr's status shows
// (AnnotationSpokeStopped is its token).
func SpokeStopped(lr *LockRequest) bool {
	v, ok := lr.Annotations[AnnotationSpokeStopped]
	return ok && v == StoppedToken(lr.Status.FencingToken)
}
