package validation

import "strings"

// targetCase is an invalid lock target: the fields of over replace those of a valid target (nil
// removes one); field is the offending field ("" for the target itself) and wantErr the phrases
// the rejection must contain besides the field's path. The same cases run against
// LockRequest.spec.locks[0] and ProjectLock.spec, which share the LockTarget schema.
type targetCase struct {
	over    map[string]any
	field   string
	wantErr []string
}

func targetRejections() map[string]targetCase {
	return map[string]targetCase{
		// repo
		"repo without name":             {over: map[string]any{"repo": "acme"}, field: "repo", wantErr: []string{msgRepo}},
		"repo with empty name":          {over: map[string]any{"repo": "acme/"}, field: "repo", wantErr: []string{msgRepo}},
		"repo with empty owner":         {over: map[string]any{"repo": "/infra"}, field: "repo", wantErr: []string{msgRepo}},
		"repo with a space":             {over: map[string]any{"repo": "ac me/infra"}, field: "repo", wantErr: []string{msgRepo}},
		"repo with empty group segment": {over: map[string]any{"repo": "acme//infra"}, field: "repo", wantErr: []string{msgRepo}},
		"repo with trailing slash":      {over: map[string]any{"repo": "group/sub/"}, field: "repo", wantErr: []string{msgRepo}},
		"repo of 2 chars":               {over: map[string]any{"repo": "a/"}, field: "repo", wantErr: []string{"should be at least 3 chars long"}},
		"repo of 201 chars":             {over: map[string]any{"repo": "acme/" + strings.Repeat("r", 196)}, field: "repo", wantErr: []string{"Too long", "200"}},
		"repo missing":                  {over: map[string]any{"repo": nil}, field: "repo", wantErr: []string{"Required value"}},
		"repo with name ..":             {over: map[string]any{"repo": "acme/.."}, field: "repo", wantErr: []string{msgRepoDots}},
		"repo with name .":              {over: map[string]any{"repo": "acme/."}, field: "repo", wantErr: []string{msgRepoDots}},
		"repo with owner .":             {over: map[string]any{"repo": "./x"}, field: "repo", wantErr: []string{msgRepoDots}},
		"repo with owner ..":            {over: map[string]any{"repo": "../x"}, field: "repo", wantErr: []string{msgRepoDots}},
		"repo with a .. group":          {over: map[string]any{"repo": "group/../name"}, field: "repo", wantErr: []string{msgRepoDots}},
		"repo with a . group":           {over: map[string]any{"repo": "group/./name"}, field: "repo", wantErr: []string{msgRepoDots}},
		// path
		"absolute path":                {over: map[string]any{"path": "/modules/vpc"}, field: "path", wantErr: []string{msgPathAbsolute}},
		"path /":                       {over: map[string]any{"path": "/"}, field: "path", wantErr: []string{msgPathAbsolute}},
		"path with .. segment":         {over: map[string]any{"path": "modules/../vpc"}, field: "path", wantErr: []string{msgPathDots}},
		"path ..":                      {over: map[string]any{"path": ".."}, field: "path", wantErr: []string{msgPathDots}},
		"path with trailing ..":        {over: map[string]any{"path": "modules/.."}, field: "path", wantErr: []string{msgPathDots}},
		"path with leading . segment":  {over: map[string]any{"path": "./x"}, field: "path", wantErr: []string{msgPathDots}},
		"path with inner . segment":    {over: map[string]any{"path": "a/./b"}, field: "path", wantErr: []string{msgPathDots}},
		"path with trailing . segment": {over: map[string]any{"path": "a/."}, field: "path", wantErr: []string{msgPathDots}},
		"path with leading ..":         {over: map[string]any{"path": "../x"}, field: "path", wantErr: []string{msgPathDots}},
		"path ./":                      {over: map[string]any{"path": "./"}, field: "path", wantErr: []string{msgPathDots}},
		"path with trailing slash":     {over: map[string]any{"path": "modules/vpc/"}, field: "path", wantErr: []string{msgPathSegments}},
		"path with empty segment":      {over: map[string]any{"path": "a//b"}, field: "path", wantErr: []string{msgPathSegments}},
		"path with a space":            {over: map[string]any{"path": "my modules/vpc"}, field: "path", wantErr: []string{msgPathSegments}},
		"path empty":                   {over: map[string]any{"path": ""}, field: "path", wantErr: []string{"should be at least 1 chars long"}},
		"path of 254 chars":            {over: map[string]any{"path": strings.Repeat("p", 254)}, field: "path", wantErr: []string{"Too long", "253"}},
		// workspace
		"workspace starting with -": {over: map[string]any{"workspace": "-x"}, field: "workspace", wantErr: []string{msgWorkspace}},
		"workspace starting with .": {over: map[string]any{"workspace": ".x"}, field: "workspace", wantErr: []string{msgWorkspace}},
		"workspace with a space":    {over: map[string]any{"workspace": "a b"}, field: "workspace", wantErr: []string{msgWorkspace}},
		"workspace with a slash":    {over: map[string]any{"workspace": "a/b"}, field: "workspace", wantErr: []string{msgWorkspace}},
		"workspace of 64 chars":     {over: map[string]any{"workspace": strings.Repeat("w", 64)}, field: "workspace", wantErr: []string{"Too long", "63"}},
		"workspace empty":           {over: map[string]any{"workspace": ""}, field: "workspace", wantErr: []string{"should be at least 1 chars long"}},
		// project
		"project starting with .": {over: map[string]any{"project": ".edge"}, field: "project", wantErr: []string{msgProject}},
		"project with a slash":    {over: map[string]any{"project": "edge/west"}, field: "project", wantErr: []string{msgProject}},
		"project with a space":    {over: map[string]any{"project": "a b"}, field: "project", wantErr: []string{msgProject}},
		"project of 64 chars":     {over: map[string]any{"project": strings.Repeat("p", 64)}, field: "project", wantErr: []string{"Too long", "63"}},
		// The type-level rule reports on the target itself, not on its project field.
		"project empty": {over: map[string]any{"project": ""}, field: "", wantErr: []string{msgProjectEmpty}},
	}
}

// errorsAt is what the API server must say when the target at base (e.g. spec.locks[0]) is
// rejected: the field's path, then the case's phrases.
func (tc targetCase) errorsAt(base string) []string {
	return append([]string{fieldPath(base, tc.field)}, tc.wantErr...)
}

// fieldPath joins a target's path and a field in it.
func fieldPath(base, field string) string {
	if field == "" {
		return base
	}
	return base + "." + field
}
