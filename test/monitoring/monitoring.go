// Package monitoring reads the PromQL of Turnstile's alerts (config/prometheus) and Grafana
// dashboard (config/grafana) with Prometheus' own parser, and checks every metric and label it
// selects against what a manager really exports: a scrape of its /metrics. test/install scrapes
// the real manager binary and runs the check; the unit tests here prove the check itself.
package monitoring

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// Query is one PromQL expression and where it was found.
type Query struct {
	Where string
	Expr  string
}

// Selector is one series selector of a query: the metric it names and its label matchers.
type Selector struct {
	Metric   string
	Matchers []Matcher
}

// Matcher is one label matcher: Op is =, !=, =~ or !~.
type Matcher struct {
	Label, Op, Value string
}

// TargetLabels are the labels Prometheus adds to every series it scrapes: a query may match on
// them though no exporter writes them.
var TargetLabels = []string{"job", "instance", "pod", "service", "endpoint", "container"}

var promql = parser.NewParser(parser.Options{})

// Selectors parses expr and returns its series selectors, in order of appearance. A selector
// that names no metric (only label matchers) is an error: the check could not tell what it reads.
func Selectors(expr string) ([]Selector, error) {
	ast, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []Selector
	var bad error
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s := Selector{Metric: vs.Name}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if m.Type == labels.MatchEqual {
					s.Metric = m.Value
				}
				continue
			}
			s.Matchers = append(s.Matchers, Matcher{Label: m.Name, Op: m.Type.String(), Value: m.Value})
		}
		if s.Metric == "" {
			bad = fmt.Errorf("selector %s names no metric", vs)
		}
		sort.Slice(s.Matchers, func(i, j int) bool { return s.Matchers[i].Label < s.Matchers[j].Label })
		out = append(out, s)
		return nil
	})
	return out, bad
}

// RuleQueries returns the expression of every rule of a Prometheus rules file.
func RuleQueries(data []byte) ([]Query, error) {
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	// Rules also carry for, labels and annotations: only the expressions are read.
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := "alert " + r.Alert
			if r.Record != "" {
				name = "recording rule " + r.Record
			}
			out = append(out, Query{Where: fmt.Sprintf("group %s, %s", g.Name, name), Expr: r.Expr})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no rules")
	}
	return out, nil
}

// dashboard is the part of a Grafana dashboard that holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type variable struct {
	Name    string          `json:"name"`
	Type    string          `json:"type"`
	Query   json.RawMessage `json:"query"`
	Current struct {
		Value any `json:"value"`
	} `json:"current"`
}

// labelValues matches Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// grafanaIntervals are Grafana's built-in range variables.
var grafanaIntervals = []string{"__rate_interval", "__interval", "__range"}

// DashboardQueries returns every panel target's expression, and the selector of every
// label_values() variable query, with Grafana's variables replaced as Grafana would before
// sending them: a custom variable by its current value, a query or data source variable by
// ".*" (its "All" value), the built-in intervals by 5m.
func DashboardQueries(data []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	values := map[string]string{}
	for _, name := range grafanaIntervals {
		values[name] = "5m"
	}
	var out []Query
	for _, v := range d.Templating.List {
		switch v.Type {
		case "custom", "constant", "interval":
			values[v.Name] = fmt.Sprint(v.Current.Value)
		default:
			values[v.Name] = ".*"
		}
		if v.Type != "query" {
			continue
		}
		q := string(v.Query)
		var obj struct {
			Query string `json:"query"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Query, &obj) == nil && obj.Query != "":
			q = obj.Query
		case json.Unmarshal(v.Query, &s) == nil:
			q = s
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
		}
		out = append(out, Query{Where: "variable " + v.Name, Expr: m[1]})
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q, target %s", p.Title, t.RefID), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for i := range out {
		out[i].Expr = substitute(out[i].Expr, values)
	}
	return out, nil
}

// substitute replaces ${name} and $name, longest names first so $topn is not read as $top.
func substitute(expr string, values map[string]string) string {
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		expr = strings.ReplaceAll(expr, "${"+n+"}", values[n])
		expr = strings.ReplaceAll(expr, "$"+n, values[n])
	}
	return expr
}

// Exported is what a scrape showed: each series name, with each label it carried and the
// values seen.
type Exported map[string]map[string]map[string]bool

// ParseExposition reads a /metrics response in the Prometheus text format. A histogram's family
// X is the series X_bucket (with le), X_sum and X_count, as PromQL sees them.
func ParseExposition(r io.Reader) (Exported, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := Exported{}
	add := func(name string, labels []*dto.LabelPair, extra string) {
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		seen := func(label, value string) {
			if out[name][label] == nil {
				out[name][label] = map[string]bool{}
			}
			out[name][label][value] = true
		}
		for _, l := range labels {
			seen(l.GetName(), l.GetValue())
		}
		if extra != "" {
			seen(extra, "") // le or quantile: values are not checked
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel(), "")
				add(name+"_count", m.GetLabel(), "")
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel(), "")
				add(name+"_count", m.GetLabel(), "")
			default:
				add(name, m.GetLabel(), "")
			}
		}
	}
	return out, nil
}

// Merge adds what other saw.
func (e Exported) Merge(other Exported) {
	for name, ls := range other {
		if e[name] == nil {
			e[name] = map[string]map[string]bool{}
		}
		for l, values := range ls {
			if e[name][l] == nil {
				e[name][l] = map[string]bool{}
			}
			for v := range values {
				e[name][l][v] = true
			}
		}
	}
}

// Check returns a line for each problem: a query that does not parse, a metric the manager
// does not export, a label it matches on that the metric does not carry, or a value it matches
// (= and =~) that the scrape never showed for that label. Prometheus' target labels are not
// checked. So the scrapes must cover what the queries select: drive the manager through it
// (a queue, a release, an expiry) before scraping.
func Check(queries []Query, exported Exported) []string {
	var problems []string
	for _, q := range queries {
		sels, err := Selectors(q.Expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", q.Where, err))
			continue
		}
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%s: selects no metric", q.Where))
		}
		for _, s := range sels {
			have, ok := exported[s.Metric]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exported by the manager", q.Where, s.Metric))
				continue
			}
			for _, m := range s.Matchers {
				if slices.Contains(TargetLabels, m.Label) {
					continue
				}
				values, ok := have[m.Label]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: metric %s has no label %q", q.Where, s.Metric, m.Label))
					continue
				}
				if p := unseen(m, values); p != "" {
					problems = append(problems, fmt.Sprintf("%s: metric %s: %s", q.Where, s.Metric, p))
				}
			}
		}
	}
	return problems
}

// unseen says why matcher m matches none of the values seen, or "" when it matches one (or can
// match an absent label, like =~".*").
func unseen(m Matcher, values map[string]bool) string {
	switch m.Op {
	case "=":
		if !values[m.Value] {
			return fmt.Sprintf("%s=%q was never seen (seen: %s)", m.Label, m.Value, strings.Join(slices.Sorted(maps.Keys(values)), ", "))
		}
	case "=~":
		re, err := regexp.Compile("^(?:" + m.Value + ")$")
		if err != nil {
			return err.Error()
		}
		if re.MatchString("") {
			return ""
		}
		for v := range values {
			if re.MatchString(v) {
				return ""
			}
		}
		return fmt.Sprintf("%s=~%q matches none of %s", m.Label, m.Value, strings.Join(slices.Sorted(maps.Keys(values)), ", "))
	}
	return ""
}

// Metrics lists the metric names the queries select, sorted, for a report.
func Metrics(queries []Query) []string {
	seen := map[string]bool{}
	for _, q := range queries {
		sels, _ := Selectors(q.Expr)
		for _, s := range sels {
			seen[s.Metric] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
