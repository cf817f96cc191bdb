package testkit

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Postgres starts a throwaway PostgreSQL server for the test (initdb into a
// temporary directory, trust authentication for user "am", listening on a
// free loopback port, fsync off), runs the setup SQL on it with psql (one
// transaction; any error fails the test), and returns its DSN for database
// "postgres". The server stops and its files go in t.Cleanup. Run as root,
// the server runs as the "postgres" user, as PostgreSQL requires.
//
// It skips the test when no PostgreSQL server is installed (Debian package
// postgresql; `.ci/run` installs it).
func Postgres(t testing.TB, setup ...string) string {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		t.Skip("PostgreSQL server binaries not found (install the Debian package postgresql)")
	}
	dir, err := os.MkdirTemp("", "agentmesh-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	attr := &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testkit: PostgreSQL refuses to run as root and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "am", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = attr
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("testkit: initdb: %v\n%s", err, out)
	}
	port := FreePort(t)
	var logs bytes.Buffer
	srv := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	srv.SysProcAttr = attr
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatalf("testkit: start postgres: %v", err)
	}
	var stop sync.Once
	t.Cleanup(func() {
		stop.Do(func() {
			_ = srv.Process.Signal(syscall.SIGINT) // fast shutdown
			done := make(chan struct{})
			go func() { _ = srv.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
	})
	ready := filepath.Join(bin, "pg_isready")
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if exec.Command(ready, "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "am").Run() == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("testkit: postgres not ready within 30s:\n%s", logs.String())
		}
	}
	dsn := fmt.Sprintf("postgres://am@127.0.0.1:%d/postgres?sslmode=disable", port)
	if len(setup) > 0 {
		psql := exec.Command(filepath.Join(bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-d", dsn, "-f", "-")
		psql.Stdin = strings.NewReader(strings.Join(setup, ";\n") + ";\n")
		if out, err := psql.CombinedOutput(); err != nil {
			t.Fatalf("testkit: postgres setup: %v\n%s", err, out)
		}
	}
	return dsn
}

// postgresBin returns the directory holding initdb, postgres and
// pg_isready: the one on PATH, else the newest under /usr/lib/postgresql;
// "" if there is none.
func postgresBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dir := filepath.Dir(real)
			if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
				return dir
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	return ""
}

// FreePort returns a loopback TCP port nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}
