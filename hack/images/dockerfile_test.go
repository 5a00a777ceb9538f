// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// stage is one FROM ... AS name of a Dockerfile: its base and its
// instructions, continuation lines joined.
type stage struct {
	from  string
	instr [][2]string // keyword (upper case), rest
}

func parseDockerfile(t *testing.T, path string) map[string]*stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages := map[string]*stage{}
	var cur *stage
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if line == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			line += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		line += l
		kw, rest, _ := strings.Cut(line, " ")
		kw, rest, line = strings.ToUpper(kw), strings.TrimSpace(rest), ""
		if kw == "FROM" {
			f := strings.Fields(rest)
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				t.Fatalf("Dockerfile: FROM %s: every stage is named", rest)
			}
			cur = &stage{from: f[0]}
			stages[f[2]] = cur
			continue
		}
		if cur != nil {
			cur.instr = append(cur.instr, [2]string{kw, rest})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func (s *stage) all(kw string) []string {
	var out []string
	for _, in := range s.instr {
		if in[0] == kw {
			out = append(out, in[1])
		}
	}
	return out
}

func jsonList(t *testing.T, s string) []string {
	t.Helper()
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		t.Fatalf("%s: not a JSON list: %v", s, err)
	}
	return l
}

// goBuild is the `go build` command line of a text (build.sh or a RUN),
// with ${VERSION} and $version as one word and the output path left out.
var goBuild = regexp.MustCompile(`CGO_ENABLED=0 go build (.*?) -o \S+ (\./cmd/svcnet \./cmd/svcnet-agent)`)

func buildFlags(t *testing.T, where, text string) string {
	t.Helper()
	m := goBuild.FindStringSubmatch(strings.Join(strings.Fields(strings.ReplaceAll(text, "\\\n", " ")), " "))
	if m == nil {
		t.Fatalf("%s: no `CGO_ENABLED=0 go build ... -o ... ./cmd/svcnet ./cmd/svcnet-agent`", where)
	}
	return regexp.MustCompile(`\$\{?(VERSION|version)\}?`).ReplaceAllString(m[1], "VERSION") + " " + m[2]
}

// TestDockerfileBuildsTheSameImages: the Dockerfile's final stages are the
// images of Specs (entrypoint, cmd, env, user, the binary's path) made of
// the same parts as `make images` (the binary built with build.sh's flags,
// the roots of root.sh), on the Go version go.mod names.
func TestDockerfileBuildsTheSameImages(t *testing.T) {
	stages := parseDockerfile(t, "../../Dockerfile")
	build, roots := stages["build"], stages["roots"]
	if build == nil || roots == nil {
		t.Fatal("Dockerfile: stages build and roots are missing")
	}
	script, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := buildFlags(t, "Dockerfile", strings.Join(build.all("RUN"), "\n")), buildFlags(t, "build.sh", string(script)); got != want {
		t.Errorf("Dockerfile builds the binaries with\n  %s\nmake images with\n  %s", got, want)
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	dockerfile, _ := os.ReadFile("../../Dockerfile")
	if goVersion == nil || !strings.Contains(string(dockerfile), "ARG GO_VERSION="+goVersion[1]+"\n") {
		t.Errorf("Dockerfile: ARG GO_VERSION is not go.mod's go %v", goVersion)
	}
	rootsRun := strings.Join(roots.all("RUN"), " ")

	for _, spec := range Specs {
		s := stages[spec.Name]
		if s == nil {
			t.Errorf("Dockerfile has no stage %s", spec.Name)
			continue
		}
		if s.from != "scratch" {
			t.Errorf("stage %s is FROM %s, want scratch: its files are the root's and the binary", spec.Name, s.from)
		}
		wantCopy := []string{"--from=roots /roots/" + spec.Name + "/ /", "--from=build /out/" + spec.Command + " " + spec.Binary}
		if got := s.all("COPY"); !slices.Equal(got, wantCopy) {
			t.Errorf("stage %s copies %q, want %q", spec.Name, got, wantCopy)
		}
		if got := s.all("ENV"); !slices.Equal(got, spec.Env) {
			t.Errorf("stage %s: ENV %q, want %q", spec.Name, got, spec.Env)
		}
		if got := s.all("USER"); !slices.Equal(got, []string{spec.User}) {
			t.Errorf("stage %s: USER %q, want %q", spec.Name, got, spec.User)
		}
		for kw, want := range map[string][]string{"ENTRYPOINT": spec.Entrypoint, "CMD": spec.Cmd} {
			got := s.all(kw)
			if len(got) != 1 || !slices.Equal(jsonList(t, got[0]), want) {
				t.Errorf("stage %s: %s %q, want %q", spec.Name, kw, got, want)
			}
		}
		rootCmd := "/images/root.sh " + spec.Name + " /roots/" + spec.Name
		if !strings.Contains(rootsRun, rootCmd) {
			t.Errorf("stage roots does not run %q", rootCmd)
		}
		if bad := s.all("RUN"); len(bad) > 0 {
			t.Errorf("stage %s runs %q: the image's files come from root.sh alone", spec.Name, bad)
		}
	}
}
