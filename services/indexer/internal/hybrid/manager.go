package hybrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentmesh/agentmesh/services/indexer/internal/vector"
)

// Scope names a tenant's project; each has its own shard.
type Scope struct {
	// Tenant is the tenant id.
	Tenant string
	// Project is the project id; empty is the tenant's default project.
	Project string
}

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	// Dir is the root of the shard directories.
	Dir string
	// Embedder names the embedder the vectors come from.
	Embedder string
	// Dimensions is the embedder's vector length.
	Dimensions int
	// Vector tunes the HNSW indexes.
	Vector vector.Params
	// SnapshotBytes overrides the vector log size that triggers a snapshot.
	SnapshotBytes int64
	// VectorWeight is the RRF weight of the vector ranking (BM25's is 1);
	// 0 means 1.
	VectorWeight float64
	// Logger receives notices; nil discards them.
	Logger *slog.Logger
}

// Manager opens one Shard per scope, on first use, under its directory:
// <dir>/<tenant>/<project or "_">, each name escaped so that any id is a
// safe single path element. It is safe for concurrent use.
type Manager struct {
	opts ManagerOptions
	log  *slog.Logger

	mu     sync.Mutex // guards shards and stale
	shards map[Scope]*Shard
	stale  map[Scope]bool
}

// NewManager returns a manager; it opens nothing until a shard is asked for.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Dir == "" || opts.Embedder == "" || opts.Dimensions <= 0 {
		return nil, errors.New("hybrid: manager needs a directory, an embedder name and dimensions")
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("hybrid: data dir: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.VectorWeight <= 0 {
		opts.VectorWeight = 1
	}
	return &Manager{opts: opts, log: log, shards: map[Scope]*Shard{}, stale: map[Scope]bool{}}, nil
}

// Dimensions returns the vector length of every shard.
func (m *Manager) Dimensions() int { return m.opts.Dimensions }

func (m *Manager) manifest() manifest {
	return manifest{Format: manifestFormat, Embedder: m.opts.Embedder, Dimensions: m.opts.Dimensions}
}

func (m *Manager) vectorOptions() vector.StoreOptions {
	return vector.StoreOptions{Params: m.opts.Vector, SnapshotBytes: m.opts.SnapshotBytes, Logger: m.log}
}

// dir returns the shard directory of a scope.
func (m *Manager) dir(s Scope) string {
	p := s.Project
	if p == "" {
		return filepath.Join(m.opts.Dir, escape(s.Tenant), "_")
	}
	return filepath.Join(m.opts.Dir, escape(s.Tenant), "p-"+escape(p))
}

// escape keeps [A-Za-z0-9_-] and writes every other byte as %XX, so an id
// can never be "..", contain a separator, or collide with another id.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() == 0 {
		return "%"
	}
	return b.String()
}

// Shard returns the scope's shard, opening (or creating) it on first use.
func (m *Manager) Shard(s Scope) (*Shard, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sh, ok := m.shards[s]; ok {
		return sh, nil
	}
	sh, stale, err := openShard(m.dir(s), m.manifest(), m.vectorOptions(), m.opts.VectorWeight, m.log)
	if err != nil {
		return nil, err
	}
	m.shards[s] = sh
	if stale {
		m.stale[s] = true
	}
	return sh, nil
}

// exists reports whether the scope's shard is open or on disk.
func (m *Manager) exists(s Scope) bool {
	m.mu.Lock()
	_, open := m.shards[s]
	m.mu.Unlock()
	if open {
		return true
	}
	_, err := os.Stat(m.dir(s))
	return err == nil
}

// Stale reports whether the scope's shard directory was wiped on open
// because it was built with another embedder or format, and clears the mark.
func (m *Manager) Stale(s Scope) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stale[s]
	delete(m.stale, s)
	return st
}

// Write runs fn with write access to the scope's shard, holding its write
// lock. If a rebuild replaced the shard while fn waited for the lock, fn
// runs on the new one. fn must not call the Manager (Close, holding the
// manager's lock, waits for fn to end) nor the shard's own reads, and
// should not wait on the network: a close or a rebuild waits for it.
func (m *Manager) Write(s Scope, fn func(Tx) error) error {
	for {
		sh, err := m.Shard(s)
		if err != nil {
			return err
		}
		err = sh.write(func() error { return fn(Tx{s: sh}) })
		if errors.Is(err, errClosed) {
			continue
		}
		return err
	}
}

// Read runs fn on the scope's shard; if a rebuild swaps the shard out
// under fn, fn is retried on the new shard. A scope that has never been
// written has no shard: fn is not called and Read returns nil, so reads
// (a search naming any tenant) never create directories.
func (m *Manager) Read(s Scope, fn func(*Shard) error) error {
	for {
		if !m.exists(s) {
			return nil
		}
		sh, err := m.Shard(s)
		if err != nil {
			return err
		}
		err = fn(sh)
		if errors.Is(err, errClosed) {
			continue
		}
		return err
	}
}

// Rebuild replaces the scope's shard with one filled by fill, which calls
// add with batches of chunks. Writes to the scope wait until the rebuild
// ends; searches keep using the old shard until the new one takes its
// place. On failure the old shard stays.
func (m *Manager) Rebuild(s Scope, fill func(add func([]Chunk) error) error) error {
	old, err := m.Shard(s)
	if err != nil {
		return err
	}
	old.writeMu.Lock()
	defer old.writeMu.Unlock()

	final := m.dir(s)
	tmp := final + ".rebuild"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("hybrid: rebuild: %w", err)
	}
	fresh, _, err := openShard(tmp, m.manifest(), m.vectorOptions(), m.opts.VectorWeight, m.log)
	if err != nil {
		return err
	}
	if err := fill(func(cs []Chunk) error { return Tx{s: fresh}.Add(cs) }); err != nil {
		fresh.close()
		os.RemoveAll(tmp)
		return fmt.Errorf("hybrid: rebuild: %w", err)
	}
	// One BM25 segment searches fastest; persist the new vector graph
	// whole, so reopening does not replay a log.
	if err := fresh.Compact(context.Background()); err != nil {
		fresh.close()
		os.RemoveAll(tmp)
		return err
	}
	if err := fresh.Snapshot(); err != nil {
		fresh.close()
		os.RemoveAll(tmp)
		return err
	}
	if err := fresh.close(); err != nil {
		os.RemoveAll(tmp)
		return err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if err := old.close(); err != nil {
		m.log.Warn("closing the replaced shard", "dir", final, "error", err)
	}
	delete(m.shards, s)
	trash := final + ".old"
	os.RemoveAll(trash)
	if err := os.Rename(final, trash); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("hybrid: rebuild: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("hybrid: rebuild: %w", err)
	}
	if err := os.RemoveAll(trash); err != nil {
		m.log.Warn("removing the replaced shard", "dir", trash, "error", err)
	}
	sh, _, err := openShard(final, m.manifest(), m.vectorOptions(), m.opts.VectorWeight, m.log)
	if err != nil {
		return err
	}
	m.shards[s] = sh
	delete(m.stale, s)
	return nil
}

// Close snapshots and closes every open shard.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for s, sh := range m.shards {
		errs = append(errs, sh.close())
		delete(m.shards, s)
	}
	return errors.Join(errs...)
}
