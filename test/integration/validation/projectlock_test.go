package validation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestProjectLockCreate checks that a ProjectLock's key is held to the same rules as a
// LockRequest's targets, with the same defaults.
func TestProjectLockCreate(t *testing.T) {
	ns := newNamespace(t)

	type createCase struct {
		spec     map[string]any
		wantErr  []string
		wantSpec locksv1.ProjectLockSpec
	}
	cases := map[string]createCase{
		"spec missing": {
			spec:    nil,
			wantErr: []string{"spec: Required value"},
		},
		"minimal: path and workspace defaulted": {
			spec:     map[string]any{"repo": "acme/infra"},
			wantSpec: locksv1.ProjectLockSpec{LockTarget: locksv1.LockTarget{Repo: "acme/infra", Path: ".", Workspace: "default"}},
		},
		"full key": {
			spec:     map[string]any{"repo": "group/sub/name", "path": "modules/vpc", "workspace": "prod", "project": "edge"},
			wantSpec: locksv1.ProjectLockSpec{LockTarget: locksv1.LockTarget{Repo: "group/sub/name", Path: "modules/vpc", Workspace: "prod", Project: "edge"}},
		},
	}
	cases["a key with a mode"] = createCase{
		spec:    map[string]any{"repo": "acme/infra", "mode": "Shared"},
		wantErr: []string{"spec", "a ProjectLock's key has no mode"},
	}
	cases["a key with maxHolders"] = createCase{
		spec:    map[string]any{"repo": "acme/infra", "maxHolders": 3},
		wantErr: []string{"spec", "a ProjectLock's key has no maxHolders"},
	}
	for name, tc := range targetRejections() {
		cases["key: "+name] = createCase{spec: target(tc.over), wantErr: tc.errorsAt("spec")}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := obj("ProjectLock", ns, map[string]any{"generateName": "pl-"}, tc.spec)
			err := k.Create(ctx(t), u)
			checkAdmission(t, err, tc.wantErr)
			if len(tc.wantErr) > 0 || t.Failed() {
				return
			}
			checkStoredSpec(t, u, tc.wantSpec)
		})
	}
}

// TestProjectLockUpdate checks that a ProjectLock's key never changes, while its metadata may.
func TestProjectLockUpdate(t *testing.T) {
	ns := newNamespace(t)

	cases := map[string]struct {
		mutate  func(*locksv1.ProjectLock)
		wantErr []string
	}{
		"change repo": {
			mutate:  func(p *locksv1.ProjectLock) { p.Spec.Repo = "acme/other" },
			wantErr: []string{"spec", msgKeyImmutable},
		},
		"change path": {
			mutate:  func(p *locksv1.ProjectLock) { p.Spec.Path = "modules/dns" },
			wantErr: []string{"spec", msgKeyImmutable},
		},
		"change workspace": {
			mutate:  func(p *locksv1.ProjectLock) { p.Spec.Workspace = "prod" },
			wantErr: []string{"spec", msgKeyImmutable},
		},
		"set project": {
			mutate:  func(p *locksv1.ProjectLock) { p.Spec.Project = "edge" },
			wantErr: []string{"spec", msgKeyImmutable},
		},
		"label it": {
			mutate: func(p *locksv1.ProjectLock) { p.Labels = map[string]string{"team": "a"} },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pl := &locksv1.ProjectLock{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "pl-", Namespace: ns},
				Spec:       locksv1.ProjectLockSpec{LockTarget: locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc"}},
			}
			if err := k.Create(ctx(t), pl); err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.mutate(pl)
			checkAdmission(t, k.Update(ctx(t), pl), tc.wantErr)
		})
	}
}
