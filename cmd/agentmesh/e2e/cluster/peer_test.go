//go:build e2ecluster

package cluster

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// peerPID finds which of pids owns the client end of a TCP connection to
// one of the test's own servers: client is that end's address as the
// server sees it (http.Request.RemoteAddr), server the server's end (one
// local port can serve connections to several servers). It reads /proc/net/tcp (and
// tcp6, for a dual-stack socket) for the socket's inode and then each
// process's open files. It is how the suite kills exactly the replica that
// is executing a tool job or a model call. 0 when no process of pids holds
// it (the connection is gone).
func peerPID(client, server string, pids []int) int {
	ap, err := netip.ParseAddrPort(client)
	if err != nil || !ap.Addr().Unmap().Is4() {
		return 0
	}
	sp, err := netip.ParseAddrPort(server)
	if err != nil || !sp.Addr().Unmap().Is4() {
		return 0
	}
	// The kernel prints these tables in pieces; an entry can be missed
	// while other sockets come and go, so a miss is read again.
	var inode string
	for range 3 {
		if inode = socketInode(ap, sp); inode != "" {
			break
		}
	}
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && l == want {
				return pid
			}
		}
	}
	return 0
}

// socketInode is the inode of the TCP socket from local to remote (IPv4
// addresses), "" when there is none.
func socketInode(local, remote netip.AddrPort) string {
	for file, key := range map[string][2]string{
		"/proc/net/tcp":  {procAddr4(local), procAddr4(remote)},
		"/proc/net/tcp6": {procAddr6(local), procAddr6(remote)},
	} {
		if inode := findInode(file, key); inode != "" {
			return inode
		}
	}
	return ""
}

// procAddr4 and procAddr6 write an address as /proc/net/tcp and tcp6 do:
// its network-order 32-bit words read in host byte order, and the port as
// a number; tcp6 holds an IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
func procAddr4(a netip.AddrPort) string {
	ip := a.Addr().Unmap().As4()
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip[:]), a.Port())
}

func procAddr6(a netip.AddrPort) string {
	mapped := netip.AddrFrom4(a.Addr().Unmap().As4()).As16()
	var b strings.Builder
	for i := 0; i < 16; i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(mapped[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", a.Port())
	return b.String()
}

// findInode returns the inode of the row of a /proc/net/tcp table with
// the local and remote addresses of key. Rows of closed connections
// (TIME_WAIT, inode 0) may hold the same pair from an earlier connection:
// they are skipped.
func findInode(file string, key [2]string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == key[0] && fields[2] == key[1] && fields[9] != "0" {
			return fields[9]
		}
	}
	return ""
}
