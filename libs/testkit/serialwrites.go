package testkit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/agentmesh/agentmesh/libs/mongox"
)

// SerialWrites is a MongoDB wire-protocol relay that lets the write
// commands of every client reach one database of its backend one at a
// time, each held until its reply has come back.
//
// Many writers' code relies on what MongoDB guarantees a single document:
// an update or findAndModify whose filter matches applies to the document
// it matched, so two replicas updating {_id, version} cannot both succeed.
// FerretDB v1 applies an update as a read, a filter in Go and a write,
// without isolation between its clients: two such updates can both match
// and both write. In front of FerretDB, this relay restores the guarantee
// for tests that run many writing processes against one FerretDB (the
// production form runs MongoDB). Reads pass without waiting: SQLite gives
// each a consistent snapshot.
type SerialWrites struct {
	lis     net.Listener
	backend string

	mu    sync.Mutex
	gates map[string]*sync.Mutex // database → its writers' turn
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// StartSerialWrites listens on a free loopback port and relays every
// connection to backend (host:port), dialing it anew per connection, so
// the backend may be stopped and started again behind it.
func StartSerialWrites(backend string) (*SerialWrites, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &SerialWrites{lis: lis, backend: backend, gates: map[string]*sync.Mutex{}, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the relay's host:port.
func (s *SerialWrites) Addr() string { return s.lis.Addr().String() }

// Close stops accepting, closes every relayed connection and waits for
// their relays to end.
func (s *SerialWrites) Close() error {
	err := s.lis.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *SerialWrites) accept() {
	defer s.wg.Done()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.relay(c)
		}()
	}
}

// track adds c to the connections Close closes; false if Close has begun.
func (s *SerialWrites) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *SerialWrites) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

func (s *SerialWrites) gate(db string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gates[db]
	if !ok {
		g = &sync.Mutex{}
		s.gates[db] = g
	}
	return g
}

// relay serves one client connection: a request, then its replies. The
// MongoDB protocol is request/response on a connection; a request flagged
// moreToCome has no reply, and a reply flagged moreToCome is followed by
// more replies.
func (s *SerialWrites) relay(client net.Conn) {
	if !s.track(client) {
		_ = client.Close()
		return
	}
	defer s.untrack(client)
	server, err := net.Dial("tcp", s.backend)
	if err != nil {
		return // the client sees its connection closed, as with the server down
	}
	if !s.track(server) {
		_ = server.Close()
		return
	}
	defer s.untrack(server)
	for {
		req, err := readWireMessage(client)
		if err != nil {
			return
		}
		db, write := writeTarget(req)
		var turn *sync.Mutex
		if write {
			turn = s.gate(db)
			turn.Lock()
		}
		err = s.exchange(client, server, req)
		if turn != nil {
			turn.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// exchange sends req to server and relays its replies to client.
func (s *SerialWrites) exchange(client, server net.Conn, req []byte) error {
	if _, err := server.Write(req); err != nil {
		return err
	}
	if moreToCome(req) {
		return nil
	}
	for {
		reply, err := readWireMessage(server)
		if err != nil {
			return err
		}
		if _, err := client.Write(reply); err != nil {
			return err
		}
		if !moreToCome(reply) {
			return nil
		}
	}
}

const (
	opMsg            = 2013
	wireHeaderLen    = 16
	maxWireMessage   = 48 << 20 // MongoDB's maxMessageSizeBytes
	flagMoreToCome   = 1 << 1
	sectionBody      = 0
	opMsgFirstOffset = wireHeaderLen + 4 // header, flagBits
)

// readWireMessage reads one whole message: its length, then the rest.
func readWireMessage(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.LittleEndian.Uint32(head[:])))
	if n < wireHeaderLen || n > maxWireMessage {
		return nil, fmt.Errorf("wire message of %d bytes", n)
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// moreToCome reports whether msg is an OP_MSG flagged moreToCome.
func moreToCome(msg []byte) bool {
	if len(msg) < opMsgFirstOffset || binary.LittleEndian.Uint32(msg[12:16]) != opMsg {
		return false
	}
	return binary.LittleEndian.Uint32(msg[16:20])&flagMoreToCome != 0
}

// writeTarget reports whether msg is a command that writes and the
// database it names. Other messages (legacy opcodes of a handshake, reads)
// are not writes.
func writeTarget(msg []byte) (db string, write bool) {
	body, err := commandBody(msg)
	if err != nil {
		return "", false
	}
	elems, err := body.Elements()
	if err != nil || len(elems) == 0 {
		return "", false
	}
	if !mongox.IsWrite(elems[0].Key()) {
		return "", false
	}
	if v, err := body.LookupErr("$db"); err == nil {
		db, _ = v.StringValueOK()
	}
	return db, true
}

// commandBody returns the body section (kind 0) of an OP_MSG.
func commandBody(msg []byte) (bsoncore.Document, error) {
	if len(msg) < opMsgFirstOffset+1 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg {
		return nil, errors.New("not an OP_MSG")
	}
	rest := msg[opMsgFirstOffset:]
	for len(rest) > 0 {
		kind := rest[0]
		rest = rest[1:]
		if len(rest) < 4 {
			return nil, errors.New("short section")
		}
		size := int(int32(binary.LittleEndian.Uint32(rest)))
		if size < 4 || size > len(rest) {
			return nil, errors.New("bad section size")
		}
		if kind == sectionBody {
			return bsoncore.Document(rest[:size]), nil
		}
		rest = rest[size:] // a document sequence: its size counts itself
	}
	return nil, errors.New("no body section")
}
