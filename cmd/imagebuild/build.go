package main

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// forbiddenModules must not be linked into a service binary: the embedded
// infrastructure belongs to the agentmesh CLI and the tests (DESIGN.md,
// "Storage").
var forbiddenModules = []string{
	"github.com/FerretDB/FerretDB",
	"github.com/nats-io/nats-server/v2",
}

// goBuildFlags are the flags of the `go build` that makes the image
// binaries, here and in the Dockerfile: no local paths, no VCS stamp (a
// Docker build context has no .git, and the revision is a label), no symbol
// tables, and the version the services report.
func goBuildFlags(version string) []string {
	return []string{"-trimpath", "-buildvcs=false", "-ldflags", "-s -w -X " + versionVar + "=" + version}
}

// goBuildEnv is the environment of that `go build`: CGO off, so the binary
// needs no libc, for Linux on arch.
func goBuildEnv(arch string) []string {
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}
}

// buildBinaries builds the binaries of imgs into dir with one `go build`
// run in the repository root, and checks each is static. Its output goes
// to log.
func buildBinaries(ctx context.Context, repo, dir, version, arch string, imgs []Image, log io.Writer) error {
	args := append([]string{"build"}, goBuildFlags(version)...)
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, packages(imgs)...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), goBuildEnv(arch)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	var errs []error
	for _, im := range imgs {
		if err := checkStatic(filepath.Join(dir, im.Name)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", im.Name, err))
		}
	}
	return errors.Join(errs...)
}

// checkStatic returns an error unless path is a Go binary for Linux that
// runs on an empty root filesystem: no ELF interpreter, no shared
// libraries, built with CGO_ENABLED=0, and none of forbiddenModules linked.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked: it has an ELF interpreter (PT_INTERP)")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read its dynamic section: %w", err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("needs shared libraries %v", libs)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("no Go build information: %w", err)
	}
	return checkBuildInfo(info)
}

// checkBuildInfo returns an error unless info says CGO_ENABLED=0, GOOS=linux
// and no forbidden module.
func checkBuildInfo(info *buildinfo.BuildInfo) error {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if v := settings["CGO_ENABLED"]; v != "0" {
		return fmt.Errorf("built with CGO_ENABLED=%q, want 0", v)
	}
	if v := settings["GOOS"]; v != "linux" {
		return fmt.Errorf("built for GOOS=%q, want linux", v)
	}
	for _, d := range info.Deps {
		for _, m := range forbiddenModules {
			if d.Path == m {
				return fmt.Errorf("links %s %s, which only the agentmesh CLI and tests may link", d.Path, d.Version)
			}
		}
	}
	return nil
}
