package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const notesFile = "RELEASE_NOTES.md"

// commit is one entry of the log.
type commit struct {
	hash, subject string
}

// writeNotes writes the release notes: the artifacts and the image's digest, then every
// commit since the last tag (or --since), grouped by the area its subject names ("area: what
// and why", the house style), as cert-manager's and Kueue's notes are grouped by kind.
func writeNotes(ctx context.Context, o options, m meta, digest v1.Hash) error {
	since := notesSince(ctx, o, m)
	rangeArg := m.commit
	if since != "" {
		rangeArg = since + ".." + m.commit
	}
	out, err := git(ctx, o.repo, "log", "--no-merges", "--abbrev=12", "--format=%h%x09%s", rangeArg)
	if err != nil {
		return err
	}
	var commits []commit
	for _, line := range strings.Split(out, "\n") {
		if h, s, ok := strings.Cut(line, "\t"); ok {
			commits = append(commits, commit{h, s})
		}
	}
	text := renderNotes(o, m, digest, since, commits)
	return os.WriteFile(filepath.Join(o.out, notesFile), []byte(text), 0o644)
}

// notesSince is where the notes start: --since, else the newest tag reachable from the
// commit other than the release's own, else "" (every commit: the first release).
func notesSince(ctx context.Context, o options, m meta) string {
	if o.since != "" {
		return o.since
	}
	tag, err := git(ctx, o.repo, "describe", "--tags", "--abbrev=0", "--match=v[0-9]*", "--exclude="+m.version, m.commit)
	if err != nil {
		// No tag: git describe fails with "No names found" (or "cannot describe"), and the
		// notes list every commit.
		tag = ""
	}
	return tag
}

// areaPrefix is a subject's area: a short prefix before ": ".
var areaPrefix = regexp.MustCompile(`^([A-Za-z0-9_./ -]{1,32}): `)

// renderNotes is the notes' Markdown.
func renderNotes(o options, m meta, digest v1.Hash, since string, commits []commit) string {
	var b strings.Builder
	ref := fmt.Sprintf("%s:%s@%s", o.image, m.version, digest)
	fmt.Fprintf(&b, "# Turnstile %s\n\nBuilt from commit %s (%s).\n\n", m.version, m.commit, m.epoch.Format("2006-01-02 15:04 UTC"))
	b.WriteString("## Artifacts\n\n")
	for _, row := range [][2]string{
		{"Manager image (" + platformList(imagePlatforms) + ")", "`" + ref + "`"},
		{"Helm chart, the image pinned by digest", "`" + chartFile(m) + "`"},
		{"Install bundles for `kubectl apply --server-side -f`", bundleList(o)},
		{"kubectl plugin (" + platformList(pluginPlatforms) + ")", "`" + pluginName + "_" + m.version + "_OS_ARCH.tar.gz` (`.zip` on Windows); krew manifest `" + krewFile + "`"},
		{"SBOMs (CycloneDX " + sbomSpec.String() + ")", "`" + imageSBOMFile + "`, `" + pluginSBOMFile + "`"},
		{"Checksums", "`" + sumsFile + "` (`sha256sum -c " + sumsFile + "`)"},
	} {
		fmt.Fprintf(&b, "- %s: %s\n", row[0], row[1])
	}
	fmt.Fprintf(&b, "\nInstalling, upgrading and verifying the digests and SBOMs: %s/blob/%s/docs/install.md\n\n", projectURL, m.version)
	if since == "" {
		fmt.Fprintf(&b, "## Changes (the first release: every commit, %d)\n", len(commits))
	} else {
		fmt.Fprintf(&b, "## Changes since %s (%d commits)\n", since, len(commits))
	}
	groups := map[string][]string{}
	for _, c := range commits {
		area, what := "other", c.subject
		if mm := areaPrefix.FindStringSubmatch(c.subject); mm != nil {
			area, what = mm[1], strings.TrimPrefix(c.subject, mm[0])
		}
		groups[area] = append(groups[area], fmt.Sprintf("- %s (%s)", what, c.hash))
	}
	areas := make([]string, 0, len(groups))
	for a := range groups {
		if a != "other" {
			areas = append(areas, a)
		}
	}
	// Case-insensitively, and areas that differ only in case ("api", "API") by their bytes: the
	// map gives them in any order, and the notes must be the same on every build.
	sort.Slice(areas, func(i, j int) bool {
		if a, b := strings.ToLower(areas[i]), strings.ToLower(areas[j]); a != b {
			return a < b
		}
		return areas[i] < areas[j]
	})
	if _, ok := groups["other"]; ok {
		areas = append(areas, "other")
	}
	for _, a := range areas {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n", a, strings.Join(groups[a], "\n"))
	}
	return b.String()
}

func platformList(ps []platform) string {
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

// bundleList names each install bundle and the clusters it is for.
func bundleList(o options) string {
	var parts []string
	for _, b := range bundles {
		if _, err := os.Stat(filepath.Join(o.out, b.file)); err != nil {
			continue // not in a source from before its overlay
		}
		parts = append(parts, "`"+b.file+"` ("+b.clusters+")")
	}
	return strings.Join(parts, "; ")
}
