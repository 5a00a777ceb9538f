// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	binaries := flag.String("binaries", "", "folder of the images' binaries (static): svcnet and svcnet-agent")
	roots := flag.String("roots", "", "folder of the images' roots (root.sh), one sub-folder per image name")
	out := flag.String("out", "", "folder the archives <name>.tar are written to")
	version := flag.String("version", "devel", "svcnet's version: the images' version label and tag")
	flag.Parse()
	if *binaries == "" || *roots == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	tags := []string{tagOf(*version)}
	if tags[0] != "latest" {
		tags = append(tags, "latest")
	}
	var lines []string
	for _, spec := range Specs {
		b, err := build(spec, Inputs{Binaries: *binaries, Root: filepath.Join(*roots, spec.Name), Version: *version, Tags: tags}, *out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		line := fmt.Sprintf("%s %s@%s %d", b.Archive, spec.Repository, b.Digest, b.Size)
		fmt.Println("images:", line)
		lines = append(lines, fmt.Sprintf("%s %s@%s", filepath.Base(b.Archive), spec.Repository, b.Digest))
	}
	if err := os.WriteFile(filepath.Join(*out, "digests.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// tagOf makes a version a valid tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
func tagOf(version string) string {
	t := []byte(version)
	for i, c := range t {
		ok := c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c == '.' || c == '-')
		if !ok {
			t[i] = '_'
		}
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return string(t)
}
