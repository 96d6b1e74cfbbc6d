// Package chart checks the Helm chart (charts/turnstile) with helm itself, built from the Go
// module proxy by `make helm helm-unittest`: helm lint --strict, the helm-unittest suites, and
// that what it renders installs the same CRDs and RBAC as the kustomize build, ships the alerts
// and dashboard of config/, and passes the manager the defaults the manager has.
//
// Run it with `make test`, or alone with:
//
//	make build helm helm-unittest k8s-bins && go test -count=1 -v ./test/chart/
//
// (the Makefile exports TURNSTILE_HELM, HELM_PLUGINS and TURNSTILE_KUBECTL; outside make, set
// them or rely on the defaults under bin/).
package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

var root = func() string {
	r, err := framework.RepoRoot()
	if err != nil {
		panic(err)
	}
	return r
}()

var chartDir = filepath.Join(root, "charts", "turnstile")

// tool is a binary from the environment (set by the Makefile) or its default under bin/.
func tool(t *testing.T, env, def string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(root, def)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found (%v): run through `make test`, which builds it (or set %s)", p, err, env)
	}
	return p
}

func helm(t *testing.T) string { return tool(t, "TURNSTILE_HELM", "bin/helm-v3.22.0") }

func kubectl(t *testing.T) string {
	return tool(t, "TURNSTILE_KUBECTL", "bin/k8s/1.37.2-linux-amd64/kubectl")
}

// run runs a command and returns its stdout; stderr goes into the failure.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	if os.Getenv("HELM_PLUGINS") == "" {
		cmd.Env = append(os.Environ(), "HELM_PLUGINS="+filepath.Join(root, "bin", "helm-plugins"))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// object is one rendered manifest.
type object = framework.Manifest

func parseManifests(t *testing.T, out string) []object {
	t.Helper()
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("parse rendered manifest: %v\n%s", err, doc)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

// render is `helm template RELEASE charts/turnstile -n NAMESPACE ARGS...`.
func render(t *testing.T, release, namespace string, args ...string) []object {
	t.Helper()
	return parseManifests(t, run(t, helm(t), append([]string{"template", release, chartDir, "-n", namespace}, args...)...))
}

// kustomizeBuild is `kubectl kustomize config/default`.
func kustomizeBuild(t *testing.T) []object {
	t.Helper()
	return kustomizeBuildOf(t, filepath.Join("config", "default"))
}

// kustomizeBuildOf is `kubectl kustomize` of dir, relative to the repository root.
func kustomizeBuildOf(t *testing.T, dir string) []object {
	t.Helper()
	return parseManifests(t, run(t, kubectl(t), "kustomize", filepath.Join(root, dir)))
}

func TestHelmLint(t *testing.T) {
	for name, args := range map[string][]string{
		"default values": nil,
		"all on":         {"-f", filepath.Join(root, "test", "chart", "testdata", "all-on.yaml")},
	} {
		t.Run(name, func(t *testing.T) {
			out := run(t, helm(t), append([]string{"lint", "--strict", chartDir}, args...)...)
			t.Logf("helm lint --strict (%s):\n%s", name, out)
			if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("helm lint did not pass:\n%s", out)
			}
		})
	}
}

var unittestTotals = regexp.MustCompile(`Tests:\s+(?:(\d+) failed, )?(\d+) passed, (\d+) total`)

func TestHelmUnittest(t *testing.T) {
	helm(t)
	out := run(t, helm(t), "unittest", "--strict", "--color=false", chartDir)
	t.Logf("helm unittest --strict:\n%s", out)
	m := unittestTotals.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no test count in helm unittest's output")
	}
	passed, _ := strconv.Atoi(m[2])
	total, _ := strconv.Atoi(m[3])
	if passed != total || total == 0 {
		t.Errorf("helm-unittest: %d of %d passed", passed, total)
	}
	t.Logf("helm-unittest: %d tests passed", passed)
}

// rbacKinds are compared between the chart and kustomize.
var rbacKinds = map[string]bool{"ClusterRole": true, "Role": true, "ClusterRoleBinding": true, "RoleBinding": true}

// rbacView is what makes an RBAC object grant what it grants: its kind, name and namespace,
// rules, aggregation, role reference, subjects and the labels that aggregate it into the
// built-in roles. rename maps kustomize's names to the release's.
func rbacView(o object, rename func(string) string) map[string]any {
	v := map[string]any{"kind": o.Kind(), "name": rename(o.Meta("name")), "namespace": o.Meta("namespace")}
	for _, f := range []string{"rules", "aggregationRule", "subjects"} {
		if o[f] != nil {
			v[f] = o[f]
		}
	}
	if ref, ok := o["roleRef"].(map[string]any); ok {
		r := maps.Clone(ref)
		r["name"] = rename(r["name"].(string))
		v["roleRef"] = r
	}
	if subjects, ok := o["subjects"].([]any); ok {
		var renamed []any
		for _, s := range subjects {
			sm := map[string]any{}
			for k, val := range s.(map[string]any) {
				sm[k] = val
			}
			if sm["kind"] != "Group" { // built-in groups (system:authenticated) keep their name
				sm["name"] = rename(sm["name"].(string))
			}
			renamed = append(renamed, sm)
		}
		v["subjects"] = renamed
	}
	labels := map[string]any{}
	if m, ok := o["metadata"].(map[string]any); ok {
		if ls, ok := m["labels"].(map[string]any); ok {
			for k, val := range ls {
				if strings.HasPrefix(k, "rbac.authorization.k8s.io/") {
					labels[k] = val
				}
			}
		}
	}
	v["aggregationLabels"] = labels
	return v
}

func rbacObjects(objs []object, namespace string, rename func(string) string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		if !rbacKinds[o.Kind()] {
			continue
		}
		v := rbacView(o, rename)
		if v["namespace"] != "" {
			v["namespace"] = namespace
		}
		if subjects, ok := v["subjects"].([]any); ok {
			for _, s := range subjects {
				if sm := s.(map[string]any); sm["namespace"] != nil {
					sm["namespace"] = namespace
				}
			}
		}
		out[fmt.Sprintf("%s %s", v["kind"], v["name"])] = v
	}
	return out
}

// releases are the installs under which the chart must match kustomize: the names kustomize
// gives, and another release in another namespace, whose names rename derives from kustomize's.
var releases = map[string]struct {
	release, namespace string
	rename             func(string) string
}{
	// `helm install turnstile -n turnstile-system`: the names of config/default.
	"release turnstile": {"turnstile", "turnstile-system", sameName},
	"another release and namespace": {"locks", "platform", func(s string) string {
		return "locks-" + s // "turnstile-manager" -> "locks-turnstile-manager"
	}},
}

// sameName renames nothing: the chart's objects already have the names it renders.
func sameName(s string) string { return s }

// TestRBACMatchesKustomize: the chart grants exactly what config/rbac grants, object for
// object, under the release's names and in its namespace.
func TestRBACMatchesKustomize(t *testing.T) {
	kustomize := kustomizeBuild(t)
	for name, tc := range releases {
		t.Run(name, func(t *testing.T) {
			want := rbacObjects(kustomize, tc.namespace, tc.rename)
			got := rbacObjects(render(t, tc.release, tc.namespace), tc.namespace, sameName)
			if len(want) < 8 {
				t.Fatalf("kustomize build has %d RBAC objects", len(want))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the chart's RBAC differs from config/rbac (-kustomize +chart):\n%s", diff)
			}
		})
	}
}

// TestCRDsMatchKustomize: the chart installs config/crd's CRDs, spec for spec, kept on
// uninstall unless crds.keep is false, and none when crds.enabled is false.
func TestCRDsMatchKustomize(t *testing.T) {
	specs := func(objs []object) map[string]any {
		out := map[string]any{}
		for _, o := range objs {
			if o.Kind() == "CustomResourceDefinition" {
				out[o.Meta("name")] = o["spec"]
			}
		}
		return out
	}
	want := specs(kustomizeBuild(t))
	if len(want) != 4 { // ProjectLock, CommandLock, LockRequest, Spoke
		t.Fatalf("kustomize build has %d CRDs, want 4", len(want))
	}
	chart := render(t, "turnstile", "turnstile-system")
	if diff := cmp.Diff(want, specs(chart)); diff != "" {
		t.Errorf("the chart's CRDs differ from config/crd (-kustomize +chart):\n%s", diff)
	}
	for _, o := range chart {
		if o.Kind() == "CustomResourceDefinition" {
			ann, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any)
			if ann["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s: not kept on uninstall by default", o.Meta("name"))
			}
		}
	}
	if got := specs(render(t, "turnstile", "turnstile-system", "--set", "crds.enabled=false")); len(got) != 0 {
		t.Errorf("crds.enabled=false still renders %d CRDs", len(got))
	}
}

// admissionKinds are the admission policies, bindings and params of config/admission and
// config/labels.
var admissionKinds = map[string]bool{
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
}

// admissionObjects are the policies and bindings (by kind and name, spec with the policy name
// and params reference renamed) and the params ConfigMap (by name, in its namespace).
func admissionObjects(objs []object, rename func(string) string) map[string]any {
	out := map[string]any{}
	for _, o := range objs {
		switch {
		case admissionKinds[o.Kind()]:
			spec := maps.Clone(o["spec"].(map[string]any))
			if p, ok := spec["policyName"].(string); ok {
				spec["policyName"] = rename(p)
			}
			// A paramRef names the params ConfigMap, or selects params by labels (the write
			// freezes: every CommandLock), which nothing renames.
			if ref, ok := spec["paramRef"].(map[string]any); ok {
				r := maps.Clone(ref)
				if name, ok := r["name"].(string); ok {
					r["name"] = rename(name)
				}
				spec["paramRef"] = r
			}
			key := o.Kind() + " " + rename(o.Meta("name"))
			if strings.HasPrefix(o.Kind(), "Mutating") {
				key += " " + o["apiVersion"].(string)
			}
			out[key] = spec
		case o.Kind() == "ConfigMap" && strings.HasSuffix(o.Meta("name"), "turnstile-admission"):
			out["ConfigMap "+o.Meta("namespace")+"/"+rename(o.Meta("name"))] = o["data"]
		}
	}
	return out
}

// blankLines are line breaks with only whitespace between them.
var blankLines = regexp.MustCompile(`\n(?:[ \t]*\n)+`)

// sameCEL writes every string of v with runs of line breaks as one. kustomize writes a folded
// (>-) expression with an empty line before each more-indented line, where YAML (and so helm)
// reads one line break; in CEL both are whitespace between tokens.
func sameCEL(v any) any {
	switch x := v.(type) {
	case string:
		return blankLines.ReplaceAllString(x, "\n")
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = sameCEL(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sameCEL(e)
		}
		return out
	}
	return v
}

// admissionModes are the chart's admission installs by what the cluster serves (the
// --api-versions helm install learns from discovery) and the kustomize bundle a user of such a
// cluster applies: the same objects, spec for spec.
var admissionModes = map[string]struct {
	bundle  string
	helm    []string
	objects int
}{
	"MutatingAdmissionPolicy v1 (1.36 and later)": {"config/default",
		[]string{"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}, 41}, // 20 policies, 20 bindings (the compatibility floor's among them), 1 ConfigMap
	"MutatingAdmissionPolicy v1beta1 (1.34, 1.35 with it enabled)": {"config/overlays/mutating-v1beta1",
		[]string{"--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, 41},
	"no MutatingAdmissionPolicy (validating only)": {"config/overlays/validating-only", nil, 33}, // the 4 mutating ones and their bindings left out
}

// TestAdmissionMatchesKustomize: with admissionPolicies.enabled (the default) the chart
// installs config/admission's and config/labels' policies, bindings and params, spec for spec,
// under the release's names, the params in the release namespace, the mutating ones as the
// version the cluster serves or none, as the bundle for that cluster does; with it false, none
// but the compatibility floor (config/compatibility), which guards the install itself.
func TestAdmissionMatchesKustomize(t *testing.T) {
	for mode, m := range admissionModes {
		t.Run(mode, func(t *testing.T) { testAdmissionMatches(t, kustomizeBuildOf(t, m.bundle), m.helm, m.objects) })
	}
	got := admissionObjects(render(t, "turnstile", "turnstile-system", "--set", "admissionPolicies.enabled=false"), sameName)
	if diff := cmp.Diff([]string{"ValidatingAdmissionPolicy turnstile-compatibility-floor", "ValidatingAdmissionPolicyBinding turnstile-compatibility-floor"}, slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("admissionPolicies.enabled=false renders these admission objects, want the compatibility floor only (-want +got):\n%s", diff)
	}
	params := render(t, "turnstile", "turnstile-system", "--set", "admissionPolicies.maxPriority=Critical")
	if got := admissionObjects(params, sameName)["ConfigMap turnstile-system/turnstile-admission"]; !cmp.Equal(got, map[string]any{"maxPriority": "Critical"}) {
		t.Errorf("admissionPolicies.maxPriority=Critical: params data %v", got)
	}
}

func testAdmissionMatches(t *testing.T, kustomize []object, helmArgs []string, objects int) {
	for name, tc := range releases {
		t.Run(name, func(t *testing.T) {
			want := admissionObjects(kustomize, tc.rename)
			// kustomize's params live in turnstile-system; the chart's in the release namespace,
			// and the binding's paramRef follows.
			for k, v := range want {
				if strings.HasPrefix(k, "ConfigMap turnstile-system/") {
					delete(want, k)
					want["ConfigMap "+tc.namespace+"/"+strings.TrimPrefix(k, "ConfigMap turnstile-system/")] = v
				}
				if spec, ok := v.(map[string]any); ok {
					// The params ConfigMap's; CommandLocks are cluster-scoped.
					if ref, ok := spec["paramRef"].(map[string]any); ok && ref["name"] != nil {
						ref["namespace"] = tc.namespace
					}
				}
			}
			if len(want) != objects {
				t.Fatalf("kustomize build has %d admission objects, want %d", len(want), objects)
			}
			got := admissionObjects(render(t, tc.release, tc.namespace, helmArgs...), sameName)
			if diff := cmp.Diff(sameCEL(want), sameCEL(got)); diff != "" {
				t.Errorf("the chart's admission policies differ from the kustomize bundle (-kustomize +chart):\n%s", diff)
			}
		})
	}
}

func find(t *testing.T, objs []object, kind string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind() == kind {
			return o
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

// TestAlertsAndDashboardMatchConfig: the PrometheusRule carries config/prometheus's groups and
// the dashboard ConfigMap config/grafana's dashboard, unchanged (Prometheus' own {{ $labels }}
// templates included).
func TestAlertsAndDashboardMatchConfig(t *testing.T) {
	objs := render(t, "turnstile", "turnstile-system", "-f", filepath.Join(root, "test", "chart", "testdata", "all-on.yaml"))

	data, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "turnstile.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	rule := find(t, objs, "PrometheusRule")
	if diff := cmp.Diff(rules["groups"], rule["spec"].(map[string]any)["groups"]); diff != "" {
		t.Errorf("PrometheusRule groups differ from config/prometheus/turnstile.rules.yaml (-file +chart):\n%s", diff)
	}

	data, err = os.ReadFile(filepath.Join(root, "config", "grafana", "turnstile-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	var cm object
	for _, o := range objs {
		if o.Kind() == "ConfigMap" && o.Meta("name") == "turnstile-dashboard" {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no dashboard ConfigMap (turnstile-dashboard) rendered")
	}
	if err := json.Unmarshal([]byte(cm["data"].(map[string]any)["turnstile.json"].(string)), &got); err != nil {
		t.Fatalf("dashboard ConfigMap: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dashboard differs from config/grafana/turnstile-dashboard.json (-file +chart):\n%s", diff)
	}
}

// deployedFlags are set on purpose to other values than the manager's defaults: how it runs
// in a cluster.
var deployedFlags = map[string]bool{
	"active-active":             true,
	"health-probe-bind-address": true,
	"metrics-bind-address":      true,
	"metrics-secure":            true,
}

var (
	flagLine    = regexp.MustCompile(`^  -(\S+)(?: (\S+))?$`)
	defaultText = regexp.MustCompile(`\(default (.*)\)$`)
)

// managerDefaults reads `manager --help`: each flag and its default as the flag package
// prints it ("" when it prints none: false, 0 or empty).
func managerDefaults(t *testing.T) map[string]string {
	t.Helper()
	bin := tool(t, "TURNSTILE_MANAGER", "bin/manager")
	out, _ := exec.Command(bin, "--help").CombinedOutput() // exits 2 after printing the usage
	defaults := map[string]string{}
	current := ""
	for _, line := range strings.Split(string(out), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			defaults[current] = ""
			continue
		}
		if current != "" {
			if m := defaultText.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				defaults[current] = m[1]
			}
		}
	}
	if len(defaults) < 20 {
		t.Fatalf("read %d flags from manager --help:\n%s", len(defaults), out)
	}
	return defaults
}

// sameValue compares a chart value with a flag default by meaning: 30m and 30m0s are the same.
func sameValue(chart, def string) bool {
	if u, err := strconv.Unquote(def); err == nil {
		def = u
	}
	if def == "" {
		return chart == "" || chart == "false" || chart == "0" || chart == "0s"
	}
	if a, err := time.ParseDuration(chart); err == nil {
		b, err := time.ParseDuration(def)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(chart, 64); err == nil {
		b, err := strconv.ParseFloat(def, 64)
		return err == nil && a == b
	}
	return chart == def
}

// TestDefaultsMatchManagerFlags: every flag the chart passes exists, and with default values
// carries the manager's own default, except the deployment's deliberate choices. A default
// changed in cmd/manager and not in values.yaml fails here.
func TestDefaultsMatchManagerFlags(t *testing.T) {
	defaults := managerDefaults(t)
	dep := find(t, render(t, "turnstile", "turnstile-system"), "Deployment")
	containers := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	args := containers[0].(map[string]any)["args"].([]any)
	var names []string
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a.(string), "--"), "=")
		if !ok {
			t.Errorf("arg %q is not --name=value", a)
			continue
		}
		names = append(names, name)
		def, known := defaults[name]
		switch {
		case !known:
			t.Errorf("--%s: the manager has no such flag", name)
		case deployedFlags[name]:
		case name == "zap-log-level":
			if value != "info" {
				t.Errorf("--zap-log-level=%s by default, want info", value)
			}
		case !sameValue(value, def):
			t.Errorf("--%s=%s in values.yaml, but the manager's default is %s", name, value, def)
		}
	}
	sort.Strings(names)
	t.Logf("flags checked: %s", strings.Join(names, ", "))
}

var envInHelp = regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`)

// TestRenderedInputsMatchManager diffs what the Deployment renders against what the binary
// takes, for default values and with every option on: each flag the chart passes is a flag of
// `manager --help`, and each environment variable the manager reads (its --help names them as
// $NAME) is rendered in the container's env, and nothing else is. A manager that needs an input
// the chart does not give fails here, not in a cluster.
func TestRenderedInputsMatchManager(t *testing.T) {
	bin := tool(t, "TURNSTILE_MANAGER", "bin/manager")
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	defaults := managerDefaults(t)
	wantEnv := map[string]bool{}
	for _, m := range envInHelp.FindAllStringSubmatch(string(help), -1) {
		wantEnv[m[1]] = true
	}
	if len(wantEnv) == 0 {
		t.Fatalf("manager --help names no environment variable:\n%s", help)
	}
	// The Go runtime's own variables, which --help names as overrides a user may set: the chart
	// leaves them unset (it passes MEMORY_LIMIT, of which the manager takes its runtime limit).
	for _, name := range []string{"GOMEMLIMIT"} {
		if !wantEnv[name] {
			t.Errorf("manager --help no longer names $%s: drop it here", name)
		}
		delete(wantEnv, name)
	}
	for name, args := range map[string][]string{
		"default values": nil,
		"all on":         {"-f", filepath.Join(root, "test", "chart", "testdata", "all-on.yaml")},
		// A fleet's spoke: the hub flags are the manager's too.
		"fleet spoke": {"--set", "fleet.role=spoke", "--set", "fleet.clusterName=eu-west-1", "--set", "fleet.spoke.hubKubeconfigSecret=hub",
			"--set", "activeActive.enabled=false", "--set", "leaderElection.enabled=true"},
	} {
		t.Run(name, func(t *testing.T) {
			dep := find(t, render(t, "turnstile", "turnstile-system", args...), "Deployment")
			container := dep.Path("spec", "template", "spec", "containers").([]any)[0].(map[string]any)
			for _, a := range container["args"].([]any) {
				flagName, _, _ := strings.Cut(strings.TrimPrefix(a.(string), "--"), "=")
				if _, ok := defaults[flagName]; !ok {
					t.Errorf("the chart passes %s: the manager has no flag --%s", a, flagName)
				}
			}
			gotEnv := map[string]bool{}
			entries, _ := container["env"].([]any)
			for _, e := range entries {
				gotEnv[e.(map[string]any)["name"].(string)] = true
			}
			if diff := cmp.Diff(wantEnv, gotEnv); diff != "" {
				t.Errorf("the container's env differs from the variables the manager reads (-manager +chart):\n%s", diff)
			}
		})
	}
}
