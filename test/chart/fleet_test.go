package chart

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	fleetcmd "github.com/turnstile-dev/turnstile/internal/plugin/cmd/fleet"
)

// TestFleetMatchesKustomize: with fleet.role=hub the chart installs config/fleet object for
// object (the spokes' namespace, roles, binding, admission policies and the members ConfigMap
// with fleet.members as its data), under the release's names; the namespace turnstile-fleet and
// the members ConfigMap keep theirs, since the spokes' identities, the manager's role, fleet join
// and the policies name them. One cluster's chart and a
// spoke's install none of it.
func TestFleetMatchesKustomize(t *testing.T) {
	for name, tc := range releases {
		t.Run(name, func(t *testing.T) {
			// Built anew for each release: the renames below edit the objects' maps in place.
			kustomize := kustomizeBuildOf(t, "config/fleet")
			if len(kustomize) < 9 {
				t.Fatalf("kubectl kustomize config/fleet has %d objects", len(kustomize))
			}
			want := map[string]any{}
			for _, o := range kustomize {
				o = fleetObject(o)
				// The namespace and the members ConfigMap keep their names in every release
				// (the spokes' identities name the one; the manager's role, fleet join and the
				// policies read the other by its name).
				if o.Kind() != "Namespace" && o.Kind() != "ConfigMap" {
					md := o["metadata"].(map[string]any)
					md["name"] = tc.rename(md["name"].(string))
				}
				if ref, ok := o["roleRef"].(map[string]any); ok {
					ref["name"] = tc.rename(ref["name"].(string))
				}
				if spec, ok := o["spec"].(map[string]any); ok && strings.HasSuffix(o.Kind(), "Binding") {
					spec["policyName"] = tc.rename(spec["policyName"].(string))
					// paramRef names the members ConfigMap: kept.
				}
				if o.Kind() == "ConfigMap" {
					o["data"] = map[string]any{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{}}`}
				}
				want[o.Kind()+" "+o.Meta("namespace")+"/"+o.Meta("name")] = map[string]any(o)
			}
			got := fleetObjects(render(t, tc.release, tc.namespace, "--set", "fleet.role=hub",
				"--set-json", `fleet.members={"eu-west-1":{"region":"eu"},"us-east-1":{}}`), tc.rename("turnstile-fleet"))
			if diff := cmp.Diff(sameCEL(want), sameCEL(got)); diff != "" {
				t.Errorf("the chart's fleet objects differ from config/fleet (-kustomize +chart):\n%s", diff)
			}
			for role, args := range map[string][]string{
				"one cluster": nil,
				"spoke": {"--set", "fleet.role=spoke", "--set", "fleet.clusterName=eu-west-1", "--set", "fleet.spoke.hubKubeconfigSecret=hub",
					"--set", "activeActive.enabled=false", "--set", "leaderElection.enabled=true"},
			} {
				if got := fleetObjects(render(t, tc.release, tc.namespace, args...), tc.rename("turnstile-fleet")); len(got) > 0 {
					t.Errorf("%s renders fleet objects: %v", role, got)
				}
			}
		})
	}
}

// fleetObjects are the rendered objects of config/fleet: the namespace turnstile-fleet, the
// members ConfigMap, and those named prefix-*, keyed by kind, namespace and name, without their labels.
func fleetObjects(objs []object, prefix string) map[string]any {
	out := map[string]any{}
	for _, o := range objs {
		n := o.Meta("name")
		if (o.Kind() == "Namespace" && n == "turnstile-fleet") || (o.Kind() == "ConfigMap" && n == "turnstile-fleet-members") ||
			(o.Kind() != "Namespace" && strings.HasPrefix(n, prefix)) {
			o = fleetObject(o)
			out[o.Kind()+" "+o.Meta("namespace")+"/"+n] = map[string]any(o)
		}
	}
	return out
}

// fleetObject is o without its labels (the chart's own).
func fleetObject(o object) object {
	c := object{}
	for k, v := range o {
		c[k] = v
	}
	md := map[string]any{}
	for k, v := range o["metadata"].(map[string]any) {
		if k != "labels" {
			md[k] = v
		}
	}
	c["metadata"] = md
	return c
}

// TestSpokeMountsWhatJoinWrites: the Secret `kubectl turnstile fleet join NAME --secret S`
// writes (in DefaultSecretNamespace, under DefaultSecretKey) is what the chart's spoke mounts
// and passes as --hub-kubeconfig, with the chart's defaults and the release namespace of
// docs/install.md.
func TestSpokeMountsWhatJoinWrites(t *testing.T) {
	objs := render(t, "turnstile", fleetcmd.DefaultSecretNamespace, "--set", "fleet.role=spoke", "--set", "fleet.clusterName=eu-west-1",
		"--set", "fleet.spoke.hubKubeconfigSecret=turnstile-hub", "--set", "activeActive.enabled=false", "--set", "leaderElection.enabled=true")
	b, err := yaml.Marshal(find(t, objs, "Deployment"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Namespace != fleetcmd.DefaultSecretNamespace {
		t.Errorf("the Deployment is in %q, join's Secret in %q", d.Namespace, fleetcmd.DefaultSecretNamespace)
	}
	var mountPath string
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "hub-kubeconfig" {
			mountPath = m.MountPath
		}
	}
	var found bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name != "hub-kubeconfig" || v.Secret == nil {
			continue
		}
		found = true
		if v.Secret.SecretName != "turnstile-hub" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != fleetcmd.DefaultSecretKey {
			t.Errorf("the spoke mounts %+v, join writes key %s", v.Secret, fleetcmd.DefaultSecretKey)
		}
		want := "--hub-kubeconfig=" + path.Join(mountPath, v.Secret.Items[0].Path)
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("the manager's args %v lack %s", d.Spec.Template.Spec.Containers[0].Args, want)
		}
	}
	if !found || mountPath == "" {
		t.Fatal("the spoke's Deployment mounts no Secret hub-kubeconfig")
	}
}
