package controller_test

import (
	"fmt"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/internal/controller"
)

// Helpers that observe what the operator reports besides status: Events and metrics.

// eventsAbout polls the Events (events.k8s.io/v1) whose regarding object is o, matched by UID
// so events about an earlier object of the same name do not count. Events about a
// cluster-scoped object are in the default namespace.
func eventsAbout(o client.Object) func() []eventsv1.Event {
	ns := o.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	uid := o.GetUID()
	return func() []eventsv1.Event {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil
		}
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.UID == uid {
				out = append(out, e)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].EventTime.Before(&out[j].EventTime) })
		return out
	}
}

// eventNotes polls the Events about o as "Type Reason: note", oldest first.
func eventNotes(o client.Object) func() []string {
	events := eventsAbout(o)
	return func() []string {
		var out []string
		for _, e := range events() {
			out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Note))
		}
		return out
	}
}

// withManager replaces the suite's manager, for the rest of the spec, by one whose options are
// the suite's changed by edit, and puts a manager with the suite's options back afterwards.
// Specs use it for what the suite's options leave out: a metrics registry, another deadlock
// victim policy, the apply flags.
func withManager(edit func(*controller.SetupOptions)) {
	GinkgoHelper()
	o := options
	edit(&o)
	Expect(mgr.Stop()).To(Succeed())
	mgr = nil
	DeferCleanup(func() {
		if mgr != nil {
			Expect(mgr.Stop()).To(Succeed())
		}
		var err error
		mgr, err = env.StartManager(options)
		Expect(err).NotTo(HaveOccurred())
	})
	var err error
	mgr, err = env.StartManager(o)
	Expect(err).NotTo(HaveOccurred())
}

// withMetrics runs the rest of the spec under a manager that registers its metrics with a fresh
// registry, and returns the registry.
func withMetrics(edit ...func(*controller.SetupOptions)) *prometheus.Registry {
	GinkgoHelper()
	reg := prometheus.NewRegistry()
	withManager(func(o *controller.SetupOptions) {
		o.Registry = reg
		for _, e := range edit {
			e(o)
		}
	})
	return reg
}

// metric polls one sample of a metric family: the one whose labels include labels (name,
// value pairs); a histogram's sample is the sum of its observations. It returns -1 while there is no such sample, so "gone" and "0" differ.
func metric(reg prometheus.Gatherer, name string, labels ...string) func() float64 {
	return func() float64 {
		families, err := reg.Gather()
		if err != nil {
			return -2
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		samples:
			for _, m := range f.GetMetric() {
				have := map[string]string{}
				for _, l := range m.GetLabel() {
					have[l.GetName()] = l.GetValue()
				}
				for i := 0; i+1 < len(labels); i += 2 {
					if have[labels[i]] != labels[i+1] {
						continue samples
					}
				}
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				case m.GetHistogram() != nil:
					return m.GetHistogram().GetSampleSum()
				}
			}
		}
		return -1
	}
}
