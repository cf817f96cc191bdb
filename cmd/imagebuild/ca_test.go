package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/md5"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned returns a PEM certificate with the given common name.
func selfSigned(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fakeDebian lays out, under a new directory, what dpkg and
// update-ca-certificates leave on a Debian machine with ca-certificates
// installed (two certificates) and one locally added CA, and returns the
// directory and the certificates.
func fakeDebian(t *testing.T, status string) (root string, a, b, local []byte) {
	t.Helper()
	root = t.TempDir()
	a, b, local = selfSigned(t, "Package CA A"), selfSigned(t, "Package CA B"), selfSigned(t, "Sandbox proxy CA")
	put := func(p string, data []byte) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(data []byte) string { s := md5.Sum(data); return hex.EncodeToString(s[:]) }
	put("usr/share/ca-certificates/mozilla/Zeta_Root.crt", b)
	put("usr/share/ca-certificates/mozilla/Alpha_Root.crt", a)
	put("usr/sbin/update-ca-certificates", []byte("#!/bin/sh\n"))
	put("usr/local/share/ca-certificates/proxy.crt", local)
	put("etc/ssl/certs/ca-certificates.crt", bytes.Join([][]byte{a, b, local}, nil))
	// dpkg lists files in its own order, not sorted.
	put("var/lib/dpkg/info/ca-certificates.md5sums", []byte(
		sum([]byte("#!/bin/sh\n"))+"  usr/sbin/update-ca-certificates\n"+
			sum(b)+"  usr/share/ca-certificates/mozilla/Zeta_Root.crt\n"+
			sum(a)+"  usr/share/ca-certificates/mozilla/Alpha_Root.crt\n"))
	put("var/lib/dpkg/status", []byte(status))
	return root, a, b, local
}

const installed = `Package: ca-certificates-java
Status: install ok installed
Version: 20230710~deb12u1

Package: ca-certificates
Status: install ok installed
Priority: standard
Version: 20230311+deb12u1
Description: Common CA certificates
 Contains the certificate authorities shipped with Mozilla's browser.
 Version: not this one

Package: zlib1g
Status: install ok installed
Version: 1:1.2.13.dfsg-1
`

// TestDebianCA checks that the bundle is the package's certificates alone,
// in file-name order, and that a changed certificate, a package not
// installed or a machine without dpkg stop the build.
func TestDebianCA(t *testing.T) {
	t.Parallel()
	t.Run("the package's certificates, not the local CA", func(t *testing.T) {
		root, a, b, local := fakeDebian(t, installed)
		bundle, source, n, err := loadCA(caDebian, root)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(append([]byte{}, a...), b...); !bytes.Equal(bundle, want) {
			t.Errorf("bundle is not Alpha then Zeta:\n%s", bundle)
		}
		if bytes.Contains(bundle, local) {
			t.Error("bundle holds the locally added CA")
		}
		if n != 2 || source != "Debian ca-certificates 20230311+deb12u1, the package's 2 certificate files" {
			t.Errorf("loadCA = %d certificates from %q", n, source)
		}
	})
	t.Run("a certificate changed after install", func(t *testing.T) {
		root, _, _, local := fakeDebian(t, installed)
		if err := os.WriteFile(filepath.Join(root, "usr/share/ca-certificates/mozilla/Zeta_Root.crt"), local, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := loadCA(caDebian, root)
		if err == nil || !strings.Contains(err.Error(), "/usr/share/ca-certificates/mozilla/Zeta_Root.crt differs from the package's") {
			t.Errorf("loadCA = %v, want the changed file named", err)
		}
	})
	t.Run("package removed, its configuration kept", func(t *testing.T) {
		root, _, _, _ := fakeDebian(t, strings.Replace(installed, "Package: ca-certificates\nStatus: install ok installed", "Package: ca-certificates\nStatus: deinstall ok config-files", 1))
		_, _, _, err := loadCA(caDebian, root)
		if err == nil || !strings.Contains(err.Error(), "ca-certificates is not installed") {
			t.Errorf("loadCA = %v, want 'not installed'", err)
		}
	})
	t.Run("not a Debian machine", func(t *testing.T) {
		_, _, _, err := loadCA(caDebian, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "pass -ca FILE") {
			t.Errorf("loadCA = %v, want advice to pass -ca FILE", err)
		}
	})
}

// TestDebianCAOnThisMachine builds the bundle from this machine's package
// and checks that no locally added CA (/usr/local/share/ca-certificates)
// is in it, though the machine's own bundle may hold them.
func TestDebianCAOnThisMachine(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/var/lib/dpkg/info/ca-certificates.md5sums"); err != nil {
		t.Skip("ca-certificates is not installed from a Debian package here")
	}
	bundle, source, n, err := loadCA(caDebian, "/")
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Errorf("%s: %d certificates, want a full set", source, n)
	}
	inBundle := map[string]bool{}
	for rest := bundle; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		inBundle[string(blk.Bytes)] = true
	}
	locals, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	for _, p := range locals {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if blk, _ := pem.Decode(data); blk != nil && inBundle[string(blk.Bytes)] {
			t.Errorf("the image bundle holds the local CA %s", p)
		}
	}
	t.Logf("%s: %d certificates; %d local CAs left out", source, n, len(locals))
}
