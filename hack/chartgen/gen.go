package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	chartDir = "charts/turnstile"

	// namePrefix starts the name of every object in config/: the chart puts the release's full
	// name in its place, so `helm install turnstile` gives the same names as kustomize.
	namePrefix = "turnstile-"
	// managerServiceAccount is the manager's ServiceAccount in config/rbac; the chart names its own.
	managerServiceAccount = "turnstile-controller-manager"

	fullname           = `{{ include "turnstile.fullname" . }}`
	serviceAccountName = `{{ include "turnstile.serviceAccountName" . }}`
	releaseNamespace   = `{{ .Release.Namespace }}`
	chartLabels        = `{{- include "turnstile.labels" . | nindent 4 }}`
)

// generatedDirs hold only generated files: a file there that Generate does not return is stale.
var generatedDirs = []string{
	chartDir + "/templates/crd",
	chartDir + "/templates/rbac",
	chartDir + "/templates/admission",
	chartDir + "/templates/compatibility",
	chartDir + "/templates/fleet",
	chartDir + "/files",
}

// admissionDirs hold the admission policies, their bindings and their params ConfigMap: the
// chart installs them behind admissionPolicies.enabled.
var admissionDirs = []string{"config/admission", "config/labels"}

// copies are files the chart reads with .Files.Get, copied byte for byte.
var copies = map[string]string{
	"config/prometheus/turnstile.rules.yaml": chartDir + "/files/turnstile.rules.yaml",
}

// links are files whose one copy lives in the chart (helm reads nothing outside it), linked
// from where config/ has them: a symbolic link's path and its target, relative to the link.
var links = map[string]string{
	"config/grafana/turnstile-dashboard.json": "../../" + chartDir + "/files/turnstile-dashboard.json",
}

// isLinkTarget: a chart file that links point to is a source, not generated.
func isLinkTarget(p string) bool {
	for link, target := range links {
		if filepath.ToSlash(filepath.Join(filepath.Dir(link), target)) == p {
			return true
		}
	}
	return false
}

// labelsFromChart are replaced by the chart's own labels (turnstile.labels).
var labelsFromChart = map[string]bool{
	"app.kubernetes.io/name":       true,
	"app.kubernetes.io/managed-by": true,
	"app.kubernetes.io/part-of":    true,
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*\n`)

// templated are the config/ directories whose kustomize resources become chart templates, each
// with its template function and the chart path a source's template goes to.
var templated = []struct {
	dirs     []string
	template func(src string, data []byte) ([]byte, error)
	dst      func(src string) string
}{
	{[]string{"config/crd"}, crdTemplate, func(src string) string { return chartDir + "/templates/crd/" + crdFileName(src) }},
	{[]string{"config/rbac"}, rbacTemplate, func(src string) string { return chartDir + "/templates/rbac/" + dashed(src) }},
	{admissionDirs, admissionTemplate, func(src string) string { return chartDir + "/templates/admission/" + dashed(src) }},
	{[]string{"config/fleet"}, fleetTemplate, func(src string) string { return chartDir + "/templates/fleet/" + dashed(src) }},
	{[]string{"config/compatibility"}, compatibilityTemplate, func(src string) string { return chartDir + "/templates/compatibility/" + dashed(src) }},
}

// dashed is a source's file name with dashes for underscores, as the chart names its templates.
func dashed(src string) string { return strings.ReplaceAll(filepath.Base(src), "_", "-") }

// Generate returns every generated file of the chart, by path relative to root.
func Generate(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, t := range templated {
		err := eachResource(root, t.dirs, func(src string, data []byte) error {
			tpl, err := t.template(src, data)
			if err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
			if tpl == nil {
				return nil // the manager's ServiceAccount, which the chart templates itself
			}
			dst := t.dst(src)
			if _, dup := out[dst]; dup {
				return fmt.Errorf("%s: two sources in %v are named %s", src, t.dirs, filepath.Base(src))
			}
			out[dst] = tpl
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for src, dst := range copies {
		data, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return nil, err
		}
		out[dst] = data
	}
	return out, nil
}

// generatedOnDisk lists the files now in the generated directories, relative to root.
func generatedOnDisk(root string) ([]string, error) {
	var paths []string
	for _, dir := range generatedDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			if isLinkTarget(filepath.ToSlash(rel)) {
				return nil
			}
			paths = append(paths, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(paths)
	return paths, nil
}

// eachResource calls fn with the path (relative to root) and the contents of each resource of
// the kustomizations in dirs, in order.
func eachResource(root string, dirs []string, fn func(src string, data []byte) error) error {
	for _, dir := range dirs {
		srcs, err := kustomizeResources(root, dir)
		if err != nil {
			return err
		}
		for _, src := range srcs {
			data, err := os.ReadFile(filepath.Join(root, src))
			if err != nil {
				return err
			}
			if err := fn(src, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// kustomizeResources reads the resources of dir/kustomization.yaml: what `kubectl apply -k`
// installs from there, as paths relative to root.
func kustomizeResources(root, dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	paths := make([]string, 0, len(k.Resources))
	for _, r := range k.Resources {
		if !strings.HasSuffix(r, ".yaml") {
			return nil, fmt.Errorf("%s/kustomization.yaml: resource %q is not a file; chartgen reads files only", dir, r)
		}
		paths = append(paths, filepath.ToSlash(filepath.Join(dir, r)))
	}
	return paths, nil
}

// crdFileName names a CRD's template after its plural, e.g. lockrequests.yaml for
// config/crd/bases/locks.turnstile.dev_lockrequests.yaml.
func crdFileName(src string) string {
	base := filepath.Base(src)
	if _, after, ok := strings.Cut(base, "_"); ok {
		return after
	}
	return base
}

// documents splits a YAML stream into its non-empty documents.
func documents(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// leadingComments are the comment lines a document starts with: they explain the object and
// stay with it in the chart.
func leadingComments(doc []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// escape keeps Helm from reading "{{" in copied text as the start of an action.
func escape(s string) string { return strings.ReplaceAll(s, "{{", `{{ "{{" }}`) }

func header(src string) string {
	return fmt.Sprintf("{{- /* Code generated by hack/chartgen from %s. DO NOT EDIT. */}}\n", src)
}

// crdTemplate wraps a controller-gen CRD: its spec verbatim, its metadata rebuilt with the
// chart's labels and, when crds.keep, the annotation that keeps Helm from deleting it (and with
// it every lock) on uninstall.
func crdTemplate(src string, data []byte) ([]byte, error) {
	docs := documents(data)
	if len(docs) != 1 {
		return nil, fmt.Errorf("want one CustomResourceDefinition, found %d documents", len(docs))
	}
	var crd struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
			Labels      map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(docs[0], &crd); err != nil {
		return nil, err
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Metadata.Name == "" {
		return nil, fmt.Errorf("not a named CustomResourceDefinition (kind %q)", crd.Kind)
	}
	// The spec, byte for byte: everything from the top-level "spec:" line on.
	i := bytes.Index(docs[0], []byte("\nspec:\n"))
	if i < 0 {
		return nil, fmt.Errorf("no top-level spec")
	}
	spec := string(docs[0][i+1:])
	if j := strings.Index(spec, "\n---"); j >= 0 {
		spec = spec[:j+1]
	}
	for _, line := range strings.Split(strings.TrimRight(spec, "\n"), "\n")[1:] {
		if line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#") {
			return nil, fmt.Errorf("top-level field after spec (%q): chartgen copies spec only", line)
		}
	}

	var b strings.Builder
	b.WriteString(header(src))
	b.WriteString("{{- if .Values.crds.enabled }}\n")
	fmt.Fprintf(&b, "apiVersion: %s\nkind: CustomResourceDefinition\nmetadata:\n  name: %s\n", crd.APIVersion, crd.Metadata.Name)
	b.WriteString("  annotations:\n")
	for _, k := range slices.Sorted(maps.Keys(crd.Metadata.Annotations)) {
		fmt.Fprintf(&b, "    %s: %s\n", k, quote(crd.Metadata.Annotations[k]))
	}
	b.WriteString("    {{- if .Values.crds.keep }}\n    helm.sh/resource-policy: keep\n    {{- end }}\n")
	b.WriteString("  labels:\n    " + chartLabels + "\n")
	for _, k := range slices.Sorted(maps.Keys(crd.Metadata.Labels)) {
		if !labelsFromChart[k] {
			fmt.Fprintf(&b, "    %s: %s\n", k, quote(crd.Metadata.Labels[k]))
		}
	}
	b.WriteString(escape(spec))
	b.WriteString("{{- end }}\n")
	return []byte(b.String()), nil
}

// rbacObject is the part of an RBAC object (or ServiceAccount) that chartgen reads.
type rbacObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Rules           []any `json:"rules,omitempty"`
	AggregationRule any   `json:"aggregationRule,omitempty"`
	RoleRef         *struct {
		APIGroup string `json:"apiGroup"`
		Kind     string `json:"kind"`
		Name     string `json:"name"`
	} `json:"roleRef,omitempty"`
	Subjects []struct {
		APIGroup  string `json:"apiGroup"`
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"subjects,omitempty"`
}

var rbacKinds = []string{"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"}

// rbacTemplate turns the RBAC objects of one config/rbac file into a template: names from the
// release, namespaced objects in the release namespace, the manager's ServiceAccount as the
// chart names it; rules, role references and aggregation labels exactly as in config/rbac. It
// returns nil for the ServiceAccount, which the chart templates itself (serviceAccount.*).
func rbacTemplate(src string, data []byte) ([]byte, error) {
	var b strings.Builder
	b.WriteString(header(src))
	n := 0
	for _, doc := range documents(data) {
		var o rbacObject
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, err
		}
		if o.Kind == "ServiceAccount" && o.Metadata.Name == managerServiceAccount {
			continue
		}
		if !slices.Contains(rbacKinds, o.Kind) {
			return nil, fmt.Errorf("%s %s: chartgen templates only %v (and the manager's ServiceAccount)", o.Kind, o.Metadata.Name, rbacKinds)
		}
		if len(o.Metadata.Annotations) > 0 {
			return nil, fmt.Errorf("%s %s: annotations are not carried into the chart", o.Kind, o.Metadata.Name)
		}
		name, err := ChartName(o.Metadata.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.Kind, err)
		}
		if n > 0 {
			b.WriteString("---\n")
		}
		n++
		b.WriteString(leadingComments(doc))
		fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n", o.APIVersion, o.Kind, name)
		if o.Metadata.Namespace != "" {
			b.WriteString("  namespace: " + releaseNamespace + "\n")
		}
		b.WriteString("  labels:\n    " + chartLabels + "\n")
		for _, k := range slices.Sorted(maps.Keys(o.Metadata.Labels)) {
			if !labelsFromChart[k] {
				fmt.Fprintf(&b, "    %s: %s\n", k, quote(o.Metadata.Labels[k]))
			}
		}
		if o.AggregationRule != nil {
			if err := writeYAML(&b, map[string]any{"aggregationRule": o.AggregationRule}); err != nil {
				return nil, err
			}
		}
		if o.Rules != nil {
			if err := writeYAML(&b, map[string]any{"rules": o.Rules}); err != nil {
				return nil, err
			}
		}
		if o.RoleRef != nil {
			ref, err := ChartName(o.RoleRef.Name)
			if err != nil {
				return nil, fmt.Errorf("%s %s roleRef: %w", o.Kind, o.Metadata.Name, err)
			}
			fmt.Fprintf(&b, "roleRef:\n  apiGroup: %s\n  kind: %s\n  name: %s\n", o.RoleRef.APIGroup, o.RoleRef.Kind, ref)
		}
		if len(o.Subjects) > 0 {
			b.WriteString("subjects:\n")
			for _, s := range o.Subjects {
				switch {
				case s.Kind == "ServiceAccount" && s.Name == managerServiceAccount:
					b.WriteString("- kind: ServiceAccount\n  name: " + serviceAccountName + "\n  namespace: " + releaseNamespace + "\n")
				case s.Kind == "Group" && strings.HasPrefix(s.Name, "system:"):
					// A built-in group (system:authenticated): the same in every release.
					fmt.Fprintf(&b, "- apiGroup: %s\n  kind: Group\n  name: %s\n", s.APIGroup, s.Name)
				default:
					return nil, fmt.Errorf("%s %s: subject %s %s: chartgen binds only the manager's ServiceAccount %s and built-in system: groups", o.Kind, o.Metadata.Name, s.Kind, s.Name, managerServiceAccount)
				}
			}
		}
	}
	if n == 0 {
		return nil, nil
	}
	return []byte(b.String()), nil
}

// ChartName is the chart's name for an object named name in config/: the release's full name
// in place of the "turnstile-" prefix, and the chart's ServiceAccount for the manager's.
func ChartName(name string) (string, error) {
	if name == managerServiceAccount {
		return serviceAccountName, nil
	}
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok || rest == "" {
		return "", fmt.Errorf("name %q does not start with %q: the chart cannot derive it from the release", name, namePrefix)
	}
	return fullname + "-" + rest, nil
}

func writeYAML(b *strings.Builder, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	b.WriteString(escape(string(data)))
	return nil
}

// quote writes a label or annotation value as a YAML string.
func quote(s string) string { return fmt.Sprintf("%q", s) }

var admissionKinds = []string{
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
	"ConfigMap",
}

// Placeholders stand for the release's names while a spec is written as YAML; they are
// replaced after escape, so the template actions they become are not escaped.
const (
	fullnamePlaceholder       = "__chartgen_fullname__"
	namespacePlaceholder      = "__chartgen_namespace__"
	serviceAccountPlaceholder = "__chartgen_serviceaccount__"
)

// valuesKey is a ConfigMap data key that is also a values key (admissionPolicies.<key>).
var valuesKey = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)

// admissionTemplate turns the admission policies, bindings and params ConfigMap of one file
// of config/admission or config/labels into a template behind admissionPolicies.enabled: names
// from the release, the ConfigMap in the release namespace with its data from
// admissionPolicies.<key>, the bindings' policyName and paramRef pointing at the release's
// objects; the policies' rules, variables, validations and mutations verbatim.
func admissionTemplate(src string, data []byte) ([]byte, error) {
	return policiesTemplate(src, data, true)
}

// compatibilityTemplate turns config/compatibility's policy into a template as admissionTemplate
// does, but installed whatever admissionPolicies.enabled says: the floor protects the install
// itself from a downgrade, not the locks from their users.
func compatibilityTemplate(src string, data []byte) ([]byte, error) {
	return policiesTemplate(src, data, false)
}

func policiesTemplate(src string, data []byte, gated bool) ([]byte, error) {
	var b strings.Builder
	b.WriteString(header(src))
	if gated {
		b.WriteString("{{- if .Values.admissionPolicies.enabled }}\n")
	}
	n := 0
	for _, doc := range documents(data) {
		if err := admissionObject(&b, doc, n == 0); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("no objects")
	}
	if gated {
		b.WriteString("{{- end }}\n")
	}
	return []byte(b.String()), nil
}

// admissionObject writes one object of an admission source into the template (after a "---"
// unless it is the first).
func admissionObject(b *strings.Builder, doc []byte, first bool) error {
	if strings.Contains(string(doc), fullnamePlaceholder) || strings.Contains(string(doc), namespacePlaceholder) || strings.Contains(string(doc), serviceAccountPlaceholder) {
		return fmt.Errorf("the source contains a chartgen placeholder")
	}
	var o map[string]any
	if err := yaml.Unmarshal(doc, &o); err != nil {
		return err
	}
	kind, _ := o["kind"].(string)
	if !slices.Contains(admissionKinds, kind) {
		return fmt.Errorf("%s: chartgen templates only %v here", kind, admissionKinds)
	}
	md, _ := o["metadata"].(map[string]any)
	objName, _ := md["name"].(string)
	for k := range md {
		if k != "name" && k != "namespace" && k != "labels" && k != "annotations" {
			return fmt.Errorf("%s %s: metadata.%s is not carried into the chart", kind, objName, k)
		}
	}
	for k := range stringMap(asMap(md["annotations"])) {
		if !annotationsCarried[k] {
			return fmt.Errorf("%s %s: annotation %s is not carried into the chart", kind, objName, k)
		}
	}
	name, err := ChartName(objName)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	if !first {
		b.WriteString("---\n")
	}
	apiVersion, _ := o["apiVersion"].(string)
	mutating := strings.HasPrefix(kind, "Mutating")
	if mutating {
		// Installed only where the cluster serves MutatingAdmissionPolicy, as the version it
		// serves (turnstile.mutatingAdmissionPolicyVersion); filled.yaml's checks stand in
		// for them elsewhere. Their fields are the same in v1beta1 and v1.
		if apiVersion != mutatingGroup+"/v1" {
			return fmt.Errorf("%s %s: apiVersion %s: the chart carries %s/v1 (and installs it as the version the cluster serves)", kind, objName, apiVersion, mutatingGroup)
		}
		b.WriteString("{{- if include \"turnstile.mutatingAdmissionPolicyVersion\" . }}\n")
		apiVersion = mutatingGroup + `/{{ include "turnstile.mutatingAdmissionPolicyVersion" . }}`
	}
	b.WriteString(leadingComments(doc))
	admissionMetadata(b, apiVersion, kind, name, md)
	if kind == "ConfigMap" {
		if md["namespace"] == nil {
			return fmt.Errorf("ConfigMap %s: no namespace; a params object is read from the namespace its binding names", objName)
		}
		return paramsData(b, objName, o)
	}
	if err := admissionSpec(b, kind, objName, o); err != nil {
		return err
	}
	if mutating {
		b.WriteString("{{- end }}\n")
	}
	return nil
}

// annotationsCarried are the annotations a policy source may carry into the chart: helm's own
// (the compatibility floor is kept when the chart is uninstalled or downgraded).
var annotationsCarried = map[string]bool{"helm.sh/resource-policy": true}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// mutatingGroup is MutatingAdmissionPolicy's API group.
const mutatingGroup = "admissionregistration.k8s.io"

// admissionMetadata writes an object's head: its kind, its chart name, the release's
// namespace if it had one, and the chart's labels with its own.
func admissionMetadata(b *strings.Builder, apiVersion, kind, name string, md map[string]any) {
	fmt.Fprintf(b, "apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n", apiVersion, kind, name)
	if ns, _ := md["namespace"].(string); ns != "" {
		b.WriteString("  namespace: " + releaseNamespace + "\n")
	}
	if as := stringMap(asMap(md["annotations"])); len(as) > 0 {
		b.WriteString("  annotations:\n")
		for _, k := range slices.Sorted(maps.Keys(as)) {
			fmt.Fprintf(b, "    %s: %s\n", k, quote(as[k]))
		}
	}
	b.WriteString("  labels:\n    " + chartLabels + "\n")
	labels, _ := md["labels"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(stringMap(labels))) {
		if !labelsFromChart[k] {
			fmt.Fprintf(b, "    %s: %s\n", k, quote(fmt.Sprint(labels[k])))
		}
	}
}

// admissionSpec writes a policy's or binding's spec, with the release's names put in.
func admissionSpec(b *strings.Builder, kind, objName string, o map[string]any) error {
	spec, ok := o["spec"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: no spec", kind, objName)
	}
	for k := range o {
		if k != "apiVersion" && k != "kind" && k != "metadata" && k != "spec" {
			return fmt.Errorf("%s %s: top-level field %s is not carried into the chart", kind, objName, k)
		}
	}
	if strings.HasSuffix(kind, "Binding") {
		if err := renameBinding(kind, objName, spec); err != nil {
			return err
		}
	}
	text, err := yaml.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	for _, fixed := range []string{namespaceFromConfig, managerServiceAccount} {
		if strings.Contains(string(text), fixed) {
			return fmt.Errorf("%s %s: its spec names %s, which the chart cannot carry: it differs per release", kind, objName, fixed)
		}
	}
	s := escape(string(text))
	s = strings.ReplaceAll(s, fullnamePlaceholder, fullname)
	s = strings.ReplaceAll(s, namespacePlaceholder, releaseNamespace)
	s = strings.ReplaceAll(s, serviceAccountPlaceholder, serviceAccountName)
	b.WriteString(s)
	return nil
}

// namespaceFromConfig is the namespace config/default installs into; in the chart it is the
// release's.
const namespaceFromConfig = "turnstile-system"

// renameBinding points a binding at the release's policy and params object.
func renameBinding(kind, objName string, spec map[string]any) error {
	policy, _ := spec["policyName"].(string)
	name, err := ChartName(policy)
	if err != nil {
		return fmt.Errorf("%s %s policyName: %w", kind, objName, err)
	}
	spec["policyName"] = strings.Replace(name, fullname, fullnamePlaceholder, 1)
	if ref, ok := spec["paramRef"].(map[string]any); ok {
		if _, sel := ref["selector"]; sel {
			// Params by selector (every CommandLock, config/admission/freeze.yaml) name no object
			// of the release: carried verbatim.
			if ref["name"] != nil || ref["namespace"] != nil {
				return fmt.Errorf("%s %s: paramRef has a selector and a name or namespace", kind, objName)
			}
			return nil
		}
		p, _ := ref["name"].(string)
		pn, err := ChartName(p)
		if err != nil {
			return fmt.Errorf("%s %s paramRef: %w", kind, objName, err)
		}
		ref["name"] = strings.Replace(pn, fullname, fullnamePlaceholder, 1)
		if p == managerServiceAccount {
			// A policy whose params are the manager's ServiceAccount (it names the manager).
			ref["name"] = serviceAccountPlaceholder
		}
		if ref["namespace"] != nil {
			ref["namespace"] = namespacePlaceholder
		}
	}
	return nil
}

// paramsData writes a params ConfigMap's data: each key's value from admissionPolicies.<key>,
// so an admin sets it with the release's values (values.yaml has the defaults of config/).
func paramsData(b *strings.Builder, objName string, o map[string]any) error {
	for k := range o {
		if k != "apiVersion" && k != "kind" && k != "metadata" && k != "data" {
			return fmt.Errorf("ConfigMap %s: top-level field %s is not carried into the chart", objName, k)
		}
	}
	data, _ := o["data"].(map[string]any)
	if len(data) == 0 {
		return fmt.Errorf("ConfigMap %s: no data", objName)
	}
	b.WriteString("data:\n")
	for _, k := range slices.Sorted(maps.Keys(stringMap(data))) {
		if !valuesKey.MatchString(k) || k == "enabled" || k == "mutating" {
			return fmt.Errorf("ConfigMap %s: data key %q cannot be a value admissionPolicies.%s", objName, k, k)
		}
		fmt.Fprintf(b, "  %s: {{ .Values.admissionPolicies.%s | quote }}\n", k, k)
	}
	return nil
}

// ParamsDefaults are the data of the params ConfigMaps in config/ (admissionDirs): the defaults
// values.yaml must give admissionPolicies.<key>.
func ParamsDefaults(root string) (map[string]string, error) {
	out := map[string]string{}
	err := eachResource(root, admissionDirs, func(src string, data []byte) error {
		for _, doc := range documents(data) {
			var cm struct {
				Kind string            `json:"kind"`
				Data map[string]string `json:"data"`
			}
			if err := yaml.Unmarshal(doc, &cm); err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
			if cm.Kind == "ConfigMap" {
				maps.Copy(out, cm.Data)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func stringMap(m map[string]any) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// fleetNamespace is config/fleet's namespace of the spokes' ServiceAccounts: its policies name
// it in their expressions (system:serviceaccount:turnstile-fleet:spoke-<cluster>), so the chart
// keeps it, and the members ConfigMap in it, whatever the release is called.
const fleetNamespace = "turnstile-fleet"

// fleetKinds are the kinds config/fleet may hold.
var fleetKinds = []string{"Namespace", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// fleetTemplate turns a file of config/fleet (the hub's side of a fleet: docs/fleet.md) into a
// template installed when fleet.role is hub: the namespace turnstile-fleet verbatim; the
// members ConfigMap in it with its data from fleet.members (a cluster's labels as JSON); the
// ClusterRoles, the ClusterRoleBinding, the policies and bindings with names from the release,
// the bindings' subjects (the spokes' groups) and the policies' expressions verbatim.
func fleetTemplate(src string, data []byte) ([]byte, error) {
	var b strings.Builder
	b.WriteString(header(src))
	b.WriteString("{{- if eq .Values.fleet.role \"hub\" }}\n")
	n := 0
	for _, doc := range documents(data) {
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, err
		}
		kind, _ := o["kind"].(string)
		md := asMap(o["metadata"])
		objName, _ := md["name"].(string)
		if !slices.Contains(fleetKinds, kind) {
			return nil, fmt.Errorf("%s %s: chartgen templates only %v in config/fleet", kind, objName, fleetKinds)
		}
		if ns, _ := md["namespace"].(string); ns != "" && ns != fleetNamespace {
			return nil, fmt.Errorf("%s %s: namespace %s: config/fleet's objects live in %s", kind, objName, ns, fleetNamespace)
		}
		if n > 0 {
			b.WriteString("---\n")
		}
		n++
		name := objName
		// The namespace and the members ConfigMap keep their names in every release: the
		// spokes' identities name the namespace, and the hub's manager (its role's
		// resourceNames), kubectl turnstile fleet join and the policies read the ConfigMap by
		// its name.
		if kind != "Namespace" && kind != "ConfigMap" {
			var err error
			if name, err = ChartName(objName); err != nil {
				return nil, fmt.Errorf("%s: %w", kind, err)
			}
		}
		b.WriteString(leadingComments(doc))
		apiVersion, _ := o["apiVersion"].(string)
		fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n", apiVersion, kind, name)
		if ns, _ := md["namespace"].(string); ns != "" {
			b.WriteString("  namespace: " + ns + "\n")
		}
		b.WriteString("  labels:\n    " + chartLabels + "\n")
		switch kind {
		case "Namespace":
		case "ConfigMap":
			if len(asMap(o["data"])) > 0 {
				return nil, fmt.Errorf("ConfigMap %s: the members come from fleet.members, not config/fleet", objName)
			}
			b.WriteString("data:\n  {{- range $cluster, $labels := .Values.fleet.members }}\n  {{ $cluster }}: {{ dict \"labels\" (default (dict) $labels) | toJson | quote }}\n  {{- end }}\n")
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := fleetRBAC(&b, kind, objName, o); err != nil {
				return nil, err
			}
		default:
			if err := fleetPolicy(&b, kind, objName, o); err != nil {
				return nil, err
			}
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("no objects")
	}
	b.WriteString("{{- end }}\n")
	return []byte(b.String()), nil
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// fleetRBAC writes a role's or binding's body: rules verbatim, the role reference renamed after
// the release, the spokes' groups and the manager's ServiceAccount (as the chart names it, in
// the release namespace: the hub's managers read the members) as subjects, nothing else.
func fleetRBAC(b *strings.Builder, kind, objName string, o map[string]any) error {
	rest := map[string]any{}
	for k, v := range o {
		if k != "apiVersion" && k != "kind" && k != "metadata" {
			rest[k] = v
		}
	}
	if ref := asMap(rest["roleRef"]); ref != nil {
		refName, err := ChartName(fmt.Sprint(ref["name"]))
		if err != nil {
			return fmt.Errorf("%s %s roleRef: %w", kind, objName, err)
		}
		ref["name"] = fullnamePlaceholder + strings.TrimPrefix(refName, fullname)
	}
	for _, s := range asSlice(rest["subjects"]) {
		subject := asMap(s)
		switch k := fmt.Sprint(subject["kind"]); {
		case k == "Group":
		case k == "ServiceAccount" && subject["name"] == managerServiceAccount:
			subject["name"], subject["namespace"] = serviceAccountPlaceholder, namespacePlaceholder
		default:
			return fmt.Errorf("%s %s: subject %s %v: config/fleet binds the spokes' groups and the manager's ServiceAccount only", kind, objName, k, subject["name"])
		}
	}
	text, err := yaml.Marshal(rest)
	if err != nil {
		return err
	}
	b.WriteString(strings.NewReplacer(fullnamePlaceholder, fullname, serviceAccountPlaceholder, serviceAccountName,
		namespacePlaceholder, releaseNamespace).Replace(escape(string(text))))
	return nil
}

// fleetPolicy writes a policy's or binding's spec: the policy and params names after the
// release, the params kept in turnstile-fleet, the expressions verbatim.
func fleetPolicy(b *strings.Builder, kind, objName string, o map[string]any) error {
	spec := asMap(o["spec"])
	ref := asMap(spec["paramRef"])
	var params any
	if ref != nil {
		params = ref["name"] // the members ConfigMap: its name is the same in every release
		if ns := fmt.Sprint(ref["namespace"]); ns != fleetNamespace {
			return fmt.Errorf("%s %s: paramRef namespace %s: the fleet's params live in %s", kind, objName, ns, fleetNamespace)
		}
		// renameBinding would move the params to the release namespace: they stay in
		// the fleet's.
		delete(ref, "namespace")
	}
	if strings.HasSuffix(kind, "Binding") {
		if err := renameBinding(kind, objName, spec); err != nil {
			return err
		}
	}
	if ref != nil {
		ref["name"], ref["namespace"] = params, fleetNamespace
	}
	text, err := yaml.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	for _, fixed := range []string{namespaceFromConfig, managerServiceAccount} {
		if strings.Contains(string(text), fixed) {
			return fmt.Errorf("%s %s: its spec names %s, which differs per release", kind, objName, fixed)
		}
	}
	b.WriteString(strings.ReplaceAll(escape(string(text)), fullnamePlaceholder, fullname))
	return nil
}
