package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/client-go/rest"
)

// proxies are toxiproxy TCP proxies, run in this process, one between each manager replica or
// client and the API server. TLS goes through them untouched (the API server's certificate is
// for 127.0.0.1, whatever the port), so a fault is what a network does to the bytes.
type proxies struct {
	srv      *toxiproxy.ApiServer
	upstream string
	mu       sync.Mutex
	all      []*proxy
}

func newProxies(upstream string) *proxies {
	// The toxics log through zerolog's global logger (a trace line per interrupted pipe); the
	// harness reports through its own records, not theirs.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	return &proxies{
		srv:      toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		upstream: upstream,
	}
}

// proxy is one component's link to the API server.
type proxy struct {
	name string
	p    *toxiproxy.Proxy
}

// add starts a proxy for the component name on a free loopback port.
func (ps *proxies) add(name string) (*proxy, error) {
	p := toxiproxy.NewProxy(ps.srv, name, "127.0.0.1:0", ps.upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	px := &proxy{name: name, p: p}
	ps.mu.Lock()
	ps.all = append(ps.all, px)
	ps.mu.Unlock()
	return px, nil
}

func (ps *proxies) stop() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		p.p.Stop()
	}
	ps.all = nil
}

// config is base pointed at the proxy instead of the API server.
func (p *proxy) config(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = "https://" + p.p.Listen
	return cfg
}

// toxic adds a toxiproxy toxic: typ is its type ("timeout", "latency", "bandwidth",
// "reset_peer"), stream "upstream" (requests) or "downstream" (responses), attrs its attributes.
func (p *proxy) toxic(typ, stream string, attrs string) error {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, typ+"_"+stream, typ, stream, attrs)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("proxy %s: toxic %s: %w", p.name, body, err)
	}
	return nil
}

// heal removes every toxic. A toxic that dropped bytes (timeout) closes its connections as it
// goes: their TLS streams are broken, and the client dials again.
func (p *proxy) heal() {
	p.p.Toxics.ResetToxics(context.Background())
}
