// Command chartgen writes the parts of the Helm chart (charts/turnstile) that have their source
// in config/, so the chart and `kubectl apply -k config/default` install the same CRDs, the
// same RBAC and the same admission policies, and the chart ships the same alerts and dashboard:
//
//   - templates/crds/*.yaml from the CRDs in config/crd (controller-gen's output), behind
//     crds.enabled and with helm.sh/resource-policy: keep behind crds.keep;
//   - templates/rbac/*.yaml from config/rbac, with names, namespaces and the ServiceAccount
//     subject taken from the release; rules, role references and aggregation labels verbatim;
//   - templates/admission/*.yaml from config/admission and config/labels (the admission
//     policies, their bindings and the params ConfigMap), behind admissionPolicies.enabled, with
//     names from the release, the params ConfigMap in the release namespace and its data from
//     admissionPolicies.<key>; the policies' expressions verbatim;
//   - templates/compatibility/*.yaml from config/compatibility (the compatibility floor), as
//     the admission policies but always installed, with helm.sh/resource-policy: keep;
//   - files/ a copy of the Prometheus rules (config/prometheus), which the chart's
//     PrometheusRule reads;
//   - config/grafana/turnstile-dashboard.json, a symbolic link to the chart's
//     files/turnstile-dashboard.json: the dashboard's one source is in the chart, which helm
//     can read from (a chart cannot read outside its directory).
//
// `make manifests` runs it after controller-gen; `make chart` runs it alone. A test
// (chartgen_test.go, in `make test`) and `make verify-generated` fail when the checked-in chart
// differs from what it writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	root := flag.String("root", ".", "Repository root.")
	flag.Parse()
	if err := write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

// write replaces the generated files of the chart with what Generate returns, removing
// generated files whose source is gone.
func write(root string) error {
	files, err := Generate(root)
	if err != nil {
		return err
	}
	stale, err := generatedOnDisk(root)
	if err != nil {
		return err
	}
	for _, p := range stale {
		if _, ok := files[p]; !ok {
			if err := os.Remove(filepath.Join(root, p)); err != nil {
				return err
			}
		}
	}
	for link, target := range links {
		full := filepath.Join(root, link)
		if now, err := os.Readlink(full); err == nil && now == target {
			continue
		}
		if err := os.Remove(full); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(target, full); err != nil {
			return err
		}
	}
	for p, data := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
