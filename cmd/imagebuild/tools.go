package main

import (
	"crypto/md5"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Tools are the programs an image carries besides its service binary,
// taken from the build machine's installed Debian packages (as the CA
// certificates are): each executable with the shared libraries it needs,
// found as the dynamic loader finds them, and the loader; and data
// packages whose files those programs read (fontconfig's configuration, a
// font). Every file is checked against the md5sum dpkg recorded when it
// was installed, so a file changed on the build machine stops the build.
type Tools struct {
	// Executables are absolute paths, e.g. /usr/bin/pdftotext.
	Executables []string
	// DataPackages are packages whose files are taken whole (but for
	// /usr/share/doc and manual pages).
	DataPackages []string
}

// multiarch is the Debian multiarch triplet of each GOARCH images are
// built for.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// toolFiles is what toolEntries found: the layer's entries, the packages
// they came from with their versions, and the shared libraries' count.
type toolFiles struct {
	entries  []entry
	packages []string // "name version", sorted
	libs     int
}

// dpkgFile is one file an installed package ships, with its md5sum.
type dpkgFile struct{ pkg, md5 string }

// toolEntries collects t's files from the Debian system under root for
// arch (only the build machine's own architecture can be taken this way).
func toolEntries(root, arch string, t Tools) (toolFiles, error) {
	triplet, ok := multiarch[arch]
	if !ok {
		return toolFiles{}, fmt.Errorf("tools: no Debian multiarch triplet known for %s", arch)
	}
	owned, err := dpkgFiles(root)
	if err != nil {
		return toolFiles{}, err
	}
	c := &collector{root: root, owned: owned, files: map[string]int64{}, pkgs: map[string]bool{},
		searchDirs: []string{"lib/" + triplet, "usr/lib/" + triplet, "lib", "usr/lib"}}
	for _, exe := range t.Executables {
		if err := c.elf(strings.TrimPrefix(exe, "/"), 0o755); err != nil {
			return toolFiles{}, err
		}
	}
	for _, pkg := range t.DataPackages {
		if err := c.dataPackage(pkg); err != nil {
			return toolFiles{}, err
		}
	}
	var out toolFiles
	names := make([]string, 0, len(c.files))
	for n := range c.files {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		out.entries = append(out.entries, entry{name: d, mode: 0o755})
	}
	for _, n := range names {
		data, _, err := c.read(n)
		if err != nil {
			return toolFiles{}, err
		}
		out.entries = append(out.entries, entry{name: n, mode: c.files[n], data: data})
		if c.files[n] == 0o644 && strings.Contains(path.Base(n), ".so") {
			out.libs++
		}
	}
	installed, err := dpkgStatus(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return toolFiles{}, err
	}
	for _, p := range slices.Sorted(maps.Keys(c.pkgs)) {
		out.packages = append(out.packages, p+" "+installed[p].version)
	}
	return out, nil
}

// collector gathers files under root, each checked against dpkg.
type collector struct {
	root       string
	owned      map[string]dpkgFile // path without leading slash → owner
	searchDirs []string            // the loader's system search path
	files      map[string]int64    // image path → mode
	pkgs       map[string]bool     // packages files came from
}

// read returns the content of the file the image path p names on the
// build machine (following symlinks), checked against dpkg's md5sum, and
// its owning package.
func (c *collector) read(p string) ([]byte, string, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(c.root, p))
	if err != nil {
		return nil, "", fmt.Errorf("tools: %w", err)
	}
	rel, err := filepath.Rel(c.root, real)
	if err != nil {
		return nil, "", err
	}
	rel = filepath.ToSlash(rel)
	// Under the merged /usr, the file may be recorded by the path it was
	// packaged at: /lib/... for what the machine has under /usr/lib/....
	f, ok := c.owned[rel]
	if alt, cut := strings.CutPrefix(rel, "usr/"); !ok && cut {
		f, ok = c.owned[alt]
	}
	if !ok {
		return nil, "", fmt.Errorf("tools: /%s (for /%s) belongs to no installed Debian package with an md5sum", rel, p)
	}
	data, err := os.ReadFile(real)
	if err != nil {
		return nil, "", fmt.Errorf("tools: %w", err)
	}
	if sum := md5.Sum(data); hex.EncodeToString(sum[:]) != f.md5 {
		return nil, "", fmt.Errorf("tools: /%s differs from package %s's (md5sum %s, dpkg recorded %s)", rel, f.pkg, hex.EncodeToString(sum[:]), f.md5)
	}
	return data, f.pkg, nil
}

// add records image path p with mode after checking it; it reports
// whether p is new.
func (c *collector) add(p string, mode int64) (bool, error) {
	if _, seen := c.files[p]; seen {
		return false, nil
	}
	_, pkg, err := c.read(p)
	if err != nil {
		return false, err
	}
	c.files[p], c.pkgs[pkg] = mode, true
	return true, nil
}

// elf adds the ELF file p, its loader (PT_INTERP) and, recursively, the
// libraries it needs (DT_NEEDED) where the loader's system search path
// finds them.
func (c *collector) elf(p string, mode int64) error {
	isNew, err := c.add(p, mode)
	if err != nil || !isNew {
		return err
	}
	f, err := elf.Open(filepath.Join(c.root, p))
	if err != nil {
		return fmt.Errorf("tools: /%s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return fmt.Errorf("tools: /%s: interpreter: %w", p, err)
		}
		// The loader is executed by the kernel: it keeps its exec bit.
		if err := c.elf(strings.TrimPrefix(strings.TrimRight(string(b), "\x00"), "/"), 0o755); err != nil {
			return err
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("tools: /%s: %w", p, err)
	}
	for _, lib := range needed {
		i := slices.IndexFunc(c.searchDirs, func(d string) bool {
			_, err := os.Stat(filepath.Join(c.root, d, lib))
			return err == nil
		})
		if i < 0 {
			return fmt.Errorf("tools: /%s needs %s, which is in none of /%s", p, lib, strings.Join(c.searchDirs, ", /"))
		}
		if err := c.elf(c.searchDirs[i]+"/"+lib, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// dataPackage adds the files (and the files symlinks point to, under the
// link's name) of an installed package, but for documentation.
func (c *collector) dataPackage(pkg string) error {
	list, err := os.ReadFile(filepath.Join(c.root, "var/lib/dpkg/info", pkg+".list"))
	if err != nil {
		return fmt.Errorf("tools: package %s is not installed: %w", pkg, err)
	}
	for _, line := range strings.Split(string(list), "\n") {
		p := strings.TrimPrefix(line, "/")
		if p == "" || p == "." || strings.HasPrefix(p, "usr/share/doc/") || strings.HasPrefix(p, "usr/share/man/") {
			continue
		}
		fi, err := os.Stat(filepath.Join(c.root, p))
		if err != nil {
			return fmt.Errorf("tools: package %s: %w", pkg, err)
		}
		if fi.IsDir() {
			continue
		}
		if _, err := c.add(p, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// dpkgFiles maps every file the installed packages under root ship with
// an md5sum (their md5sums lists, and their conffiles as dpkg's status
// records them) to its package.
func dpkgFiles(root string) (map[string]dpkgFile, error) {
	sums, err := filepath.Glob(filepath.Join(root, "var/lib/dpkg/info/*.md5sums"))
	if err != nil || len(sums) == 0 {
		return nil, errors.Join(errors.New("tools: no dpkg md5sums (not a Debian machine?)"), err)
	}
	out := map[string]dpkgFile{}
	for _, s := range sums {
		data, err := os.ReadFile(s)
		if err != nil {
			return nil, err
		}
		pkg, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(s), ".md5sums"), ":")
		for _, line := range strings.Split(string(data), "\n") {
			if sum, p, ok := strings.Cut(line, "  "); ok {
				out[p] = dpkgFile{pkg: pkg, md5: sum}
			}
		}
	}
	installed, err := dpkgStatus(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	for _, st := range installed {
		for _, line := range strings.Split(st.conffiles, "\n") {
			// " /etc/fonts/fonts.conf 9c01e1...", maybe followed by "obsolete".
			if f := strings.Fields(line); len(f) >= 2 {
				out[strings.TrimPrefix(f[0], "/")] = dpkgFile{pkg: st.name, md5: f[1]}
			}
		}
	}
	return out, nil
}

// installedPackage is one installed package of dpkg's status file.
type installedPackage struct{ name, version, conffiles string }

// dpkgStatus reads the installed packages of dpkg's status file.
func dpkgStatus(statusFile string) (map[string]installedPackage, error) {
	data, err := os.ReadFile(statusFile)
	if err != nil {
		return nil, fmt.Errorf("dpkg status (not a Debian machine?): %w", err)
	}
	out := map[string]installedPackage{}
	for _, stanza := range strings.Split(string(data), "\n\n") {
		fields := map[string]string{}
		var last string
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(line, " ") && last != "" {
				fields[last] += "\n" + line // a continuation line
				continue
			}
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k], last = strings.TrimSpace(v), k
			}
		}
		if strings.HasSuffix(fields["Status"], " installed") {
			out[fields["Package"]] = installedPackage{name: fields["Package"], version: fields["Version"], conffiles: fields["Conffiles"]}
		}
	}
	return out, nil
}
