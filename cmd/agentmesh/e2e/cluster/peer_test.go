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
// one of the test's own servers, client being that end's address as the
// server sees it (http.Request.RemoteAddr). It reads /proc/net/tcp for the
// socket's inode and then each process's open files. It is how the suite
// kills exactly the replica that is executing a tool job or a model call.
// 0 when no process of pids holds it (the connection is gone).
func peerPID(client string, pids []int) int {
	ap, err := netip.ParseAddrPort(client)
	if err != nil || !ap.Addr().Is4() {
		return 0
	}
	inode := socketInode(ap)
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

// socketInode is the inode of the IPv4 TCP socket whose local address is
// local, "" when there is none.
func socketInode(local netip.AddrPort) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	// /proc/net/tcp prints an IPv4 address as the network-order 32-bit
	// word read in host byte order, and the port as a number.
	ip := local.Addr().As4()
	key := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip[:]), local.Port())
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == key {
			return fields[9]
		}
	}
	return ""
}
