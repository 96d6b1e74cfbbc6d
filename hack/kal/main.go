// Command kal runs the Kube API Linter (sigs.k8s.io/kube-api-linter) on Turnstile's API packages.
//
// KAL ships as a golangci-lint module plugin; building a custom golangci-lint with it compiles all
// of golangci-lint's linters again (minutes). This driver builds only KAL's analyzers, from KAL's
// own plugin entry (kubeapilinter.New(settings).BuildAnalyzers(), the code golangci-lint calls),
// and runs them with golang.org/x/tools/go/analysis/checker. It lives in its own module so that
// KAL's dependencies stay out of Turnstile's go.mod.
//
// Usage (from the repository root; `make lint` runs it):
//
//	kal -config hack/kal/config.yaml ./api/...
//
// The configuration file's `settings` are the plugin's settings exactly as they would sit under
// linters.settings.custom.kubeapilinter.settings in a .golangci.yml; its `exclusions` drop named
// findings (linter plus a message regexp, with a reason), and one that matches nothing is an
// error. Findings are printed as file:line:col: message (linter), and the exit code is 1 when
// there are any. Test files and generated files ("Code generated ... DO NOT EDIT.") are not
// linted, as golangci-lint does not lint them.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"
	kubeapilinter "sigs.k8s.io/kube-api-linter"
	"sigs.k8s.io/yaml"
)

func main() {
	configPath := flag.String("config", "hack/kal/config.yaml", "configuration: KAL's plugin settings and exclusions")
	dir := flag.String("C", ".", "directory of the module whose packages are linted")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: kal [-config file] [-C dir] packages...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}

	n, err := run(*configPath, *dir, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kal:", err)
		os.Exit(2)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "kal: %d issue(s)\n", n)
		os.Exit(1)
	}
}

// run lints the packages matching patterns and prints each finding; it returns how many there were.
func run(configPath, dir string, patterns []string) (int, error) {
	cfg, err := readConfig(configPath)
	if err != nil {
		return 0, err
	}
	analyzers, err := buildAnalyzers(configPath, cfg.Settings)
	if err != nil {
		return 0, err
	}

	load := &packages.Config{Mode: packages.LoadSyntax, Dir: dir, Tests: false}
	pkgs, err := packages.Load(load, patterns...)
	if err != nil {
		return 0, fmt.Errorf("loading packages: %w", err)
	}
	if len(pkgs) == 0 {
		return 0, fmt.Errorf("no packages match %v", patterns)
	}
	// A package that does not compile would be linted on a partial AST: refuse it instead.
	if packages.PrintErrors(pkgs) > 0 {
		return 0, fmt.Errorf("the packages have errors")
	}

	graph, err := checker.Analyze(analyzers, pkgs, nil)
	if err != nil {
		return 0, fmt.Errorf("running analyzers: %w", err)
	}

	type finding struct {
		pos     token.Position
		message string
	}
	var findings []finding
	for _, act := range graph.Roots {
		if act.Err != nil {
			return 0, fmt.Errorf("%s on %s: %w", act.Analyzer.Name, act.Package.PkgPath, act.Err)
		}
		generated := generatedFiles(act.Package)
		for _, d := range act.Diagnostics {
			pos := act.Package.Fset.Position(d.Pos)
			if generated[pos.Filename] || cfg.excluded(act.Analyzer.Name, d.Message) {
				continue
			}
			findings = append(findings, finding{pos: pos, message: fmt.Sprintf("%s (%s)", d.Message, act.Analyzer.Name)})
		}
	}

	for _, x := range cfg.Exclusions {
		if !x.used {
			return 0, fmt.Errorf("%s: exclusion (%s, %q) matches nothing: remove it", configPath, x.Linter, x.Text)
		}
	}

	sort.Slice(findings, func(i, j int) bool {
		a, b := findings[i].pos, findings[j].pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return findings[i].message < findings[j].message
	})
	wd, _ := os.Getwd()
	for _, f := range findings {
		name := f.pos.Filename
		if rel, err := filepath.Rel(wd, name); err == nil {
			name = rel
		}
		fmt.Printf("%s:%d:%d: %s\n", name, f.pos.Line, f.pos.Column, f.message)
	}
	return len(findings), nil
}

// config is the driver's configuration file.
type config struct {
	// Settings are KAL's plugin settings (linters, lintersConfig), exactly as under
	// linters.settings.custom.kubeapilinter.settings in a .golangci.yml.
	Settings map[string]any `json:"settings"`
	// Exclusions drop findings of shipped fields that a linter's fix would change on the wire,
	// as golangci-lint's exclusions.rules do. Each must match at least one finding.
	Exclusions []exclusion `json:"exclusions"`
}

// exclusion drops the findings of one linter whose message matches Text.
type exclusion struct {
	Linter string `json:"linter"`
	Text   string `json:"text"`
	Reason string `json:"reason"`

	re   *regexp.Regexp
	used bool
}

func readConfig(path string) (*config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c config
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range c.Exclusions {
		x := &c.Exclusions[i]
		if x.Linter == "" || x.Text == "" || x.Reason == "" {
			return nil, fmt.Errorf("%s: exclusion %d needs linter, text and reason", path, i+1)
		}
		if x.re, err = regexp.Compile(x.Text); err != nil {
			return nil, fmt.Errorf("%s: exclusion %d: %w", path, i+1, err)
		}
	}
	return &c, nil
}

// buildAnalyzers builds the enabled analyzers through KAL's plugin entry, which validates the
// settings as golangci-lint would.
func buildAnalyzers(configPath string, settings map[string]any) ([]*analysis.Analyzer, error) {
	plugin, err := kubeapilinter.New(settings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	analyzers, err := plugin.BuildAnalyzers()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	if len(analyzers) == 0 {
		return nil, fmt.Errorf("%s enables no linters", configPath)
	}
	return analyzers, nil
}

// excluded reports whether an exclusion drops this finding, and marks the exclusion used.
func (c *config) excluded(linter, message string) bool {
	for i := range c.Exclusions {
		x := &c.Exclusions[i]
		if x.Linter == linter && x.re.MatchString(message) {
			x.used = true
			return true
		}
	}
	return false
}

// generatedFiles names the package's files that carry the "Code generated ... DO NOT EDIT." line.
func generatedFiles(pkg *packages.Package) map[string]bool {
	out := map[string]bool{}
	for _, f := range pkg.Syntax {
		if ast.IsGenerated(f) {
			out[pkg.Fset.Position(f.Pos()).Filename] = true
		}
	}
	return out
}
