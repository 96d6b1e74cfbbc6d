package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckListenAddress(t *testing.T) {
	cases := map[string]struct {
		host        string
		allowRemote bool
		wantErr     bool
		wantWarning bool
	}{
		"127.0.0.1":                      {host: "127.0.0.1"},
		"elsewhere in 127/8":             {host: "127.0.0.2"},
		"::1":                            {host: "::1"},
		"[::1]":                          {host: "[::1]"},
		"localhost":                      {host: "localhost"},
		"LOCALHOST":                      {host: "LOCALHOST"},
		"every interface is refused":     {host: "0.0.0.0", wantErr: true},
		"every IPv6 interface is too":    {host: "::", wantErr: true},
		"an empty address is too":        {host: "", wantErr: true},
		"a LAN address is refused":       {host: "192.168.1.10", wantErr: true},
		"a name is not resolved":         {host: "myhost.local", wantErr: true},
		"loopback-looking names are not": {host: "127.0.0.1.nip.io", wantErr: true},
		"allowed remote, with a warning": {host: "0.0.0.0", allowRemote: true, wantWarning: true},
		"allowed LAN, with a warning":    {host: "192.168.1.10", allowRemote: true, wantWarning: true},
		"loopback needs no warning":      {host: "127.0.0.1", allowRemote: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			warning, err := CheckListenAddress(tc.host, tc.allowRemote)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--allow-remote") {
				t.Errorf("the refusal does not say how to override it: %v", err)
			}
			if (warning != "") != tc.wantWarning {
				t.Errorf("warning = %q, want one: %v", warning, tc.wantWarning)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 64 || a == b || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("tokens %q, %q: want two different 64-character hex strings", a, b)
	}
}

func TestURL(t *testing.T) {
	cases := map[string]struct {
		host, token string
		want        string
	}{
		"IPv4":                       {host: "127.0.0.1", token: "abc", want: "http://127.0.0.1:8001/?token=abc"},
		"IPv6 gets brackets":         {host: "::1", token: "abc", want: "http://[::1]:8001/?token=abc"},
		"the token is query-escaped": {host: "localhost", token: "a b&c=d#e/f", want: "http://localhost:8001/?token=a+b%26c%3Dd%23e%2Ff"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := URL(tc.host, 8001, tc.token)
			if got != tc.want {
				t.Errorf("URL = %q, want %q", got, tc.want)
			}
			u, err := url.Parse(got)
			if err != nil || u.Query().Get("token") != tc.token {
				t.Errorf("the token does not survive the URL: %v %q", err, u.Query().Get("token"))
			}
		})
	}
}

// newRequest is a request to target on host, with headers.
func newRequest(method, target, host string, headers map[string]string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Host = host
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

func TestGuard(t *testing.T) {
	g := guard{token: "secret", loopback: true}
	type want struct{ Host, Token, Origin bool }
	cases := map[string]struct {
		method  string
		target  string
		host    string
		headers map[string]string
		want    want
	}{
		"the page's own action":                               {method: "POST", target: "/api/release", host: "127.0.0.1:8001", headers: map[string]string{TokenHeader: "secret", "Origin": "http://127.0.0.1:8001", "Sec-Fetch-Site": "same-origin"}, want: want{Host: true, Token: true, Origin: true}},
		"the token in the query (the event stream)":           {method: "GET", target: "/api/stream?token=secret", host: "localhost:8001", want: want{Host: true, Token: true}},
		"IPv6 loopback":                                       {method: "POST", target: "/api/thaw", host: "[::1]:8001", headers: map[string]string{TokenHeader: "secret", "Origin": "http://[::1]:8001"}, want: want{Host: true, Token: true, Origin: true}},
		"no token":                                            {method: "GET", target: "/api/stream", host: "127.0.0.1:8001", want: want{Host: true}},
		"a wrong token":                                       {method: "GET", target: "/api/stream?token=secreT", host: "127.0.0.1:8001", want: want{Host: true}},
		"a prefix of the token":                               {method: "GET", target: "/api/stream?token=secre", host: "127.0.0.1:8001", want: want{Host: true}},
		"DNS rebinding: a foreign name for loopback":          {method: "GET", target: "/?token=secret", host: "evil.example:8001", want: want{Token: true}},
		"a cross-site form post":                              {method: "POST", target: "/api/force-unlock?token=secret", host: "127.0.0.1:8001", headers: map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, want: want{Host: true, Token: true}},
		"another local port is another origin":                {method: "POST", target: "/api/freeze", host: "127.0.0.1:8001", headers: map[string]string{TokenHeader: "secret", "Origin": "http://127.0.0.1:9999"}, want: want{Host: true, Token: true}},
		"https is another origin":                             {method: "POST", target: "/api/freeze", host: "127.0.0.1:8001", headers: map[string]string{TokenHeader: "secret", "Origin": "https://127.0.0.1:8001"}, want: want{Host: true, Token: true}},
		"no Origin at all":                                    {method: "POST", target: "/api/freeze", host: "127.0.0.1:8001", headers: map[string]string{TokenHeader: "secret"}, want: want{Host: true, Token: true}},
		"a sandboxed frame's null Origin":                     {method: "POST", target: "/api/freeze", host: "127.0.0.1:8001", headers: map[string]string{TokenHeader: "secret", "Origin": "null"}, want: want{Host: true, Token: true}},
		"same Origin but a same-site, not same-origin, fetch": {method: "POST", target: "/api/freeze", host: "127.0.0.1:8001", headers: map[string]string{TokenHeader: "secret", "Origin": "http://127.0.0.1:8001", "Sec-Fetch-Site": "same-site"}, want: want{Host: true, Token: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRequest(tc.method, tc.target, tc.host, tc.headers)
			got := want{Host: g.hostAllowed(r), Token: g.tokenValid(r), Origin: originAllowed(r)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("with --allow-remote any Host may reach it, the token still guards it", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/api/stream", nil)
		r.Host = "dashboard.lan:8001"
		remote := guard{token: "secret"}
		if !remote.hostAllowed(r) || remote.tokenValid(r) {
			t.Errorf("host allowed %v, token valid %v; want true, false", remote.hostAllowed(r), remote.tokenValid(r))
		}
	})
	t.Run("an empty token never matches", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/api/stream?token=", nil)
		if (guard{}).tokenValid(r) {
			t.Error("an empty token matched a server without one")
		}
	})
}

// TestServeHTTP checks the order of the checks on the real handler: the static files need no
// token, everything else does, and an action needs the page's Origin too.
func TestServeHTTP(t *testing.T) {
	s := &Server{guard: guard{token: "secret", loopback: true}, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /static/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("static")) })
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("POST /api/release", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("released")) })
	cases := map[string]struct {
		method, target, host string
		headers              map[string]string
		wantCode             int
		wantBody             string
	}{
		"static files without the token":    {method: "GET", target: "/static/app.js", host: "127.0.0.1:1", wantCode: 200, wantBody: "static"},
		"the page without the token":        {method: "GET", target: "/", host: "127.0.0.1:1", wantCode: 401, wantBody: "needs the token"},
		"the page with it":                  {method: "GET", target: "/?token=secret", host: "127.0.0.1:1", wantCode: 200, wantBody: "<title>Turnstile locks</title>"},
		"the page under a foreign name":     {method: "GET", target: "/?token=secret", host: "evil.example:1", wantCode: 421, wantBody: "loopback host name"},
		"static files under a foreign name": {method: "GET", target: "/static/app.js", host: "evil.example:1", wantCode: 421},
		"an action with token and Origin": {method: "POST", target: "/api/release", host: "127.0.0.1:1",
			headers: map[string]string{TokenHeader: "secret", "Origin": "http://127.0.0.1:1"}, wantCode: 200, wantBody: "released"},
		"an action from another site": {method: "POST", target: "/api/release?token=secret", host: "127.0.0.1:1",
			headers: map[string]string{"Origin": "https://evil.example"}, wantCode: 403, wantBody: "Origin does not match"},
		"an action without the token": {method: "POST", target: "/api/release", host: "127.0.0.1:1",
			headers: map[string]string{"Origin": "http://127.0.0.1:1"}, wantCode: 401},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRequest(tc.method, tc.target, tc.host, tc.headers)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.target, rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy = %q", csp)
			}
			if rp := rec.Header().Get("Referrer-Policy"); rp != "no-referrer" {
				t.Errorf("Referrer-Policy = %q: a holder's link would carry the token away", rp)
			}
		})
	}
}
