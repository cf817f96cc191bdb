// Package mariadbtest starts throwaway MariaDB servers for the SQL agent's
// tests, the way testkit.Postgres starts PostgreSQL: a data directory
// made by mariadb-install-db in a temporary directory, mariadbd on a free
// loopback port, everything removed in t.Cleanup. Only the SQL agent
// needs MariaDB, so this lives in its module rather than in libs/testkit.
package mariadbtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// Server is a running throwaway MariaDB server.
type Server struct {
	// Port is its loopback TCP port.
	Port int
	// Files is the only directory SELECT ... INTO OUTFILE and LOAD_FILE
	// may reach (secure_file_priv); the server may write to it.
	Files string
	// DataDir is its data directory.
	DataDir string
}

// Start starts a MariaDB server for the test: user "am" with no password
// and every privilege (WITH GRANT OPTION) created at start, fsync off,
// listening on 127.0.0.1 only. It runs the setup SQL (scripts, joined, with
// the mariadb client as am; any error fails the test). Run as root, the
// server runs as the "mysql" user, as mariadbd requires. The server stops
// and its files go in t.Cleanup.
//
// It skips the test when MariaDB is not installed (Debian package
// mariadb-server; `.ci/run` installs it).
func Start(t testing.TB, setup ...string) *Server {
	t.Helper()
	server, _ := exec.LookPath("mariadbd")
	if server == "" {
		if _, err := os.Stat("/usr/sbin/mariadbd"); err == nil {
			server = "/usr/sbin/mariadbd"
		}
	}
	install, _ := exec.LookPath("mariadb-install-db")
	client, _ := exec.LookPath("mariadb")
	if server == "" || install == "" || client == "" {
		t.Skip("MariaDB server binaries not found (install the Debian package mariadb-server)")
	}
	dir, err := os.MkdirTemp("", "agentmesh-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	attr := &syscall.SysProcAttr{Setpgid: true}
	s := &Server{Files: filepath.Join(dir, "files"), DataDir: filepath.Join(dir, "data")}
	if err := os.Mkdir(s.Files, 0o777); err != nil {
		t.Fatal(err)
	}
	// Its own temporary directory: mariadbd's temporary tables under the shared /tmp
	// were deleted under a bootstrap running beside other tests (CI: "Error on delete of
	// '/tmp/#sql-temptable-…'").
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	initFile := filepath.Join(dir, "init.sql")
	if err := os.WriteFile(initFile, []byte("CREATE USER 'am'@'%' IDENTIFIED BY '';\nGRANT ALL PRIVILEGES ON *.* TO 'am'@'%' WITH GRANT OPTION;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("mysql")
		if err != nil {
			t.Fatalf("mariadbtest: mariadbd refuses to run as root and there is no mysql user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, s.Files, tmp, initFile} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// The bootstrap is tried twice on a fresh data directory: a failed one leaves a
	// half-made directory that a second run would refuse.
	for attempt := 1; ; attempt++ {
		inst := exec.Command(install, "--no-defaults", "--datadir="+s.DataDir, "--auth-root-authentication-method=socket",
			"--skip-test-db", "--skip-name-resolve", "--tmpdir="+tmp)
		inst.SysProcAttr = attr
		out, err := inst.CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 2 {
			t.Fatalf("mariadbtest: mariadb-install-db: %v\n%s", err, out)
		}
		t.Logf("mariadbtest: mariadb-install-db failed, trying once more: %v\n%s", err, out)
		if err := os.RemoveAll(s.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	s.Port = testkit.FreePort(t)
	var logs bytes.Buffer
	srv := exec.Command(server, "--no-defaults", "--datadir="+s.DataDir, "--socket="+filepath.Join(dir, "sock"),
		"--port="+strconv.Itoa(s.Port), "--bind-address=127.0.0.1", "--tmpdir="+tmp, "--skip-name-resolve", "--init-file="+initFile,
		"--secure-file-priv="+s.Files, "--pid-file="+filepath.Join(dir, "pid"), "--log-error="+filepath.Join(dir, "error.log"),
		"--innodb-buffer-pool-size=16M", "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", "--skip-log-bin")
	srv.SysProcAttr = attr
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatalf("mariadbtest: start mariadbd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	var stop sync.Once
	t.Cleanup(func() {
		stop.Do(func() {
			_ = srv.Process.Signal(syscall.SIGTERM) // a clean shutdown
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
				<-exited
			}
		})
	})
	db, err := sql.Open("mysql", s.DSN("am", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ready := func() bool {
		select {
		case <-exited:
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("mariadbtest: mariadbd exited:\n%s\n%s", logs.String(), errLog)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return db.PingContext(ctx) == nil
	}
	testkit.Eventually(t, 60*time.Second, ready, "mariadbd ready on port %d", s.Port)
	if len(setup) > 0 {
		cmd := exec.Command(client, "--no-defaults", "--protocol=tcp", "-h", "127.0.0.1", "-P", strconv.Itoa(s.Port), "-u", "am", "--batch")
		cmd.Stdin = strings.NewReader(strings.Join(setup, ";\n") + ";\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mariadbtest: setup: %v\n%s", err, out)
		}
	}
	return s
}

// DSN returns a go-sql-driver DSN for user (no password) on database db
// ("" for none).
func (s *Server) DSN(user, db string) string {
	cfg := mysql.NewConfig()
	cfg.User = user
	cfg.Net = "tcp"
	cfg.Addr = fmt.Sprintf("127.0.0.1:%d", s.Port)
	cfg.DBName = db
	return cfg.FormatDSN()
}

// Chinook returns the Chinook MySQL script from shared/data/chinook
// (found in a directory above the working directory), which creates and
// fills the database Chinook, or skips the test.
func Chinook(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", "chinook", "Chinook_MySql.sql")
		if b, err := os.ReadFile(p); err == nil {
			return string(b)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("shared/data/chinook/Chinook_MySql.sql not found above the package directory")
		}
		dir = parent
	}
}
