package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

func keyRow(id, holder string) Key {
	k := Key{ID: id, Namespace: ns, Name: id, Key: id, Queue: []Waiter{}}
	if holder != "" {
		k.Holder = &Holder{Who: holder, Owner: holder, Requests: []HolderRequest{}}
	}
	return k
}

func TestDiff(t *testing.T) {
	a, b, c := keyRow("a", ""), keyRow("b", "bob"), keyRow("c", "")
	freezes := []Freeze{{Command: "apply", Reason: "maintenance", InForce: true}}
	prevView := View{Keys: []Key{a, b}, Freezes: []Freeze{}, Events: []Event{}}
	prev := encode(prevView, []Problem{})
	type summary struct {
		Upsert          []string
		Remove          []string
		Freezes, Events bool
		Problems        bool
		Changed         bool
	}
	cases := map[string]struct {
		next     View
		problems []Problem
		want     summary
	}{
		"nothing changed: no patch": {
			next: prevView,
			want: summary{},
		},
		"a key changed, one was added, one removed": {
			next: View{Keys: []Key{keyRow("a", "alice"), c}, Freezes: []Freeze{}, Events: []Event{}},
			want: summary{Upsert: []string{"a", "c"}, Remove: []string{"b"}, Changed: true},
		},
		"only the freezes changed": {
			next: View{Keys: []Key{a, b}, Freezes: freezes, Events: []Event{}},
			want: summary{Freezes: true, Changed: true},
		},
		"a watch failed": {
			next:     prevView,
			problems: []Problem{{Resource: "events", Message: "You may not list events"}},
			want:     summary{Problems: true, Changed: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.problems == nil {
				tc.problems = []Problem{}
			}
			p, changed := diff(prev, tc.next, encode(tc.next, tc.problems), tc.problems, now)
			got := summary{Remove: p.Remove, Freezes: p.Freezes != nil, Events: p.Events != nil, Problems: p.Problems != nil, Changed: changed}
			for _, raw := range p.Upsert {
				var k Key
				if err := json.Unmarshal(raw, &k); err != nil {
					t.Fatal(err)
				}
				got.Upsert = append(got.Upsert, k.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestFrameCannotBeBroken: a reason, owner or url with newlines, "data:" lines and markup is
// one frame of valid JSON: the page gets exactly the text that was written.
func TestFrameCannotBeBroken(t *testing.T) {
	hostile := "maintenance\n\nevent: view\ndata: {\"keys\":[]}\r\n</script><img src=x onerror=alert(1)>\u2028&"
	v := viewMessage{View: View{
		Keys:    []Key{{ID: "x", Holder: &Holder{Who: hostile, Owner: hostile, Requests: []HolderRequest{}}, Queue: []Waiter{}}},
		Freezes: []Freeze{{Command: "apply", Reason: hostile}},
		Events:  []Event{{Message: hostile}},
	}, Problems: []Problem{}}
	f := frame(msgView, v)
	sc := bufio.NewScanner(bytes.NewReader(f))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 3 || lines[0] != "event: view" || !strings.HasPrefix(lines[1], "data: ") || lines[2] != "" {
		t.Fatalf("the frame is not one event: %q", lines)
	}
	if bytes.ContainsAny(f[:len(f)-2], "\r<>") {
		t.Errorf("raw CR or markup characters in the frame: %q", f)
	}
	var back viewMessage
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &back); err != nil {
		t.Fatal(err)
	}
	if back.Freezes[0].Reason != hostile || back.Keys[0].Holder.Owner != hostile || back.Events[0].Message != hostile {
		t.Errorf("the text did not survive: %q", back.Freezes[0].Reason)
	}
}

// TestActionAnswers: the API server's refusal reaches the page as it is, with its status.
func TestActionAnswers(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "locks.turnstile.dev", Resource: "projectlocks"}, "k",
		errors.New(`User "alice" cannot delete resource "projectlocks"`))
	cases := map[string]struct {
		body     string
		result   string
		err      error
		wantCode int
		want     actionResult
	}{
		"done": {
			body: `{"namespace":"a","name":"k","uid":"u"}`, result: "projectlock a/k deleted",
			wantCode: 200, want: actionResult{OK: true, Message: "projectlock a/k deleted"},
		},
		"Forbidden, as the API server said it": {
			body: `{"namespace":"a","name":"k","uid":"u"}`, err: forbidden,
			wantCode: 403, want: actionResult{Message: forbidden.Error(), Reason: "Forbidden", Code: 403},
		},
		"a wrapped API error keeps its status": {
			body: `{"namespace":"a","name":"k","uid":"u"}`, err: fmt.Errorf("thaw: %w", apierrors.NewConflict(schema.GroupResource{Resource: "commandlocks"}, "apply", errors.New("uid changed"))),
			wantCode: 409, want: actionResult{Message: `thaw: Operation cannot be fulfilled on commandlocks "apply": uid changed`, Reason: "Conflict", Code: 409},
		},
		"a bad request never reaches the API server": {
			body: `{"namespace":"a","name":"k","uid":"u"}`, err: fmt.Errorf("%w: no uid", errBadRequest),
			wantCode: 400, want: actionResult{Message: "bad request: no uid"},
		},
		"an unknown field is refused": {
			body:     `{"namespace":"a","name":"k","uid":"u","force":true}`,
			wantCode: 400, want: actionResult{Message: `bad request: json: unknown field "force"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &Server{}
			called := false
			h := s.action(func(context.Context, ctrlclient.Client, actionRequest) (string, error) {
				called = true
				return tc.result, tc.err
			})
			rec := httptest.NewRecorder()
			h(rec, httptest.NewRequest(http.MethodPost, "/api/x", strings.NewReader(tc.body)))
			var got actionResult
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, rec.Body.String())
			}
			if rec.Code != tc.wantCode {
				t.Errorf("status %d, want %d", rec.Code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if strings.Contains(tc.body, "force") && called {
				t.Error("a malformed action was carried out")
			}
		})
	}
}
