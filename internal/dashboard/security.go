package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// TokenHeader carries the per-run token on the page's own requests (actions). The event
// stream, which a browser opens without custom headers, carries it as the token query
// parameter, as the page's own URL does.
const TokenHeader = "X-Turnstile-Token"

// NewToken returns a fresh random token: 32 bytes from crypto/rand, hex-encoded, so it needs no
// escaping in a URL.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// CheckListenAddress decides whether the dashboard may listen on host. A loopback address
// (127.0.0.0/8, ::1, or "localhost") is always allowed. Anything else is refused unless
// allowRemote, and then warning says what it means: anyone who reaches the port and has the URL
// acts with the user's credentials.
func CheckListenAddress(host string, allowRemote bool) (warning string, err error) {
	if IsLoopback(host) {
		return "", nil
	}
	what := fmt.Sprintf("%q is not a loopback address", host)
	if host == "" {
		what = "an empty address listens on every interface"
	}
	if !allowRemote {
		return "", fmt.Errorf("refusing to serve the dashboard on %s: %s, and the dashboard acts with your "+
			"credentials, so anyone who reaches it from another machine acts as you. Use 127.0.0.1, or pass "+
			"--allow-remote if you mean it", host, what)
	}
	return fmt.Sprintf("WARNING: serving the dashboard on %s, beyond this machine (--allow-remote): anyone who "+
		"can reach it and has its URL acts against the API server with your credentials, and plain HTTP "+
		"shows the URL's token to anyone on the path", host), nil
}

// IsLoopback reports whether host (an IP address or "localhost") is loopback. Other names are
// not resolved: what they resolve to can change after the check.
func IsLoopback(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL is the address to open: http://HOST:PORT/?token=TOKEN, with an IPv6 host in brackets and
// the token query-escaped.
func URL(host string, port int, token string) string {
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, fmt.Sprint(port)), Path: "/", RawQuery: url.Values{"token": {token}}.Encode()}
	return u.String()
}

// guard is what every request passes before it reaches a handler.
type guard struct {
	token string
	// loopback is true when the server listens on loopback only: then the Host header must
	// name loopback too, which defeats DNS rebinding (a page on evil.example whose name now
	// points at 127.0.0.1 sends Host: evil.example).
	loopback bool
}

// hostAllowed reports whether the request's Host header may reach the server.
func (g guard) hostAllowed(r *http.Request) bool {
	if !g.loopback {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	return IsLoopback(host)
}

// tokenValid reports whether the request carries the run's token, in the header or the query.
func (g guard) tokenValid(r *http.Request) bool {
	got := r.Header.Get(TokenHeader)
	if got == "" {
		got = r.URL.Query().Get("token")
	}
	return g.token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) == 1
}

// originAllowed reports whether a state-changing request comes from the dashboard's own page:
// its Origin must be present and name this server exactly (scheme, host and port), and the
// browser must not call it cross-site. A page elsewhere cannot forge Origin; a request without
// one (some non-browser client) is refused too, because an action must prove where it comes from.
func originAllowed(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// securityHeaders are set on every response: no framing, no inline script or style, no
// referrer (a holder's link must not carry the URL's token away), no MIME sniffing.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
}
