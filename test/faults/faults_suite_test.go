// Package faults is Turnstile's Jepsen-style harness: clients acquire, hold and release locks
// while faults are injected between the managers, the clients and the API server (toxiproxy in
// this process), into the control plane's processes (an API server or etcd restart, a SIGSTOPped
// manager) and into the API (410 Gone after a compaction, 429 throttling, skewed clocks). After
// each run a judge decides from the clients' own records alone (Judge): no two holds of a key
// overlap in real time, tokens increase in real-time order, every waiter is granted within a
// bound after the heal, nothing is lost, and porcupine agrees.
//
// `make test` runs one seed per fault class; `make faults` runs the matrix (every class × seeds
// × 1 and 3 replicas) and prints the summary table (docs/faults.md).
//
//	TURNSTILE_FAULTS_SEEDS=1,2,3 TURNSTILE_FAULTS_REPLICAS=1,3 go test ./test/faults/ -ginkgo.v
package faults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

var (
	ctx    = context.Background()
	shared *cluster
)

func TestFaults(t *testing.T) { framework.RunSuite(t, "Faults suite") }

var _ = BeforeSuite(func() {
	if os.Getenv("TURNSTILE_FAULTS_LOG") != "" {
		l := zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true), zap.Level(zapcore.Level(-4)), func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder })
		ctrl.SetLogger(l)
		klog.SetLogger(l)
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", "4")
	}
	var err error
	shared, err = startCluster(GinkgoT().TempDir(), true)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(shared.stop)
})

// row is one run's line of the summary table.
type row struct {
	class             string
	replicas          int
	seed              int64
	holds, violations int
	p50, max          time.Duration
	recoveries        int
	note              string
	apiReady          time.Duration // after the heal, when the API server served LockRequests again
}

var summary struct {
	sync.Mutex
	rows []row
}

var _ = AfterSuite(func() {
	summary.Lock()
	defer summary.Unlock()
	if len(summary.rows) == 0 {
		return
	}
	table := summaryTable(summary.rows)
	GinkgoWriter.Println(table)
	if path := os.Getenv("TURNSTILE_FAULTS_SUMMARY"); path != "" {
		Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
		Expect(os.WriteFile(path, []byte(table), 0o644)).To(Succeed())
	}
})

// summaryTable is the runs grouped by class and replicas: holds checked, violations, recovery
// after heal p50/max over every heal and key of the group's seeds.
func summaryTable(rows []row) string {
	type group struct {
		class    string
		replicas int
	}
	byGroup := map[group][]row{}
	var order []group
	for _, r := range rows {
		g := group{r.class, r.replicas}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], r)
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].class != order[j].class {
			return classIndex(order[i].class) < classIndex(order[j].class)
		}
		return order[i].replicas < order[j].replicas
	})
	var b strings.Builder
	fmt.Fprintf(&b, "| class | replicas | seeds | holds checked | violations | recovery p50 | recovery max | API server back (max) |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, g := range order {
		rs := byGroup[g]
		var holds, viol int
		var seeds []string
		var rec []time.Duration
		var api time.Duration
		for _, r := range rs {
			api = max(api, r.apiReady)
			holds += r.holds
			viol += r.violations
			seeds = append(seeds, fmt.Sprint(r.seed))
			rec = append(rec, recoveries[recKey(r.class, r.replicas, r.seed)]...)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %s | %s | %s |\n", g.class, g.replicas, strings.Join(seeds, ","), holds, viol,
			percentile(rec, 0.5).Round(time.Millisecond), percentile(rec, 1).Round(time.Millisecond), api.Round(time.Millisecond))
	}
	return b.String()
}

// recoveries keeps every run's recovery samples for the summary.
var recoveries = map[string][]time.Duration{}

func recKey(class string, replicas int, seed int64) string {
	return fmt.Sprintf("%s/%d/%d", class, replicas, seed)
}

func record(r row, rec []time.Duration) {
	summary.Lock()
	defer summary.Unlock()
	summary.rows = append(summary.rows, r)
	recoveries[recKey(r.class, r.replicas, r.seed)] = rec
}
