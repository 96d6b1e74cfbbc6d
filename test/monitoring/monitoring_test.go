package monitoring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSelectors(t *testing.T) {
	cases := map[string]struct {
		expr    string
		want    []Selector
		wantErr bool
	}{
		"plain metric": {
			expr: `turnstile_grants_total`,
			want: []Selector{{Metric: "turnstile_grants_total"}},
		},
		"matchers, ranges and functions": {
			expr: `sum by (le) (rate(turnstile_wait_duration_seconds_bucket{job=~".*", phase="x"}[5m]))`,
			want: []Selector{{Metric: "turnstile_wait_duration_seconds_bucket", Matchers: []Matcher{{"job", "=~", ".*"}, {"phase", "=", "x"}}}},
		},
		"both sides of a binary operation": {
			expr: `time() - max by (namespace) (a_seconds) > 3600 and on (instance) b_total`,
			want: []Selector{{Metric: "a_seconds"}, {Metric: "b_total"}},
		},
		"subquery and offset": {
			expr: `deriv(max(q{namespace="a"})[30m:1m]) > 0 unless q offset 1h`,
			want: []Selector{{Metric: "q", Matchers: []Matcher{{"namespace", "=", "a"}}}, {Metric: "q"}},
		},
		"__name__ matcher": {
			expr: `{__name__="x_total", job="a"}`,
			want: []Selector{{Metric: "x_total", Matchers: []Matcher{{"job", "=", "a"}}}},
		},
		"a selector with no metric": {
			expr:    `{job="a"}`,
			wantErr: true,
		},
		"not PromQL": {
			expr:    `rate(x[$__rate_interval])`,
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Selectors(tc.expr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

const scrape = `# HELP turnstile_queue_depth Requests waiting for a lock key.
# TYPE turnstile_queue_depth gauge
turnstile_queue_depth{namespace="team-a",projectlock="vpc"} 2
turnstile_queue_depth{namespace="team-b",projectlock="vpc"} 1
# HELP turnstile_grants_total LockRequests granted.
# TYPE turnstile_grants_total counter
turnstile_grants_total 3
# HELP turnstile_wait_duration_seconds Time a request waited.
# TYPE turnstile_wait_duration_seconds histogram
turnstile_wait_duration_seconds_bucket{le="1"} 1
turnstile_wait_duration_seconds_bucket{le="+Inf"} 1
turnstile_wait_duration_seconds_sum 0.5
turnstile_wait_duration_seconds_count 1
`

func TestParseExposition(t *testing.T) {
	got, err := ParseExposition(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	want := Exported{
		"turnstile_queue_depth":                  {"namespace": {"team-a": true, "team-b": true}, "projectlock": {"vpc": true}},
		"turnstile_grants_total":                 {},
		"turnstile_wait_duration_seconds_bucket": {"le": {"": true}},
		"turnstile_wait_duration_seconds_sum":    {},
		"turnstile_wait_duration_seconds_count":  {},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	exported, err := ParseExposition(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		expr string
		want []string
	}{
		"exported metrics, own and target labels": {
			expr: `topk(10, max by (namespace, projectlock) (turnstile_queue_depth{job=~".*", namespace=~"team-.*"}))` +
				` / histogram_quantile(0.95, sum by (le) (rate(turnstile_wait_duration_seconds_bucket{instance!=""}[5m])))`,
		},
		"a metric the manager does not export": {
			expr: `rate(turnstile_handoffs_total[5m])`,
			want: []string{"q: metric turnstile_handoffs_total is not exported by the manager"},
		},
		"a histogram read by its family name": {
			expr: `turnstile_wait_duration_seconds`,
			want: []string{"q: metric turnstile_wait_duration_seconds is not exported by the manager"},
		},
		"a value the scrape showed": {
			expr: `turnstile_queue_depth{namespace="team-b", projectlock=~"v.*"}`,
		},
		"a value never seen": {
			expr: `turnstile_queue_depth{namespace="team-c"}`,
			want: []string{`q: metric turnstile_queue_depth: namespace="team-c" was never seen (seen: team-a, team-b)`},
		},
		"a regular expression matching no value seen": {
			expr: `turnstile_queue_depth{projectlock=~"dns|iam"}`,
			want: []string{`q: metric turnstile_queue_depth: projectlock=~"dns|iam" matches none of vpc`},
		},
		"a label the metric does not carry": {
			expr: `turnstile_grants_total{namespace="team-a"}`,
			want: []string{`q: metric turnstile_grants_total has no label "namespace"`},
		},
		"an expression that does not parse": {
			expr: `sum(turnstile_grants_total`,
			want: []string{"q: 1:27: parse error: unclosed left parenthesis"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Check([]Query{{Where: "q", Expr: tc.expr}}, exported)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDashboardQueriesSubstitutesVariables(t *testing.T) {
	dash := `{
	  "templating": {"list": [
	    {"type": "datasource", "name": "datasource", "query": "prometheus"},
	    {"type": "query", "name": "job", "query": {"query": "label_values(turnstile_grants_total, job)"}},
	    {"type": "query", "name": "ns", "query": "label_values(turnstile_queue_depth{job=~\"$job\"}, namespace)"},
	    {"type": "custom", "name": "topn", "query": "5,10", "current": {"value": "10"}}
	  ]},
	  "panels": [
	    {"type": "row", "title": "Row", "panels": [
	      {"type": "timeseries", "title": "Inside", "targets": [{"refId": "A", "expr": "topk($topn, turnstile_queue_depth{job=~\"${job}\", namespace=~\"$ns\"})"}]}
	    ]},
	    {"type": "timeseries", "title": "Rate", "targets": [{"refId": "B", "expr": "rate(turnstile_grants_total{job=~\"$job\"}[$__rate_interval])"}]}
	  ]
	}`
	got, err := DashboardQueries([]byte(dash))
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{Where: "variable job", Expr: "turnstile_grants_total"},
		{Where: "variable ns", Expr: `turnstile_queue_depth{job=~".*"}`},
		{Where: `panel "Inside", target A`, Expr: `topk(10, turnstile_queue_depth{job=~".*", namespace=~".*"})`},
		{Where: `panel "Rate", target B`, Expr: `rate(turnstile_grants_total{job=~".*"}[5m])`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestShippedQueriesParse: every query of the shipped dashboard and rules parses, and each
// panel has one. (Whether the manager exports what they name is test/install's check: it
// scrapes the real manager.)
func TestShippedQueriesParse(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "config", "grafana", "turnstile-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	dq, err := DashboardQueries(data)
	if err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(filepath.Join(root, "config", "prometheus", "turnstile.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rq, err := RuleQueries(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(dq) < 10 || len(rq) < 8 {
		t.Fatalf("%d dashboard queries and %d rules: the files lost their content", len(dq), len(rq))
	}
	for _, q := range append(dq, rq...) {
		if _, err := Selectors(q.Expr); err != nil {
			t.Errorf("%s: %v\n%s", q.Where, err, q.Expr)
		}
	}
}
