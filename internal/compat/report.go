package compat

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Event reasons of the Reporter, on the manager's Pod.
const (
	ReasonSupported    = "KubernetesSupported"
	ReasonUnsupported  = "KubernetesUnsupported"
	ReasonAdmission    = "AdmissionPolicies"
	ReasonUnprotected  = "AdmissionUnprotected"
	ReasonProbeFailed  = "AdmissionUnknown"
	infoMetricName     = "turnstile_cluster_info"
	defaultProbePeriod = 5 * time.Minute
)

// Reporter says what the manager found of its cluster: the version (Cluster, found before the
// manager starts), and which admission policies run (Probe, when the manager runs, and again
// every Period: policies load after the manager starts, or are removed). Each finding, and each
// change of it, is a log line and an Event on the manager's Pod (Regarding); the metric
// turnstile_cluster_info has one series with the current findings as labels, value 1.
type Reporter struct {
	Cluster   Cluster
	Client    client.Client
	Namespace string
	Recorder  events.EventRecorder
	// Regarding is the manager's Pod ($POD_NAME, $POD_NAMESPACE); nil: no Events.
	Regarding runtime.Object
	Log       logr.Logger
	// Period is how often the admission policies are probed again (default 5m).
	Period time.Duration

	info *prometheus.GaugeVec
	mu   sync.Mutex
	last Admission
}

// NewReporter completes r and registers its metric with reg.
func NewReporter(reg prometheus.Registerer, r *Reporter) (*Reporter, error) {
	r.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: infoMetricName,
		Help: "What the manager found of its cluster, as labels (value 1): the Kubernetes version, whether Turnstile supports it, " +
			"the MutatingAdmissionPolicy version it serves (empty: none), and which admission policies run (mutating, validating-only, none, unknown).",
	}, []string{"kubernetes_version", "supported", "mutating_admission_policy", "admission"})
	if err := reg.Register(r.info); err != nil {
		return nil, err
	}
	if r.Period <= 0 {
		r.Period = defaultProbePeriod
	}
	return r, nil
}

// Pod is the object Events about the manager are recorded on: its own Pod.
func Pod(namespace, name string) runtime.Object {
	if namespace == "" || name == "" {
		return nil
	}
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

// Start reports the version, then probes the admission policies until ctx ends.
func (r *Reporter) Start(ctx context.Context) error {
	v := r.Cluster.Version
	if w := v.Warning(); w != "" {
		r.Log.Info("WARNING: "+w, "kubernetes", v.Describe())
		r.event(corev1.EventTypeWarning, ReasonUnsupported, "%s", w)
	} else {
		r.event(corev1.EventTypeNormal, ReasonSupported, "Kubernetes %s is in the supported range (%s); mutating admission: %s", v.Describe(), Range(), r.Cluster.MutatingDescription())
	}
	r.probe(ctx)
	t := time.NewTicker(r.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.probe(ctx)
		}
	}
}

// NeedLeaderElection is false: every replica reports on itself.
func (r *Reporter) NeedLeaderElection() bool { return false }

// Admission is the last probe's finding ("" before the first).
func (r *Reporter) Admission() Admission {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *Reporter) probe(ctx context.Context) {
	mode, err := Probe(ctx, r.Client, r.Namespace)
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	changed := mode != r.last
	r.last = mode
	r.mu.Unlock()
	r.info.Reset()
	r.info.WithLabelValues(r.Cluster.Version.Describe(), strconv.FormatBool(r.Cluster.Version.Supported()), r.Cluster.MutatingAdmissionPolicy, string(mode)).Set(1)
	if !changed {
		return
	}
	switch mode {
	case AdmissionMutating, AdmissionValidatingOnly:
		r.Log.Info("admission policies: "+mode.Describe(), "admission", mode, "mutatingAdmissionPolicy", r.Cluster.MutatingAdmissionPolicy)
		r.event(corev1.EventTypeNormal, ReasonAdmission, "admission %s: %s", mode, mode.Describe())
	case AdmissionNone:
		r.Log.Info("WARNING: admission policies: "+mode.Describe(), "admission", mode)
		r.event(corev1.EventTypeWarning, ReasonUnprotected, "%s", mode.Describe())
	default:
		r.Log.Error(err, "admission policies: could not tell which run", "admission", mode)
		r.event(corev1.EventTypeWarning, ReasonProbeFailed, "could not tell which admission policies run: %v", err)
	}
}

func (r *Reporter) event(eventType, reason, note string, args ...any) {
	if r.Recorder == nil || r.Regarding == nil {
		return
	}
	r.Recorder.Eventf(r.Regarding, nil, eventType, reason, "Start", note, args...)
}
