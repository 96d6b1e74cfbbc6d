package controller

import (
	"reflect"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestUpdateFilterFailsClosed changes every status field of every kind the key reconciler
// watches, found by reflection over the API types, one at a time: each change is relevant unless
// the field is on the ignore list, and a change in only ignored fields (and in the metadata every
// write changes) is not. A status field added tomorrow is relevant without anyone listing it.
func TestUpdateFilterFailsClosed(t *testing.T) {
	kinds := []client.Object{&locksv1.LockRequest{}, &locksv1.ProjectLock{}, &locksv1.CommandLock{}}
	for _, base := range kinds {
		typ := reflect.TypeOf(base).Elem()
		ignored := ignoredStatusFields[typ]
		st, _ := typ.FieldByName("Status")
		for i := range st.Type.NumField() {
			field := st.Type.Field(i).Name
			t.Run(typ.Name()+"/"+field, func(t *testing.T) {
				changed := withField(base, field)
				want := !slices.Contains(ignored, field)
				if got := decisionInputChanged(base, changed); got != want {
					t.Errorf("a change of status.%s: relevant = %v, want %v", field, got, want)
				}
			})
		}
		t.Run(typ.Name()+"/ignored together", func(t *testing.T) {
			changed := base.DeepCopyObject().(client.Object)
			for _, f := range ignored {
				changed = withField(changed, f)
			}
			changed.SetResourceVersion("99")
			changed.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m"}})
			if decisionInputChanged(base, changed) {
				t.Errorf("a change of only the ignored fields %v and the metadata every write changes is relevant", ignored)
			}
		})
	}
	// The list itself is reviewed here: a field joins it only if Decide never reads it.
	want := map[reflect.Type][]string{reflect.TypeFor[locksv1.LockRequest](): {"QueuePosition", "BlockedBy", "Conditions"}}
	if !reflect.DeepEqual(ignoredStatusFields, want) || !slices.Equal(ignoredMetaFields, []string{"ResourceVersion", "ManagedFields"}) {
		t.Errorf("ignored fields %v and %v; Decide reads every other field (queue/decide.go), so only %v may be ignored", ignoredStatusFields, ignoredMetaFields, want)
	}
	for typ, fields := range ignoredStatusFields {
		st, _ := typ.FieldByName("Status")
		for _, f := range fields {
			if _, ok := st.Type.FieldByName(f); !ok {
				t.Errorf("%s has no status field %s to ignore", typ.Name(), f)
			}
		}
	}
}

// withField is a copy of o with its status field set to a value that is not the zero one.
func withField(o client.Object, field string) client.Object {
	c := o.DeepCopyObject().(client.Object)
	st := reflect.ValueOf(c).Elem().FieldByName("Status")
	fill(st.FieldByName(field))
	return c
}

var fillTime = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// fill sets v to a non-zero value, different from the one it had.
func fill(v reflect.Value) {
	switch v.Interface().(type) {
	case metav1.Time:
		v.Set(reflect.ValueOf(metav1.NewTime(fillTime)))
		return
	case metav1.MicroTime:
		v.Set(reflect.ValueOf(metav1.NewMicroTime(fillTime)))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		fill(v.Index(v.Len() - 1))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}
