package main

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// caDebian is the -ca value that builds the bundle from the build machine's
// Debian ca-certificates package rather than from a file.
const caDebian = "debian"

// debianCertPath matches the certificates the ca-certificates package ships.
var debianCertPath = regexp.MustCompile(`^usr/share/ca-certificates/.+\.crt$`)

// debianCA builds the CA bundle from the ca-certificates package installed
// under root, as update-ca-certificates does with no local additions: the
// package's own certificate files, in byte order, concatenated. The
// machine's /etc/ssl/certs/ca-certificates.crt is not used because it also
// holds whatever this machine was told to trust (/usr/local/share/
// ca-certificates: a company or sandbox proxy CA), which must not reach an
// image. Each file is checked against the md5sum dpkg recorded at install,
// so a modified certificate stops the build. It returns the bundle and a
// description naming the package version.
func debianCA(root string) ([]byte, string, error) {
	version, err := debianPackageVersion(filepath.Join(root, "var/lib/dpkg/status"), "ca-certificates")
	if err != nil {
		return nil, "", err
	}
	sums, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/ca-certificates.md5sums"))
	if err != nil {
		return nil, "", fmt.Errorf("ca-certificates file list: %w", err)
	}
	want := map[string]string{}
	var paths []string
	for _, line := range strings.Split(string(sums), "\n") {
		sum, path, ok := strings.Cut(line, "  ")
		if !ok || !debianCertPath.MatchString(path) {
			continue
		}
		want[path] = sum
		paths = append(paths, path)
	}
	if len(paths) == 0 {
		return nil, "", errors.New("the ca-certificates package lists no certificate under /usr/share/ca-certificates")
	}
	sort.Strings(paths)
	var bundle bytes.Buffer
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, "", fmt.Errorf("ca-certificates: %w", err)
		}
		got := md5.Sum(data)
		if hex.EncodeToString(got[:]) != want[p] {
			return nil, "", fmt.Errorf("ca-certificates: /%s differs from the package's (md5sum %s, dpkg recorded %s)", p, hex.EncodeToString(got[:]), want[p])
		}
		bundle.Write(data)
	}
	return bundle.Bytes(), fmt.Sprintf("Debian ca-certificates %s, the package's %d certificate files", version, len(paths)), nil
}

// debianPackageVersion returns the version of an installed package from
// dpkg's status file.
func debianPackageVersion(statusFile, pkg string) (string, error) {
	installed, err := dpkgStatus(statusFile)
	if err != nil {
		return "", fmt.Errorf("%w (pass -ca FILE)", err)
	}
	p, ok := installed[pkg]
	if !ok {
		return "", fmt.Errorf("package %s is not installed (dpkg status %s)", pkg, statusFile)
	}
	return p.version, nil
}
