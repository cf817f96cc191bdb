package main

import (
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// The floor under any proxy's added latency, measured two ways. The
// wake-up probe measures what a process boundary costs on this machine when
// it finds the CPUs idle: the gateway path crosses two more process
// boundaries than the direct path (load generator → gateway, mock →
// gateway), and between requests the CPUs go idle. A 1-byte loopback TCP
// round trip to an echo child process is timed back to back (the CPUs stay
// busy) and after an idle gap. The tcp relay (serveRelay) is the least any
// process in the path can do, under the bench's own load.

// probeGap is the idle time before each timed round trip, about the gap
// between requests at 2,000 per second.
const probeGap = 500 * time.Microsecond

// serveEcho echoes bytes on a loopback port and prints "ADDR <host:port>".
func serveEcho() error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", lis.Addr())
	c, err := lis.Accept()
	if err != nil {
		return err
	}
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return nil
		}
		if _, err := c.Write(b); err != nil {
			return nil
		}
	}
}

// wakeProbe returns the p50 of a round trip to an echo child process, back
// to back and after probeGap of idleness.
func wakeProbe(self string) (hot, idle time.Duration, err error) {
	child, addr, err := startChild(self, os.Environ(), "-serve-echo")
	if err != nil {
		return 0, 0, fmt.Errorf("echo: %w", err)
	}
	defer stopChild(child)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	p50 := func(gap time.Duration) (time.Duration, error) {
		d := make([]time.Duration, 0, 2000)
		b := []byte{1}
		for range cap(d) {
			if gap > 0 {
				time.Sleep(gap)
			}
			t0 := time.Now()
			if _, err := c.Write(b); err != nil {
				return 0, err
			}
			if _, err := c.Read(b); err != nil {
				return 0, err
			}
			d = append(d, time.Since(t0))
		}
		slices.Sort(d)
		return d[len(d)/2], nil
	}
	if hot, err = p50(0); err != nil {
		return 0, 0, err
	}
	idle, err = p50(probeGap)
	return hot, idle, err
}

// serveRelay relays each TCP connection on a loopback port to the address
// to, copying bytes each way as they come (read, write: no splicing, no
// buffering beyond one read), and prints "ADDR <host:port>". It is the
// least any process in the path can do.
func serveRelay(to string) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", lis.Addr())
	for {
		c, err := lis.Accept()
		if err != nil {
			return err
		}
		go func() {
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				return
			}
			// Whichever side ends first ends the other: a client that
			// hangs up mid-stream (the stream rows read only the first
			// chunk) leaves the upstream's keep-alive connection idle, so
			// waiting for both directions held two descriptors a request
			// until the relay ran out of them.
			closeBoth := sync.OnceFunc(func() { c.Close(); u.Close() })
			go func() { copyEach(u, c); closeBoth() }()
			copyEach(c, u)
			closeBoth()
		}()
	}
}

// copyEach writes every read from src to dst until either fails.
func copyEach(dst, src net.Conn) {
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
