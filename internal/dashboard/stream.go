package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// The page receives server-sent events of these types:
//
//	hello       who the user is and what the server knows of the cluster (once per stream)
//	namespaces  the namespace selector's options (again whenever they change)
//	view        the whole view of the selected scope (once per stream, then patches)
//	patch       what changed: keys upserted or removed, freezes or events replaced
//	fleet       the whole Fleet tab (fleet.go): once per stream, and again when the Spokes come to
//	            be served or stop being
//	fleetpatch  what changed in it: spokes upserted or removed, the summary, the problem
//
// Every message carries the server's clock, so countdowns do not depend on the browser's.
const (
	msgHello      = "hello"
	msgNamespaces = "namespaces"
	msgView       = "view"
	msgPatch      = "patch"
)

// Problem is something the page cannot show, in words a person can act on, with the API
// server's own message.
type Problem struct {
	// Resource is what could not be read, e.g. "projectlocks".
	Resource string `json:"resource"`
	Message  string `json:"message"`
}

// viewMessage is the payload of a "view" message.
type viewMessage struct {
	Now       time.Time `json:"now"`
	Namespace string    `json:"namespace"`
	View
	Problems []Problem `json:"problems"`
}

// patchMessage is the payload of a "patch" message. Freezes, Events and Problems are nil when
// unchanged; Keys are sent only when they changed.
type patchMessage struct {
	Now      time.Time         `json:"now"`
	Upsert   []json.RawMessage `json:"upsert,omitempty"`
	Remove   []string          `json:"remove,omitempty"`
	Freezes  *[]Freeze         `json:"freezes,omitempty"`
	Events   *[]Event          `json:"events,omitempty"`
	Problems *[]Problem        `json:"problems,omitempty"`
}

// encoded is a view as last sent, in JSON, so the next one can be sent as a patch.
type encoded struct {
	keys     map[string][]byte
	freezes  []byte
	events   []byte
	problems []byte
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings, numbers and times are marshalled here.
		panic(fmt.Sprintf("dashboard: marshal %T: %v", v, err))
	}
	return b
}

func encode(v View, problems []Problem) encoded {
	e := encoded{keys: make(map[string][]byte, len(v.Keys)), freezes: mustJSON(v.Freezes), events: mustJSON(v.Events), problems: mustJSON(problems)}
	for _, k := range v.Keys {
		e.keys[k.ID] = mustJSON(k)
	}
	return e
}

// diff is the patch from prev to next (whose encoding is nextEnc); ok is false when nothing
// changed.
func diff(prev encoded, next View, nextEnc encoded, problems []Problem, now time.Time) (patchMessage, bool) {
	p := patchMessage{Now: now}
	changed := false
	for _, k := range next.Keys {
		if old, ok := prev.keys[k.ID]; !ok || !bytes.Equal(old, nextEnc.keys[k.ID]) {
			// The key's JSON as encoded for the comparison: it is not marshalled twice.
			p.Upsert = append(p.Upsert, nextEnc.keys[k.ID])
			changed = true
		}
	}
	for id := range prev.keys {
		if _, ok := nextEnc.keys[id]; !ok {
			p.Remove = append(p.Remove, id)
			changed = true
		}
	}
	slices.Sort(p.Remove)
	if !bytes.Equal(prev.freezes, nextEnc.freezes) {
		p.Freezes = &next.Freezes
		changed = true
	}
	if !bytes.Equal(prev.events, nextEnc.events) {
		p.Events = &next.Events
		changed = true
	}
	if !bytes.Equal(prev.problems, nextEnc.problems) {
		p.Problems = &problems
		changed = true
	}
	return p, changed
}

// frame is one server-sent event. The data is JSON, which never holds a raw newline (a string's
// newline is written \n), so no field a user controls can end the frame or start another.
func frame(event string, payload any) []byte {
	var b bytes.Buffer
	b.WriteString("event: ")
	b.WriteString(event)
	b.WriteString("\ndata: ")
	b.Write(mustJSON(payload))
	b.WriteString("\n\n")
	return b.Bytes()
}
