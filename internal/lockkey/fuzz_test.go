package lockkey

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The files the API server is given: the generated CRDs and the admission policy that checks
// a workload's lock annotation.
const (
	lockRequestCRD = "../../config/crd/bases/locks.turnstile.dev_lockrequests.yaml"
	projectLockCRD = "../../config/crd/bases/locks.turnstile.dev_projectlocks.yaml"
	workloadPolicy = "../../config/admission/workload-gate.yaml"
	annotationsVAP = "turnstile-workload-annotations"
	lockAnnotation = "locks.turnstile.dev/lock"
	// policyRefusal is how the policy's refusal of a lock annotation begins: clear, whatever
	// the value (a refusal the API server could not phrase falls back to "failed expression").
	policyRefusal = "annotation locks.turnstile.dev/lock must name one or more locks as REPO:PATH[:WORKSPACE[:PROJECT]]"
)

// FuzzKey holds the three readers of a lock key together: Parse (the plugin's --lock, the
// workload controller's annotation), the CRDs' validation of the target it names, and the
// admission policy's check of the annotation accept and refuse the same strings.
//
// The CRDs and the policy are read from config/ as the API server is given them, and judged
// with the API server's own code, set up as it sets them up: for a CRD, apiextensions-apiserver's
// defaulting, OpenAPI schema validator and CEL validator (celconfig.PerCallLimit,
// RuntimeCELCostBudget), as its customresource strategy builds them; for the policy,
// k8s.io/apiserver's ValidatingAdmissionPolicy compiler and validator on its base CEL
// environment, as its plugin compiles a policy (compilePolicy), judging a Pod's create.
func FuzzKey(f *testing.F) {
	for _, s := range keySeeds() {
		f.Add(s)
	}
	crds := []*crdJudge{loadCRD(f, lockRequestCRD), loadCRD(f, projectLockCRD)}
	policy := loadPolicy(f, workloadPolicy, annotationsVAP)
	f.Fuzz(func(t *testing.T, s string) {
		s = decoded(s)
		// One key: the target split names is what the plugin asks for; the CRDs judge it.
		if target, err := split(s); err == nil {
			verr := validate(target)
			for _, crd := range crds {
				if errs := crd.judge(t, target); (verr == nil) != (len(errs) == 0) {
					t.Errorf("%s: the %s CRD says %v, Parse says %v", short(s), crd.kind, errs, verr)
				}
			}
		}
		// The annotation's value: ParseList is the controller's reading, the policy admission's.
		_, perr := ParseList(s)
		denied := policy.judge(t, s)
		if (perr == nil) != (denied == "") {
			t.Errorf("%s: the policy says %s, ParseList says %s", short(s), short(denied), short(fmt.Sprint(perr)))
		}
		if denied != "" && !strings.HasPrefix(denied, policyRefusal) {
			t.Errorf("%s: the policy refuses with %s, not its own message", short(s), short(denied))
		}
	})
}

// short is s quoted for a message, its middle cut out when it is long.
func short(s string) string {
	const keep = 60
	if len(s) <= 2*keep {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:keep]) + fmt.Sprintf(" ... (%d bytes) ... ", len(s)) + strconv.Quote(s[len(s)-keep:])
}

// decoded is s as the API server hands it on: decoded from JSON, where bytes that are not
// UTF-8 become U+FFFD.
func decoded(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// keySeeds are the seed corpus, run by every go test: each rule of the syntax and of the
// CRDs' fields at its edge, the separators of the annotation, and values whose refusal would
// be hard to phrase (newlines, a long value).
func keySeeds() []string {
	long := func(n int, c string) string { return strings.Repeat(c, n) }
	return []string{
		"acme/infra:modules/vpc", "acme/infra:modules/vpc:default", "acme/infra:.:prod:web", "acme/infra:a::web",
		"acme/infra:a:prod:", "acme/infra:a::", "acme/infra:a:", "acme-infra", "acme/infra", ":a", "acme/infra:",
		"a/b:c:d:e:f", "acme/infra:../etc", "acme/infra:./a", "acme/infra:a/../b", "acme/infra:/abs", "acme/infra:a/",
		"acme/infra:a//b", "acme/./infra:a", "./x:a", "acme/..:a", "acme/infra:...", "acme/infra:..", "acme/infra:a,b",
		"acme/infra:a, acme/infra:b:prod", "acme/infra:a\nacme:broken", "acme/infra:a\r", "acme/infra:a\r\nacme/infra:b",
		" acme/infra:a ", "acme/infra:a\tacme/infra:b", "", " , ", "Acme/Infra:Modules/VPC", "gitlab/group/sub/repo:a",
		"a/b:c:-ws", "a/b:c:.ws", "a/b:c:ws:-p", "a/b:c:_:_", "a/b:c@1+2=3~4-5", "a/b:c:ws.1-2_3", "ünï/cödé:a",
		"a/b:c:wö", "a/b:c\x00", "a/b:\xffc", "-a/b:c", "a/b/:c", "a//b:c",
		"a/" + long(198, "r") + ":c", "a/" + long(199, "r") + ":c",
		"a/b:" + long(253, "p"), "a/b:" + long(254, "p"), "a/b:" + long(126, "p/") + "p",
		"a/b:c:" + long(63, "w"), "a/b:c:" + long(64, "w"), "a/b:c:w:" + long(63, "p"), "a/b:c:w:" + long(64, "p"),
		long(300, "acme/infra:a,") + "acme:broken", "acme:broken " + long(6000, "x"),
	}
}

// crdJudge is one CRD's validation of created objects, as the API server's.
type crdJudge struct {
	kind       string
	structural *structuralschema.Structural
	schema     schemavalidation.SchemaValidator
	cel        *schemacel.Validator
}

func loadCRD(tb testing.TB, file string) *crdJudge {
	tb.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		tb.Fatalf("%s: want one version with a schema", file)
	}
	var internal apiextensionsinternal.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(crd.Spec.Versions[0].Schema, &internal, nil); err != nil {
		tb.Fatal(err)
	}
	structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		tb.Fatal(err)
	}
	validator, _, err := schemavalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		tb.Fatal(err)
	}
	return &crdJudge{
		kind: crd.Spec.Names.Kind, structural: structural, schema: validator,
		cel: schemacel.NewValidator(structural, true, celconfig.PerCallLimit),
	}
}

// judge creates an object of the CRD that names target and returns what the API server
// would refuse in it.
func (c *crdJudge) judge(tb testing.TB, target locksv1.LockTarget) []string {
	tb.Helper()
	meta := metav1.ObjectMeta{Name: "fuzz", Namespace: "default"}
	var obj runtime.Object
	switch c.kind {
	case "LockRequest":
		obj = &locksv1.LockRequest{ObjectMeta: meta, Spec: locksv1.LockRequestSpec{
			Locks: []locksv1.LockTarget{target}, Holder: locksv1.Holder{Owner: "alice"},
		}}
	case "ProjectLock":
		obj = &locksv1.ProjectLock{ObjectMeta: meta, Spec: locksv1.ProjectLockSpec{LockTarget: target}}
	default:
		tb.Fatalf("no object of kind %s", c.kind)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		tb.Fatal(err)
	}
	u["apiVersion"], u["kind"] = locksv1.GroupVersion.String(), c.kind
	structuraldefaulting.Default(u, c.structural)
	errs := schemavalidation.ValidateCustomResource(nil, u, c.schema)
	celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, u, nil, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// policyJudge is one ValidatingAdmissionPolicy, compiled as the API server compiles it.
type policyJudge struct {
	validator validating.Validator
}

func loadPolicy(tb testing.TB, file, name string) *policyJudge {
	tb.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" && p.Name == name {
			policy = &p
		}
	}
	if policy == nil {
		tb.Fatalf("%s: no ValidatingAdmissionPolicy %s", file, name)
	}
	if len(policy.Spec.MatchConditions) > 0 || policy.Spec.ParamKind != nil {
		tb.Fatalf("%s: compile its matchConditions and params too", name)
	}
	return &policyJudge{validator: compilePolicy(policy)}
}

// compilePolicy is k8s.io/apiserver's compilePolicy (pkg/admission/plugin/policy/validating,
// plugin.go; unexported there) for a policy without params or match conditions: its
// composition environment, its variable and condition compilers, its validator.
func compilePolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}
	expressionOptionalVars := plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: false}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, p.Spec.FailurePolicy, err)
	}
	variables := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, optionalVars, environment.StoredExpressions)
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	audit := make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		audit[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		nil,
		compiler.CompileCondition(audit, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, expressionOptionalVars, environment.StoredExpressions),
		p.Spec.FailurePolicy,
		nil,
	)
}

// judge creates a Pod with the lock annotation value and returns the policy's refusal, ""
// when it admits it. An evaluation error fails the test: it would be refused by
// failurePolicy, with a message nobody can act on.
func (p *policyJudge) judge(tb testing.TB, value string) string {
	tb.Helper()
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "default", Annotations: map[string]string{lockAnnotation: value}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	attr := admission.NewAttributesRecord(pod, nil, gvk, pod.Namespace, pod.Name, gvr, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "alice"})
	versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(pod)}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace}}
	res := p.validator.Validate(context.Background(), gvr, versioned, nil, ns, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range res.Decisions {
		switch d.Evaluation {
		case validating.EvalError:
			tb.Fatalf("%s: the policy failed to judge it: %s", short(value), d.Message)
		case validating.EvalDeny:
			return d.Message
		}
	}
	return ""
}
