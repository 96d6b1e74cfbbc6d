package gitops_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// The Argo CD health checks in resource_customizations/, run the way Argo CD v3.6.1 runs one
// (util/lua/lua.go, VM.ExecuteHealthLua with useOpenLibs false, the default): gopher-lua v1.1.2
// (the version in Argo CD's go.mod) with its standard libraries skipped and only package, base
// and table opened, the object in the global `obj`, a one-second deadline, and a table
// {status, message} returned. Argo CD also opens a "safe" os (time and date); these scripts do
// not use it, so it is left out: a script that needed it would fail here, not in Argo CD.

// healthStatus is Argo CD's health.HealthStatus as a health_test.yaml names it.
type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// healthTests is Argo CD's health_test.yaml: tests: [{healthStatus, inputPath}].
type healthTests struct {
	Tests []struct {
		HealthStatus healthStatus `json:"healthStatus"`
		InputPath    string       `json:"inputPath"`
	} `json:"tests"`
}

// argoHealthStatuses are the statuses Argo CD accepts from a script; any other reads Unknown.
var argoHealthStatuses = []string{"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

// runArgoHealth runs a health.lua on obj as Argo CD does.
func runArgoHealth(script string, obj map[string]any) (healthStatus, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return healthStatus{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj))
	if err := l.DoString(script); err != nil {
		return healthStatus{}, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return healthStatus{}, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	var hs healthStatus
	for key, dst := range map[string]*string{"status": &hs.Status, "message": &hs.Message} {
		switch v := ret.RawGetString(key).(type) {
		case lua.LString:
			*dst = string(v)
		case *lua.LNilType:
		default:
			return healthStatus{}, fmt.Errorf("%s is a %s, not a string", key, v.Type())
		}
	}
	if !slices.Contains(argoHealthStatuses, hs.Status) {
		return healthStatus{}, fmt.Errorf("Lua returned an invalid health status %q", hs.Status)
	}
	return hs, nil
}

// decodeValue is Argo CD's util/lua decodeValue: how it hands an object to a script.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int, int32, int64:
		return lua.LNumber(reflect.ValueOf(v).Int())
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// kstatusToArgo is the Argo CD status that matches each kstatus verdict: the checks must agree
// with what Flux and kpt conclude from the same object.
var kstatusToArgo = map[status.Status]string{
	status.CurrentStatus:    "Healthy",
	status.InProgressStatus: "Progressing",
	status.FailedStatus:     "Degraded",
}

// TestArgoCDHealthChecks runs every case of every health_test.yaml under
// resource_customizations/locks.turnstile.dev, checks that every testdata object is a case, and
// that each verdict agrees with kstatus's on the same object.
func TestArgoCDHealthChecks(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	group := filepath.Join(root, "resource_customizations", locksv1.GroupVersion.Group)
	for _, kind := range []string{"LockRequest", "CommandLock", "ProjectLock"} {
		dir := filepath.Join(group, kind)
		script, err := os.ReadFile(filepath.Join(dir, "health.lua"))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var tests healthTests
		if err := yaml.UnmarshalStrict(raw, &tests); err != nil {
			t.Fatalf("%s/health_test.yaml: %v", kind, err)
		}
		inputs, err := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var covered []string
		for _, tc := range tests.Tests {
			covered = append(covered, filepath.Join(dir, tc.InputPath))
			t.Run(kind+"/"+tc.InputPath, func(t *testing.T) {
				raw, err := os.ReadFile(filepath.Join(dir, tc.InputPath))
				if err != nil {
					t.Fatal(err)
				}
				// As Argo CD and kstatus get it from the API server: whole numbers are int64.
				js, err := yaml.YAMLToJSON(raw)
				if err != nil {
					t.Fatal(err)
				}
				obj := map[string]any{}
				if err := utiljson.Unmarshal(js, &obj); err != nil {
					t.Fatal(err)
				}
				got, err := runArgoHealth(string(script), obj)
				if err != nil {
					t.Fatalf("health.lua: %v", err)
				}
				if diff := cmp.Diff(tc.HealthStatus, got); diff != "" {
					t.Errorf("health (-want +got):\n%s", diff)
				}
				res, err := status.Compute(&unstructured.Unstructured{Object: obj})
				if err != nil {
					t.Fatal(err)
				}
				if want := kstatusToArgo[res.Status]; got.Status != want {
					t.Errorf("Argo CD reads %s but kstatus reads %s (%s): want %s", got.Status, res.Status, res.Message, want)
				}
			})
		}
		for _, in := range inputs {
			if !slices.Contains(covered, in) {
				t.Errorf("%s is not a case in %s/health_test.yaml", strings.TrimPrefix(in, dir+"/"), kind)
			}
		}
		if len(tests.Tests) == 0 {
			t.Errorf("%s/health_test.yaml has no tests", kind)
		}
	}
}

// TestArgoCDVMHasOnlyArgoLibraries checks the VM above is Argo CD's, not a full Lua: the string
// library that Argo CD does not load is missing, so a script that used it fails here as there.
func TestArgoCDVMHasOnlyArgoLibraries(t *testing.T) {
	for name, script := range map[string]string{
		"string": `return {status = string.upper("healthy")}`,
		"math":   `return {status = "Healthy", message = tostring(math.floor(1.5))}`,
		"io":     `io.write("x"); return {status = "Healthy"}`,
	} {
		if _, err := runArgoHealth(script, map[string]any{}); err == nil {
			t.Errorf("the %s library is open; Argo CD does not open it", name)
		}
	}
	got, err := runArgoHealth(`local t = {}; table.insert(t, obj.a); return {status = "Healthy", message = t[1] .. " " .. tostring(#t)}`, map[string]any{"a": "x"})
	if err != nil || got != (healthStatus{"Healthy", "x 1"}) {
		t.Errorf("base and table: got %+v, %v", got, err)
	}
}
