// Package crddiff compares two revisions of a CustomResourceDefinition for the changes that
// break a version the old one serves: what an upgrade (old to new) does to objects already
// stored and to the clients that wrote them. It walks the two OpenAPI v3 schemas structurally,
// field by field, rather than comparing their text: a reordered or re-described schema is the
// same schema, and a one-word change of a maximum is not a cosmetic one.
//
// A change is reported when, for objects valid under the old schema, the new one
//   - removes a served version, or the status or scale subresource, or changes the scope,
//     group or names;
//   - removes a field (the API server prunes it from stored objects on their next write) or
//     stops preserving unknown fields;
//   - changes a field's type, or its list, map or int-or-string semantics;
//   - adds, removes or changes a default (defaults are applied to stored objects when read);
//   - tightens validation: a new required field, a removed enum value or a new enum, a lower
//     maximum or higher minimum (values, lengths, items, properties), a new or changed
//     pattern or format, nullable removed, a new or changed CEL rule (unless it holds for
//     every object without the fields added beside it, which no stored object has: a rule
//     `!has(self.maxHolders) || ...` for a new maxHolders), a changed composition (allOf,
//     anyOf, oneOf, not).
//
// Loosening (a new optional field, a higher maximum, a removed rule) is not reported. Compare
// the other way round (new to old) to see what a downgrade would break.
package crddiff

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/parser"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Change is one breaking difference: where (the version and the field path) and what.
type Change struct {
	Version string
	Path    string
	What    string
}

func (c Change) String() string {
	if c.Path == "" {
		return fmt.Sprintf("%s: %s", c.Version, c.What)
	}
	return fmt.Sprintf("%s %s: %s", c.Version, c.Path, c.What)
}

// Compare returns the changes from old to new that break a version old serves, sorted.
func Compare(old, new *apiextensionsv1.CustomResourceDefinition) []Change {
	var out []Change
	add := func(version, path, format string, args ...any) {
		out = append(out, Change{Version: version, Path: path, What: fmt.Sprintf(format, args...)})
	}
	crd := "CRD " + old.Name
	if old.Spec.Group != new.Spec.Group {
		add(crd, "", "group changed from %s to %s", old.Spec.Group, new.Spec.Group)
	}
	if old.Spec.Scope != new.Spec.Scope {
		add(crd, "", "scope changed from %s to %s", old.Spec.Scope, new.Spec.Scope)
	}
	on, nn := old.Spec.Names, new.Spec.Names
	if on.Kind != nn.Kind || on.Plural != nn.Plural || on.ListKind != nn.ListKind || on.Singular != nn.Singular {
		add(crd, "", "names changed from %s/%s to %s/%s", on.Kind, on.Plural, nn.Kind, nn.Plural)
	}
	for _, short := range on.ShortNames {
		if !slices.Contains(nn.ShortNames, short) {
			add(crd, "", "short name %s removed", short)
		}
	}
	for _, ov := range old.Spec.Versions {
		if !ov.Served {
			continue
		}
		nv := version(new, ov.Name)
		switch {
		case nv == nil:
			add(ov.Name, "", "version removed")
			continue
		case !nv.Served:
			add(ov.Name, "", "version no longer served")
			continue
		}
		out = append(out, compareVersion(ov, *nv)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func version(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return &crd.Spec.Versions[i]
		}
	}
	return nil
}

func compareVersion(ov, nv apiextensionsv1.CustomResourceDefinitionVersion) []Change {
	var out []Change
	if ov.Subresources != nil {
		if ov.Subresources.Status != nil && (nv.Subresources == nil || nv.Subresources.Status == nil) {
			out = append(out, Change{ov.Name, "", "status subresource removed"})
		}
		if ov.Subresources.Scale != nil && (nv.Subresources == nil || !reflect.DeepEqual(ov.Subresources.Scale, nv.Subresources.Scale)) {
			out = append(out, Change{ov.Name, "", "scale subresource removed or changed"})
		}
	}
	if ov.Schema == nil || ov.Schema.OpenAPIV3Schema == nil {
		return out
	}
	if nv.Schema == nil || nv.Schema.OpenAPIV3Schema == nil {
		return append(out, Change{ov.Name, "", "schema removed"})
	}
	w := walker{version: ov.Name}
	w.walk(ov.Schema.OpenAPIV3Schema, nv.Schema.OpenAPIV3Schema, "")
	return append(out, w.changes...)
}

type walker struct {
	version string
	changes []Change
}

func (w *walker) add(path, format string, args ...any) {
	if path == "" {
		path = "."
	}
	w.changes = append(w.changes, Change{Version: w.version, Path: path, What: fmt.Sprintf(format, args...)})
}

// walk compares one schema node of the old version with its counterpart.
func (w *walker) walk(o, n *apiextensionsv1.JSONSchemaProps, path string) {
	if o.Type != n.Type {
		w.add(path, "type changed from %q to %q", o.Type, n.Type)
		return
	}
	w.semantics(o, n, path)
	w.defaults(o, n, path)
	w.bounds(o, n, path)
	w.rules(o, n, path)
	w.fields(o, n, path)
	if o.Items != nil && o.Items.Schema != nil {
		if n.Items == nil || n.Items.Schema == nil {
			w.add(path+"[*]", "item schema removed")
		} else {
			w.walk(o.Items.Schema, n.Items.Schema, path+"[*]")
		}
	}
	w.additional(o.AdditionalProperties, n.AdditionalProperties, path+"{*}")
}

// additional compares additionalProperties: a map's values. nil allows nothing beyond the
// properties (they are pruned); Allows without a schema allows any value.
func (w *walker) additional(o, n *apiextensionsv1.JSONSchemaPropsOrBool, path string) {
	switch {
	case o == nil || (o.Schema == nil && !o.Allows):
		// Nothing was allowed: the new schema cannot be tighter.
	case n == nil || (n.Schema == nil && !n.Allows):
		w.add(path, "additionalProperties no longer allowed")
	case o.Schema != nil && n.Schema != nil:
		w.walk(o.Schema, n.Schema, path)
	case o.Schema == nil && n.Schema != nil:
		w.add(path, "additionalProperties given a schema (any value was allowed)")
	}
}

// semantics: how the API server stores, merges and prunes the node.
func (w *walker) semantics(o, n *apiextensionsv1.JSONSchemaProps, path string) {
	if isTrue(o.XPreserveUnknownFields) && !isTrue(n.XPreserveUnknownFields) {
		w.add(path, "unknown fields no longer preserved: stored ones are pruned")
	}
	if o.XIntOrString != n.XIntOrString {
		w.add(path, "x-kubernetes-int-or-string changed to %v", n.XIntOrString)
	}
	if o.XEmbeddedResource != n.XEmbeddedResource {
		w.add(path, "x-kubernetes-embedded-resource changed to %v", n.XEmbeddedResource)
	}
	if str(o.XListType) != str(n.XListType) {
		w.add(path, "x-kubernetes-list-type changed from %q to %q", str(o.XListType), str(n.XListType))
	}
	if !slices.Equal(o.XListMapKeys, n.XListMapKeys) {
		w.add(path, "x-kubernetes-list-map-keys changed from %v to %v", o.XListMapKeys, n.XListMapKeys)
	}
	if str(o.XMapType) != str(n.XMapType) {
		w.add(path, "x-kubernetes-map-type changed from %q to %q", str(o.XMapType), str(n.XMapType))
	}
	if o.Nullable && !n.Nullable {
		w.add(path, "no longer nullable")
	}
	for _, c := range []struct {
		name string
		o, n any
	}{{"allOf", o.AllOf, n.AllOf}, {"anyOf", o.AnyOf, n.AnyOf}, {"oneOf", o.OneOf, n.OneOf}, {"not", o.Not, n.Not}} {
		if !equalJSON(c.o, c.n) {
			w.add(path, "%s changed", c.name)
		}
	}
}

// defaults: applied to stored objects when they are read, so any change changes them.
func (w *walker) defaults(o, n *apiextensionsv1.JSONSchemaProps, path string) {
	od, nd := rawJSON(o.Default), rawJSON(n.Default)
	switch {
	case od == nd:
	case od == "":
		w.add(path, "default %s added", nd)
	case nd == "":
		w.add(path, "default %s removed", od)
	default:
		w.add(path, "default changed from %s to %s", od, nd)
	}
}

// bounds: every limit that a stored value may now exceed.
func (w *walker) bounds(o, n *apiextensionsv1.JSONSchemaProps, path string) {
	lower := func(name string, ov, nv *int64) {
		if nv != nil && (ov == nil || *nv < *ov) {
			w.add(path, "%s lowered from %s to %d", name, intStr(ov), *nv)
		}
	}
	higher := func(name string, ov, nv *int64) {
		if nv != nil && (ov == nil || *nv > *ov) {
			w.add(path, "%s raised from %s to %d", name, intStr(ov), *nv)
		}
	}
	lower("maxLength", o.MaxLength, n.MaxLength)
	lower("maxItems", o.MaxItems, n.MaxItems)
	lower("maxProperties", o.MaxProperties, n.MaxProperties)
	higher("minLength", o.MinLength, n.MinLength)
	higher("minItems", o.MinItems, n.MinItems)
	higher("minProperties", o.MinProperties, n.MinProperties)
	if n.Maximum != nil && (o.Maximum == nil || *n.Maximum < *o.Maximum || (*n.Maximum == *o.Maximum && n.ExclusiveMaximum && !o.ExclusiveMaximum)) {
		w.add(path, "maximum lowered to %v (exclusive %v)", *n.Maximum, n.ExclusiveMaximum)
	}
	if n.Minimum != nil && (o.Minimum == nil || *n.Minimum > *o.Minimum || (*n.Minimum == *o.Minimum && n.ExclusiveMinimum && !o.ExclusiveMinimum)) {
		w.add(path, "minimum raised to %v (exclusive %v)", *n.Minimum, n.ExclusiveMinimum)
	}
	if n.MultipleOf != nil && (o.MultipleOf == nil || *n.MultipleOf != *o.MultipleOf) {
		w.add(path, "multipleOf set to %v", *n.MultipleOf)
	}
	if n.Pattern != o.Pattern && n.Pattern != "" {
		w.add(path, "pattern changed from %q to %q", o.Pattern, n.Pattern)
	}
	if n.Format != o.Format && n.Format != "" {
		w.add(path, "format changed from %q to %q", o.Format, n.Format)
	}
	if n.UniqueItems && !o.UniqueItems {
		w.add(path, "items must now be unique")
	}
	if len(n.Enum) > 0 {
		if len(o.Enum) == 0 {
			w.add(path, "enum added: %s", enumStr(n.Enum))
		}
		for _, v := range o.Enum {
			if !slices.ContainsFunc(n.Enum, func(e apiextensionsv1.JSON) bool { return string(e.Raw) == string(v.Raw) }) {
				w.add(path, "enum value %s removed", v.Raw)
			}
		}
	}
}

// rules: a CEL rule of the new schema that the old one did not have, word for word, may
// refuse a stored object's next update, unless it holds for every object the old schema
// stored (holdsWithout: it says nothing about an object without the fields added here).
func (w *walker) rules(o, n *apiextensionsv1.JSONSchemaProps, path string) {
	var added []string
	if !isTrue(o.XPreserveUnknownFields) {
		for name := range n.Properties {
			if _, ok := o.Properties[name]; !ok {
				added = append(added, name)
			}
		}
	}
	for _, r := range n.XValidations {
		if slices.ContainsFunc(o.XValidations, func(or apiextensionsv1.ValidationRule) bool {
			return or.Rule == r.Rule && isTrue(or.OptionalOldSelf) == isTrue(r.OptionalOldSelf)
		}) {
			continue
		}
		if holdsWithout(r.Rule, added) {
			continue
		}
		w.add(path, "validation rule added or changed: %s", r.Rule)
	}
}

// holdsWithout reports whether a CEL rule is true of every object that has none of the
// fields absent (fields of this node that the old schema did not have: the API server pruned
// them from every object it stored under the old one). It parses the rule with CEL's own
// parser and reads has(self.F) of an absent field as false, then folds !, &&, || and ?: over
// the constants: only a rule that folds to true holds, such as
// `!has(self.maxHolders) || self.mode == 'Shared'` for a maxHolders new in this version. Any
// other rule, or one that does not parse, may refuse a stored object, and is reported.
func holdsWithout(rule string, absent []string) bool {
	if len(absent) == 0 {
		return false
	}
	p, err := parser.NewParser(parser.Macros(parser.HasMacro))
	if err != nil {
		return false
	}
	tree, errs := p.Parse(common.NewTextSource(rule))
	if len(errs.GetErrors()) > 0 {
		return false
	}
	v, known := fold(tree.Expr(), absent)
	return known && v
}

// fold evaluates e where it can from constants and has(self.F) of absent fields: the value,
// and whether it is known.
func fold(e ast.Expr, absent []string) (value, known bool) {
	switch e.Kind() {
	case ast.LiteralKind:
		b, ok := e.AsLiteral().(types.Bool)
		return bool(b), ok
	case ast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() && s.Operand().Kind() == ast.IdentKind && s.Operand().AsIdent() == "self" && slices.Contains(absent, s.FieldName()) {
			return false, true
		}
		return false, false
	case ast.CallKind:
	default:
		return false, false
	}
	c := e.AsCall()
	args := c.Args()
	switch c.FunctionName() {
	case operators.LogicalNot:
		if len(args) != 1 {
			return false, false
		}
		v, ok := fold(args[0], absent)
		return !v, ok
	case operators.LogicalOr, operators.LogicalAnd:
		// a || b is true when either is true, false when both are; && the other way round.
		// (CEL's || and && are commutative, errors absorbed by a deciding operand.)
		decides := c.FunctionName() == operators.LogicalOr
		all := true
		for _, a := range args {
			v, ok := fold(a, absent)
			if ok && v == decides {
				return decides, true
			}
			all = all && ok
		}
		return !decides, all
	case operators.Conditional:
		if len(args) != 3 {
			return false, false
		}
		// Only a known condition: one that is not may be an error, which is the result.
		cond, ok := fold(args[0], absent)
		switch {
		case !ok:
			return false, false
		case cond:
			return fold(args[1], absent)
		default:
			return fold(args[2], absent)
		}
	}
	return false, false
}

// fields: a removed field is pruned from stored objects; a newly required one refuses them.
func (w *walker) fields(o, n *apiextensionsv1.JSONSchemaProps, path string) {
	names := make([]string, 0, len(o.Properties))
	for name := range o.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		op := o.Properties[name]
		np, ok := n.Properties[name]
		if !ok {
			if !isTrue(n.XPreserveUnknownFields) {
				w.add(path+"."+name, "field removed")
			}
			continue
		}
		w.walk(&op, &np, path+"."+name)
	}
	for _, r := range n.Required {
		if !slices.Contains(o.Required, r) {
			w.add(path+"."+r, "field became required")
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func str[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func intStr(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

func rawJSON(j *apiextensionsv1.JSON) string {
	if j == nil {
		return ""
	}
	var v any
	if err := json.Unmarshal(j.Raw, &v); err != nil {
		return string(j.Raw)
	}
	out, _ := json.Marshal(v) // canonical: sorted keys, no spaces
	return string(out)
}

func enumStr(vals []apiextensionsv1.JSON) string {
	parts := make([]string, 0, len(vals))
	for _, v := range vals {
		parts = append(parts, string(v.Raw))
	}
	return strings.Join(parts, ", ")
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
